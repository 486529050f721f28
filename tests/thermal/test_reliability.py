from __future__ import annotations

import numpy as np
import pytest

from hbfd.reliability.hazard import HazardSweep
from hbfd.reliability.ledger import BlockLedger, ReliabilityParams, acceleration, lifetime_h
from hbfd.reliability.refresh import OP_PROGRAM, OP_READ, REFRESH_ID_BASE, RefreshScheduler

P = ReliabilityParams(ea_retention_ev=1.1, l_ref_h=100.0, t_ref_c=40.0, a_t=1.0, refresh_damage_threshold=0.5,
                      read_disturb_limit=1000, pec_limit=3000)


def ledger(n=64, channels=4, dies=4, pages=4):
    L = BlockLedger(P, channels=channels, dies_per_channel=dies, layers=dies, block_bytes=pages * 4096,
                    pages_per_block=pages)
    L.register(7, np.arange(n))
    return L


def test_arrhenius_anchor_and_damage():
    assert lifetime_h(40.0, ea_ev=1.1, l_ref_h=100.0, t_ref_c=40.0) == pytest.approx(100.0)
    # by hand: exp(1.1 / 8.617e-5 × (1/313.15 − 1/325.15)) = exp(1.5045) = 4.50
    assert acceleration(52.0, ea_ev=1.1, t_ref_c=40.0) == pytest.approx(4.50, rel=1e-3)
    L = ledger()
    L.accumulate(3600.0 * 20, np.full(4, 40.0))          # 20 h at T_ref: damage 0.20
    assert L.damage().max() == pytest.approx(0.20)
    assert not L.eligible_mask().any()
    L.accumulate(3600.0 * 25, np.array([40.0, 40.0, 40.0, 52.0]))
    elig = L.eligible_mask()
    assert elig.any() and (L.layer[elig] == 3).all()     # only the hot layer crossed


def _eligible_all(L):
    L.accumulate(3600.0 * 60, np.full(L.layers, 40.0))


def test_refresh_order_is_deterministic_and_follows_the_spec():
    orders = []
    for _ in range(2):
        L = ledger()
        _eligible_all(L)
        s = RefreshScheduler(L)
        assert s.update_eligibility() == 64
        seq = []
        while True:
            expected = s.eligible_order()
            pl = s.plan()
            if pl is None:
                break
            assert pl.index == expected[0]                # incremental picker == spec order
            seq.append(pl.block)
            for r in s.requests(pl):
                s.complete(r.id, True)
        orders.append(seq)
    assert orders[0] == orders[1]
    assert sorted(orders[0]) == list(range(64))
    # channel round robin: consecutive refreshes move to the next channel
    L = ledger()
    ch = [b % 4 for b in orders[0][:8]]
    assert ch == [0, 1, 2, 3, 0, 1, 2, 3]
    _ = L


def test_requests_are_page_aligned_pairs_in_their_own_namespace():
    L = ledger(pages=4)
    _eligible_all(L)
    s = RefreshScheduler(L)
    s.update_eligibility()
    pl = s.plan()
    reqs = s.requests(pl)
    assert len(reqs) == 8 and all(r.id >= REFRESH_ID_BASE for r in reqs)
    assert [r.op for r in reqs] == [OP_READ, OP_PROGRAM] * 4
    assert all(r.media_address % 4096 == 0 for r in reqs)
    assert len({r.media_address for r in reqs}) == 4
    # every page of the block lives on the block's channel and die (interleave 0)
    for r in reqs:
        page = r.media_address // 4096
        assert page % L.channels == pl.channel and (page // L.channels) % L.dies == pl.die
    assert s.debt_total_bytes == 8 * 4096
    with pytest.raises(ValueError):
        s.complete(5, True)                              # an application ticket id


def test_pec_only_on_complete_refresh():
    L = ledger()
    _eligible_all(L)
    s = RefreshScheduler(L)
    s.update_eligibility()
    pl = s.plan()
    reqs = s.requests(pl)
    for r in reqs[:-1]:
        assert not s.complete(r.id, True)
    assert L.pec[pl.index] == 0 and L.damage()[pl.index] >= 0.5
    assert s.complete(reqs[-1].id, True)
    assert L.pec[pl.index] == 1 and L.damage()[pl.index] == 0.0
    # a failed request: nothing committed, the block is eligible again and retried
    pl2 = s.plan()
    reqs2 = s.requests(pl2)
    s.complete(reqs2[0].id, False)
    for r in reqs2[1:]:
        s.complete(r.id, True)
    assert L.pec[pl2.index] == 0 and L.damage()[pl2.index] >= 0.5
    assert s.failed_attempts == 1
    again = [s.plan()]
    while again[-1] is not None and again[-1].index != pl2.index:
        for r in s.requests(again[-1]):
            s.complete(r.id, True)
        again.append(s.plan())
    assert again[-1] is not None and again[-1].index == pl2.index


def test_refresh_skips_a_die_an_application_read_occupies():
    L = ledger()
    _eligible_all(L)
    s = RefreshScheduler(L)
    s.update_eligibility()
    pl = s.plan(busy={(0, 0)})
    assert (pl.channel, pl.die) != (0, 0)


def test_read_disturb_makes_blocks_eligible_and_fluid_drain_commits():
    L = ledger(n=16)
    L.add_uniform_reads(16 * 1000)
    assert L.eligible_mask().all()
    s = RefreshScheduler(L)
    s.update_eligibility()
    s.plan()
    assert s.drain(3 * 4096) == 3 * 4096 and s.in_flight is not None
    s.drain(10**9)
    assert s.completed_blocks == 1 and L.disturb()[s.order_log[0] == L.block].min() == 0


def test_hazard_sweep_eq6():
    h = HazardSweep(ea_min_ev=0.5, ea_max_ev=1.1, ea_step_ev=0.1, mtbf_ref_h=1000.0, t_ref_c=40.0)
    assert list(h.ea) == [0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1]
    h.add(3600.0, 40.0)                                  # 1 h at T_ref: hazard 1e-3 for every Ea
    np.testing.assert_allclose(h.hazard, 1e-3)
    h2 = HazardSweep(ea_min_ev=0.5, ea_max_ev=1.1, ea_step_ev=0.1, mtbf_ref_h=1000.0, t_ref_c=40.0)
    h2.add_series(36.0, np.full(100, 80.0))
    assert (np.diff(h2.hazard) > 0).all()                # hotter than T_ref: higher Ea, more hazard
    rows = h2.rows()
    assert rows[0]["failure_probability"] == pytest.approx(1 - np.exp(-h2.hazard[0]))


def test_refresh_through_the_media_model_commits_after_its_duration():
    from hbfd.media import MediaEngine, MediaGeometry
    from hbfcommon.profile import load_profile
    from hbfd.reliability.refresh import RefreshScheduler
    from hbfd.reliability.service import ReliabilityService, make_ledger
    from hbfd.contracts import ThermalState
    prof = load_profile("ocp-sg1")
    eng = MediaEngine(MediaGeometry.from_profile(prof))
    led = make_ledger(prof, logical_pages=eng.g.logical_pages)
    svc = ReliabilityService(led, RefreshScheduler(led), HazardSweep.from_profile(prof.reliability),
                             media_bytes_per_s=384e9)
    svc.attach_media()
    th = ThermalState(hbf_max_c=60.0)
    svc.tick(0, th)
    led.add_uniform_reads(float(prof.reliability.read_disturb_limit) * led.n_blocks)   # every block disturbed
    debt = svc.tick(10_000_000, th)
    assert debt == 2 * prof.geometry.pages_per_block * 4096                           # one block planned
    token, lpns = svc.media_work(10_000_000)
    assert svc.media_work(10_000_000) is None                                          # handed out once
    t_done = eng.refresh(lpns, 0)
    assert t_done > 0 and eng.stats()["counts"]["refresh_pages"] == prof.geometry.pages_per_block
    svc.media_done(token, t_done)
    blk = svc.sched.plan_now.index
    svc.tick(10_000_000 + t_done - 1, th)
    assert led.pec[blk] == 0                                                           # not before it finished
    svc.tick(10_000_000 + t_done, th)
    assert led.pec[blk] == 1 and led.disturb()[blk] == 0
    assert svc.summary_section()["refresh_path"] == "media model (engine.refresh)"


def test_dies_fill_the_stack_layers_from_the_bottom():
    # several dies per channel: the die index within its channel is its layer (as before)
    L = BlockLedger(P, channels=4, dies_per_channel=4, layers=4, block_bytes=4096, pages_per_block=1)
    L.register(0, np.arange(64))
    assert (L.layer == (np.arange(64) // 4) % 4).all()
    # one die per channel (the OCP grades): die c sits on channel c, so the layer is the channel
    L = BlockLedger(P, channels=8, dies_per_channel=1, layers=8, block_bytes=4096, pages_per_block=1)
    L.register(0, np.arange(64))
    assert (L.layer == np.arange(64) % 8).all()
    # 16 dies in 8 layers: two dies per layer
    L = BlockLedger(P, channels=16, dies_per_channel=1, layers=8, block_bytes=4096, pages_per_block=1)
    L.register(0, np.arange(32))
    assert (L.layer == (np.arange(32) % 16) // 2).all()
    with pytest.raises(ValueError, match="layer holds at least one die"):
        BlockLedger(P, channels=2, dies_per_channel=1, layers=4, block_bytes=4096, pages_per_block=1)


def test_ocp_sg1_ages_each_layer_at_its_own_temperature():
    from hbfcommon.profile import load_profile
    from hbfd.contracts import ThermalState
    from hbfd.reliability.service import ReliabilityService, make_ledger
    from hbfd.thermal.service import PackageThermalState
    # SG2/SG3 run the 16-high package (one thermal layer per die); a state with fewer layers than the ledger
    # (an 8-layer model under a 16-die ledger) ages every block at the hottest layer
    for name, layers, n_t, source in (("ocp-sg1", 8, 8, "per-layer"), ("ocp-sg2", 16, 16, "per-layer"),
                                      ("ocp-sg2", 16, 8, "hbf_max for every layer")):
        prof = load_profile(name)
        led = make_ledger(prof)
        assert led.layers == layers and sorted(set(led.layer.tolist())) == list(range(layers))
        svc = ReliabilityService(led, RefreshScheduler(led), HazardSweep.from_profile(prof.reliability),
                                 media_bytes_per_s=float(prof.geometry.aggregate_bytes_per_s))
        temps = tuple(40.0 + 2.0 * i for i in range(n_t))         # the package model's layers
        svc.tick(0, ThermalState(hbf_max_c=75.0))
        svc.tick(3_600_000_000_000, PackageThermalState(hbf_max_c=75.0, hbf_layers_c=temps))
        assert svc.layer_source == source
        d = led.damage()
        if n_t == layers:
            assert (np.diff([d[led.layer == i].max() for i in range(layers)]) > 0).all()  # hotter, more damage
        else:
            assert np.allclose(d, d.max())                         # every block at the hottest layer
