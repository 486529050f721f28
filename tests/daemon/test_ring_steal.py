"""The ring's deferred-consumption deadlock and the slot stealing that removes it (docs/runtime.md "ring").

A warp holds its tickets unconsumed until the values are used; with more tickets held than the ring has slots,
an issuer waiting for a slot whose occupant belongs to a warp that is itself waiting for a slot never proceeds
(the C API sample under the nominal profile: 2 tickets per warp, 4,224 resident warps). hbfd/hostring.py is the
CPU model of the device protocol: stealing (claim, overflow table, owner lookup) must make every such run end
with every completion exactly what hbfd posted for it, and without stealing the same run must stall.

Also: the completion seqlock (hbfcommon/ctl.py post_completions / read_completion_validated, every
interleaving of writer and reader), the claim paths, the overflow-full failure and hbfd's self-contained
completion (the request's site|flags and q|tag words)."""
from __future__ import annotations

import itertools
import mmap
import random
import time

import numpy as np
import pytest

from hbfcommon import ctl
from hbfcommon.capacity import HBF_REQ_CAP_HINT
from hbfcommon.profile import load_profile
from hbfd.contracts import FixedLatencyEngine
from hbfd.hostring import AlreadyWaited, RingDriver, RingOverflow

from hbfd_harness import attach, start_hbfd

N = ctl.HBF_RING_SLOTS
WARPS = N + 300            # first tickets fill the ring: every second ticket waits for another warp's first
PER_WARP = 2               # loads in flight per warp before the first use (vector_add: a[i] and b[i])
STALL_S = 6.0              # no warp progressed this long: deadlocked (hbfd answers in milliseconds)


def _arrival(w: int, j: int) -> int:
    return 1_000_000 + 10 * (w * PER_WARP + j)      # unique per request: a mixed-up completion shows


def _op(w: int, j: int) -> int:
    return ctl.HBF_OP_STORE if (w + j) % 3 == 0 else ctl.HBF_OP_LOAD   # two fixed latencies


def _warp(drv: RingDriver, w: int, out: dict):
    """One warp as the instrumented vector_add runs it: issue PER_WARP loads, then wait for each at its use.
    Yields True when it progressed, False when it spun."""
    tickets = []
    for j in range(PER_WARP):
        t = drv.reserve()
        while not drv.slot_ready(t):
            yield False
        drv.publish(t, arrival_ns=_arrival(w, j), address=0x7f00_0000_0000 + 4096 * (w % 1024),
                    media_address=4096 * ((w * PER_WARP + j) % 8192), nbytes=64, op=_op(w, j),
                    site=(w * PER_WARP + j) & 0xFFFF, flags=ctl.HBF_OP_LOAD + 0x100 * j)
        tickets.append(t)
        yield True
    for j, t in enumerate(tickets):
        while (c := drv.take(t)) is None:
            yield False
        out[(w, j)] = c
        yield True


def _run_warps(drv: RingDriver, seed: int = 38) -> tuple[dict, int, bool]:
    """Round-robin over the warps (shuffled each round) until all end or none progressed for STALL_S.
    Returns (completions by (warp, j), warps left, stalled)."""
    rng = random.Random(seed)
    out: dict = {}
    live = {w: _warp(drv, w, out) for w in range(WARPS)}
    last = time.monotonic()
    while live:
        order = list(live)
        rng.shuffle(order)
        moved = False
        for w in order:
            try:
                moved |= next(live[w])
            except StopIteration:
                del live[w]
                moved = True
        now = time.monotonic()
        if moved:
            last = now
        elif now - last > STALL_S:
            return out, len(live), True
        else:
            time.sleep(0.001)
    return out, 0, False


def _expected(profile) -> dict[int, int]:
    e = FixedLatencyEngine.from_profile(profile)
    return {ctl.HBF_OP_LOAD: e.read_ns, ctl.HBF_OP_STORE: e.write_ns}


@pytest.mark.parametrize("steal", [False, True])
def test_deferred_consumption_deadlocks_without_stealing_and_ends_with_it(tmp_path, steal):
    expect = _expected(load_profile("nominal"))
    with start_hbfd(tmp_path) as h:
        att, m = attach(h)
        try:
            drv = RingDriver(m, att.ring_key, steal=steal)
            out, left, stalled = _run_warps(drv)
            if not steal:
                # the deadlock: warps left, every one of them in a slot wait whose occupant's completion hbfd
                # HAS posted (it is not hbfd's service that is missing, only the occupant's consumption)
                assert stalled and left > 0, (stalled, left)
                comp = m.completions
                head = int(m.ctl.header.ring_head)
                # the slot waits whose occupant (ticket t - N) was published: every one of them posted
                waiting = [t for t in range(N, head) if int(comp["consumed"][t % N]) < t - N + 1
                           and int(m.ring["seq"][t % N]) == t - N + 1]
                assert len(waiting) >= left // 2, (len(waiting), left)
                assert all(int(comp["seq"][t % N]) == t - N + 1 for t in waiting)
                return
            assert not stalled and left == 0, (stalled, left)
            assert len(out) == WARPS * PER_WARP
            assert drv.stats["steals"] > 0
            assert drv.stats["overflow_takes"] == drv.stats["steals"]   # every stolen completion taken once
            for (w, j), c in out.items():
                assert c.status == ctl.HBF_ST_READY, (w, j, c)
                assert c.arrival_ns == _arrival(w, j), (w, j, c)          # its own request's echo
                assert c.modeled_ns == expect[_op(w, j)], (w, j, c)       # the timing hbfd posted for it
                assert c.site_flags == ((w * PER_WARP + j) & 0xFFFF) | ((ctl.HBF_OP_LOAD + 0x100 * j) << 32)
            assert len({c.ticket for c in out.values()}) == WARPS * PER_WARP
        finally:
            m.close()
        assert h.alive()


@pytest.mark.parametrize("steal", [False, True])
def test_threads_holding_more_tickets_than_slots(tmp_path, steal):
    """The blocking driver from real threads (claims and overflow entries under concurrent owners and stealers):
    48 threads each issue 48 requests, meet, issue 48 more, meet, then wait for all of theirs: every one of the
    4,608 tickets is reserved before any is consumed, so tickets 4,096.. must steal (exactly 512 steals).
    Without stealing the second meeting never happens (slot waits time out)."""
    import threading
    threads, half = 48, 48
    expect = _expected(load_profile("nominal"))
    with start_hbfd(tmp_path) as h:
        att, m = attach(h)
        try:
            drv = RingDriver(m, att.ring_key, steal=steal)
            got, errors = {}, []
            meet = threading.Barrier(threads, timeout=60)

            def worker(w):
                try:
                    ts = []
                    for phase in range(2):
                        meet.wait()
                        ts += [drv.issue(arrival_ns=_arrival(w, j), address=0x7f00_0000_0000, media_address=4096 * j,
                                         nbytes=64, op=_op(w, j), site=w, flags=j, timeout_s=30 if steal else 3)
                               for j in range(phase * half, (phase + 1) * half)]
                    meet.wait()
                    for j, t in enumerate(ts):
                        got[(w, j)] = drv.wait(t, timeout_s=60)
                except Exception as e:          # reported below
                    errors.append(e)
                    meet.abort()

            ths = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
            for t in ths:
                t.start()
            for t in ths:
                t.join(180)
            if not steal:
                assert any("ring slot never freed" in str(e) for e in errors), errors[:3]
                return
            assert not errors, errors[:3]
            assert len(got) == threads * 2 * half
            for (w, j), c in got.items():
                assert (c.status, c.arrival_ns, c.modeled_ns) == (ctl.HBF_ST_READY, _arrival(w, j), expect[_op(w, j)])
                assert c.site_flags == w | (j << 32)
            assert drv.stats["steals"] == threads * 2 * half - N
            assert drv.stats["overflow_takes"] == drv.stats["steals"]
        finally:
            m.close()


def test_stealing_runs_out_of_overflow_entries_loudly(tmp_path):
    """Too small an overflow table for the stolen completions outstanding: RingOverflow (status
    RING_OVERFLOW), never an entry overwritten."""
    with start_hbfd(tmp_path) as h:
        att, m = attach(h)
        try:
            drv = RingDriver(m, att.ring_key, overflow_entries=4)
            with pytest.raises(RingOverflow) as ei:
                _run_warps(drv)
            assert ei.value.fields["status"] == "RING_OVERFLOW"
            held = ei.value.fields["held"]
            e = drv.ovf[held & 3]
            assert int(e["tick1"]) == held + 1 and int(e["taken"]) == 0   # the entry it refused to overwrite
        finally:
            m.close()


def test_completion_carries_its_request_words(tmp_path):
    """hbfd copies the request's site | flags << 32 and thermal_q_ppm (q | tag << 32) words into the
    completion: the owner (or a stealer) never reads ring[slot], which the next issuer may rewrite."""
    with start_hbfd(tmp_path) as h:
        att, m = attach(h)
        try:
            drv = RingDriver(m, att.ring_key)
            for i, (site, flags) in enumerate(((0x12345, 0x7), (0xFFFF_FFFF, 0x3), (0, 0))):
                t = drv.issue(arrival_ns=5000 + i, address=0x7f00_0000_0000, media_address=4096 * i, nbytes=64,
                              op=ctl.HBF_OP_LOAD, site=site, flags=flags)
                word7 = int(m.ring["thermal_q_ppm"][t % N])
                assert word7 >> 32 != 0                       # the request's tag
                c = drv.wait(t, timeout_s=10)
                assert c.site_flags == site | (flags << 32)
                assert c.q_tag == word7
                assert int(m.completions["req_site_flags"][t % N]) == site | (flags << 32)
        finally:
            m.close()


# ---- the claim paths, deterministic: a region of our own, hbfd's writer played by the test -------------------
def _region() -> ctl.CtlMap:
    return ctl.CtlMap.from_mmap(mmap.mmap(-1, ctl.CTL_BYTES))


def _post(m: ctl.CtlMap, t: int, *, arrival: int, modeled: int, site_flags: int = 0) -> None:
    """hbfd's post of ticket ``t`` (its writer: ctl.post_completions)."""
    c64 = m.completions.view(np.uint64).reshape(N, ctl.COMPLETION_WORDS)
    s = np.array([t % N])
    ctl.post_completions(c64, s, np.array([t + 1], np.uint64),
                         np.array([[arrival, modeled, 7, ctl.HBF_ST_READY]], np.uint64),
                         np.array([[site_flags, 0]], np.uint64))


def _fill(drv: RingDriver, m: ctl.CtlMap, k: int) -> list[int]:
    ts = []
    for i in range(k):
        t = drv.reserve()
        assert drv.slot_ready(t)
        drv.publish(t, arrival_ns=i, address=0, media_address=0, nbytes=64, op=0)
        _post(m, t, arrival=100 + t, modeled=1000 + t)
        ts.append(t)
    return ts


def test_owner_first_then_the_issuer_finds_the_slot_consumed():
    m = _region()
    drv = RingDriver(m, 1)
    _fill(drv, m, N)
    c = drv.take(0)
    assert (c.arrival_ns, c.modeled_ns, c.stolen) == (100, 1000, False)
    assert drv.slot_ready(drv.reserve()) and drv.stats["steals"] == 0


def test_stealer_first_then_the_owner_takes_it_from_the_overflow_table():
    m = _region()
    drv = RingDriver(m, 1)
    _fill(drv, m, N)
    t = drv.reserve()                                      # ticket N: slot 0, occupant ticket 0 unconsumed
    assert drv.slot_ready(t) and drv.stats["steals"] == 1
    assert int(m.completions["consumed"][0]) == 1
    drv.publish(t, arrival_ns=0, address=0, media_address=0, nbytes=64, op=0)
    assert drv.take(0).stolen                              # seq still 1: the claim says stolen
    _post(m, t, arrival=5, modeled=6)                      # hbfd reuses the slot
    c = drv.take(0)                                        # seq moved on: the overflow entry, again
    assert (c.ticket, c.arrival_ns, c.modeled_ns, c.stolen) == (0, 100, 1000, True)
    c = drv.take(t)
    assert (c.arrival_ns, c.modeled_ns, c.stolen) == (5, 6, False)
    # a ticket consumed by its owner whose slot moved on is in no entry: waited before
    assert drv.take(1).stolen is False
    t2 = drv.reserve()
    assert drv.slot_ready(t2) and drv.stats["steals"] == 1   # consumed by its owner: nothing to steal
    drv.publish(t2, arrival_ns=0, address=0, media_address=0, nbytes=64, op=0)
    _post(m, t2, arrival=1, modeled=1)
    with pytest.raises(AlreadyWaited):
        drv.take(1)


def test_an_owner_that_claimed_first_keeps_it_and_the_stealer_waits():
    m = _region()
    drv = RingDriver(m, 1)
    _fill(drv, m, N)
    drv._claim(0, 2 * 1)                                   # the owner of ticket 0 has claimed, not yet consumed
    t = drv.reserve()
    assert not drv.slot_ready(t) and drv.stats["steals"] == 0
    assert drv.take(0).stolen is False                     # (a second path of the same ticket: validated read)
    assert drv.slot_ready(t)


def test_a_capacity_hint_is_never_stolen():
    m = _region()
    drv = RingDriver(m, 1)
    _fill(drv, m, N - 1)
    t = drv.reserve()
    drv.publish(t, arrival_ns=0, address=0, media_address=0, nbytes=64, op=0, flags=HBF_REQ_CAP_HINT)
    _post(m, t, arrival=1, modeled=1, site_flags=HBF_REQ_CAP_HINT << 32)
    for _ in range(N - 1):
        assert drv.slot_ready(drv.reserve())
    t2 = drv.reserve()                                     # slot of the hint
    assert not drv.slot_ready(t2)                          # hbfd consumes a hint itself
    m.completions["consumed"][t % N] = t + 1
    assert drv.slot_ready(t2)


def test_overflow_entry_reuse_rules():
    """An untaken entry is never overwritten (RingOverflow), a taken one is, and so is one of a ticket
    below the floor (reserved before the last synchronization point: its owner is gone)."""
    m = _region()
    drv = RingDriver(m, 1, overflow_entries=1)
    _fill(drv, m, N)
    t = drv.reserve()
    assert drv.slot_ready(t)                               # ticket 0 stolen into entry 0
    t1 = drv.reserve()
    with pytest.raises(RingOverflow) as ei:                # ticket 1's steal: entry 0 holds ticket 0, untaken
        drv.slot_ready(t1)
    assert (ei.value.fields["ticket"], ei.value.fields["held"]) == (1, 0)
    assert int(drv.ovf["tick1"][0]) == 1 and int(drv.claim[1]) == 0   # nothing overwritten, nothing claimed
    assert drv.take(0).stolen                              # taken: the entry may be reused
    assert drv.slot_ready(t1) and int(drv.ovf["tick1"][0]) == 2
    t2 = drv.reserve()
    with pytest.raises(RingOverflow):
        drv.slot_ready(t2)
    drv.floor = t2                                         # a synchronization point: tickets below are gone
    assert drv.slot_ready(t2) and int(drv.ovf["tick1"][0]) == 3
    assert drv.stats["steals"] == 3


# ---- the completion seqlock: every interleaving of hbfd's writer and the GPU's reader --------------------------
class _Recorder:
    """Stands for the completions matrix in ctl.post_completions: records its store passes in order."""

    def __init__(self):
        self.ops = []

    def __setitem__(self, key, value):
        self.ops.append((key, np.array(value, np.uint64, copy=True)))

    def __getitem__(self, key):                 # a column view, c64[:, j]: its stores are recorded as c64[i, j]
        _, j = key
        rec = self

        class _Col:
            def __setitem__(self, i, value):
                rec.ops.append(((i, j), np.array(value, np.uint64, copy=True)))
        return _Col()


class _Field:
    def __init__(self, comp, name, before_read):
        self.comp, self.name, self.before_read = comp, name, before_read

    def __getitem__(self, i):
        self.before_read()
        return self.comp[self.name][i]


class _Interleaved:
    """The completions as the reader sees them: before its k-th load, the writer runs sched[k] store passes."""

    def __init__(self, comp, c64, ops, sched):
        self.comp, self.c64, self.ops, self.sched, self.k, self.w = comp, c64, ops, sched, 0, 0

    def _step(self):
        for _ in range(self.sched[self.k] if self.k < len(self.sched) else 0):
            key, val = self.ops[self.w]
            self.c64[key] = val
            self.w += 1
        self.k += 1

    def __getitem__(self, name):
        return _Field(self.comp, name, self._step)


def _payload(t: int) -> tuple[int, ...]:
    return (3 * t + 1, 5 * t + 2, 7 * t + 3, (t % 5) + 1, t | (1 << 40), ~t & 0xFFFF_FFFF_FFFF_FFFF)


def _naive_read(comp, slot, want):
    """The reader without the re-read (what hb_ticket_deadline did before ABI 4)."""
    if int(comp["seq"][slot]) != want:
        return None
    return (int(comp["arrival_ns"][slot]), int(comp["modeled_ns"][slot]), int(comp["service_ns"][slot]),
            int(comp["status"][slot]), int(comp["req_site_flags"][slot]), int(comp["req_q_tag"][slot]))


def _torn_accepts(reader, seqlock: bool, per_column: bool = False) -> tuple[int, int]:
    """Every schedule of the writer's store passes (re-posting slot 0 from ticket 0 to ticket N) around
    the reader's 8 loads of ticket 0: (accepted reads, accepted reads that are not ticket 0's payload)."""
    comp = np.zeros(4, ctl.COMPLETION_DTYPE)
    c64 = comp.view(np.uint64).reshape(4, ctl.COMPLETION_WORDS)
    rec = _Recorder()
    p1 = _payload(N)
    ctl.post_completions(rec, np.array([0]), np.array([N + 1], np.uint64), np.array([p1[:4]], np.uint64),
                         np.array([p1[4:]], np.uint64), seqlock=seqlock, per_column=per_column)
    ops = rec.ops
    accepted = torn = 0
    loads = 8
    for cut in itertools.combinations(range(len(ops) + loads), len(ops)):   # stars and bars
        sched, k = [0] * (loads + 1), 0
        for pos in range(len(ops) + loads):
            if pos in cut:
                sched[k] += 1
            else:
                k += 1
        p0 = _payload(0)
        c64[0, :] = 0
        c64[0, 1:5], c64[0, 6:8], c64[0, 0] = p0[:4], p0[4:], 1
        got = reader(_Interleaved(comp, c64, ops, sched), 0, 1)
        if got is not None:
            accepted += 1
            torn += got != p0
    return accepted, torn


@pytest.mark.parametrize("per_column", [False, True])
def test_seqlock_reader_never_accepts_a_torn_completion(per_column):
    accepted, torn = _torn_accepts(ctl.read_completion_validated, seqlock=True, per_column=per_column)
    assert accepted > 0 and torn == 0, (accepted, torn)


@pytest.mark.parametrize("per_column", [False, True])
def test_seqlock_needs_both_the_marker_and_the_re_read(per_column):
    """The checks above can fail: without hbfd's seq = 0 marker, or without the reader's re-read of seq,
    some interleaving accepts a payload mixed from two tickets."""
    assert _torn_accepts(ctl.read_completion_validated, seqlock=False, per_column=per_column)[1] > 0
    assert _torn_accepts(_naive_read, seqlock=True, per_column=per_column)[1] > 0


def test_overflow_knob(monkeypatch):
    from hbfcommon.errors import ConfigError
    from runtime_cuda import knobs
    monkeypatch.delenv("HBF_RING_OVERFLOW_LOG2", raising=False)
    assert knobs.ring_overflow_log2() == 20                 # 2^20 x 64 B = 64 MiB of device memory
    for v, want in (("0", 0), ("10", 10), ("26", 26)):
        monkeypatch.setenv("HBF_RING_OVERFLOW_LOG2", v)
        assert knobs.ring_overflow_log2() == want
    for v in ("5", "27", "-1"):
        monkeypatch.setenv("HBF_RING_OVERFLOW_LOG2", v)
        with pytest.raises(ConfigError):
            knobs.ring_overflow_log2()
