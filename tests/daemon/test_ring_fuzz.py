"""Ring-request mutations from a second writer against a live hbfd (issue 19): a legitimate client
drives its own tickets through the host ring driver while another writer puts mutated request
records into the same ring. No legitimate answer may change, the daemon stays up, and the summary
counts what it refused. Small seeded corpus; runs in a few seconds."""
from __future__ import annotations

import random
import threading
import time

import numpy as np

from hbfcommon import ctl
from hbfcommon.profile import load_profile
from hbfd.contracts import REQUEST_BATCH_DTYPE, FixedLatencyEngine
from hbfd.hostring import RingDriver, seal

from hbfd_harness import attach, start_hbfd

N = ctl.HBF_RING_SLOTS
LEGIT = 256                       # the legitimate client's tickets 0..LEGIT-1 (slots 0..LEGIT-1)
FREE0 = 2048                      # slots the legitimate client never reaches: the fuzzer's own
SEED = 19


def _expected_modeled(profile, ops, nbytes):
    """What the real fixed-latency engine of this profile answers for these requests."""
    e = FixedLatencyEngine.from_profile(profile)
    b = np.zeros(len(ops), REQUEST_BATCH_DTYPE)
    b["id"] = np.arange(len(ops))
    b["arrival_ns"] = 1000 * np.arange(len(ops))
    b["bytes"] = nbytes
    b["op"] = ops
    e.submit(b)
    e.advance(1 << 40)
    out = e.collect()
    return dict(zip(out["id"].tolist(), out["modeled_ns"].tolist()))


def _write(m, slot, seq, *, arrival=1000, media=4096, nbytes=64, op=ctl.HBF_OP_LOAD, key=None):
    """A record in ``slot``: tagged under ``key`` (a client of the run, however buggy) or not (a writer
    that only maps the region)."""
    r = m.ring
    r["arrival_ns"][slot], r["media_address"][slot], r["bytes"][slot] = arrival, media, nbytes
    r["op"][slot], r["range_id"][slot], r["site"][slot] = op, 0, 7
    r["thermal_q_ppm"][slot] = 0
    if key is not None:
        seal(m, slot, seq, key)
    r["seq"][slot] = seq


def _corpus(cap):
    """(field mutations, expected outcome) for a record in a free slot published with its own
    slot's next seq: answered with a terminal status and counted by kind."""
    return [
        ({"media": 1 << 63}, "media_address"), ({"media": (1 << 64) - 1}, "media_address"),
        ({"media": cap}, "media_address"), ({"media": cap - 32, "nbytes": 64}, "media_address"),
        ({"nbytes": 0}, "bytes"), ({"media": cap - 4096, "nbytes": (1 << 32) - 1}, "media_address"),
        ({"arrival": 1 << 62}, "arrival_ns"), ({"arrival": (1 << 64) - 1}, "arrival_ns"),
        ({"op": 4}, "op"), ({"op": 255}, "op"), ({"op": (1 << 32) - 1}, "op"),
        ({"media": 1 << 63, "op": 9}, "op"),
    ]


def _seq_mutations(slot):
    """Seqs that do not belong to ``slot``'s next ticket (its first is slot + 1)."""
    return [slot + 2, slot + 1 + N, slot + 1 + N * (1 << 40), (1 << 64) - 1, slot + 1 + N - 1,
            ((slot + 1) % N) + 1 if slot + 1 < N else 1]


def test_second_writer_cannot_change_or_stop_the_legitimate_client(tmp_path):
    rng = random.Random(SEED)
    p = load_profile("nominal")
    cap = p.capacity_bytes
    ops = [rng.choice((ctl.HBF_OP_LOAD, ctl.HBF_OP_STORE, ctl.HBF_OP_ATOMIC, ctl.HBF_OP_CPASYNC))
           for _ in range(LEGIT)]
    expect = _expected_modeled(p, ops, 4096)
    with start_hbfd(tmp_path) as h:
        att, m = attach(h)
        try:
            # 1. before the client runs: foreign seqs in the slots it will use (the s + N*2^40 hang,
            #    a skipped ticket, the wrong slot); the client's own writes replace them later
            planted = 0
            for s in rng.sample(range(1, LEGIT), 48):
                _write(m, s, rng.choice(_seq_mutations(s)), key=att.ring_key if planted % 2 else None)
                planted += 1
            # 2. while it runs: a second writer in slots it never reaches
            stop = threading.Event()
            corpus = _corpus(cap)
            fuzz_log = {"foreign": 0, "rejected": {}, "answered": [], "unanswered": []}

            def writer():
                wr = random.Random(SEED + 1)
                slot = FREE0
                while not stop.is_set() and slot < N - 1:
                    x = wr.random()
                    if x < 0.4:   # a buggy client of the run (its records carry the run's tag): validated
                        mut, kind = wr.choice(corpus)
                        _write(m, slot, slot + 1, key=att.ring_key, **mut)
                        fuzz_log["rejected"][kind] = fuzz_log["rejected"].get(kind, 0) + 1
                        fuzz_log["answered"].append((slot, ctl.HBF_ST_UNSUPPORTED if kind == "op"
                                                     else ctl.HBF_ST_IO_ERROR))
                    elif x < 0.6:   # a writer that only maps the region: the slot's exact next ticket,
                        _write(m, slot, slot + 1)   # well formed, but without the run's tag: never answered
                        fuzz_log["foreign"] += 1
                        fuzz_log["unanswered"].append(slot)
                    else:
                        _write(m, slot, wr.choice(_seq_mutations(slot)), media=wr.randrange(1 << 64),
                               key=att.ring_key if x < 0.8 else None)
                        fuzz_log["foreign"] += 1
                    slot += 1
                    time.sleep(0.0005)
            t = threading.Thread(target=writer, daemon=True)
            t.start()
            drv = RingDriver(m, att.ring_key)
            got = []
            for i in range(LEGIT):
                tk = drv.issue(arrival_ns=1000 * i, address=0x7f00_0000_0000 + 4096 * i,
                               media_address=4096 * i, nbytes=4096, op=ops[i])
                assert tk == i
                got.append(drv.wait(tk, timeout_s=10))
            stop.set()
            t.join(5)
            assert all(c.status == ctl.HBF_ST_READY for c in got), [c for c in got if c.status != 1][:3]
            assert [c.modeled_ns for c in got] == [expect[i] for i in range(LEGIT)]
            assert [c.arrival_ns for c in got] == [1000 * i for i in range(LEGIT)]
            # the mutated-but-placed records got their terminal status, for their own ticket only
            time.sleep(0.2)
            comp = m.completions
            for slot, st in fuzz_log["answered"]:
                assert int(comp["seq"][slot]) == slot + 1 and int(comp["status"][slot]) == st, slot
            for slot in fuzz_log["unanswered"]:
                assert int(comp["seq"][slot]) == 0, slot    # hbfd answered a record it was not asked for
            assert h.alive()
            with h.client() as c:
                assert c.call("Status").engine
        finally:
            m.close()
        assert h.stop() == 0
    s = h.read_summary()
    assert s["terminal_status"] == "clean"
    assert s["rejected_requests"] == dict(sorted(fuzz_log["rejected"].items()))
    assert s["foreign_requests"] == planted + fuzz_log["foreign"]
    by_state = s["counters"]["reference_requests_by_state"]
    assert by_state["READY"] == LEGIT
    assert by_state["IO_ERROR"] + by_state["UNSUPPORTED"] == len(fuzz_log["answered"])
    assert "ring: rejected" in h.log_tail(200_000) and "foreign_requests" in h.log_tail(200_000)


def _media_run(tmp_path, name, bad):
    """The media engine with refresh (read counting through the reliability ledger): ``bad``
    records in free slots first, then 64 legitimate tickets. Returns (their answers, summary)."""
    p = load_profile("nominal")
    with start_hbfd(tmp_path, name=name, env={"HBFD_ENGINE": "auto", "HBFD_REFRESH": "auto"}) as h:
        att, m = attach(h)
        try:
            for i, mut in enumerate(bad):
                _write(m, FREE0 + i, FREE0 + i + 1, key=att.ring_key, **mut)
            deadline = time.monotonic() + 10
            while bad and int(m.completions["seq"][FREE0 + len(bad) - 1]) == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            drv = RingDriver(m, att.ring_key)
            got = []
            for i in range(64):
                tk = drv.issue(arrival_ns=50_000 * (i + 1), address=0x7f00_0000_0000 + 4096 * i,
                               media_address=(4096 * 37 * i) % p.capacity_bytes, nbytes=4096,
                               op=ctl.HBF_OP_STORE if i % 5 == 0 else ctl.HBF_OP_LOAD)
                got.append(drv.wait(tk, timeout_s=10))
            assert h.alive()
        finally:
            m.close()
        assert h.stop() == 0
    return got, h.read_summary()


def test_bad_requests_do_not_stop_the_media_engine_or_the_ledger(tmp_path):
    """Regression (issue 19): a media address >= 2^63 reached reliability/ledger.py (IndexError) and
    an arrival >= 2^62 the media engine (MediaError); either ended the run for every client."""
    cap = load_profile("nominal").capacity_bytes
    bad = [mut for mut, _ in _corpus(cap)]
    base, _ = _media_run(tmp_path, "base", [])
    got, s = _media_run(tmp_path, "fuzz", bad)
    assert all(c.status == ctl.HBF_ST_READY for c in got)
    assert [c.modeled_ns for c in got] == [c.modeled_ns for c in base]
    assert s["terminal_status"] == "clean" and s["engine_error"] is None
    assert sum(s["rejected_requests"].values()) == len(bad)
    assert s["rejected_requests"]["media_address"] == 5 and s["rejected_requests"]["arrival_ns"] == 2


def test_a_slot_is_reused_only_after_its_completion_was_consumed(tmp_path):
    """The next ticket of a slot published before the previous completion there was consumed (a
    writer that ignores the reuse rule) is held, not answered over the unread completion."""
    with start_hbfd(tmp_path) as h:
        att, m = attach(h)
        try:
            drv = RingDriver(m, att.ring_key)
            tickets = [drv.issue(arrival_ns=10 * i, address=0, media_address=64 * i, nbytes=64,
                                 op=ctl.HBF_OP_LOAD) for i in range(N)]
            comp = m.completions
            deadline = time.monotonic() + 20
            while int(comp["seq"][0]) != 1 and time.monotonic() < deadline:
                time.sleep(0.005)
            for t in tickets[1:]:
                drv.wait(t)                               # every slot but 0 consumed
            assert int(comp["consumed"][0]) == 0
            _write(m, 0, N + 1, arrival=10 * N, key=att.ring_key)   # ticket N, slot 0 not yet free
            time.sleep(0.3)
            assert int(comp["seq"][0]) == 1               # the unread completion stays
            comp["consumed"][0] = 1                       # its waiter reads it: now the slot is free
            deadline = time.monotonic() + 10
            while int(comp["seq"][0]) != N + 1 and time.monotonic() < deadline:
                time.sleep(0.005)
            assert int(comp["seq"][0]) == N + 1 and int(comp["status"][0]) == ctl.HBF_ST_READY
        finally:
            m.close()
        assert h.stop() == 0
    s = h.read_summary()
    assert s["ring_service"]["reuse_holds"] > 0 and s["foreign_requests"] == 0
    assert s["counters"]["reference_requests_by_state"]["READY"] == N + 1
