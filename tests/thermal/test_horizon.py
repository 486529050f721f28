"""The thermal snapshot's validity horizon (hbfd/thermal/horizon.py; docs/design.md §3.3 "Validity horizon").

The property, over the real controller code (PackageThermalService on the small ROM, the policies, the operator
override, the gate and hbfd's publication function writing a real control region), with hbfd's clock simulated and
a simulated GPU clock with an offset and a drift: no published contract word (mode, q_ppm, admission_open, refresh
debt total) changes at a GPU time before any horizon published earlier. And the clock rule alone: the GPU time
hbfd derives from a reference never exceeds the true GPU time while the drift stays within the margin.
"""
from __future__ import annotations

import random

import pytest

from hbfd.contracts import NoThermal
from hbfd.region import ControlRegion
from hbfd.thermal.controller import SEVERE, SHUTDOWN, PolicyConfig, make_policy
from hbfd.thermal.horizon import (NEVER, GpuClockRef, HorizonConfig, HorizonGate, policy_hint_ticks,
                                  publish_with_horizon, service_hint_ns)
from hbfd.thermal.override import OperatorOverrideThermal
from hbfd.thermal.power import HbmPowerModel
from hbfd.thermal.service import PackageThermalService
from hbfd.thermal.telemetry import TelemetryGuard, TelemetrySample

MS = 1_000_000
TH = {"rtt": 40.0, "ltt": 45.0, "stt": 50.0, "shutdown": 80.0}


class FnSource:
    """A telemetry source whose board power is a function of time (a measuring kind: sensor error computed)."""

    kind = "test"

    def __init__(self, power):
        self.power = power

    def read(self, now_ns: int) -> TelemetrySample:
        return TelemetrySample(t_ns=now_ns, gpu_power_w=float(self.power(now_ns)), gpu_temp_c=50.0)

    def identity(self) -> dict:
        return {"identity": "test:fn"}


def package(rom, power, policy="hysteresis"):
    rom.reset()
    cfg = PolicyConfig(name=policy, rtt_c=40.0, ltt_c=45.0, stt_c=50.0, shutdown_c=80.0, hysteresis_k=2.0,
                       light_q_ppm=500_000, min_dwell_ticks=5)
    return PackageThermalService(rom, make_policy(cfg), TelemetryGuard(FnSource(power), 200 * MS), idle_w=1.0,
                                 hbm=HbmPowerModel(0.0, 0.0), hbm_traffic_bytes_per_s=0.0, thresholds=TH,
                                 sample_every_ticks=10)


class SimClock:
    """hbfd's monotonic clock; every reading moves it on 1 us (time passes between the steps of a publication)."""

    def __init__(self, t0: int):
        self.t = t0
        self.slept = 0

    def now(self) -> int:
        self.t += 1_000
        return self.t

    def sleep(self, ns: int) -> None:
        assert ns > 0
        self.slept += ns
        self.t += ns


class Gpu:
    """The GPU's %globaltimer at hbfd time t: offset + (1 + drift) t."""

    def __init__(self, offset: int, drift_ppm: float):
        self.offset, self.drift = offset, drift_ppm * 1e-6

    def at(self, t: int) -> int:
        return self.offset + t + int(self.drift * t)


def words(region) -> tuple[int, int, int, int]:
    th, rf = region.ctl.thermal, region.ctl.refresh
    return int(th.mode), int(th.q_ppm), int(th.admission_open), int(rf.debt_total_bytes)


def simulate(service, *, ticks: int, gpu: Gpu, cfg: HorizonConfig, debt=lambda i: 0, refresh_name="none",
             overrides=None, seed=0, echo=True):
    """hbfd's control loop, simulated: every ~10 ms tick the model runs and publish_with_horizon publishes. The
    device reads the snapshot now and then (its clock echo lands before hbfd reads it). Returns the publications
    (hbfd time after the write, the words the region holds, the horizon) and the gate."""
    rng = random.Random(seed)
    region = ControlRegion(name="hbf-horizon-test")
    try:
        clock = SimClock(5_000 * MS)
        gate = HorizonGate(cfg)
        t0 = clock.t
        service.tick(0, 0.0)
        pubs, applied = [], []
        for i in range(ticks):
            clock.t += 10 * MS + rng.randrange(0, 2 * MS)
            if echo and rng.random() < 0.7:             # a device read some time before this tick
                region.ctl.activity.clock_echo_ns = gpu.at(clock.t - rng.randrange(0, 5 * MS))
            if overrides and i in overrides:
                service.set_override(overrides[i])
                applied.append((i, clock.t))
            st = service.tick(clock.t - t0, 0.0)
            hint = service_hint_ns(service, refresh_name, st)
            off = publish_with_horizon(gate, region, st, i, debt(i), 4096, 0, hint, clock=clock.now,
                                       sleep=clock.sleep)
            assert region.ctl.thermal.valid_until_gpu_ns == off.valid_until_gpu_ns
            pubs.append((clock.t, words(region), off.valid_until_gpu_ns))
            if st.mode == SHUTDOWN:
                break
        return pubs, gate, applied
    finally:
        region.close()


def assert_no_change_before_a_horizon(pubs, gpu: Gpu) -> int:
    """Every change of the words is written at a GPU time at or past every horizon published before it.
    Returns the number of changes checked."""
    changes = 0
    max_u = 0
    for j, (t, w, u) in enumerate(pubs):
        if j and w != pubs[j - 1][1]:
            changes += 1
            assert gpu.at(t) >= max_u, f"publication {j} changed {pubs[j - 1][1]} -> {w} at GPU " \
                                       f"{gpu.at(t)} before the horizon {max_u}"
        max_u = max(max_u, u)
    return changes


GPUS = [Gpu(0, 0.0), Gpu(123_456_789_000, -200.0), Gpu(7 * 10**15, 199.0), Gpu(10**12, -150.0)]
ON = HorizonConfig(enabled=True, max_ns=50 * MS)


@pytest.mark.parametrize("gpu", GPUS, ids=["same", "slow200ppm", "fast199ppm", "slow150ppm"])
def test_heating_and_cooling_through_light_and_severe(small_rom, gpu):
    """40 W for 3 s, off for 3 s: Normal -> Light -> Severe -> Light -> Normal and again (the P=40 trace)."""
    s = package(small_rom, lambda t: 40.0 if (t // (3000 * MS)) % 2 == 0 else 0.0)
    pubs, gate, _ = simulate(s, ticks=800, gpu=gpu, cfg=ON)
    modes = {w[0] for _, w, _ in pubs}
    assert {0, 1, 2} <= modes
    assert [tr[1:3] for tr in s.policy.transitions][:4] == [(0, 1), (1, 2), (2, 1), (1, 0)]
    assert assert_no_change_before_a_horizon(pubs, gpu) >= 4
    assert gate.with_horizon > 100 and gate.ahead_max_ns == ON.max_ns
    # Severe publishes no horizon
    assert all(u == 0 for _, w, u in pubs if w[0] >= SEVERE)


@pytest.mark.parametrize("policy", ["none", "hysteresis", "pi", "fixed-cap"])
def test_heating_under_max_power_to_shutdown(small_rom, policy):
    """From cold at 2000 W: the model's warm-up publishes no horizon, so nothing is held on the way to Shutdown."""
    gpu = GPUS[1]
    s = package(small_rom, lambda t: 2000.0, policy)
    pubs, gate, _ = simulate(s, ticks=400, gpu=gpu, cfg=ON)
    assert pubs[-1][1][0] == SHUTDOWN
    assert_no_change_before_a_horizon(pubs, gpu)
    assert gate.holds == 0


@pytest.mark.parametrize("policy", ["none", "hysteresis", "pi", "fixed-cap"])
def test_a_power_step_beyond_anything_seen_is_held_never_early(small_rom, policy):
    """20 W for 1.5 s (horizons of the full cap), then 2000 W: the prediction is outrun; the transitions wait for the
    horizons already published (at most one cap), none is published before one."""
    gpu = GPUS[2]
    s = package(small_rom, lambda t: 20.0 if t < 1500 * MS else 2000.0, policy)
    pubs, gate, _ = simulate(s, ticks=600, gpu=gpu, cfg=ON)
    assert pubs[-1][1][0] == SHUTDOWN
    assert gate.with_horizon > 10
    assert assert_no_change_before_a_horizon(pubs, gpu) >= 1
    assert gate.held_ns_max <= ON.max_ns


def test_pi_policy_under_a_slow_ramp(small_rom):
    gpu = GPUS[2]
    s = package(small_rom, lambda t: min(60.0, 5.0 + t / (100 * MS)), "pi")
    pubs, gate, _ = simulate(s, ticks=900, gpu=gpu, cfg=ON)
    assert len({w[1] for _, w, _ in pubs}) > 3          # q moved several times
    assert_no_change_before_a_horizon(pubs, gpu)
    assert gate.with_horizon > 0


def test_refresh_debt_accrual_is_held_until_the_horizon(small_rom):
    """The debt total is a contract word: its growth waits for the published horizon like a mode change."""
    gpu = GPUS[3]
    rng = random.Random(4)
    steps = sorted(rng.sample(range(1, 600), 40))
    s = package(small_rom, lambda t: 20.0)
    pubs, gate, _ = simulate(s, ticks=600, gpu=gpu, cfg=ON, debt=lambda i: 4096 * sum(1 for k in steps if k <= i),
                             refresh_name="retention")
    assert pubs[-1][1][3] == 4096 * 40
    assert assert_no_change_before_a_horizon(pubs, gpu) >= 30
    assert gate.holds > 0 and gate.held_ns_max <= ON.max_ns


def test_no_thermal_model_with_debt_is_capped_and_without_is_never(small_rom):
    gpu = GPUS[1]
    pubs, gate, _ = simulate(NoThermal(), ticks=50, gpu=gpu, cfg=ON, debt=lambda i: 4096 * (i // 7),
                             refresh_name="retention")
    assert assert_no_change_before_a_horizon(pubs, gpu) >= 5
    assert gate.ahead_max_ns == ON.max_ns
    pubs, gate, _ = simulate(NoThermal(), ticks=20, gpu=gpu, cfg=ON)
    assert gate.ahead_max_ns == NEVER           # nothing can change: the longest horizon a device word carries
    t, _, u = pubs[-1]
    assert gpu.at(t) + NEVER - 2 * ON.max_ns < u <= gpu.at(t) + NEVER


def test_an_override_waits_for_the_published_horizon_at_most_one_horizon(small_rom):
    """The guarantee for hbfctl thermal-override: the override's words are published once every horizon already
    published has passed (never earlier), and so at most HBFD_THERMAL_HORIZON_NS after the tick that takes it."""
    gpu = GPUS[1]
    base = package(small_rom, lambda t: 10.0)
    s = OperatorOverrideThermal(base)
    ovs = {100: {"mode": "Light", "q_ppm": 400_000}, 180: {"mode": "Severe"}, 260: {"clear": True},
           330: {"mode": "Light", "q_ppm": 900_000}, 335: {"clear": True}}
    pubs, gate, applied = simulate(s, ticks=420, gpu=gpu, cfg=ON, overrides=ovs)
    assert assert_no_change_before_a_horizon(pubs, gpu) >= 4
    seen = [w[:3] for _, w, _ in pubs]
    assert (1, 400_000, 1) in seen and (2, 400_000, 0) in seen and (1, 900_000, 1) in seen
    # each override's words appear within one horizon (+ the tick's jitter) of the tick that took it
    for i, t_set in applied:
        want = {100: (1, 400_000, 1), 180: (2, 400_000, 0), 330: (1, 900_000, 1)}.get(i)
        if want is None:
            continue
        t_pub = next(t for t, w, _ in pubs if t >= t_set and w[:3] == want)
        assert t_pub - t_set <= ON.max_ns + 3 * MS
    assert gate.holds >= 1 and gate.held_ns_max <= ON.max_ns


def test_off_publishes_no_horizon_and_holds_nothing(small_rom):
    gpu = GPUS[0]
    s = package(small_rom, lambda t: 40.0 if (t // (3000 * MS)) % 2 == 0 else 0.0)
    pubs, gate, _ = simulate(s, ticks=300, gpu=gpu, cfg=HorizonConfig(enabled=False))
    assert all(u == 0 for _, _, u in pubs) and gate.holds == 0 and gate.with_horizon == 0


def test_no_clock_reference_no_horizon(small_rom):
    s = package(small_rom, lambda t: 10.0)
    pubs, gate, _ = simulate(s, ticks=50, gpu=GPUS[0], cfg=ON, echo=False)
    assert all(u == 0 for _, _, u in pubs) and gate.holds == 0


def test_the_property_check_catches_an_early_change(small_rom):
    """The checker itself can fail: a gate that never holds (its deadline forgotten) lets a change through early."""
    gpu = GPUS[0]

    class Forgetful(HorizonGate):
        def offer(self, now, w, hint_ns):
            self.hold_until = 0
            return super().offer(now, w, hint_ns)

    s = package(small_rom, lambda t: 10.0)
    base = OperatorOverrideThermal(s)
    region = ControlRegion(name="hbf-horizon-test")
    try:
        clock, gate = SimClock(1_000 * MS), Forgetful(ON)
        region.ctl.activity.clock_echo_ns = gpu.at(clock.t)
        base.tick(0, 0.0)
        pubs = []
        for i in range(30):
            clock.t += 10 * MS
            if i == 20:
                base.set_override({"mode": "Severe"})
            st = base.tick(clock.t - 1_000 * MS, 0.0)
            off = publish_with_horizon(gate, region, st, i, 0, 4096, 0, ON.max_ns, clock=clock.now, sleep=clock.sleep)
            pubs.append((clock.t, words(region), off.valid_until_gpu_ns))
    finally:
        region.close()
    with pytest.raises(AssertionError, match="before the horizon"):
        assert_no_change_before_a_horizon(pubs, gpu)


# ---- the clock rule ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("drift_ppm", [-200.0, -120.0, 0.0, 80.0, 200.0])
def test_gpu_time_bound_never_exceeds_the_true_gpu_clock(drift_ppm):
    cfg = HorizonConfig(enabled=True)
    rng = random.Random(int(drift_ppm) + 7)
    for _ in range(2000):
        gpu = Gpu(rng.randrange(0, 10**16), drift_ppm)
        ref = GpuClockRef()
        t_write = rng.randrange(0, 10**12)
        t_read = t_write + rng.randrange(0, 20 * MS)       # the value lands, then hbfd reads it
        ref.observe(gpu.at(t_write), t_read)
        for _ in range(5):
            t = t_read + rng.choice([0, rng.randrange(0, 100 * MS), rng.randrange(0, 100_000 * MS)])
            assert ref.gpu_time_at(t, cfg) <= gpu.at(t)


def test_the_margin_is_what_makes_the_bound_hold():
    """Without the drift margin a slow GPU clock is overtaken: the rule's test can fail."""
    cfg = HorizonConfig(enabled=True, drift_ppm=0, margin_ns=0)
    gpu = Gpu(10**12, -200.0)
    ref = GpuClockRef()
    ref.observe(gpu.at(0), 0)
    assert ref.gpu_time_at(10_000 * MS, cfg) > gpu.at(10_000 * MS)


def test_the_reference_kept_is_the_highest_bound():
    ref = GpuClockRef()
    ref.observe(1000, 500)
    ref.observe(900, 600)          # an older write read later: a lower bound, not kept
    assert (ref.g, ref.t_read) == (1000, 500)
    ref.observe(0, 700)            # nothing written yet
    assert ref.observations == 2
    ref.observe(5000, 800)
    assert (ref.g, ref.t_read) == (5000, 800)


def test_policy_hint_uses_the_policy_scan():
    cfg = PolicyConfig(name="hysteresis", rtt_c=40.0, ltt_c=45.0, stt_c=50.0, shutdown_c=80.0, hysteresis_k=2.0,
                       light_q_ppm=500_000, min_dwell_ticks=5)
    p = make_policy(cfg)
    assert policy_hint_ticks(p, 44.0, 0.25) == 3       # 44 + 0.25 k reaches 45 at k = 4: three quiet ticks
    assert policy_hint_ticks(p, 30.0, 0.0) == 100      # flat and far: the cap of the scan
    p.mode = SEVERE
    assert policy_hint_ticks(p, 30.0, 0.0) == 0


def _table() -> None:
    """The scenarios' counts for docs/RESULTS.md (``PYTHONPATH=$PWD python tests/thermal/test_horizon.py``)."""
    import copy
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import SMALL

    from hbfd.thermal.fom import build_model
    from hbfd.thermal.geometry import as_geometry
    from hbfd.thermal.rom import fit_rom
    rom = fit_rom(build_model(as_geometry(copy.deepcopy(SMALL))), dt_s=0.01, hankel_blocks=60)

    def show(name, pubs, g, gpu):
        s = g.summary()
        ch = assert_no_change_before_a_horizon(pubs, gpu)
        print(f"{name}: ticks {len(pubs)} changes {ch} with_horizon {s['with_horizon']} "
              f"mean_ahead_ms {s['mean_ahead_ns'] / 1e6:.1f} held {s['held_changes']} "
              f"held_max_ms {s['held_ns_max'] / 1e6:.2f}")

    p, g, _ = simulate(package(rom, lambda t: 40.0 if (t // (3000 * MS)) % 2 == 0 else 0.0), ticks=800,
                       gpu=GPUS[1], cfg=ON)
    show("hysteresis 40W/0W 3s", p, g, GPUS[1])
    for pol in ("none", "hysteresis", "pi", "fixed-cap"):
        p, g, _ = simulate(package(rom, lambda t: 2000.0, pol), ticks=400, gpu=GPUS[1], cfg=ON)
        show(f"{pol} 2000W to Shutdown", p, g, GPUS[1])
        p, g, _ = simulate(package(rom, lambda t: 20.0 if t < 1500 * MS else 2000.0, pol), ticks=600, gpu=GPUS[2],
                           cfg=ON)
        show(f"{pol} 20W then 2000W step", p, g, GPUS[2])
    p, g, _ = simulate(package(rom, lambda t: min(60.0, 5.0 + t / (100 * MS)), "pi"), ticks=900, gpu=GPUS[2], cfg=ON)
    show("pi ramp", p, g, GPUS[2])
    rng = random.Random(4)
    steps = sorted(rng.sample(range(1, 600), 40))
    p, g, _ = simulate(package(rom, lambda t: 20.0), ticks=600, gpu=GPUS[3], cfg=ON,
                       debt=lambda i: 4096 * sum(1 for k in steps if k <= i), refresh_name="retention")
    show("debt accrual 40 steps", p, g, GPUS[3])
    ovs = {100: {"mode": "Light", "q_ppm": 400_000}, 180: {"mode": "Severe"}, 260: {"clear": True},
           330: {"mode": "Light", "q_ppm": 900_000}, 335: {"clear": True}}
    p, g, _ = simulate(OperatorOverrideThermal(package(rom, lambda t: 10.0)), ticks=420, gpu=GPUS[1], cfg=ON,
                       overrides=ovs)
    show("overrides", p, g, GPUS[1])
    p, g, _ = simulate(NoThermal(), ticks=20, gpu=GPUS[1], cfg=ON)
    show("none/none", p, g, GPUS[1])


if __name__ == "__main__":
    _table()
