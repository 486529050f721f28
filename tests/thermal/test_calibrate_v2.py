"""The thermal recorder v2 (bench/thermal_calibrate.py) and what the fit does with it, on the CPU: the energy counter
(mean power per interval, hbfd/thermal/calibrate.energy_power), the dithered load windows, the settle to a temperature
slope, the sampler and the recorder with stand-ins for NVML and the GPU kernels, a simulated v2 recording fitted
(energy vs instantaneous readings, a split per load kind), the fast-step check, and that v1 recordings are unchanged."""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hbfd.thermal import calibrate as cal

from tests.thermal.test_calibrate_bench import bench  # noqa: F401 -- the module fixture

ROOT = Path(__file__).resolve().parents[2]
# the simulated v2 recordings run on the real 8-high package (its pinned ROM is committed), as --synthetic does
# with H200-like powers: the 12 x 8 mm test package's die responds to the loads' 10 ms ripple far more than a
# real package
REAL = "hbf-package-8hi"


# ------------------------------------------------------------------------------------------------ energy counter
def _counter(t_s, watts, update_s, offset_s=0.013, start_mj=5e8):
    """An integer-mJ counter of a constant power that advances only every update_s."""
    upd = np.floor((t_s - offset_s) / update_s) * update_s + offset_s
    return start_mj + np.floor(np.clip(upd, 0, None) * watts * 1e3)


def test_energy_power_is_the_mean_power_whatever_the_counter_steps():
    t_s = np.arange(1200) / 20.0
    t = (1_000_000_000 + t_s * 1e9).astype(np.int64)
    for upd in (0.001, 0.02, 0.033, 0.1):
        p = cal.energy_power(t, _counter(t_s, 450.0, upd))
        # a counter advancing in steps of 33 ms read at 20 Hz: per-interval differences would be off by a step
        # (up to 66 %); 1 s spans with knots fitted through all readings keep every span within 1 %
        assert np.abs(p[40:-40] - 450.0).max() < 4.5, (upd, np.abs(p[40:-40] - 450).max())


def test_energy_power_keeps_a_step_at_a_break():
    """A load switched just after sample k: the interval from k on is the new load's; a span starts at k."""
    t_s = np.arange(400) / 20.0
    t = (t_s * 1e9).astype(np.int64) + 10
    k = 189                                                # mid-way between two 1 s knots
    sw = t_s[k] + 0.01                                     # the switch, 10 ms after sample k
    e = 1e6 + 1e3 * np.where(t_s < sw, 100.0 * t_s, 100.0 * sw + 600.0 * (t_s - sw))
    p = cal.energy_power(t, e, breaks=[k])
    assert np.abs(p[:k - 10] - 100.0).max() < 2.0
    assert np.abs(p[k + 1:] - 600.0).max() < 6.0            # 1 %: the knot at k is 10 ms before the kink
    assert abs(p[k] - 600.0) < 10.0                        # the straddling interval (40 of its 50 ms new) starts it
    smeared = cal.energy_power(t, e)                       # without the break a merged span mixes the two
    assert np.abs(smeared[k - 9:k + 10] - np.where(np.arange(k - 9, k + 10) <= k, 100, 600)).max() > 100


@pytest.mark.parametrize("edit,msg", [
    (lambda e: e.__setitem__(30, e[29] - 5), "goes back"),
    (lambda e: e.__setitem__(slice(None), 7.0), "never advances"),
    (lambda e: e.__setitem__(40, np.nan), "energy_mj at sample 40"),
    (lambda e: e.__setitem__(slice(100, None), e[100:] + 1e9), "must be in"),
])
def test_energy_power_refuses(edit, msg):
    t = (np.arange(200) * 50_000_000).astype(np.int64)
    e = 1e6 + np.arange(200) * 10_000.0
    edit(e)
    with pytest.raises(cal.CalibrationError, match=msg):
        cal.energy_power(t, e)


# ------------------------------------------------------------------------------------------------ the load
def test_duty_schedule_follows_the_duty_in_short_random_windows(bench):
    for gd, hd in ((0.25, 0.0), (0.5, 0.5), (0.75, 0.0), (0.0, 1.0)):
        s = bench.DutySchedule(gd, hd, 2.0e-4, 1.7e-4, seed=3)
        rows = np.array([s.next() for _ in range(5000)])
        w = rows[:, 0]
        assert w.min() >= bench.DUTY_WINDOW_S[0] and w.max() <= bench.DUTY_WINDOW_S[1]
        assert len(np.unique(np.round(w, 9))) > 4900          # random: not commensurate with any sampling
        for duty, n, ks in ((gd, rows[:, 1], 2.0e-4), (hd, rows[:, 2], 1.7e-4)):
            busy = n.sum() * ks / w.sum()
            if duty < 1:
                assert busy == pytest.approx(duty, abs=0.002), (gd, hd, busy)
            else:
                assert (n * ks >= w).all()                  # back to back
    with pytest.raises(ValueError):
        bench.DutySchedule(1.5, 0, 1e-4, 1e-4)


class FakeKernels:
    """GEMMs and copies that take their time on a host clock (what sync waits for)."""

    def __init__(self, gemm_s=2.0e-4, copy_s=1.7e-4):
        self.s = (gemm_s, copy_s)
        self.pending = 0.0
        self.calls = {"gemm": 0, "copy": 0}

    def time(self):
        return self.s

    def gemm(self, k):
        self.calls["gemm"] += k
        self.pending = max(self.pending, k * self.s[0])

    def copy(self, k):
        self.calls["copy"] += k
        self.pending = max(self.pending, k * self.s[1])

    def sync(self):
        time.sleep(self.pending)
        self.pending = 0.0


def test_load_runs_the_duty_until_the_switch(bench):
    load = bench.Load(FakeKernels())
    ph = bench.PlannedPhase("gemm_50", "gemm", 0.5, 0.0, 1.0)
    until = time.monotonic_ns() + 300_000_000
    got = load.run(ph, until_ns=until)
    end = time.monotonic_ns()
    assert end >= until                                     # never returns before the switch
    assert end - until < 50_000_000                         # the last window is cut there (a window is 2-5 ms;
                                                            # the slack is a loaded CI machine's sleep overshoot)
    assert got["windows"] > 30 and got["gemms"] > 0 and got["copies"] == 0
    assert 0.3 < got["busy_share"] < 0.75                   # host-clock stand-in: sleeps overshoot a little
    t0 = time.monotonic()
    assert load.run(bench.PlannedPhase("idle", "idle", 0, 0, 1.0), 0.05)["windows"] == 0
    assert time.monotonic() - t0 >= 0.05


# ------------------------------------------------------------------------------------------------ NVML stand-in
class FakeNvml:
    """pynvml's surface the sampler uses: constant power, a temperature from a callable, an energy counter."""
    NVML_SUCCESS = 0
    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_FI_DEV_MEMORY_TEMP = 82
    NVML_TEMPERATURE_GPU = 0
    NVML_VALUE_TYPE_DOUBLE = 0
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4

    def __init__(self, watts=300.0, temp=lambda t: 40.0, energy=True):
        self.watts, self.temp, self.energy = watts, temp, energy
        self.t0 = time.monotonic()

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"Fake H200"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-fake"

    def nvmlSystemGetDriverVersion(self):
        return "999.1"

    def nvmlDeviceGetFieldValues(self, h, fields):
        def fv(v):
            return SimpleNamespace(nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=v))
        return [fv(int(self.watts * 1000)), fv(55)]

    def nvmlDeviceGetTemperature(self, h, what):
        return self.temp(time.monotonic() - self.t0)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.energy:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return int(1e6 + (time.monotonic() - self.t0) * self.watts * 1e3)


def test_sampler_reads_the_energy_counter_and_switches_after_a_sample(bench):
    s = bench.NvmlSampler(0, 50.0, nvml=FakeNvml())
    s.start()
    time.sleep(0.3)
    sw = s.switch_time(time.monotonic_ns())
    s.stop_evt.set()
    s.join(1)
    a = s.take(0, 2 ** 62)
    assert a.shape[1] == 5 and len(a) >= 10 and s.error is None
    assert np.all(np.diff(a[:, 4]) >= 0)
    w = np.diff(a[:, 4]) * 1e-3 / (np.diff(a[:, 0]) * 1e-9)
    assert np.median(w) == pytest.approx(300.0, rel=0.05)
    assert (sw - s.grid0_ns) % s.period_ns == int(bench.SWITCH_AFTER_SAMPLE_S * 1e9)


def test_preflight_refuses_a_card_without_the_energy_counter(bench):
    with pytest.raises(SystemExit, match="energy counter"):
        bench.preflight(0, nvml=FakeNvml(energy=False), load_factory=lambda: bench.Load(FakeKernels()))
    got = bench.preflight(0, nvml=FakeNvml(), load_factory=lambda: bench.Load(FakeKernels()))
    assert got["card"] == "Fake H200" and got["gemms"] > 0 and got["copies"] > 0
    assert got["energy_power_w_over_0.25s"] == pytest.approx(300.0, rel=0.1)


# ------------------------------------------------------------------------------------------------ settle
class ClockedSampler:
    """A sampler on a simulated clock: the GPU temperature relaxes to `final` with time constant tau."""

    def __init__(self, tau, start=60.0, final=40.0, hz=20.0):
        self.now = 0
        self.rows = []
        self.tau, self.start, self.final, self.hz = tau, start, final, hz

    def clock(self):
        return self.now

    def run_for(self, s):
        for _ in range(int(round(s * self.hz))):
            self.now += int(1e9 / self.hz)
            x = self.now / 1e9
            temp = round(self.final + (self.start - self.final) * math.exp(-x / self.tau))
            self.rows.append((self.now, 200.0, temp, math.nan, 0.0))

    def take(self, t0, t1):
        return np.array([r for r in self.rows if t0 <= r[0] < t1], float).reshape(-1, 5)


@pytest.mark.parametrize("tau,converged,lo,hi", [(10.0, True, 60, 120), (600.0, False, 120, 126)])
def test_settle_waits_for_a_small_slope_with_a_cap(bench, tau, converged, lo, hi):
    smp = ClockedSampler(tau)
    st = bench.settle(smp, smp.run_for, cap_s=120.0, window_s=60.0, max_slope_k_min=1.0, min_s=60.0,
                      clock=smp.clock)
    assert st["converged"] is converged
    assert lo <= st["seconds"] <= hi, st
    assert st["gpu_temp_c_start"] >= st["gpu_temp_c_end"]
    if converged:
        assert abs(st["gpu_slope_k_min"]) <= 1.0
        assert st["gpu_temp_c_end"] - 40.0 <= 1.0           # near the steady state the fit assumes
    else:
        assert abs(st["gpu_slope_k_min"]) > 1.0


def test_settle_capped_before_its_window_says_so_in_strict_json(bench):
    smp = ClockedSampler(20.0)
    st = bench.settle(smp, smp.run_for, cap_s=10.0, window_s=60.0, max_slope_k_min=1.0, min_s=10.0, clock=smp.clock)
    assert st["converged"] is False and st["gpu_slope_k_min"] is None and 10.0 <= st["seconds"] < 15.0
    json.dumps(st, allow_nan=False)


# ------------------------------------------------------------------------------------------------ the recorder
def test_record_writes_energy_and_the_settle_with_stand_ins(bench, tmp_path):
    """The whole recording path with NVML and the kernels stood in (short phases: the CPU cannot wait minutes)."""
    plan = bench.phase_plan(0.4)
    args = argparse.Namespace(record=str(tmp_path / "rec"), settle_cap_s=0.5, settle_window_s=0.3,
                              settle_slope_k_min=0.3, sample_hz=50.0, device=0)
    nv = FakeNvml(temp=lambda t: 45.0)
    d = bench.record(args, plan, [0, 1, 2], nvml=nv, load=bench.Load(FakeKernels()))
    doc = json.loads((d / "recording.json").read_text())
    assert doc["card"] == "Fake H200" and doc["recorder"] == bench.RECORDER
    assert [q["name"] for q in doc["phases"]] == ["idle", "hbm_25", "gemm_25"]
    assert doc["phases"][0]["target"]["settle"]["converged"] is True
    assert "settle" not in doc["phases"][1]["target"]
    assert doc["phases"][2]["target"]["gemms"] > 0 and doc["phases"][1]["target"]["copies"] > 0
    rec = cal.load_recording(d)
    assert rec.has_energy and all(p.segment == 0 for p in rec.phases)
    for a, b in zip(rec.phases, rec.phases[1:]):           # back to back: one sample period apart
        assert 0 < b.t_ns[0] - a.t_ns[-1] <= 2 * 1e9 / 50.0
    for p in rec.phases:
        assert p.seconds >= 0.4 - 1e-3
        w = cal.energy_power(p.t_ns, p.energy_mj, min_span_s=0.1)
        assert np.median(w) == pytest.approx(300.0, rel=0.05)
    with pytest.raises(SystemExit, match="split them"):
        bench.check_call_time(bench.phase_plan(), bench.SETTLE_CAP_S)


def test_plan_v2_holds_out_one_phase_of_each_kind_and_fits_two_calls(bench):
    plan = bench.phase_plan()
    held = [i for i in range(len(plan)) if i % 3 == 2]
    assert sorted(plan[i].kind for i in held) == ["gemm", "hbm", "idle", "mixed"]
    for kind in ("idle", "hbm", "gemm"):
        assert sum(1 for i, p in enumerate(plan) if p.kind == kind and i not in held) >= 2
    for idx in ("0-5", "6-11"):
        need = bench.check_call_time([plan[i] for i in bench.parse_phases(idx, 12)], bench.SETTLE_CAP_S)
        assert need <= 540                                  # 9 minutes, settle cap included


@pytest.mark.parametrize("argv,msg", [
    (["--record", "R", "--phases", "0-5", "--settle-cap-s", "400"], "settle-cap-s"),
    (["--record", "R", "--phases", "0-5", "--settle-cap-s", "250"], "split them"),
    (["--record", "R", "--phases", "0-5", "--settle-slope-k-min", "0"], "settle-slope"),
    (["--record", "R", "--phases", "0-5", "--settle-window-s", "2"], "settle-window"),
    (["--fit-only", "NOREC", "--split-kinds", "idle"], "split-kinds"),
])
def test_v2_arguments_refused_before_any_gpu_time(bench, tmp_path, monkeypatch, argv, msg):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=msg):
        bench.main(argv)


# ------------------------------------------------------------------------------------------------ simulated v2
@pytest.fixture(scope="module")
def real(bench):
    return bench.pinned_rom(REAL, None)[0]


@pytest.fixture(scope="module")
def v2rec(bench, real):
    return bench.simulate_recording(real, bench.SYNTH_TRUE, bench.phase_plan(), sample_hz=20.0, seed=5)


def test_simulated_v2_recording_is_valid(v2rec):
    cal.validate_recording(v2rec)
    assert v2rec.has_energy and v2rec.synthetic
    assert [p.segment for p in v2rec.phases] == [0] * 6 + [6] * 6


def test_energy_counter_fit_recovers_what_the_readings_cannot(bench, real, v2rec):
    """Loads switched in 2-5 ms windows: the instantaneous readings at 20 Hz are random on/off samples (the
    package never saw them); the energy counter's mean power gives back the boundary and meets the goal."""
    TRUE2 = bench.SYNTH_TRUE
    res = cal.fit(cal.CalibratedModel(real, v2rec))
    got = res["params"]
    assert res["power_from"] == "energy_counter"
    assert res["goal"]["met"], res["goal"]
    assert abs(got.coolant_c - TRUE2.coolant_c) < 0.2
    assert got.sink_to_ambient_k_w == pytest.approx(TRUE2.sink_to_ambient_k_w, rel=0.05)
    assert got.sink_tau_s == pytest.approx(TRUE2.sink_tau_s, rel=0.08)
    assert got.die_fraction == pytest.approx(TRUE2.die_fraction, rel=0.03)
    raw = cal.fit(cal.CalibratedModel(real, v2rec, use_energy=False))
    assert raw["power_from"] == "readings"
    assert not raw["goal"]["met"] and raw["goal"]["worst_rms_k"] > 2 * res["goal"]["worst_rms_k"]
    # the fast-step check: at each large phase boundary the sensor's first 0.1 s asks for about the true die share
    asked = [r["die_share_asked"] for r in res["fast_steps"] if "die_share_asked" in r]
    assert len(asked) >= 3
    assert np.median(asked) == pytest.approx(TRUE2.die_fraction, rel=0.15)


def test_split_per_load_kind(bench, real, tmp_path):
    """Streaming phases that split their power their own way: the fit with --split-kinds hbm recovers both splits
    and meets the goal, the shared split misses it; hbfd refuses the per-kind fragment; a split whose phases are all
    held out is refused."""
    TRUE2 = bench.SYNTH_TRUE
    true = replace(TRUE2, kind_split=(("hbm", 0.5, 0.25),))
    rec = bench.simulate_recording(real, true, bench.phase_plan(), sample_hz=20.0, seed=6)
    res = cal.fit(cal.CalibratedModel(real, rec, split_kinds=["hbm"]))
    assert res["goal"]["met"], res["goal"]
    _, fd, fh = res["params"].kind_split[0]
    assert fd == pytest.approx(0.5, rel=0.05) and fh == pytest.approx(0.25, rel=0.05)
    assert res["params"].die_fraction == pytest.approx(TRUE2.die_fraction, rel=0.03)
    assert set(res["std_error"]) >= {"die_fraction@hbm", "hbm_fraction@hbm"}
    shared = cal.fit(cal.CalibratedModel(real, rec))
    assert shared["goal"]["worst_rms_k"] > 1.5 * res["goal"]["worst_rms_k"]
    from hbfd.thermal.geometry import load_geometry
    geom = load_geometry(REAL)
    frag = cal.fragment(res, rec, geom, fitted_on="2026-12-05")
    assert set(frag["power_split"]["by_kind"]["hbm"]) == {"die_fraction", "hbm_fraction"}
    p = cal.write_fragment(tmp_path / "k.json", frag)
    with pytest.raises(cal.CalibrationError, match="per load kind") as e:
        cal.load_fragment(p, geom)
    assert e.value.fields["reason"] == "power_split"
    hbm = [i for i, q in enumerate(rec.phases) if q.kind == "hbm"]
    with pytest.raises(cal.CalibrationError, match="every 'hbm' phase is held out"):
        cal.fit(cal.CalibratedModel(real, rec, split_kinds=["hbm"]), holdout=hbm)
    with pytest.raises(cal.CalibrationError, match="no phase of that kind"):
        cal.CalibratedModel(real, rec, split_kinds=["nosuch"])


def test_energy_column_roundtrip_and_mixed_presence(tmp_path, v2rec):
    for i, p in enumerate(v2rec.phases):
        cal.write_phase(tmp_path, i, p, {"card": v2rec.card, "driver": v2rec.driver, "date": v2rec.date,
                                         "synthetic": True})
    back = cal.load_recording(tmp_path)
    assert back.has_energy and back.sha256() == v2rec.sha256()
    assert np.array_equal(back.phases[3].energy_mj, v2rec.phases[3].energy_mj)
    assert (tmp_path / "phase_00_idle.csv").read_text().splitlines()[0].endswith(",energy_mj")
    back.phases[4].energy_mj = None
    with pytest.raises(cal.CalibrationError, match="energy counter"):
        cal.validate_recording(back)


def test_v1_recording_is_read_and_fitted_as_before(bench):
    """The H100 recording of 2026-12-05 (v1: no energy counter): same SHA-256 as its fragment, aliased phases held
    at their mean, the same held-out error as the committed fragment."""
    base = ROOT / "bench/results/thermal_calibration_rec_h100_r1"
    rec = bench.load_joined([str(base / "rec_0-5"), str(base / "rec_6-11")])
    frag = json.loads((ROOT / "bench/results/thermal_calibration_h100_r1.json").read_text())
    assert not rec.has_energy
    assert rec.sha256() == frag["provenance"]["recording_sha256"]
    assert cal.aliased_duty_phases(rec, bench.LEGACY_DUTY_WINDOW_S) == [1, 2, 3, 4, 5, 8]


def test_free_start_takes_up_a_call_that_starts_off_its_steady_state(bench, real):
    """The second call's cold plate 4 K above the steady state of its first phase (what a capped settle leaves): the
    free start recovers the offset and the coolant; v1's fixed start biases the coolant."""
    true = replace(bench.SYNTH_TRUE, sink_start_k=(0.0, 4.0))
    rec = bench.simulate_recording(real, true, bench.phase_plan(), sample_hz=20.0, seed=9)
    res = cal.fit(cal.CalibratedModel(real, rec, free_start=True))
    got = res["params"]
    assert got.sink_start_k[1] == pytest.approx(4.0, abs=0.3) and abs(got.sink_start_k[0]) < 0.3
    assert list(res["sink_start_k"]) == ["sink_start_k@idle", "sink_start_k@idle_2"]
    assert res["goal"]["met"] and abs(got.coolant_c - true.coolant_c) < 0.1
    fixed = cal.fit(cal.CalibratedModel(real, rec))
    assert fixed["params"].sink_start_k == ()
    assert abs(fixed["params"].coolant_c - true.coolant_c) > 2 * abs(got.coolant_c - true.coolant_c)
    with pytest.raises(cal.CalibrationError, match="sink start offsets"):
        cal.CalibratedModel(real, rec, free_start=True).predict(bench.SYNTH_TRUE)
