"""The write-backpressure bookkeeping as arrays (engine._ring_push, engine._Ends) equals the per-store
Python it replaced (each plane's list of its last B program ids; a dict of decided program ends)."""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.media.engine import _Ends, _ring_push


def _ref_push(ring: dict[int, list[int]], plane, fill, pid, B):
    gate = []
    pids = []
    for p, f in zip(plane.tolist(), fill.tolist()):
        L = ring.setdefault(p, [])
        gate.append(L[0] if len(L) >= B else -1)
        if f:
            pids.append(pid)
            L.append(pid)
            pid += 1
            if len(L) > B:
                del L[0]
        else:
            pids.append(-1)
    return np.array(gate, np.int64), np.array(pids, np.int64), pid


@pytest.mark.parametrize("B", [1, 2, 3])
def test_ring_push_equals_per_store_lists(B):
    rng = np.random.default_rng(B)
    planes = 7
    R = np.full((planes, B), -1, np.int64)
    ref: dict[int, list[int]] = {}
    pid = pid_ref = 0
    for _ in range(200):
        n = int(rng.integers(0, 40))
        plane = rng.integers(0, planes, n)
        fill = rng.random(n) < rng.random()
        g, p = _ring_push(R, plane, fill, pid)
        pid += int(fill.sum())
        g_ref, p_ref, pid_ref = _ref_push(ref, plane, fill, pid_ref, B)
        assert np.array_equal(g, g_ref) and np.array_equal(p, p_ref) and pid == pid_ref
        for q in range(planes):
            L = ref.get(q, [])
            assert R[q].tolist() == [-1] * (B - len(L)) + L


def test_ends_get_set_rebase():
    e = _Ends()
    ref: dict[int, int] = {}
    rng = np.random.default_rng(5)
    top = 0
    for step in range(300):
        ids = np.unique(rng.integers(max(0, top - 50), top + 30, int(rng.integers(1, 20))))
        ends = rng.integers(0, 1 << 40, len(ids))
        e.set(ids, ends)
        ref.update(zip(ids.tolist(), ends.tolist()))
        top = max(top, int(ids.max()) + 1)
        if step % 37 == 36:                     # forget below top - 10, keeping a few older ids
            keep = np.array(sorted(ref)[:3] + [top - 5], np.int64)
            e.rebase(top - 10, keep)
            ref = {k: v for k, v in ref.items() if k >= top - 10 or k in set(keep.tolist())}
        q = rng.integers(-5, top + 40, 64)
        assert e.get(q).tolist() == [ref.get(int(x), -1) for x in q]
