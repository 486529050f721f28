"""Round 14 of the media engine's speed work: ``eventsim._plane_die`` runs its exact queue-depth check only where
``_depth_bound`` (a histogram of the slots held per bucket of the admission times' span: no sort, no search) exceeds
Q. The bound must never be below the check's definition -- the largest, over the admission times t of the
planes-alone schedule, of the carried releases after t plus the joined commands not ended by t plus the commands
admitted by t not ended by t -- or ``_plane_die`` would keep a die whose depth binds; and it must be close enough
to skip the check on many dies. Its ``ad`` / ``en`` may be longer than the die (the split passes its buffers)."""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.media import eventsim

from test_plane_die_depth import _big_die, _call, _max_outstanding

pytest.importorskip("numba")


def test_depth_bound_is_an_upper_bound():
    rng = np.random.default_rng(1415)
    n = tight = equal = 0
    dies = (_big_die(rng) for _ in range(1500))
    for k, c in enumerate(dies):
        join, ct = c[7], c[8]
        ok, (en, ad, rd, st), _ = _call(c, 1 << 40)
        na = int((join < 0).sum())
        if not ok or na == 0:
            continue
        mo = _max_outstanding(ad, en, join, ct)
        pad = int(rng.integers(0, 5))                       # buffers longer than the die, garbage after it
        adb = np.concatenate([ad, rng.integers(-(1 << 40), 1 << 40, pad)])
        enb = np.concatenate([en, rng.integers(-(1 << 40), 1 << 40, pad)])
        D = np.full(na + 1 + pad, 12345, np.int64)
        b = eventsim._depth_bound(adb, enb, join, ct.copy(), na, D[:na + 1])
        assert b >= mo, (k, b, mo)
        assert D[na + 1:].tolist() == [12345] * pad, k
        n += 1
        tight += b <= mo + 2
        equal += b == mo
    assert n > 1000 and tight > n // 3 and equal > n // 10, (n, tight, equal)


def test_depth_bound_counts_each_holder():
    """Hand cases: a slot held across the last bucket, a joined command ended before the first admission (not
    counted) and after it (counted), carried releases before, at and after the first admission."""
    ad = np.array([0, 10, 20, 30], np.int64)
    en = np.array([100, 15, 25, 35], np.int64)
    join = np.full(4, -1, np.int64)
    D = np.zeros(8, np.int64)
    assert eventsim._depth_bound(ad, en, join, np.zeros(0, np.int64), 4, D) >= 2
    assert eventsim._depth_bound(ad, en, join, np.array([-5, 0, 31], np.int64), 4, D) >= 3
    ad2 = np.array([0, 0, 10], np.int64)
    en2 = np.array([-3, 50, 40], np.int64)                      # 0 joined, ended before the first admission
    join2 = np.array([5, -1, -1], np.int64)
    assert eventsim._depth_bound(ad2, en2, join2, np.zeros(0, np.int64), 2, D) == 2
    en2[0] = 4                                                  # held at 0 only (with 1: 2 held)
    assert eventsim._depth_bound(ad2, en2, join2, np.zeros(0, np.int64), 2, D) == 2
    en2[0] = 12                                                 # held at 10 too (with 1 and 2: 3 held)
    assert eventsim._depth_bound(ad2, en2, join2, np.zeros(0, np.int64), 2, D) == 3
