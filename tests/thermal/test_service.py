from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from hbfcommon.errors import TelemetryError
from hbfd.reliability.hazard import HazardSweep
from hbfd.reliability.ledger import BlockLedger, ReliabilityParams
from hbfd.reliability.refresh import RefreshScheduler
from hbfd.contracts import ThermalService
from hbfd.thermal.controller import PolicyConfig, make_policy
from hbfd.thermal.power import HbmPowerModel
from hbfd.thermal.service import PackageThermalService
from hbfd.thermal.simulate import Scenario, run_closed_loop
from hbfd.thermal.telemetry import ConstantSource, TelemetryGuard, TraceSource

MS = 1_000_000
TH = {"rtt": 40.0, "ltt": 45.0, "stt": 50.0, "shutdown": 80.0}


def cfg(name="hysteresis"):
    return PolicyConfig(name=name, rtt_c=40.0, ltt_c=45.0, stt_c=50.0, shutdown_c=80.0, hysteresis_k=2.0,
                        light_q_ppm=500_000, min_dwell_ticks=5)


def service(rom, source, policy="hysteresis"):
    rom.reset()
    return PackageThermalService(rom, make_policy(cfg(policy)), TelemetryGuard(source, 200 * MS), idle_w=1.0,
                                 hbm=HbmPowerModel(0.0, 0.0), hbm_traffic_bytes_per_s=0.0, thresholds=TH,
                                 sample_every_ticks=10)


SUMMARY_KEYS = {"thermal", "model", "policy", "telemetry", "samples", "transitions", "residency_ns", "seconds_above",
                "peak_c", "terminal_status", "media_energy_j", "model_ticks", "mode", "q_ppm"}


def test_service_ticks_conserve_energy_and_summarize(small_rom):
    s = service(small_rom, ConstantSource(20.0, 50.0))
    assert isinstance(s, ThermalService)
    st = s.tick(0, 0.0)                          # before readiness: a valid snapshot already
    assert st.q_ppm == 1_000_000 and st.admission_open
    now, e = 0, 0.0
    rng = np.random.default_rng(3)
    for _ in range(200):                         # irregular daemon ticks
        dt = int(rng.integers(3 * MS, 25 * MS))
        now += dt
        ej = 5.0 * dt / 1e9
        e += ej
        st = s.tick(now, ej)
    assert s.ticks == now // (10 * MS)
    # every joule handed in is binned (the tail bin is still open)
    assert s.hbf_energy_j == pytest.approx(e - s.binner._acc.get(s.binner.next_bin, np.zeros(1)).sum(), rel=1e-9)
    assert len(st.hbf_layers_c) == 1 and st.hbf_max_c > 30.0
    sec = s.summary_section()
    assert SUMMARY_KEYS <= set(sec)
    assert sec["terminal_status"] == "clean" and sec["telemetry"]["identity"] == "constant:20W:50C"
    assert sum(sec["residency_ns"].values()) == s.ticks * 10 * MS
    json.dumps(sec)                              # JSON-able as the daemon writes it


def test_stale_trace_ends_the_run_and_the_summary_says_so(small_rom, tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("t_ns,gpu_power_w,gpu_temp_c\n0,20,50\n100000000,20,50\n")
    src = TraceSource(p, hashlib.sha256(p.read_bytes()).hexdigest())
    s = service(small_rom, src)
    s.tick(0, 0.0)
    s.tick(250 * MS, 0.0)
    with pytest.raises(TelemetryError, match="stale"):
        s.tick(400 * MS, 0.0)
    sec = s.summary_section()
    assert sec["terminal_status"] == "source_failed"
    assert sec["telemetry"]["failure"]["kind"] == "stale"


def test_thermal_shutdown_is_terminal(small_rom):
    s = service(small_rom, ConstantSource(2000.0, 90.0), policy="none")
    s.tick(0, 0.0)
    for i in range(1, 3000):
        st = s.tick(i * 10 * MS, 0.0)
        if st.mode == 3:
            break
    assert st.mode == 3 and not st.admission_open
    assert s.summary_section()["terminal_status"] == "thermal_shutdown"


def _scenario(horizon):
    return Scenario(horizon_s=horizon, offered_read_bytes_per_s=384e9, media_bytes_per_s=384e9, idle_w=5.0,
                    j_per_byte=8.4e-11, read_j=0.0, program_j=1e-6, read_command_bytes=4096,
                    hbm=HbmPowerModel(0.0, 0.0), hbm_traffic_bytes_per_s=0.0, thresholds=TH, sample_period_s=1.0,
                    bandwidth_window_s=(5.0, 10.0), max_chunk_ticks=700)


@pytest.mark.parametrize("policy", ["none", "hysteresis", "hysteresis-early", "fixed-cap", "pi"])
def test_closed_loop_fast_path_equals_tick_by_tick(small_rom, policy):
    res = []
    for fast in (True, False):
        small_rom.reset()
        led = BlockLedger(ReliabilityParams(1.1, 0.002, 40.0, 1.0, 0.7, 10**9, 3000), channels=2,
                          dies_per_channel=1, layers=1, block_bytes=16 * 4096, pages_per_block=16)
        led.register(0, np.arange(32))
        res.append(run_closed_loop(small_rom, make_policy(cfg(policy)),
                                   TelemetryGuard(ConstantSource(60.0, 50.0), 200 * MS), _scenario(20.0),
                                   ledger=led, refresh=RefreshScheduler(led),
                                   hazard=HazardSweep(ea_min_ev=0.5, ea_max_ev=1.1, ea_step_ev=0.3, mtbf_ref_h=1e6,
                                                      t_ref_c=40.0), fast=fast))
    a, b = res
    assert a["transitions"] == b["transitions"]
    assert a["residency_ns"] == b["residency_ns"]
    assert a["application_bytes"] == pytest.approx(b["application_bytes"], rel=1e-12)
    assert a["refresh"]["completed_refresh_blocks"] == b["refresh"]["completed_refresh_blocks"]
    for k in a["final_temps_c"]:
        assert a["final_temps_c"][k] == pytest.approx(b["final_temps_c"][k], abs=1e-6)
    np.testing.assert_allclose([r["hazard"] for r in a["hazard_sweep"]], [r["hazard"] for r in b["hazard_sweep"]],
                               rtol=1e-9)
    assert a["slow_ticks"] < b["slow_ticks"]
    # stretches computed for nothing (h = 0): a stretch that ended where the decision changes is followed by that
    # tick step by step (hysteresis-type policies: none wasted; before, one per transition), and a policy whose
    # output moves every tick (PI) is tried again only after a doubling wait (before: on every slow tick, 91 here)
    wasted = a["stretch_evaluations"] - a["chunks"]
    assert wasted <= 2 + a["slow_ticks"] // 64
    if policy != "pi":
        assert wasted <= 2
    if policy != "none":
        assert a["transitions"], "the scenario is hot enough to throttle"


def test_daemon_plugins_build_from_a_shipped_profile():
    from hbfcommon.profile import load_profile
    from hbfd.reliability import make_refresh_service
    from hbfd.contracts import RefreshService
    from hbfd.thermal import make_service
    p = load_profile("ocp-sg1")
    th = make_service(p)                            # committed ROM, declared constant telemetry
    rf = make_refresh_service(p)
    assert isinstance(th, ThermalService) and isinstance(rf, RefreshService)
    st = th.tick(0, 0.0)
    assert rf.tick(0, st) == 0
    for i in range(1, 21):
        st = th.tick(i * 10 * MS, 0.3)
        debt = rf.tick(i * 10 * MS, st)
    assert th.ticks == 20 and st.hbf_max_c > p.thermal.ambient_c and debt == 0
    sec = {"thermal": th.summary_section(), "refresh": rf.summary_section()}
    json.dumps(sec)
    assert sec["thermal"]["telemetry"]["kind"] == "constant"
    assert sec["refresh"]["ledger"]["registered_blocks"] > 0 and sec["refresh"]["hazard_sweep"]


def test_profile_without_declared_telemetry_is_refused():
    import dataclasses

    from hbfcommon.errors import ConfigError
    from hbfcommon.profile import load_profile
    from hbfd.thermal import make_service
    p = load_profile("ocp-sg1")
    p2 = dataclasses.replace(p, thermal=dataclasses.replace(p.thermal, telemetry=None))
    with pytest.raises(ConfigError, match="declares no thermal telemetry"):
        make_service(p2)


def test_validate_cli_on_a_small_geometry(tmp_path, capsys, small_geometry_dict):
    from hbfd.thermal.validate import main
    g = tmp_path / "g.json"
    g.write_text(json.dumps(small_geometry_dict))
    assert main(["--geometry", str(g), "--seconds", "3", "--hankel-blocks", "40", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["pass"] and res["worst_error_k"] <= 0.02 and len(res["traces"]) == 3
    assert res["python_control"]["max_markov_diff_k_per_w"] < 1e-9


def test_sensor_error_against_a_measuring_source(small_rom, tmp_path):
    """With telemetry that measures (a trace, NVML), the summary gives modeled minus measured per sensor over every
    model tick (how far the boundary in force is from the card); a constant source's temperature is declared, so
    none is computed."""
    rows = "\n".join(f"{k * 50 * MS},20,{50 + (k % 2)},40" for k in range(40))
    p = tmp_path / "t.csv"
    p.write_text("t_ns,gpu_power_w,gpu_temp_c,hbm_temp_c\n" + rows + "\n")
    s = service(small_rom, TraceSource(p, hashlib.sha256(p.read_bytes()).hexdigest()))
    s.tick(0, 0.0)
    modeled, measured = [], []
    for k in range(1, 151):
        s.tick(k * 10 * MS, 0.0)
        modeled.append(s._state.gpu_c)
        measured.append(s.telemetry.read(k * 10 * MS).gpu_temp_c)
    err = np.array(modeled) - np.array(measured)
    se = s.summary_section()["sensor_error"]
    assert se["gpu"]["samples"] == 150 and se["hbm"] is None          # the test package has no HBM output
    assert se["gpu"]["bias_k"] == pytest.approx(err.mean(), abs=1e-9)
    assert se["gpu"]["rms_k"] == pytest.approx(np.sqrt((err ** 2).mean()), abs=1e-9)
    assert se["gpu"]["max_abs_k"] == pytest.approx(np.abs(err).max(), abs=1e-9)
    c = service(small_rom, ConstantSource(20.0, 50.0))
    c.tick(0, 0.0)
    c.tick(100 * MS, 0.0)
    assert "declared" in c.summary_section()["sensor_error"]
