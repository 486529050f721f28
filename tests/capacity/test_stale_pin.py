"""A warp that read a page's pte before the frame was evicted may pin the frame at any later time (hb_cap_pin:
pte -> pin -> fence -> state and generation re-checked) and backs off at its re-check. So the host may find a
transient pin on a FREE frame it is about to fill: the fill must go on (on the H100, 2026-12-06, an assert that
also required pins == 0 ended a 16 GiB generated stream with IO_ERROR once evictions began), and the late warp
must still miss, before and after the frame is published again."""
from __future__ import annotations

import numpy as np

from hbfcommon.capacity import HBF_FR_DIRTY as DIRTY, HBF_FR_FILLING as FILLING, HBF_FR_VALID as VALID
from hbfd.capacity.frames import FramePool


def _recheck(pool: FramePool, frame: int, pte_generation: int) -> bool:
    """The device's re-check after its pin (hb_cap_pin): True = a hit on the pte it read."""
    fr = pool.frames[frame]
    return int(fr["state"]) in (VALID, DIRTY) and int(fr["generation"]) == pte_generation


def _resident(pool: FramePool, page: int) -> int:
    f = pool.take_free()
    pool.begin_fill(f, 1, page, prefetch=False)
    pool.publish(f, 100, 7)
    return f


def test_batched_fill_goes_on_over_a_stale_pin_and_the_late_warp_misses():
    pool = FramePool(1)
    pool.add_range(1, 8)
    f = _resident(pool, 0)
    t = pool.tables[1]
    stale_frame, stale_gen = t.frame_of(0), int(t[0]["generation"])     # a warp reads the pte ...
    pool.frames["referenced"][f] = 0
    frames, ev = pool.take_frames(1)                                      # ... the host evicts the frame ...
    assert list(frames) == [f] and len(ev) == 1
    pool.complete_evictions(ev)
    pool.frames["pins"][stale_frame] += 1                                 # ... and the warp's pin lands now
    pool.begin_fill_many(np.array([f]), np.array([1]), np.array([5]), np.array([False]))
    assert int(pool.frames["state"][f]) == FILLING
    assert not _recheck(pool, stale_frame, stale_gen)                     # FILLING: the warp misses, unpins
    pool.device_unpin(stale_frame)
    pool.frames["pins"][stale_frame] += 1                                 # a second late warp, after the publish
    pool.publish_many(np.array([f]), np.array([200]), np.array([9], np.uint64))
    assert not _recheck(pool, stale_frame, stale_gen)                     # generation bumped: still a miss
    pool.device_unpin(stale_frame)
    assert pool.lookup(1, 5) == f and pool.lookup(1, 0) is None
    assert pool.device_pin(1, 5) is not None                              # the new mapping is a hit


def test_single_fill_goes_on_over_a_stale_pin():
    pool = FramePool(1)
    pool.add_range(1, 8)
    f = _resident(pool, 0)
    stale_gen = int(pool.tables[1][0]["generation"])
    pool.frames["referenced"][f] = 0
    ev = pool.begin_eviction()
    assert ev is not None and ev.frame == f
    g = pool.complete_eviction(ev)
    pool.frames["pins"][g] += 1
    pool.begin_fill(g, 1, 3, prefetch=True)
    assert not _recheck(pool, g, stale_gen)
    pool.device_unpin(g)
    pool.publish(g, 300, 11)
    assert not _recheck(pool, g, stale_gen) and pool.device_pin(1, 3) is not None
