"""The device-model twin (hbfd/media/twin.py): equal to the literal scalar reference (twin_ref.py),
batching-invariant, hand-computed cases of media semantics v2, and its agreement with the CPU
media engine on small versions of the cross-check streams (bench/media_crosscheck.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from twin_ref import device_model

from hbfcommon.errors import ConfigError
from hbfd.media.crosscheck import TOLERANCE, compare, run_engine, run_twin
from hbfd.media.geometry import MediaError, MediaGeometry
from hbfd.media.streams import KINDS, bound_bytes_per_s, channel_bytes, make_stream
from hbfd.media.twin import DeviceModelTwin

LOAD, STORE, ATOMIC, CPASYNC = 0, 1, 2, 3


def geom(C=2, D=2, B=2, P=2, t_cmd=50, t_read=1000, t_prog=3000, cbps=1_000_000_000, **kw):
    return MediaGeometry(channels=C, dies_per_channel=D, planes_per_die=B, blocks_per_plane=16, pages_per_block=8,
                         channel_bytes_per_s=cbps, t_read_ns=t_read, t_prog_ns=t_prog, t_erase_ns=10_000,
                         t_cmd_ns=t_cmd, page_buffers_per_plane=P, over_provisioning=0.3, **kw)


# one page per plane index: with C = D = B = 2 page n lives on plane ((n%2)*2 + (n//2)%2)*2 + (n//4)%2,
# so pages 0, 8, 16, ... share plane 0 (and channel 0)
SAME_PLANE = 8


def random_stream(rng, g, n, *, pages=10, p_ops=(0.5, 0.2, 0.1, 0.2), sorted_=False, thermal=False):
    a = rng.integers(0, 20_000, n)
    if sorted_:
        a = np.sort(a)
    addr = rng.integers(0, pages * 4096, n)
    nb = np.minimum(rng.integers(1, 6000, n), g.capacity_bytes - addr)
    op = rng.choice([LOAD, STORE, ATOMIC, CPASYNC], n, p=p_ops)
    q = rng.choice([1_000_000, 500_000, 333_333, 0, 2_000_000], n) if thermal else np.full(n, 1_000_000)
    return a, addr, nb, op, q


def as_requests(a, addr, nb, op, q=None):
    return [(int(a[i]), int(addr[i]), int(nb[i]), int(op[i])) + (() if q is None else (int(q[i]),))
            for i in range(len(a))]


# ---------------------------------------------------------------------------------------------
# the twin equals the literal reference

@pytest.mark.parametrize("seed", range(60))
def test_twin_equals_scalar_reference(seed):
    rng = np.random.default_rng(seed)
    g = geom(C=int(rng.integers(1, 3)), D=int(rng.integers(1, 3)), B=int(rng.integers(1, 3)),
             P=int(rng.integers(1, 3)), t_cmd=int(rng.integers(0, 100)))
    n = int(rng.integers(1, 120))
    p_ops = (1.0, 0, 0, 0) if seed % 4 == 0 else (0.5, 0.2, 0.1, 0.2)
    a, addr, nb, op, q = random_stream(rng, g, n, pages=int(rng.integers(1, 14)), p_ops=p_ops,
                                       thermal=seed % 3 == 0)
    assert DeviceModelTwin(g).run(a, addr, nb, op, q).tolist() == device_model(g, as_requests(a, addr, nb, op, q))


@pytest.mark.parametrize("seed", range(20))
def test_stepped_solver_equals_scalar_reference(seed, monkeypatch):
    """The exact fallback for long write chains (forced after one fixed-point pass)."""
    monkeypatch.setattr(DeviceModelTwin, "max_fixed_point_iterations", 1)
    rng = np.random.default_rng(100 + seed)
    g = geom(C=int(rng.integers(1, 3)), B=int(rng.integers(1, 3)), P=int(rng.integers(1, 3)))
    a, addr, nb, op, q = random_stream(rng, g, 150, pages=8, p_ops=(0.4, 0.3, 0.1, 0.2), thermal=True)
    tw = DeviceModelTwin(g)
    assert tw.run(a, addr, nb, op, q).tolist() == device_model(g, as_requests(a, addr, nb, op, q))
    assert tw.counts["stepped_channels"] >= 1


@pytest.mark.parametrize("wop", [STORE, ATOMIC])
def test_twin_equals_reference_on_a_long_write_chain(wop):
    """Writes far beyond what the planes sustain. A store's data-in waits for a free page buffer of its plane
    (the end of the program before last), so the stores' acks form a chain through the plane; its channel
    slot stays at its no-wait time (a + t_cmd + tR), so the chain converges without the stepped solver
    (before 2026-12-04's slot fix it needed it). An atomic's write follows its read, which waits only for
    the program running at its command (read priority) and pays no backpressure."""
    g = geom(C=1, D=1, B=2, t_prog=50_000)
    n = 400
    rng = np.random.default_rng(7)
    op = np.where(rng.random(n) < 0.4, wop, LOAD)
    addr = np.where(op == wop, 4096 * (64 + np.arange(n) % 8), 512 * (np.arange(n) % 64))
    nb = np.where(op == wop, 4096, 512)
    a = np.arange(n) * 200
    tw = DeviceModelTwin(g)
    got = tw.run(a, addr, nb, op)
    assert got.tolist() == device_model(g, as_requests(a, addr, nb, op))
    assert tw.counts["stepped_channels"] == 0


def test_a_store_waits_for_a_free_page_buffer():
    """Two page buffers per plane hold the running and the queued program's data: the third store to a plane
    in a row starts its data-in when the first program ends."""
    g = geom(C=1, D=1, B=1, P=2, t_prog=50_000, t_cmd=0)
    tw = DeviceModelTwin(g)
    n = 3
    a = np.zeros(n, np.int64)
    done = tw.run(a, 4096 * np.arange(n), np.full(n, 4096), np.full(n, STORE))
    x = -(-4096 * 10**9 // g.channel_bytes_per_s)
    assert done[0] == x and done[1] == 2 * x                 # buffers free: data-in back to back
    assert done[2] == x + 50_000 + x                         # after the first program (x .. x + tPROG)


def test_a_store_waiting_for_a_page_buffer_does_not_hold_the_channel():
    """The third store to a plane waits for the first program (tPROG 50 us); a read of another plane right
    behind it on the same channel is not held behind that store's slot: the store's slot is at its no-wait
    time (a + t_cmd + tR), not at its buffer-free time + tR (before: the read waited ~50 us)."""
    g = geom(C=1, D=1, B=2, P=2, t_prog=50_000, t_cmd=0)
    a = np.array([0, 0, 0, 1])
    addr = 4096 * np.array([0, 2, 4, 1])             # pages 0, 2, 4 on plane 0; page 1 on plane 1
    op = np.array([STORE, STORE, STORE, LOAD])
    done = DeviceModelTwin(g).run(a, addr, np.full(4, 4096), op)
    assert done.tolist() == device_model(g, as_requests(a, addr, np.full(4, 4096), op))
    x = 4096
    assert done[2] == x + 50_000 + x                  # its data-in once the first program ends
    assert done[3] == 1000 + 4 * x                    # behind the three stores' slots (1000 + 3x), no more


@pytest.mark.parametrize("seed", range(25))
def test_batches_give_the_one_batch_result(seed):
    rng = np.random.default_rng(1000 + seed)
    g = geom(P=int(rng.integers(1, 3)), t_cmd=int(rng.integers(0, 100)))
    n = int(rng.integers(2, 150))
    a, addr, nb, op, q = random_stream(rng, g, n, sorted_=True, thermal=seed % 2 == 0)
    one = DeviceModelTwin(g).run(a, addr, nb, op, q)
    cuts = np.sort(rng.choice(np.arange(1, n), min(n - 1, int(rng.integers(1, 8))), replace=False))
    tw, state, parts, ref = DeviceModelTwin(g), {}, [], []
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, n]):
        parts.append(tw.run(a[lo:hi], addr[lo:hi], nb[lo:hi], op[lo:hi], q[lo:hi]))
        ref += device_model(g, as_requests(a[lo:hi], addr[lo:hi], nb[lo:hi], op[lo:hi], q[lo:hi]), state)
    assert np.concatenate(parts).tolist() == one.tolist() == ref
    assert tw.sense_free.tolist() == state["sense_free"] and tw.prog_free.tolist() == state["prog_free"]
    assert tw.chan_free.tolist() == state["chan_free"]


def test_one_request_at_a_time_equals_one_batch():
    rng = np.random.default_rng(5)
    g = geom()
    a, addr, nb, op, q = random_stream(rng, g, 80, sorted_=True)
    one = DeviceModelTwin(g).run(a, addr, nb, op)
    tw = DeviceModelTwin(g)
    assert [int(tw.run(a[i:i + 1], addr[i:i + 1], nb[i:i + 1], op[i:i + 1])[0]) for i in range(80)] == one.tolist()


# ---------------------------------------------------------------------------------------------
# the channel calendar (channel_order="calendar", hbfd/media/chancal.py): equal to the reference, batching-
# invariant, never two transfers on a channel at once

def channel_overlaps(tw):
    """Pairs of transfers of one channel that share time, over the twin's trace."""
    ch, s, e = (np.concatenate(x) for x in zip(*tw.transfers))
    bad = 0
    for c in np.unique(ch):
        m = ch == c
        o = np.argsort(s[m], kind="stable")
        cs, ce = s[m][o], e[m][o]
        bad += int((cs[1:] < np.maximum.accumulate(ce)[:-1]).sum())
    return bad


@pytest.mark.parametrize("seed", range(40))
def test_calendar_twin_equals_scalar_reference(seed):
    rng = np.random.default_rng(7000 + seed)
    g = geom(C=int(rng.integers(1, 3)), D=int(rng.integers(1, 3)), B=int(rng.integers(1, 3)),
             P=int(rng.integers(1, 3)), t_cmd=int(rng.integers(0, 100)),
             cbps=int(rng.choice([1_000_000_000, 3_000_000_000, 48_000_000_000])))
    Q, W = [(1, 128), (1, 16384), (7, 16), (64, 2), (64, 4), (64, 16384)][seed % 6]   # small rings: words
    n = int(rng.integers(1, 120))                                                     # leave the window
    p_ops = (1.0, 0, 0, 0) if seed % 4 == 0 else (0.5, 0.2, 0.1, 0.2)
    a, addr, nb, op, q = random_stream(rng, g, n, pages=int(rng.integers(1, 14)), p_ops=p_ops)
    if seed % 4 == 1:
        q = rng.choice([1_000_000, 500_000, 333_333], n)
    tw = DeviceModelTwin(g, channel_order="calendar", ring_words=W, quantum_ns=Q, trace=True)
    ref = device_model(g, as_requests(a, addr, nb, op, q), channel_order="calendar", ring_words=W, quantum_ns=Q)
    assert tw.run(a, addr, nb, op, q).tolist() == ref
    longest = max(int((e - s).max()) for _, s, e in tw.transfers)
    if longest <= 64 * (W - 1) * tw.quantum_ns:          # (longer: out of model, held for the ring's cap only)
        assert channel_overlaps(tw) == 0


@pytest.mark.parametrize("seed", range(12))
def test_calendar_batches_give_the_one_batch_result(seed):
    rng = np.random.default_rng(8000 + seed)
    g = geom(P=int(rng.integers(1, 3)), t_cmd=int(rng.integers(0, 100)))
    Q, W = [(1, 256), (1, 16384), (64, 4)][seed % 3]
    n = int(rng.integers(2, 150))
    a, addr, nb, op, q = random_stream(rng, g, n, sorted_=True)
    one = DeviceModelTwin(g, channel_order="calendar", ring_words=W, quantum_ns=Q).run(a, addr, nb, op, q)
    cuts = np.sort(rng.choice(np.arange(1, n), min(n - 1, int(rng.integers(1, 8))), replace=False))
    tw, state, parts, ref = DeviceModelTwin(g, channel_order="calendar", ring_words=W, quantum_ns=Q), {}, [], []
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, n]):
        parts.append(tw.run(a[lo:hi], addr[lo:hi], nb[lo:hi], op[lo:hi], q[lo:hi]))
        ref += device_model(g, as_requests(a[lo:hi], addr[lo:hi], nb[lo:hi], op[lo:hi], q[lo:hi]), state,
                            channel_order="calendar", ring_words=W, quantum_ns=Q)
    assert np.concatenate(parts).tolist() == one.tolist() == ref
    assert tw.sense_free.tolist() == state["sense_free"] and tw.prog_free.tolist() == state["prog_free"]


def test_calendar_compiled_and_python_forms_agree(monkeypatch):
    """``chancal.calendar_pass`` compiled (numba, where installed) and in Python: the same integers."""
    b = make_stream("mixed", SG1, 3000, load=1.5, seed=4)
    outs = []
    for mode in ("auto", "off"):
        monkeypatch.setenv("HBFD_ACCEL", mode)
        tw = DeviceModelTwin(SG1, channel_order="calendar")
        outs.append((tw.run_batch(b).tolist(), tw.prog_free.tolist(), tw.rings[0].tolist()))
    assert outs[0] == outs[1]


def test_calendar_a_late_transaction_does_not_hold_the_channel():
    """One channel, 64 ns quanta (one 64 B sector at 1 GB/s), 64 B reads, t_cmd 0, tR 1000. Read 0 (plane 0) is ready at
    1000: quantum 16 (from 1024). Read 1 (plane 0 again, behind read 0's sense) is ready at 2000: quantum 32.
    Read 2 (plane 1), ready at 1002, takes the first free quantum from ceil(1002 / 64) = 16: 17 (1088), before
    read 1's: the arrival-order tail would put it behind read 1's slot (1128 + 64), plain FCFS at data ready
    behind read 1's transfer (2064 + 64)."""
    g = geom(C=1, D=1, B=2, t_cmd=0)
    reqs = [(0, 0, 64, LOAD), (1, 2 * 4096, 64, LOAD), (2, 4096, 64, LOAD)]
    a, addr, nb, op = (np.array(x) for x in zip(*reqs))
    tw = DeviceModelTwin(g, channel_order="calendar", quantum_ns=64, trace=True)
    assert tw.run(a, addr, nb, op).tolist() == [1024 + 64, 2048 + 64, 1088 + 64]
    assert device_model(g, reqs, channel_order="calendar", quantum_ns=64) == [1088, 2112, 1152]
    # 1 ns quanta (the default): read 2 from its ready time, right after read 0 (1000 .. 1064)
    assert DeviceModelTwin(g, channel_order="calendar").run(a, addr, nb, op).tolist() == [1064, 2064, 1128]
    assert DeviceModelTwin(g).run(a, addr, nb, op).tolist() == [1064, 2064, 1192]   # arrival order (default)
    # a 4 KiB read needs 64 free quanta in a row: read 2 then goes after read 1's quantum
    reqs[2] = (2, 4096, 4096, LOAD)
    assert device_model(g, reqs, channel_order="calendar", quantum_ns=64)[2] == 2112 + 4096
    assert channel_overlaps(tw) == 0


def test_calendar_words_out_of_the_window_read_as_full():
    """A ring of 2 words (128 quanta of 64 ns): a read ready at 20 us takes word 4 = slot 0; a later read
    ready at 1 us (word 0, slot 0, now tagged with word 4) skips it: word 1 (quantum 64 = 4096 ns)."""
    g = geom(C=1, D=1, B=2, t_cmd=0, t_read=1000)
    reqs = [(19_000, 0, 64, LOAD), (19_001, 4096, 64, LOAD)]
    tw = DeviceModelTwin(g, channel_order="calendar", ring_words=2, quantum_ns=64)
    a, addr, nb, op = (np.array(x) for x in zip(*reqs))
    assert tw.run(a, addr, nb, op).tolist() == [20_032 + 64, 20_032 + 64 + 64]
    reqs = [(19_000, 0, 64, LOAD), (0, 4096, 64, LOAD)]
    done = device_model(g, [reqs[1], reqs[0]], channel_order="calendar", ring_words=2, quantum_ns=64)
    assert done == [1024 + 64, 20_032 + 64]
    with pytest.raises(ConfigError, match="ring_words"):
        DeviceModelTwin(g, channel_order="calendar", ring_words=3)
    with pytest.raises(ConfigError, match="channel_order"):
        DeviceModelTwin(g, channel_order="fifo")
    with pytest.raises(ConfigError, match="quantum_ns"):
        DeviceModelTwin(g, channel_order="calendar", quantum_ns=0)


@pytest.mark.parametrize("kind", ["random", "moe", "mixed"])
def test_calendar_never_overlaps_transfers_at_overload(kind):
    b = make_stream(kind, SG1, 6000, load=2.0, seed=3)
    tw = DeviceModelTwin(SG1, channel_order="calendar", trace=True)
    tw.run_batch(b)
    assert channel_overlaps(tw) == 0


# ---------------------------------------------------------------------------------------------
# hand-computed cases (t_cmd 50, tR 1000, tPROG 3000, 1 GB/s: xfer(b) = b ns)

def run1(g, reqs, q=1_000_000):
    tw = DeviceModelTwin(g)
    a, addr, nb, op = (np.array(x) for x in zip(*reqs))
    return tw.run(a, addr, nb, op, q).tolist(), tw


def test_eight_warp_reads_of_one_page_cost_one_sense():
    done, tw = run1(geom(), [(0, 512 * k, 512, LOAD) for k in range(8)])
    assert done == [50 + 1000 + 512 * (k + 1) for k in range(8)]      # one sense, then the channel
    assert tw.counts["senses"] == 1 and tw.counts["hits"] == 7


def test_a_read_of_a_page_being_sensed_waits_for_that_sense():
    done, tw = run1(geom(), [(0, 0, 64, LOAD), (400, 64, 64, LOAD), (2000, 128, 64, LOAD)])
    assert done == [1114, 1178, 2114]        # 2nd: ready at the 1st's sense end (1050) + channel; 3rd: buffered
    assert tw.counts["senses"] == 1 and tw.counts["coalesced"] == 1


def test_two_buffers_lru_by_use_and_eviction():
    A, B_, C_ = 0, SAME_PLANE * 4096, 2 * SAME_PLANE * 4096            # three pages of one plane
    t = [0, 10_000, 20_000, 30_000]
    done, tw = run1(geom(), [(t[0], A, 64, LOAD), (t[1], B_, 64, LOAD), (t[2], A, 64, LOAD), (t[3], C_, 64, LOAD)])
    assert tw.counts["senses"] == 3 and done[2] == t[2] + 50 + 64      # A hit (no tR)
    done, tw = run1(geom(), [(t[0], A, 64, LOAD), (t[1], B_, 64, LOAD), (t[2], C_, 64, LOAD), (t[3], A, 64, LOAD)])
    assert tw.counts["senses"] == 4 and done[3] == t[3] + 50 + 1000 + 64   # A was evicted by C
    done, tw = run1(geom(P=1), [(t[0], A, 64, LOAD), (t[1], B_, 64, LOAD), (t[2], A, 64, LOAD)])
    assert tw.counts["senses"] == 3                                     # one buffer: B evicts A


def test_store_invalidates_the_buffer_and_holds_the_plane():
    done, tw = run1(geom(), [(0, 0, 4096, LOAD), (10_000, 0, 64, STORE), (10_100, 0, 64, LOAD)])
    assert done[0] == 50 + 1000 + 4096
    assert done[1] == 10_000 + 50 + 64                                  # ack at the end of the data-in
    # the page is no longer buffered; the plane programs ceil(3000 * 64 / 4096) = 47 ns after the data-in
    assert done[2] == (10_114 + 47) + 1000 + 64
    assert tw.counts["senses"] == 2


def test_a_store_empties_only_its_own_pages_buffer():
    """The engine's and the device's rule: a store to a page that is not buffered changes no buffer (a store
    that took a buffer would evict the LRU page A); a store to the LRU page empties that buffer, which the next sense fills
    (A survives)."""
    g = geom()
    st = g.channels * g.dies_per_channel * g.planes_per_die * 4096       # same plane, next page in it
    A, B_, C_ = 0, st, 2 * st
    done, tw = run1(g, [(0, A, 64, LOAD), (5000, B_, 64, LOAD), (10_000, C_, 64, STORE), (20_000, A, 64, LOAD)])
    assert tw.counts["senses"] == 2 and done[3] == 20_000 + 50 + 64       # A (the LRU one) still buffered
    done, tw = run1(g, [(0, A, 64, LOAD), (5000, B_, 64, LOAD), (10_000, A, 64, STORE), (20_000, C_, 64, LOAD),
                        (30_000, B_, 64, LOAD)])
    assert tw.counts["senses"] == 3 and done[4] == 30_000 + 50 + 64       # C filled A's emptied buffer


def test_atomic_reads_then_writes_at_the_read_completion():
    done, tw = run1(geom(), [(0, 0, 8, ATOMIC), (1200, 0, 8, LOAD)])
    read_done = 50 + 1000 + 64
    assert done[0] == read_done + 50 + 64                               # data-in at read completion + t_cmd
    # the write invalidated the page and programs ceil(3000 * 64 / 4096) = 47 ns after its data-in
    assert done[1] == (done[0] + 47) + 1000 + 64


def test_thermal_half_rate_doubles_tr_and_transfer():
    g = geom()
    done, _ = run1(g, [(0, 0, 512, LOAD)], q=500_000)
    assert done == [50 + 2 * 1000 + 2 * 512]                            # t_cmd is not scaled
    done, _ = run1(g, [(0, 0, 64, LOAD)], q=300_000)
    assert done == [50 + -(-1000 * 10 // 3) + -(-64 * 10 // 3)]        # ceil each


def test_only_touched_sectors_cross_the_channel_and_a_request_ends_with_its_last_page():
    done, tw = run1(geom(), [(0, 60, 8, LOAD)])                         # bytes 60..67: sectors 0 and 1
    assert done == [50 + 1000 + 128]
    done, tw = run1(geom(), [(0, 4096 - 64, 128, LOAD)])                # two pages on two channels
    assert done == [50 + 1000 + 64] and tw.counts["transactions"] == 2


def test_ties_go_in_input_order_and_results_come_back_in_input_order():
    done, _ = run1(geom(), [(100, 0, 512, LOAD), (0, 512, 512, LOAD), (100, 1024, 512, LOAD)])
    # one page: the a=0 request senses (50..1050) and transfers first; the two at a=100 hit, in input order
    assert done == [1050 + 512 + 512, 1050 + 512, 1050 + 3 * 512]


def test_bad_input_is_a_clear_error():
    g = geom()
    tw = DeviceModelTwin(g)
    with pytest.raises(MediaError, match="op"):
        tw.run([0], [0], [64], [7])
    with pytest.raises(MediaError, match="address"):
        tw.run([0], [g.capacity_bytes - 8], [64], [LOAD])
    with pytest.raises(MediaError, match="bytes"):
        tw.run([0], [0], [0], [LOAD])
    with pytest.raises(MediaError, match="length"):
        tw.run([0, 1], [0], [64], [LOAD])
    with pytest.raises(ConfigError, match="page_buffers_per_plane"):
        DeviceModelTwin(geom(P=3))


# ---------------------------------------------------------------------------------------------
# streams

def test_streams_are_seeded_and_offer_the_asked_load():
    g = geom(C=4, D=2, B=4)
    for kind in KINDS:
        kw = {"experts": 4, "expert_bytes": 64 << 10} if kind == "moe" else {}
        b1 = make_stream(kind, g, 4000, load=0.5, arrivals="deterministic", seed=3, **kw)
        b2 = make_stream(kind, g, 4000, load=0.5, arrivals="deterministic", seed=3, **kw)
        assert (b1 == b2).all()
        assert ((b1["media_address"] + b1["bytes"]) <= g.capacity_bytes).all()
        cb = channel_bytes(b1)
        span = int(b1["arrival_ns"][-1] - b1["arrival_ns"][0])
        offered = cb[:-1].sum() * 1e9 / span
        assert offered == pytest.approx(0.5 * bound_bytes_per_s(g, b1), rel=0.01), kind
    # the bound counts senses: whole distinct pages give the geometry's read bound, 1 KiB random reads a
    # quarter of its sensing bound in channel bytes, 8 warp reads per page the full one
    b = make_stream("strided", g, 4000, req_bytes=4096, stride_pages=1)
    assert bound_bytes_per_s(g, b) == pytest.approx(g.read_bound_bytes_per_s)
    b["bytes"] = 1024
    sensing = g.planes * 4096 * 1e9 / g.t_read_ns
    assert bound_bytes_per_s(g, b) == pytest.approx(min(sensing / 4, g.aggregate_bytes_per_s))
    assert bound_bytes_per_s(g, make_stream("sequential", g, 4000)) == pytest.approx(g.read_bound_bytes_per_s)
    with pytest.raises(ConfigError, match="kind"):
        make_stream("zigzag", g, 10)
    with pytest.raises(ConfigError, match="stride"):
        make_stream("strided", g, 10, stride=3)


# ---------------------------------------------------------------------------------------------
# twin vs media engine

SG1 = MediaGeometry(channels=8, dies_per_channel=1, planes_per_die=256, blocks_per_plane=128, pages_per_block=256,
                    channel_bytes_per_s=48_000_000_000, t_read_ns=4000, t_prog_ns=600_000, t_erase_ns=3_500_000,
                    t_cmd_ns=300, queue_depth=256, page_buffers_per_plane=2)


def test_twin_equals_engine_exactly_where_the_semantics_coincide():
    """Distinct pages, idle planes: data ready is monotone in arrival, so the device's arrival-order
    channel and the engine's data-ready order are the same schedule."""
    b = make_stream("strided", SG1, 5000, load=0.5, seed=2)
    assert run_twin(SG1, b)[0].tolist() == run_engine(SG1, b)[0].tolist()


AGREEMENT = [
    pytest.param("sequential", 0.25, 4000, {}),
    pytest.param("strided", 0.5, 4000, {}),
    pytest.param("random", 0.1, 3000, {}),
    pytest.param("moe", 0.25, 4000, {"experts": 16, "expert_bytes": 1 << 20}),
    pytest.param("mixed", 0.05, 4000, {"write_fraction": 0.05}),
]


@pytest.mark.parametrize("kind,load,n,kw", AGREEMENT)
@pytest.mark.parametrize("arrivals", ["poisson", "deterministic"])
def test_twin_agrees_with_engine(kind, load, n, kw, arrivals):
    r = compare(SG1, make_stream(kind, SG1, n, load=load, arrivals=arrivals, seed=3, **kw))
    assert r["bounds_ok"], (r["twin"]["within_bounds"], r["engine"]["within_bounds"])
    bad = {k: round(v, 4) for k, v in r["rel_diff"].items() if abs(v) > TOLERANCE[k]}
    assert not bad, f"twin vs engine beyond {TOLERANCE}: {bad}"


@pytest.mark.parametrize("kind", KINDS)
def test_both_models_stay_within_the_geometry_bounds_at_overload(kind):
    kw = {"experts": 16, "expert_bytes": 1 << 20} if kind == "moe" else {}
    r = compare(SG1, make_stream(kind, SG1, 4000, load=2.0, seed=4, **kw))
    assert r["bounds_ok"], (r["twin"]["within_bounds"], r["engine"]["within_bounds"])
    g20 = dataclasses.replace(SG1, t_read_ns=20_000)
    r = compare(g20, make_stream(kind, g20, 4000, load=2.0, seed=4, **kw))
    assert r["bounds_ok"], (r["twin"]["within_bounds"], r["engine"]["within_bounds"])


# ---------------------------------------------------------------------------------------------
# the reduced cross-check (CI): bench/media_crosscheck.py's sweep, small. Every stream kind on the OCP SG1
# profile, SG1 with tR 20 us and nominal, loads 10-200 %, the die queue depth unbounded (the one semantics,
# docs/design.md §3.9, has none). Both models stay within the geometry's bounds in every case; they agree
# (5 % bandwidth, 10 % p50 / p99) in every case but the differences §3.9 documents, which must still differ
# here: the day one is fixed this test says so.

def _unbounded(g):
    from hbfcommon.profile import MAX_DIE_QUEUE_SLOTS
    return dataclasses.replace(g, queue_depth=MAX_DIE_QUEUE_SLOTS // g.dies)


def _ci_geometries():
    from hbfcommon.profile import load_profile
    sg1 = _unbounded(MediaGeometry.from_profile(load_profile("ocp-sg1")))
    return {"ocp-sg1": sg1, "ocp-sg1/tR20us": dataclasses.replace(sg1, t_read_ns=20_000),
            "nominal": _unbounded(MediaGeometry.from_profile(load_profile("nominal")))}


CI_GEOMETRIES = _ci_geometries()
CI_LOADS = (0.1, 0.5, 1.0, 2.0)
CI_PARAMS = {"moe": {"experts": 16, "expert_bytes": 256 << 10}}     # small experts: hot experts are re-read
# (geometry, kind, load): why they differ (docs/design.md §3.9 table, docs/RESULTS.md "Media cross-validation")
CI_KNOWN = {
    ("ocp-sg1", "strided", 2.0): "channel order at overload, a short run's tail (60k requests agree)",
    ("ocp-sg1", "random", 2.0): "channel order: arrival-order slots vs data-ready order (p99)",
    ("ocp-sg1", "moe", 0.5): "channel order: hits on buffered experts go first in the engine (p99)",
    ("ocp-sg1", "moe", 1.0): "channel order: hits on buffered experts go first in the engine (p99)",
}


CI_CASES = [pytest.param(gn, kind, load, id=f"{gn}-{kind}-{load}")
            for gn in CI_GEOMETRIES for kind in KINDS for load in CI_LOADS]


@pytest.mark.parametrize("gname,kind,load", CI_CASES)
def test_reduced_crosscheck(gname, kind, load):
    g = CI_GEOMETRIES[gname]
    r = compare(g, make_stream(kind, g, 6000, load=load, seed=5, **CI_PARAMS.get(kind, {})))
    # never above the geometry, whether or not the models agree
    assert r["bounds_ok"], (r["twin"]["within_bounds"], r["engine"]["within_bounds"])
    assert all(r["program_bound_ok"].values()), r["program_bound_ok"]
    bad = {k: round(v, 4) for k, v in r["rel_diff"].items() if abs(v) > TOLERANCE[k]}
    why = CI_KNOWN.get((gname, kind, load))
    if why is None:
        assert not bad, f"{gname} {kind} load {load}: twin vs engine beyond {TOLERANCE}: {bad}"
    else:   # a documented difference: when it is gone, take it out of CI_KNOWN and the §3.9 table
        assert bad, f"{gname} {kind} load {load} now agrees ({why}): update CI_KNOWN and docs/design.md §3.9"


def test_reduced_crosscheck_covers_every_kind_and_most_cases():
    """Every stream kind has cases that must agree, and the known differences stay a minority."""
    for kind in KINDS:
        must = [(g, ld) for g in CI_GEOMETRIES for ld in CI_LOADS if (g, kind, ld) not in CI_KNOWN]
        assert len(must) >= 8, kind
    assert len(CI_KNOWN) <= len(CI_GEOMETRIES) * len(KINDS) * len(CI_LOADS) // 6
