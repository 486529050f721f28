"""The ledger under range registrations (shared blocks, unregister, re-register), per-block reads
counted in bulk, and the page -> block mapping the daemon uses."""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.reliability.hazard import HazardSweep
from hbfd.reliability.ledger import BlockLedger, ReliabilityParams
from hbfd.reliability.refresh import RefreshScheduler
from hbfd.reliability.service import ReliabilityService

P = ReliabilityParams(ea_retention_ev=1.1, l_ref_h=100.0, t_ref_c=40.0, a_t=1.0, refresh_damage_threshold=0.5,
                      read_disturb_limit=10, pec_limit=3000)


def empty(channels=4, dies=4, pages=4):
    return BlockLedger(P, channels=channels, dies_per_channel=dies, layers=dies, block_bytes=pages * 4096,
                       pages_per_block=pages)


def test_shared_blocks_are_refcounted_and_unregister_stops_eligibility():
    L = empty()
    L.register(1, np.arange(8), shared=True)
    L.register(2, np.arange(4, 12), shared=True)       # blocks 4..7 shared with range 1
    assert L.n_active == 12 and L.n_blocks == 12
    assert (L.zone[L._dense[np.arange(4, 8)]] == 1).all(), "a shared block keeps its first zone"
    with pytest.raises(ValueError):
        L.register(3, np.arange(2))                     # not shared: an error, as before
    assert L.unregister(np.arange(8)) == 4              # 0..3 gone; 4..7 still held by range 2
    assert L.n_active == 8
    L.count_block_reads(np.array([0, 0, 5] + [6] * 20))
    assert L.unregistered_reads == 2
    assert L.reads[L._dense[5]] == 1 and L.reads[L._dense[6]] == 20
    elig = L.eligible_mask()
    assert elig[L._dense[6]] and elig.sum() == 1
    L.accumulate(3600 * 1000.0, np.full(4, 40.0))      # far past the damage threshold
    assert L.eligible_mask().sum() == 8, "unregistered blocks never become eligible"
    # re-registration: valid data again (damage, disturb 0), wear kept
    i0 = L._dense[0]
    L.pec[i0] = 5
    L.register(4, np.array([0]), shared=True)
    assert L.damage()[i0] == 0 and L.disturb()[i0] == 0 and L.pec[i0] == 5 and L.zone[i0] == 4
    assert L.summary()["registered_blocks"] == 9


def test_scheduler_drops_a_waiting_block_that_was_unregistered():
    L = empty()
    L.register(1, np.arange(4), shared=True)
    L.count_block_reads(np.repeat(np.arange(4), 10))   # every block at the disturb limit
    s = RefreshScheduler(L)
    assert s.update_eligibility() == 4
    L.unregister(np.array([1, 2]))
    done = []
    while s.plan() is not None:
        done.append(s.plan_now.block)
        s.drain(10**9)
    assert sorted(done) == [0, 3] and s.completed_blocks == 2
    assert s.summary()["eligible_waiting_blocks"] == 0


def test_blocks_of_pages_follow_the_refresh_mapping():
    L = empty(channels=4, dies=2, pages=8)                # C·D = 8, 64 pages per block group
    svc = ReliabilityService(L, RefreshScheduler(L), HazardSweep(ea_min_ev=0.5, ea_max_ev=1.1, ea_step_ev=0.1, mtbf_ref_h=1e6, t_ref_c=40.0), media_bytes_per_s=1e9)
    svc.use_range_registrations()
    L = svc.ledger
    cd = 8
    for a, b in [(0, 1), (3, 11), (60, 70), (5, 64 * 3 + 2), (64, 128)]:
        lpn = np.arange(a, b)
        want = np.unique(lpn // (cd * 8) * cd + lpn % cd)
        np.testing.assert_array_equal(svc.blocks_of_pages(a, b), want)
    # the media_work page list of a block maps back onto that block
    n = svc.register_range(9, 0, 64 * 4096)
    assert n == 8 and L.n_active == 8
    svc.count_reads(np.arange(64) * 4096)               # one read on every page: 8 per block
    assert (L.reads == 8).all()
    svc.count_reads(np.full(2, 13 * 4096))              # page 13: block 5 reaches the limit (10)
    svc.sched.update_eligibility()
    pl = svc.sched.plan()
    assert pl.block == 13 % cd
    svc.attach_media()
    _, lpns = svc.media_work(0)                          # the pages the media model refreshes
    assert len(lpns) == 8 and (svc.blocks_of_pages(int(lpns.min()), int(lpns.max()) + 1) >= 0).all()
    assert set((lpns // (cd * 8) * cd + lpns % cd).tolist()) == {pl.block}
    svc.unregister_range(9)
    assert L.n_active == 0
