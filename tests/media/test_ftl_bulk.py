"""Round 14 of the media engine's speed work: ``Ftl.program_many``'s bulk path by compiled passes
(``kernels._program_bulk`` and ``_program_place`` through ``Ftl._bulk_twin``); the numpy path (with the dict map,
the twins off) stays the definition. An FTL made with the twins on must equal one made with them off, batch by
batch: the map, the block rows (which row each block got), their pages, valid counts, block states, fresh and erased
blocks, open blocks and next pages, counts, free rows, and each call's planes and GC operations -- on batches whose
planes all go in bulk, that need planes opened first (``_open_fresh`` called once, as the numpy path calls it), and
that have planes without room or with a page twice (those pages one at a time first, then the bulk planes), with
rewrites and GC (small planes), on a geometry of 2048 planes and on one whose counts are not powers of two."""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.media import ftl as ftl_mod
from hbfd.media.ftl import Ftl

from test_engine_writes import _state
from test_media_timing import geom

pytest.importorskip("numba")


def _full_state(f: Ftl):
    return _state(f) + (f.p2l, list(f._free_rows), f._nrows, f._in_gc)


def _runs(monkeypatch, g, seed, batches, sizes):
    monkeypatch.setenv("HBFD_ACCEL", "off")
    a = Ftl(g)                                                  # the dict map: the numpy path
    monkeypatch.setenv("HBFD_ACCEL", "on")
    b = Ftl(g)
    calls = []
    orig = ftl_mod._program_bulk

    def rec(*args):
        calls.append(r := orig(*args))
        return r
    monkeypatch.setattr(ftl_mod, "_program_bulk", rec)
    rng = np.random.default_rng(seed)
    for t in range(batches):
        span = int(rng.choice([40, 600, g.logical_pages, g.logical_pages]))
        n = int(rng.choice(sizes))
        lp = rng.integers(0, span, n)
        if rng.random() < 0.5:
            lp = np.unique(lp)
            rng.shuffle(lp)
        if t % 7 == 3:
            for x in lp[:5].tolist():
                assert a.program(x) == b.program(x), t
        ra, rb = a.program_many(lp), b.program_many(lp)
        assert np.array_equal(ra[0], rb[0]) and ra[0].dtype == rb[0].dtype and ra[1] == rb[1], t
        assert _full_state(a) == _full_state(b), t
    a.check()
    b.check()
    return a, [int(r[0]) for r in calls]


def test_bulk_twin_equals_numpy_path_small_planes(monkeypatch):
    g = geom(blocks_per_plane=32, pages_per_block=16)
    a, seen = _runs(monkeypatch, g, 1401, 400, [1, 7, 8, 9, 12, 20, 40, 64, 300])
    assert seen.count(0) > 30 and seen.count(1) >= 1 and seen.count(3) > 30, seen
    assert a.gc_runs > 10 and a.gc_copies > 100


def test_bulk_twin_equals_numpy_path_many_planes(monkeypatch):
    from hbfcommon.profile import load_profile
    from hbfd.media.geometry import MediaGeometry
    g = MediaGeometry.from_profile(load_profile("nominal"))
    _, seen = _runs(monkeypatch, g, 1402, 120, [1, 7, 8, 9, 40, 63, 64, 300, 2000])
    opened_then_some = sum(1 for x, y in zip(seen, seen[1:]) if (x, y) == (1, 3))    # planes opened, a page twice
    assert seen.count(0) > 40 and seen.count(1) > 10 and opened_then_some >= 3, (seen, opened_then_some)


def test_bulk_twin_equals_numpy_path_odd_geometry(monkeypatch):
    """Channel, die and plane counts not powers of two: the twin's planes by division, not shifts."""
    g = geom(channels=3, dies_per_channel=5, planes_per_die=6, blocks_per_plane=32, pages_per_block=16)
    _, seen = _runs(monkeypatch, g, 1403, 200, [1, 8, 9, 20, 40, 64, 300])
    assert seen.count(0) > 20 and seen.count(1) >= 1 and seen.count(3) > 20, seen


def test_program_bulk_changes_nothing_unless_it_places():
    """Status 1 and 3: ``onx``, the valid counts, the pool and the scratch as they were; status 3's pages of the
    planes not in bulk, in plane order, and its bulk planes exactly those with a block, room and no page twice."""
    g = geom(blocks_per_plane=32, pages_per_block=16)
    f = Ftl(g)
    f.program_many(np.arange(0, 4000, 7))
    rng = np.random.default_rng(3)
    scratch = np.zeros(g.planes, np.int64)
    for t in range(200):
        lp = rng.integers(0, int(rng.choice([30, g.logical_pages])), int(rng.choice([8, 50, 400])))
        onx, valid, pool = f._onx.copy(), np.frombuffer(f._valid, np.int64).copy(), f._pool.copy()
        r = ftl_mod._program_bulk(lp, f._C, f._D, f._P, g.planes, f.ppb, f._ob, f._onx,
                                  np.frombuffer(f._row, np.int64), np.frombuffer(f._valid, np.int64).copy(),
                                  f._pool.reshape(-1).copy(), scratch, bool(t % 2))
        st, planes = r[0], r[1]
        assert not scratch.any(), t
        if st == 0:
            f._onx[:] = onx
            continue
        assert np.array_equal(onx, f._onx) and np.array_equal(valid, np.frombuffer(f._valid, np.int64)), t
        assert np.array_equal(pool, f._pool), t
        if st == 3:
            nb, use = r[6], r[7]
            cnt = np.bincount(planes, minlength=g.planes)
            dup = np.zeros(g.planes, bool)
            u, c = np.unique(lp, return_counts=True)
            dup[f._planes_of(u[c > 1])] = True
            want = (f._ob >= 0) & (f._onx + cnt <= f.ppb) & ~dup & (cnt > 0)
            assert np.array_equal(use.astype(bool) & (cnt > 0), want), t
            o = np.argsort(planes, kind="stable")
            assert np.array_equal(nb, o[~use[planes[o]].astype(bool)]), t
