"""Timing of the NAND media engine (semantics v2): exact single-op formulas, hand-computed
contention, page buffers and sense coalescing, an exact time-stepped reference on random read and
mixed streams, queue depth, priority, batching, and scheduling properties."""
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
                           t_read=g.t_read_ns, xfer_ns=g.transfer_ns, queue_depth=g.queue_depth,
                           page_buffers=g.page_buffers_per_plane, t_prog=g.t_prog_ns,
                           flush_timeout=g.write_flush_timeout_ns)


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
    # t=0: full-page store to page 0: data-in 3..11 (acknowledged), program P1 reaches the die at
    #      11 (its data is in), the plane at 14: busy 14..214
    # t=1: full-page store to page s (same plane): data-in 11..19, P2 at the die at 12, plane 15: waits
    # t=20: read of page 2s (same plane): at the plane at 23, waits; at 214 it goes before P2
    e, m = run(g, [(0, 0, 4096, 1), (1, s, 4096, 1), (20, 2 * s, 4096, 0)])
    assert m[0] == 3 + 8                       # acknowledged when the data is in the die
    assert m[1] == 19 - 1
    assert m[2] == 214 + 30 + 8 - 20           # sense 214..244, transfer 244..252
    assert e.n["programs"] == 2    # (read priority without a binding queue depth)
    assert [m[i] + r[0] for i, r in enumerate([(0,), (1,), (20,)])] == _ref(
        g, [(0, 0, 4096, 1), (1, s, 4096, 1), (20, 2 * s, 4096, 0)])


def test_eight_sector_reads_of_one_page_sense_once():
    """8 x 512 B reads of one 4 KiB page arriving together: one sense, the other seven wait for it
    (coalesced), transfers of 512 B each, serialized on the channel."""
    g = geom()
    rows = [(0, 3 * 4096 + 512 * k, 512) for k in range(8)]
    e, m = run(g, rows)
    x = g.transfer_ns(512)
    assert [m[k] for k in range(8)] == [g.t_cmd_ns + g.t_read_ns + (k + 1) * x for k in range(8)]
    assert e.n["senses"] == 1 and e.n["coalesced_reads"] == 7 and e.n["buffer_hits"] == 0
    assert e.stats()["channel_busy_ns"][3 % g.channels] == 8 * x      # only the asked bytes crossed
    # a later read of the page: buffered, no tR
    e.submit(batch([(1000, 3 * 4096, 64)]))
    c = e.drain()
    assert c["modeled_ns"].tolist() == [g.t_cmd_ns + g.transfer_ns(64)]
    assert e.n["senses"] == 1 and e.n["buffer_hits"] == 1


def test_read_arriving_during_the_sense_waits_for_it():
    g = geom()
    e, m = run(g, [(0, 0, 4096), (10, 64, 64)])
    assert m[0] == 3 + 30 + 8
    assert m[1] == (33 + 8 + 1) - 10           # data ready at the sense end 33; channel free at 41
    assert e.n["senses"] == 1 and e.n["coalesced_reads"] == 1


def test_third_page_on_a_plane_evicts_the_least_recently_used():
    g = geom()
    s = same_plane_stride(g)
    one = g.t_cmd_ns + g.transfer_ns(64)       # a buffered read
    e = MediaEngine(g)
    rows = [(0, 0, 64), (1000, s, 64), (2000, 0, 64),      # buffers: page 0 (MRU), page s
            (3000, 2 * s, 64),                             # miss: evicts page s (LRU), not page 0
            (4000, 0, 64), (5000, s, 64)]
    e.submit(batch(rows))
    c = e.drain()
    m = dict(zip(c["id"].tolist(), c["modeled_ns"].tolist()))
    assert m[2] == one and m[4] == one
    assert m[3] == g.single_read_ns(64) and m[5] == g.single_read_ns(64)
    assert e.n["senses"] == 4 and e.n["buffer_hits"] == 2
    # with one buffer per plane, page 0 is gone after page s
    _, m1 = run(geom(page_buffers_per_plane=1), rows[:3])
    assert m1[2] == g.single_read_ns(64)


def test_a_store_invalidates_the_buffered_page():
    g = geom()
    e = MediaEngine(g)
    e.submit(batch([(0, 0, 4096, 0), (1000, 0, 64, 0)]))          # sensed, then buffered
    b = batch([(2000, 128, 64, 1), (2500, 4096, 64, 0)])          # a store to the page (a batch with
    b["id"] += 2                                                  # no read of that plane)
    e.submit(b)
    b = batch([(3000, 0, 64, 0)])                                 # then a read of the page
    b["id"] += 4
    e.submit(b)
    c = e.drain()
    m = dict(zip(c["id"].tolist(), c["modeled_ns"].tolist()))
    assert m[1] == g.t_cmd_ns + g.transfer_ns(64)                 # buffer hit
    assert m[2] == g.t_cmd_ns + g.transfer_ns(64)                 # store: its 64 B data-in
    assert m[4] == g.single_read_ns(64)                           # senses again (sector 0 not stored)
    assert e.n["senses"] == 3 and e.n["buffer_hits"] == 1 and e.n["stores"] == 1
    # the same read with its sector in the write buffer is served from the write buffer
    b = batch([(4000, 0, 64, 1), (5000, 0, 64, 0)])
    b["id"] += 5
    e.submit(b)
    c = e.drain()
    m = dict(zip(c["id"].tolist(), c["modeled_ns"].tolist()))
    assert m[6] == g.t_cmd_ns + g.transfer_ns(64) and e.n["write_buffer_hits"] == 1


def _random_mixed(rng, g, n, span, pwrite, npages):
    a = np.sort(rng.integers(0, span, n))
    page = rng.integers(0, npages, n)
    off = rng.integers(0, 64, n) * 64
    nb = np.minimum(rng.choice([64, 256, 2048, 4096], n), 4096 - off)
    full = rng.random(n) < 0.5
    off = np.where(full, 0, off)
    nb = np.where(full, 4096, nb)
    op = np.where(rng.random(n) < pwrite, rng.choice([1, 2], n, p=[0.8, 0.2]), rng.choice([0, 3], n))
    return [(int(a[i]), int(page[i] * 4096 + off[i]), int(nb[i]), int(op[i])) for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80), span=st.sampled_from([10, 300, 3000]),
       qd=st.sampled_from([1, 2, 4, 1000]), pwrite=st.sampled_from([0.1, 0.3, 0.7]),
       npages=st.sampled_from([8, 32, 64]), nbuf=st.sampled_from([1, 2, 2, 3]))
def test_mixed_streams_agree_with_exact_reference(seed, n, span, qd, pwrite, npages, nbuf):
    """Loads, cp.async, stores (partial and whole pages) and atomics on few pages (page-buffer hits,
    coalescing, invalidation, write-buffer hits, programs with read priority)."""
    rng = np.random.default_rng(seed)
    g = geom(queue_depth=qd, page_buffers_per_plane=nbuf, write_flush_timeout_ns=10**8, blocks_per_plane=64)
    rows = _random_mixed(rng, g, n, span, pwrite, npages)
    e, m = run(g, rows)
    assert e.ftl.gc_runs == 0
    assert [m[i] + rows[i][0] for i in range(n)] == _ref(g, rows)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 120), span=st.sampled_from([1, 60, 500]),
       qd=st.sampled_from([1, 2, 5, 1000]))
def test_event_scheduler_agrees_with_the_vectorized_die_stage(seed, n, span, qd):
    """The exact event scheduler (dies with reads and programs) and the sorted-release form
    (``diestage.fifo_exact``) on read senses alone: the same sense ends."""
    from hbfd.media import diestage, eventsim
    rng = np.random.default_rng(seed)
    g = geom(queue_depth=qd)
    a = np.sort(rng.integers(0, span, n)).astype(np.int64)
    page = rng.integers(0, 4 * g.planes, n).astype(np.int64)
    e = MediaEngine(g)
    _, die, plane = e._where(page)
    _, end = eventsim.simulate(np.zeros(n, np.uint8), a, plane, die, np.full(n, g.t_read_ns, np.int64),
                               t_cmd=g.t_cmd_ns, queue_depth=qd, plane_free=np.zeros(g.planes, np.int64),
                               die_carry={})
    vec = diestage.fifo_exact(a, die, plane, g.t_read_ns, t_cmd=g.t_cmd_ns, queue_depth=qd, nplanes=g.planes,
                              ndies=g.dies, plane_free=np.zeros(g.planes, np.int64),
                              carry=diestage.DieCarry(g.dies, qd), horizon=0)
    assert end.tolist() == vec.tolist()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 150), span=st.sampled_from([20, 300, 3000]),
       qd=st.sampled_from([1, 3, 1000]), quiet=st.booleans(), npages=st.sampled_from([8, 32, 10**6]),
       nbuf=st.sampled_from([1, 2, 3]))
def test_any_batching_of_a_read_stream_gives_the_single_batch_result(seed, n, span, qd, quiet, npages, nbuf):
    """Transfers that a later arrival could still overtake are decided only once it cannot, and
    planes, die slots and page buffers carry their state, so cutting a time-ordered read stream
    into batches (as the daemon's ring scans do) changes nothing (collect after every submit, as
    the daemon does), buffer hits and coalesced reads included."""
    rng = np.random.default_rng(seed)
    g = geom(queue_depth=qd, page_buffers_per_plane=nbuf)
    rows = _random_reads(rng, g, n, span)
    if npages < 10**6:   # few distinct pages: many buffer hits and coalesced reads across cuts
        rows = [(a, (addr // 4096 % npages) * 4096 + addr % 4096, nb) for a, addr, nb in rows]
        rows = [(a, addr, min(nb, 4096 - addr % 4096)) for a, addr, nb in rows]
    _, m_all = run(g, rows)
    m = _in_batches(MediaEngine(g), rows, sorted(set(rng.integers(1, n, 4).tolist()) | {0, n}), quiet=quiet)
    if not quiet:
        assert m == m_all
        assert [m[i] + rows[i][0] for i in range(n)] == _ref(g, rows)
    else:   # decided early: never earlier than the exact schedule would have served it... and causal
        for i, (a, addr, nb) in enumerate(rows):
            assert m[i] >= g.t_cmd_ns + 1


def _in_batches(e: MediaEngine, rows, cuts, quiet: bool = False) -> dict[int, int]:
    """Feed ``rows`` to ``e`` cut at ``cuts`` as the daemon does (submit, advance to the batch's last arrival,
    collect; with ``quiet`` a second, quiet collect in between), then drain: {request id: modeled_ns}, every id
    answered once."""
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
    assert sorted(c["id"].tolist()) == list(range(len(rows)))
    return dict(zip(c["id"].tolist(), c["modeled_ns"].tolist()))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 120), span=st.sampled_from([10, 300, 3000]),
       qd=st.sampled_from([1, 2, 4, 1000]), pwrite=st.sampled_from([0.3, 0.7]),
       npages=st.sampled_from([8, 64]), nbuf=st.sampled_from([1, 2, 3]), ncut=st.integers(1, 12))
def test_any_batching_of_a_mixed_stream_gives_the_single_batch_result(seed, n, span, qd, pwrite, npages, nbuf,
                                                                      ncut):
    """Programs that a later read could still overtake (they start at or after the latest arrival +
    t_cmd) are re-scheduled with the next batch, and a store whose data-in waits for such a program's
    end (write backpressure) is decided once that end is: cutting a time-ordered mixed stream into
    batches (submit, advance, collect, as the daemon does) gives the one-batch schedule, which is the
    reference's. (Before: a batch's programs were fixed to its end, and a read of a later batch waited
    behind a program that had not started.)"""
    rng = np.random.default_rng(seed)
    g = geom(queue_depth=qd, page_buffers_per_plane=nbuf, write_flush_timeout_ns=10**8, blocks_per_plane=64)
    rows = _random_mixed(rng, g, n, span, pwrite, npages)
    e = MediaEngine(g)
    m = _in_batches(e, rows, sorted(set(rng.integers(1, n, ncut).tolist()) | {0, n}))
    assert e.ftl.gc_runs == 0
    assert [m[i] + rows[i][0] for i in range(n)] == _ref(g, rows)


def test_a_store_waits_for_a_free_page_buffer_of_its_plane():
    """Write backpressure: with B page buffers, the (B+1)-th whole-page store to a busy plane takes its
    data in only when the first program ends (before: acknowledged at its data-in whatever the queue)."""
    g = geom(page_buffers_per_plane=2)
    s = same_plane_stride(g)
    rows = [(0, 0, 4096, 1), (1, s, 4096, 1), (2, 2 * s, 4096, 1)]
    e, m = run(g, rows)
    # P1 at the plane 14..214; the third store's data-in waits for P1's end: 214..222
    assert m[0] == 11 and m[1] == 19 - 1
    assert m[2] == 214 + 8 - 2
    assert [m[i] + r[0] for i, r in enumerate(rows)] == _ref(g, rows)


def test_every_store_of_a_long_write_burst_completes():
    """More programs than the engine keeps ends for (it prunes them to each plane's last B between batches):
    a store gated by a program that was decided in the same run still completes (before the fix, stores
    whose gate was pruned before they were released never completed)."""
    g = geom(blocks_per_plane=64, pages_per_block=64, queue_depth=1000)
    rng = np.random.default_rng(3)
    n = 6000
    rows = [(i // 50, int(p) * 4096, 4096, 1) for i, p in enumerate(rng.permutation(n))]
    e = MediaEngine(g)
    got = []
    for lo in range(0, n, 1024):
        b = batch(rows[lo:lo + 1024])
        b["id"] += lo
        e.submit(b)
        e.advance(int(b["arrival_ns"].max()))
        got.append(e.collect())
    got.append(e.collect())                  # a quiet scan decides everything
    c = np.concatenate(got)
    assert sorted(c["id"].tolist()) == list(range(n))
