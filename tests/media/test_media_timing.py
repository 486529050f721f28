"""Timing of the NAND media engine: exact single-op formulas, hand-computed contention, an
exact-FCFS reference on random streams, queue depth, priority, and scheduling properties."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refsim
from hbfcommon import ctl
from hbfd.media import REQUEST_BATCH_DTYPE, MediaEngine, MediaGeometry

# small geometry: 4 KiB moves in 8 ns, one 64 B sector in 1 ns
SMALL = dict(channels=2, dies_per_channel=2, planes_per_die=2, blocks_per_plane=16, pages_per_block=8,
             channel_bytes_per_s=512_000_000_000, t_read_ns=30, t_prog_ns=200, t_erase_ns=900,
             t_cmd_ns=3, queue_depth=4, over_provisioning=0.25, gc_start_free_fraction=0.125,
             gc_hard_free_fraction=0.05)


def geom(**kw):
    return MediaGeometry(**{**SMALL, **kw})


def batch(rows):
    """rows: (arrival, address, bytes[, op])"""
    b = np.zeros(len(rows), REQUEST_BATCH_DTYPE)
    for i, r in enumerate(rows):
        b[i] = (i, r[0], r[1], r[2], r[3] if len(r) > 3 else 0)
    return b


def run(g, rows, **kw):
    e = MediaEngine(g, **kw)
    e.submit(batch(rows))
    c = e.drain()
    assert (c["status"] == ctl.HBF_ST_READY).all()
    return e, dict(zip(c["id"].tolist(), c["modeled_ns"].tolist()))


def same_plane_stride(g):
    return g.planes * 4096       # logical pages p and p + planes live on the same plane


def test_single_read_is_cmd_plus_tr_plus_transfer():
    g = MediaGeometry(channels=16, dies_per_channel=8, planes_per_die=16, blocks_per_plane=128,
                      pages_per_block=256, channel_bytes_per_s=19_200_000_000, t_read_ns=20_000,
                      t_prog_ns=600_000, t_erase_ns=3_500_000, t_cmd_ns=300)
    for addr, nb, xfer_bytes in [(0, 4096, 4096), (4096 * 7, 64, 64), (60, 100, 192), (4000, 96, 128)]:
        _, m = run(g, [(1_000_000, addr, nb)])
        want = 300 + 20_000 + -(-xfer_bytes * 10**9 // 19_200_000_000)
        assert m[0] == want == g.single_read_ns(xfer_bytes)
    # 4 KiB: 300 + 20000 + ceil(4096e9 / 19.2e9) = 300 + 20000 + 214
    assert g.single_read_ns(4096) == 20_514


def test_two_page_request_on_two_channels_costs_one_page():
    g = geom()
    _, m = run(g, [(0, 0, 8192)])        # pages 0 and 1: channels 0 and 1
    assert m[0] == 3 + 30 + 8


def test_channel_contention_hand_computed():
    g = geom()
    # pages 0 and 4 (C=2, D=2): channel 0, die 0, planes 0 and 1 -> senses overlap, transfers queue
    _, m = run(g, [(0, 0, 4096), (0, 4 * 4096, 4096)])
    assert m[0] == 3 + 30 + 8
    assert m[1] == 3 + 30 + 8 + 8
    # pages 0 and 2: same channel, different dies
    _, m = run(g, [(0, 0, 4096), (1, 2 * 4096, 4096)])
    assert m[0] == 41
    assert m[1] == (41 + 8) - 1      # sense ends at 34, channel free at 41 -> done 49, arrival 1


def test_plane_contention_hand_computed():
    g = geom()
    s = same_plane_stride(g)
    _, m = run(g, [(0, 0, 4096), (0, s, 4096), (5, 2 * s, 64)])
    assert m[0] == 41
    assert m[1] == 3 + 30 + 30 + 8            # second sense waits for the first (63 + 8 = 71)
    assert m[2] == (3 + 90 + 1) - 5           # third sense 63..93, 1 ns transfer


def test_queue_depth_one_serializes_a_die():
    g = geom(queue_depth=1)
    _, m = run(g, [(0, 0, 4096), (0, 4 * 4096, 4096)])   # same die, different planes
    assert m[0] == 41
    # admitted only when the first has finished sensing (33): sense 36..66, transfer 66..74
    assert m[1] == 33 + 3 + 30 + 8


def _random_reads(rng, g, n, span):
    a = np.sort(rng.integers(0, span, n))
    page = rng.integers(0, 4 * g.planes, n)
    off = rng.integers(0, 4096, n)
    nb = rng.integers(1, 4096, n)
    nb = np.minimum(nb, 2 * 4096 - off)        # at most two pages
    return [(int(a[i]), int(page[i] * 4096 + off[i]), int(nb[i])) for i in range(n)]


def test_queue_depth_changes_latency_under_load():
    rng = np.random.default_rng(3)
    g1, g8 = geom(queue_depth=1), geom(queue_depth=8)
    rows = [(r[0], r[1] - r[1] % 4096, 4096) for r in _random_reads(rng, g1, 400, 2000)]
    _, m1 = run(g1, rows)
    _, m8 = run(g8, rows)
    mean1, mean8 = np.mean(list(m1.values())), np.mean(list(m8.values()))
    assert mean1 > 1.2 * mean8, (mean1, mean8)
    # and under light load queue depth does not matter
    light = [(i * 500, r[1], r[2]) for i, r in enumerate(rows[:50])]
    assert run(g1, light)[1] == run(g8, light)[1]


def _ref(g, rows):
    return refsim.simulate(rows, C=g.channels, D=g.dies_per_channel, P=g.planes_per_die, t_cmd=g.t_cmd_ns,
                           t_read=g.t_read_ns, xfer_ns=g.transfer_ns, queue_depth=g.queue_depth)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), span=st.sampled_from([1, 50, 400, 3000]),
       qd=st.sampled_from([1, 2, 3, 8, 1000]), t_cmd=st.sampled_from([0, 3]))
def test_fast_model_agrees_with_exact_reference(seed, n, span, qd, t_cmd):
    rng = np.random.default_rng(seed)
    g = geom(queue_depth=qd, t_cmd_ns=t_cmd)
    rows = _random_reads(rng, g, n, span)
    _, m = run(g, rows)
    ref = _ref(g, rows)
    got = [m[i] + rows[i][0] for i in range(n)]
    assert got == ref


def test_large_batch_uses_fast_path_and_matches_reference():
    rng = np.random.default_rng(11)
    g = geom(queue_depth=1000)
    rows = _random_reads(rng, g, 300, 4000)
    e, m = run(g, rows)
    assert e.n["fast_batches"] == 1 and e.n["event_batches"] == 0
    assert [m[i] + rows[i][0] for i in range(len(rows))] == _ref(g, rows)
    # a binding queue depth goes through the event scheduler and still matches
    g2 = geom(queue_depth=2)
    e2, m2 = run(g2, rows)
    assert e2.n["qd_bound_dies"] >= 1 and e2.n["event_batches"] == 0
    assert [m2[i] + rows[i][0] for i in range(len(rows))] == _ref(g2, rows)


def test_batches_that_do_not_overlap_equal_one_batch():
    rng = np.random.default_rng(5)
    g = geom()
    r1 = _random_reads(rng, g, 80, 300)
    r2 = [(a + 100_000, addr, nb) for a, addr, nb in _random_reads(rng, g, 80, 300)]
    _, m_all = run(g, r1 + r2)
    e = MediaEngine(g)
    e.submit(batch(r1))
    b2 = batch(r2)
    b2["id"] += len(r1)
    e.submit(b2)
    c = e.drain()
    assert dict(zip(c["id"].tolist(), c["modeled_ns"].tolist())) == m_all


def test_read_has_priority_over_a_waiting_program():
    g = geom()
    s = same_plane_stride(g)
    # t=0: full-page store to page 0 -> program P1 on plane 0 (data-in 3..11, program 11..211)
    # t=1: full-page store to page s -> program P2 on plane 0, waits
    # t=2: read of page 2s -> plane 0; must go before P2 when P1 ends at 211
    e, m = run(g, [(0, 0, 4096, 1), (1, s, 4096, 1), (2, 2 * s, 4096, 0)])
    assert m[0] == 3 + 8                       # acknowledged when the data is in the die
    assert m[2] == 211 + 30 + 8 - 2            # sense 211..241, transfer 241..249
    # P2 gets the plane at 241; its data-in waits for the read's transfer (read first): 249..257
    assert m[1] == 257 - 1
    assert e.n["programs"] == 2


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 120), span=st.sampled_from([10, 500, 5000]),
       qd=st.sampled_from([1, 4, 1000]), pwrite=st.sampled_from([0.0, 0.3, 0.8]))
def test_properties_on_random_mixed_streams(seed, n, span, qd, pwrite):
    rng = np.random.default_rng(seed)
    g = geom(queue_depth=qd)
    e = MediaEngine(g, trace=True)
    a = np.sort(rng.integers(0, span, n))
    page = rng.integers(0, g.logical_pages, n)
    off = rng.integers(0, 64, n) * 64
    nb = rng.choice([64, 256, 4096], n)
    nb = np.minimum(nb, 4096 - off)
    op = np.where(rng.random(n) < pwrite, rng.choice([1, 2], n), rng.choice([0, 3], n))
    rows = [(int(a[i]), int(page[i] * 4096 + off[i]), int(nb[i]), int(op[i])) for i in range(n)]
    # submit in a few batches, then let the write buffer flush
    cuts = sorted(set(rng.integers(0, n, 3).tolist()) | {0, n})
    for lo, hi in zip(cuts, cuts[1:]):
        b = batch(rows[lo:hi])
        b["id"] += lo
        e.submit(b)
    e.advance(int(a.max()) + 10 * g.write_flush_timeout_ns)
    c = e.drain()
    assert sorted(c["id"].tolist()) == list(range(n))
    m = dict(zip(c["id"].tolist(), c["modeled_ns"].astype(np.int64).tolist()))
    for i, (_, _, nbytes, o) in enumerate(rows):
        if o in (0, 3):
            assert m[i] >= g.t_cmd_ns       # a buffer hit costs t_cmd, a media read more
        else:
            assert m[i] >= g.t_cmd_ns
    # per-resource busy intervals never overlap
    for kind in ("plane", "channel"):
        parts = [(r, s_, e_) for k, r, s_, e_ in e.trace if k == kind]
        if not parts:
            continue
        res = np.concatenate([p[0] for p in parts])
        s = np.concatenate([p[1] for p in parts])
        en = np.concatenate([p[2] for p in parts])
        assert (en > s).all()
        o = np.lexsort((s, res))
        res, s, en = res[o], s[o], en[o]
        same = res[1:] == res[:-1]
        assert (s[1:][same] >= en[:-1][same]).all(), kind
    e.ftl.check()


def test_media_read_never_faster_than_minimum_service():
    rng = np.random.default_rng(9)
    g = geom(queue_depth=2)
    rows = _random_reads(rng, g, 200, 500)
    _, m = run(g, rows)
    for i, (a, addr, nb) in enumerate(rows):
        lo = addr % 4096
        first_page_bytes = ((min(lo + nb, 4096) + 63) // 64 - lo // 64) * 64
        assert m[i] >= g.t_cmd_ns + g.t_read_ns + g.transfer_ns(first_page_bytes)


@pytest.mark.parametrize("gap", [0, 2, 20])
def test_bandwidth_never_exceeds_geometry(gap):
    rng = np.random.default_rng(gap)
    g = geom(queue_depth=1000)
    n = 3000
    rows = [(i * gap, int(p) * 4096, 4096) for i, p in enumerate(rng.integers(0, g.logical_pages, n))]
    e, m = run(g, rows)
    done = max(m[i] + rows[i][0] for i in range(n))
    makespan = done - rows[0][0]
    bw = n * 4096 / (makespan * 1e-9)
    assert bw <= g.aggregate_bytes_per_s and bw <= g.read_bound_bytes_per_s
    st_ = e.stats()
    assert all(0 <= u <= 1.0 for u in st_["channel_utilization"])
    if gap == 0:   # saturated: close to the geometry's bound
        assert bw > 0.8 * g.read_bound_bytes_per_s


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 50), span=st.sampled_from([1, 60, 500]),
       qd=st.sampled_from([1, 2, 5, 1000]))
def test_event_scheduler_agrees_with_reference_on_reads(seed, n, span, qd):
    """The exact event scheduler (used for channels with programs/GC) on read-only streams."""
    from hbfd.media import eventsim
    rng = np.random.default_rng(seed)
    g = geom(queue_depth=qd)
    a = np.sort(rng.integers(0, span, n))
    page = rng.integers(0, 4 * g.planes, n)
    nb = rng.choice([64, 640, 4096], n)
    rows = [(int(a[i]), int(page[i]) * 4096, int(nb[i])) for i in range(n)]
    e = MediaEngine(g)
    ch, die, plane = e._where(page.astype(np.int64))
    cmds = eventsim.Commands(kind=np.zeros(n, np.uint8), ready=a.astype(np.int64), plane=plane, die=die, chan=ch,
                             xfer_ns=np.array([g.transfer_ns(int(b)) for b in nb], np.int64),
                             presense=np.zeros(n, bool))
    done, *_ = eventsim.simulate(cmds, t_cmd=g.t_cmd_ns, t_read=g.t_read_ns, t_prog=g.t_prog_ns,
                                 t_erase=g.t_erase_ns, queue_depth=qd, plane_free=np.zeros(g.planes, np.int64),
                                 chan_free=np.zeros(g.channels, np.int64), die_carry={})
    assert done.tolist() == _ref(g, rows)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 150), span=st.sampled_from([20, 300, 3000]),
       qd=st.sampled_from([1, 3, 1000]), quiet=st.booleans())
def test_any_batching_of_a_read_stream_gives_the_single_batch_result(seed, n, span, qd, quiet):
    """Transfers that a later arrival could still overtake are decided only once it cannot, so
    cutting a time-ordered read stream into batches (as the daemon's ring scans do) changes
    nothing (collect after every submit, as the daemon does)."""
    rng = np.random.default_rng(seed)
    g = geom(queue_depth=qd)
    rows = _random_reads(rng, g, n, span)
    _, m_all = run(g, rows)
    e = MediaEngine(g)
    cuts = sorted(set(rng.integers(1, n, 4).tolist()) | {0, n})
    got = []
    for lo, hi in zip(cuts, cuts[1:]):
        b = batch(rows[lo:hi])
        b["id"] += lo
        e.submit(b)
        e.advance(int(b["arrival_ns"].max()))
        got.append(e.collect())
        if quiet:
            got.append(e.collect())     # a quiet scan in between: only exact if nothing overtakes
    got.append(e.drain())
    c = np.concatenate(got)
    assert sorted(c["id"].tolist()) == list(range(n))
    m = dict(zip(c["id"].tolist(), c["modeled_ns"].tolist()))
    if not quiet:
        assert m == m_all
    else:   # decided early: never earlier than the exact schedule would have served it... and causal
        for i, (a, addr, nb) in enumerate(rows):
            assert m[i] >= g.t_cmd_ns + g.t_read_ns + 1
