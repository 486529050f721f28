"""The engine's faster sorts and plane FCFS (round 3 of issue 14 item 5) equal the plain forms
bit for bit on random inputs, including inputs whose packed keys or running-maximum offsets
would overflow int64 (there the fast forms must step aside)."""
from __future__ import annotations

import numpy as np

from hbfd.media.diestage import plane_lindley
from hbfd.media.lindley import packed_order, segmented_fcfs, sorted_fcfs


def _wide(rng, n, hi):
    """Times in [0, hi), some cases spanning almost 2^62 (keys that cannot be packed)."""
    return rng.integers(0, hi, n).astype(np.int64)


def test_packed_order_equals_stable_sorts():
    rng = np.random.default_rng(1)
    packed = fell_back = 0
    for _ in range(600):
        n = int(rng.integers(1, 400))
        nmajor = int(rng.integers(1, 40))
        major = rng.integers(0, nmajor, n).astype(np.int64)
        hi = int(rng.choice([5, 1000, 1 << 20, 1 << 40, 1 << 61]))
        minor = _wide(rng, n, hi)
        ref = np.lexsort((minor, major))         # (major, minor, index)
        o = packed_order(major, nmajor, minor)
        if o is None:
            fell_back += 1
            continue
        packed += 1
        assert np.array_equal(o, ref)
    assert packed > 200 and fell_back > 50


def _plane_ref(ready, service, plane, free):
    free = free.copy()
    out = np.empty(len(ready), np.int64)
    for i, (r, p) in enumerate(zip(ready.tolist(), plane.tolist())):
        e = max(r, int(free[p])) + service
        free[p] = e
        out[i] = e
    return out, free


def test_plane_lindley_scalar_equals_fcfs():
    rng = np.random.default_rng(2)
    fast = fell_back = 0
    for _ in range(600):
        n = int(rng.integers(2, 300))
        nplanes = int(rng.integers(1, 64))
        plane = rng.integers(0, nplanes, n).astype(np.int64)
        hi = int(rng.choice([10, 100_000, 1 << 40, 1 << 60]))
        ready = np.sort(_wide(rng, n, hi)) if rng.random() < 0.5 else _wide(rng, n, hi)
        s = int(rng.choice([1, 20_000, 1 << 20]))
        free = _wide(rng, nplanes, hi)
        ref, ref_free = _plane_ref(ready, s, plane, free)
        o = np.argsort(plane, kind="stable")
        if sorted_fcfs(ready[o], s, plane[o], nplanes, free.copy()) is None:
            fell_back += 1
        else:
            fast += 1
        pf = free.copy()
        assert np.array_equal(plane_lindley(ready, s, plane, nplanes, pf), ref)
        assert np.array_equal(pf, ref_free)
    assert fast > 200 and fell_back > 50


def test_sorted_fcfs_equals_segmented_fcfs():
    """Jobs sorted by server, one service time or one per job (the channel stage's form)."""
    rng = np.random.default_rng(3)
    fast = fell_back = 0
    for _ in range(600):
        n = int(rng.integers(1, 300))
        nseg = int(rng.integers(1, 40))
        seg = np.sort(rng.integers(0, nseg, n)).astype(np.int64)
        hi = int(rng.choice([10, 100_000, 1 << 40, 1 << 60]))
        ready = _wide(rng, n, hi)
        service = int(rng.integers(1, 1 << 20)) if rng.random() < 0.5 else rng.integers(1, 1 << 20, n).astype(np.int64)
        free = _wide(rng, nseg, hi)
        ref = segmented_fcfs(ready, service, seg, free)
        ref_free = free.copy()
        for i in range(n):
            ref_free[seg[i]] = ref[i]
        f = free.copy()
        got = sorted_fcfs(ready, service, seg, nseg, f)
        if got is None:
            fell_back += 1
            assert np.array_equal(f, free)
            continue
        fast += 1
        assert np.array_equal(got, ref)
        assert np.array_equal(f, ref_free)
    assert fast > 200 and fell_back > 50
