"""Round 13 of the media engine's speed work: ``eventsim._plane_die``'s queue-depth check finds, for each end and
carried release, the first admission time not before it by a bucket table over the sorted admission times (a
scan from the table's index) instead of a binary search, and its grants scan a plane for gated commands only
while some wait. Its decision must be the check's definition -- at every admission time t the carried releases
after t, the joined commands not ended by t and the commands admitted by t not ended by t are at most Q -- and a
die it keeps must get ``eventsim.simulate``'s schedule (the definition) bit for bit.

The dies are large (up to 400 commands on 1-16 planes: the table is built from 8 admission times on), with ties
of admission, end and release times (times on a grid, some 1 ns off), gated program chains, floors, joins and
carried releases, and Q at, just below and just above the planes-alone schedule's largest outstanding count."""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.media import eventsim

pytest.importorskip("numba")


def _big_die(rng):
    m = int(rng.choice([3, 8, 9, 17, 40, 120, 400]))
    npd = int(rng.integers(1, 17))
    grid = int(rng.choice([1, 50, 1000]))
    kind = np.where(rng.random(m) < rng.choice([0.5, 0.9, 1.0]), eventsim.READ, eventsim.PROG).astype(np.int64)
    plane = rng.integers(0, npd, m).astype(np.int64)
    plane[:npd] = np.arange(min(npd, m))                  # (every plane used where m allows)
    npd = int(plane.max()) + 1
    span = int(rng.choice([1, 20, 200, 5000]))
    ready = (np.sort(rng.integers(0, span, m)) * grid + rng.choice([0, 0, 0, 1], m)).astype(np.int64)
    service = np.where(kind == eventsim.READ, rng.choice([1, 2, 20]) * grid,
                       rng.choice([3, 30, 600]) * grid).astype(np.int64)
    gate = np.full(m, -1, np.int64)
    gate_x = np.zeros(m, np.int64)
    for k in range(m):                                  # programs gated on an earlier program of their plane
        if kind[k] != eventsim.READ and rng.random() < 0.4:
            e = np.flatnonzero((plane[:k] == plane[k]) & (kind[:k] != eventsim.READ))
            if len(e):
                gate[k] = e[-1]
                gate_x[k] = int(rng.choice([0, grid, -1]))
    floor = np.where(rng.random(m) < 0.1, ready + grid, 0).astype(np.int64)
    join = np.full(m, -1, np.int64)
    if rng.random() < 0.3:
        j = rng.choice(m, min(m, 3), replace=False)
        j = j[gate[j] < 0]
        join[j] = (ready[j] + rng.integers(0, 3, len(j)) * grid).astype(np.int64)
    nc = int(rng.choice([0, 0, 3, 20, 60]))
    ct = (rng.integers(0, span + 2, nc) * grid + rng.choice([0, 1], nc)).astype(np.int64)
    pf = (rng.integers(0, 3, npd) * grid).astype(np.int64)
    t_cmd = int(rng.choice([0, 1, grid]))
    return kind, ready, plane, service, gate, gate_x, floor, join, ct, pf, t_cmd


def _call(c, Q):
    kind, ready, plane, service, gate, gate_x, floor, join, ct, pf, t_cmd = c
    m = len(kind)
    pfd = pf.copy()
    out = [np.zeros(m, np.int64) for _ in range(4)]     # en, ad, rd, st
    wk = np.zeros(3 * len(pf) + 12 * m + 8, np.int64)
    ok = eventsim._plane_die(kind, ready, plane, service, gate, gate_x, floor, True, join, t_cmd, Q, pfd, ct.copy(),
                             *out, wk)
    return ok, out, pfd


def _max_outstanding(ad, en, join, ct):
    """The largest count of slots held at an admission time of the planes-alone schedule (the check's definition)."""
    nj = int((join >= 0).sum())
    A = ad[join < 0]
    best = -1
    for t in np.unique(A):
        best = max(best, int((ct > t).sum() + (A <= t).sum() + nj - (en <= t).sum()))
    return best


def test_plane_die_depth_check_is_its_definition():
    rng = np.random.default_rng(1313)
    kept = declined = boundary = 0
    for k in range(1500):
        c = _big_die(rng)
        kind, ready, plane, service, gate, gate_x, floor, join, ct, pf, t_cmd = c
        m = len(kind)
        ok0, (en0, ad0, rd0, st0), pf0 = _call(c, 1 << 40)        # the depth never binds: the planes alone
        if not ok0:
            continue
        mo = _max_outstanding(ad0, en0, join, ct)
        for Q in sorted({max(1, mo - 1), max(1, mo), mo + 1, int(rng.integers(1, 40))}):
            ok, (en, ad, rd, st), pfd = _call(c, Q)
            want = len(ct) + m <= Q or (join < 0).sum() == 0 or mo <= Q
            assert bool(ok) == bool(want), (k, Q, mo)
            boundary += Q == mo
            if not ok:
                declined += 1
                assert np.array_equal(pfd, pf), k
                continue
            kept += 1
            for x, y in zip((en, ad, rd, st, pfd), (en0, ad0, rd0, st0, pf0)):
                assert np.array_equal(x, y), k
            pf1 = pf.copy()
            ref = eventsim.simulate(kind, ready, plane, np.zeros(m, np.int64), service, t_cmd=t_cmd, queue_depth=Q,
                                    plane_free=pf1, die_carry={0: ct.tolist()} if len(ct) else {}, gate=gate,
                                    gate_x=gate_x, floor=floor, join=join, full=True)
            for x, y in zip(ref, (st, en, ad, rd)):
                assert np.array_equal(x, y), k
            assert np.array_equal(pf1, pfd), k
    assert kept > 1000 and declined > 1000 and boundary > 500, (kept, declined, boundary)
