"""``Ftl.l2p``'s table form (``ftl._L2pTable``, its bulk update the compiled twin ``kernels._l2p_swap``;
issue 14 item 5, round 4) gives the dict's mapping (the definition, ``HBFD_ACCEL=off``), and a changed twin
is seen:

* the table against a dict under random bulk and single updates (``[]=``, ``put``), look-ups, ``in``, ``len``, ``keys``,
  ``items``: keys that collide in the hash, growth over several rehashes, the twin and its Python form;
* ``Ftl`` made with the twins on (the table) against one made with them off (the dict): the same state after
  every batch of bulk and single programs with heavy rewrites and GC (the table form's GC copies set the map
  once per victim, ``Ftl._copy_out``);
* whole engine runs off vs on are in test_accel_media.py / test_accel_writes.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.media import ftl as ftl_mod
from hbfd.media.ftl import Ftl, _L2pTable
from hbfd.media.geometry import MediaError
from hbfd.media.kernels import L2P_EMPTY, L2P_FIB

from test_engine_writes import _state
from test_media_timing import geom

pytest.importorskip("numba")


def _colliding(cap: int, n: int, rng) -> np.ndarray:
    """``n`` keys >= 0 with one hash slot in a table of ``cap``."""
    out: list[int] = []
    while len(out) < n:
        k = rng.integers(0, 1 << 40, 64 * cap).astype(np.uint64)
        with np.errstate(over="ignore"):
            h = ((k * np.uint64(L2P_FIB)) >> np.uint64(33)) & np.uint64(cap - 1)
        out += k[h == 3].astype(np.int64).tolist()
    return np.array(out[:n], np.int64)


@pytest.mark.parametrize("mode", ["on", "off"])
def test_table_equals_dict(monkeypatch, mode):
    monkeypatch.setenv("HBFD_ACCEL", mode)
    rng = np.random.default_rng(21)
    t, d = _L2pTable(cap=8), {}
    caps = set()
    for step in range(400):
        kind = step % 4
        if kind == 0:                                   # bulk, unique pages (as program_many's bulk part)
            span = int(rng.choice([50, 5000, 1 << 50]))
            ls = np.unique(rng.integers(0, span, int(rng.integers(0, 300))))
            rng.shuffle(ls)
            if step % 8 == 0 and len(ls) and len(t._k) <= 1 << 16:
                ls[: min(len(ls), 6)] = _colliding(len(t._k), min(len(ls), 6), rng)
                ls = np.unique(ls)
            pv = rng.integers(0, 1 << 40, len(ls))
            old = t.swap(ls, pv)
            ref = np.array([d.get(x, -1) for x in ls.tolist()], np.int64)
            assert np.array_equal(old, ref), step
            d.update(zip(ls.tolist(), pv.tolist()))
        elif kind == 1:                                 # single updates
            for i, x in enumerate(rng.integers(0, 6000, 20).tolist()):
                v = int(rng.integers(0, 1 << 40))
                if i % 2:
                    assert t.put(x, v) == d.get(x)
                else:
                    t[x] = v
                d[x] = v
        else:
            q = rng.integers(0, 6000, 50).tolist() + list(d)[:20]
            assert [t.get(x) for x in q] == [d.get(x) for x in q]
            assert [t.get(x, -7) for x in q] == [d.get(x, -7) for x in q]
            assert [x in t for x in q] == [x in d for x in q]
            assert [t[x] for x in q if x in d] == [d[x] for x in q if x in d]
        assert len(t) == len(d)
        if step % 10 == 9 or step < 40:
            assert sorted(t.items()) == sorted(d.items()) and sorted(t.keys()) == sorted(d) and dict(t) == d
        caps.add(len(t._k))
        assert 2 * len(t) <= len(t._k)
    assert len(caps) >= 4                               # grown several times
    with pytest.raises(KeyError):
        t[-5]
    with pytest.raises(MediaError):
        t.swap(np.array([1, L2P_EMPTY], np.int64), np.array([1, 2], np.int64))
    if mode == "on":
        assert ftl_mod._l2p_swap.is_compiled()


def _ftl_runs(monkeypatch, swap=None):
    g = geom(blocks_per_plane=32, pages_per_block=16)
    monkeypatch.setenv("HBFD_ACCEL", "off")
    a = Ftl(g)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    b = Ftl(g)
    assert type(a.l2p) is dict and type(b.l2p) is _L2pTable
    if swap is not None:
        monkeypatch.setattr(ftl_mod, "_l2p_swap", swap)
    rng = np.random.default_rng(9)
    for t in range(250):
        span = int(rng.choice([64, 600, g.logical_pages]))
        lp = rng.integers(0, span, int(rng.integers(1, 100)))
        if t % 5 == 1:
            for x in lp.tolist():
                assert a.program(x) == b.program(x), t
        else:
            ra, rb = a.program_many(lp), b.program_many(lp)
            assert np.array_equal(ra[0], rb[0]) and ra[1] == rb[1], t
        assert _state(a) == _state(b), t
    assert a.gc_runs > 10 and a.gc_copies > 100
    a.check()
    b.check()


def test_ftl_table_equals_dict_under_rewrites_and_gc(monkeypatch):
    _ftl_runs(monkeypatch)
    assert ftl_mod._l2p_swap.is_compiled()


def test_a_changed_l2p_twin_is_seen(monkeypatch):
    orig = ftl_mod._l2p_swap
    calls = []

    def changed(keys, vals, ls, ppn):
        calls.append(1)
        old, added = orig(keys, vals, ls, ppn)
        return np.full_like(old, -1), added             # old copies never invalidated
    with pytest.raises(AssertionError):
        _ftl_runs(monkeypatch, changed)
    assert calls


def _dup_runs(monkeypatch, dup=None):
    """An FTL programmed with the twins off (the sort's duplicate check) and one with them on (``kernels._dup_planes``),
    batch by batch, many batches with pages twice: the same state. Both made with the dict map: with the table
    ``program_many`` takes its compiled bulk path (round 14, tests/media/test_ftl_bulk.py), which checks repeats
    inside; the numpy path's own use of the twin is what is checked here."""
    g = geom(blocks_per_plane=32, pages_per_block=16)
    monkeypatch.setenv("HBFD_ACCEL", "off")
    a = Ftl(g)
    b = Ftl(g)
    if dup is not None:
        monkeypatch.setattr(ftl_mod, "_dup_planes", dup)
    rng = np.random.default_rng(17)
    ndup = 0
    for t in range(200):
        span = int(rng.choice([100, 2000, g.logical_pages]))
        n = int(rng.choice([ftl_mod._DUP_TWIN_MIN - 1, ftl_mod._DUP_TWIN_MIN, 90, 300]))
        lp = rng.integers(0, span, n)
        ndup += len(np.unique(lp)) < n
        monkeypatch.setenv("HBFD_ACCEL", "off")
        ra = a.program_many(lp)
        monkeypatch.setenv("HBFD_ACCEL", "on")
        rb = b.program_many(lp)
        assert np.array_equal(ra[0], rb[0]) and ra[1] == rb[1], t
        assert _state(a) == _state(b), t
    assert ndup > 50 and a.gc_runs > 10


def test_dup_planes_twin_equals_the_sort(monkeypatch):
    """``kernels._dup_planes`` (round 5: ``program_many``'s duplicate check by a hash set) marks the planes the
    sort marks, on pages with and without repeats (1-40k pages, hash collisions, a page three times); an FTL
    using it equals one using the sort, batch by batch; a twin that misses repeats is seen."""
    from hbfd.media.kernels import _dup_planes
    rng = np.random.default_rng(3)
    npl = 64
    cases = [np.zeros(1, np.int64), np.array([5, 5, 5], np.int64), _colliding(64, 40, rng)]
    for n in (2, 63, 64, 65, 1000, 40_000):
        for span in (n // 2 + 1, 10 * n, 1 << 40):
            cases.append(rng.integers(0, span, n))
    for lp in cases:
        lp = lp.astype(np.int64)
        planes = lp % npl
        srt = np.sort(lp)
        dup = srt[1:] == srt[:-1]
        ref = np.zeros(npl, bool)
        ref[srt[1:][dup] % npl] = True
        anyd, dm = _dup_planes(lp, planes, npl)
        assert anyd == bool(dup.any()) and np.array_equal(dm, ref)
    _dup_runs(monkeypatch)
    assert ftl_mod._dup_planes.is_compiled()
    with pytest.raises(AssertionError):
        _dup_runs(monkeypatch, lambda lp, pl, npl: (False, np.zeros(npl, bool)))
