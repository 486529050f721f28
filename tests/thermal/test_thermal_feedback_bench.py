"""The CPU-checkable parts of bench/thermal_feedback.py (the feedback loop itself needs a GPU and is not run in
CI): the scenario's thresholds on the model's trajectory, the retention acceleration, the derived profile, and the
exactness decomposition of a kernel's modeled time."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fb():
    spec = importlib.util.spec_from_file_location("thermal_feedback_bench", ROOT / "bench/thermal_feedback.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_scenario_places_light_before_severe_and_lets_severe_clear(fb):
    sc = fb.scenario(gpu_w=150.0, hbf_w=40.0, ambient_c=35.0, light_at_s=2.0, severe_at_s=4.0)
    assert sc["idle_steady_c"] < sc["ltt_c"] - sc["hysteresis_k"] < sc["ltt_c"] < sc["stt_c"] < sc["shutdown_c"]
    assert sc["busy_steady_c"] > sc["stt_c"]                 # the kernel alone would pass Severe
    with pytest.raises(SystemExit, match="never clear"):
        fb.scenario(gpu_w=700.0, hbf_w=1.0, ambient_c=35.0, light_at_s=2.0, severe_at_s=4.0)


def test_retention_deadline_shortens_with_temperature(fb):
    a_t, cold_s = fb.retention_a_t(hot_c=60.0, cold_c=35.0, to_threshold_s=5.0, ea_ev=1.1, l_ref_h=2160, t_ref_c=40,
                                   threshold=0.7)
    assert a_t > 1e4 and cold_s > 10 * 5.0


def test_derived_profile_loads(fb, tmp_path):
    from hbfcommon.profile import load_profile
    sc = fb.scenario(gpu_w=150.0, hbf_w=40.0, ambient_c=35.0, light_at_s=2.0, severe_at_s=4.0)
    p = fb.derived(tmp_path / "p.json", gpu_w=150.0, energy_x=1000.0, sc=sc, a_t=5e4, fixed_read_ns=2000)
    prof = load_profile(str(p))
    assert prof.thermal.ltt_c == pytest.approx(sc["ltt_c"], abs=1e-3) and prof.thermal.telemetry == "constant"
    assert prof.energy.j_per_byte == pytest.approx(8.4e-8)
    assert json.loads(p.read_text())["timing_model"]["timing_source"] == "fixed"


def test_exact_decomposition(fb):
    s, r, qL = 2000, 240_000, 750_000
    # 100 requests: 30 plain in Light, 2 claims in Normal, 1 claim in Light
    mod = 67 * s + 30 * fb.ceil_scale(s, qL) + 2 * (s + r) + fb.ceil_scale(s + r, qL)
    d = fb.exact_decomposition(requests=100, modeled_ns=mod, claims=3, s=s, refresh_ns=r, q_light=qL)
    assert d == {"n_light_plain": 30, "claims_light": 1, "claims_normal": 2}
    # a request served at another q (or thermal service applied twice) leaves no exact split
    assert fb.exact_decomposition(requests=100, modeled_ns=mod + 7, claims=3, s=s, refresh_ns=r, q_light=qL) is None


@pytest.mark.parametrize("argv,msg", [
    (["--threads", "100"], "multiple of 32"),
    (["--light-at-s", "5", "--severe-at-s", "4"], "light-at-s"),
    (["--max-s", "900"], "max-s"),
    (["--iters", "1000"], "shorter than twice"),
    (["--hbf-w", "0"], "hbf-w"),
])
def test_arguments_refused_before_any_gpu_time(fb, argv, msg):
    with pytest.raises(SystemExit, match=msg):
        fb.main([*argv, "--plan-only"])


def test_partial_results_are_written_atomically(fb, tmp_path):
    res = {"scenario": {"ltt_c": 60.0}, "trace": [{"t_s": 0.1}]}
    p = fb.save(tmp_path, res, "kernel running (0.1 s)")
    d = json.loads(p.read_text())
    assert d["status"] == "kernel running (0.1 s)" and d["trace"] == [{"t_s": 0.1}]
    assert [f.name for f in tmp_path.iterdir()] == ["thermal_feedback.json"]      # no temp file left
