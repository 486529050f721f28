"""The CPU-checkable parts of bench/thermal_calibrate.py (the GPU recording itself is not run in CI): the phase
plan, argument parsing and the split into device calls, and the fit on a saved recording."""
from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from hbfd.thermal import calibrate as cal

from tests.thermal.test_calibrate import PLAN, SYNTH, TRUE, _geometry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("thermal_calibrate_bench", ROOT / "bench/thermal_calibrate.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod                      # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_plan_meets_the_issue(bench):
    plan = bench.phase_plan()
    assert len(plan) >= 10 and all(p.seconds >= 60 for p in plan)
    kinds = {p.kind for p in plan}
    assert kinds == {"idle", "hbm", "gemm", "mixed"}
    assert len({p.hbm_duty for p in plan if p.kind == "hbm"}) >= 3        # HBM streaming at several rates
    assert len({p.gemm_duty for p in plan if p.kind == "gemm"}) >= 3      # GEMM at several duty cycles
    assert len({p.name for p in plan}) == len(plan)
    # the two documented device calls each fit the 10-minute limit; the whole plan in one call does not
    a, b = bench.parse_phases("0-5", len(plan)), bench.parse_phases("6-11", len(plan))
    assert sorted(a + b) == list(range(len(plan)))
    for idx in (a, b):                                    # at most 9 minutes each, the settle's cap included
        assert bench.check_call_time([plan[i] for i in idx], bench.SETTLE_CAP_S) <= 540
    with pytest.raises(SystemExit, match="split them"):
        bench.check_call_time(plan, bench.SETTLE_CAP_S)


@pytest.mark.parametrize("spec,want", [("0-5", [0, 1, 2, 3, 4, 5]), ("6-11", list(range(6, 12))),
                                       ("1,3, 5", [1, 3, 5]), ("all", list(range(12)))])
def test_parse_phases(bench, spec, want):
    assert bench.parse_phases(spec, 12) == want


@pytest.mark.parametrize("spec,msg", [("5-2", "not an index"), ("x", "not an index"), ("10-13", "outside")])
def test_parse_phases_refuses(bench, spec, msg):
    with pytest.raises(SystemExit, match=msg):
        bench.parse_phases(spec, 12)


def test_arguments(bench):
    p = bench.build_parser()
    a = p.parse_args(["--record", "/tmp/r", "--phases", "6-11", "--no-fit"])
    assert a.record == "/tmp/r" and a.phases == "6-11" and a.no_fit and a.sample_hz >= 10
    with pytest.raises(SystemExit):
        p.parse_args(["--phases", "0-5"])                     # neither --record nor --fit-only
    with pytest.raises(SystemExit):
        p.parse_args(["--record", "a", "--fit-only", "b"])    # both
    with pytest.raises(SystemExit, match="sample-hz"):
        bench.main(["--fit-only", "/nonexistent", "--sample-hz", "5"])


def test_fit_on_a_saved_recording(bench, tmp_path, capsys, caplog):
    """A recording written phase by phase as the GPU script writes it (two segments), fitted by --fit-only."""
    from hbfd.thermal.fom import build_model
    from hbfd.thermal.geometry import as_geometry
    from hbfd.thermal.rom import fit_rom
    gpath = tmp_path / "test-cal.json"
    g = _geometry()
    g["heat_sink"]["sink_capacitance_j_k"]["value"] = 3.0      # the file has a cold plate; the fit pins it
    gpath.write_text(json.dumps(g))
    pinned = fit_rom(build_model(cal.pinned_geometry(as_geometry(copy.deepcopy(g)))), dt_s=0.01, hankel_blocks=60)
    rec = cal.synthetic_recording(pinned, TRUE, PLAN, **SYNTH)
    # as the two device calls leave it: each call's $OUT holds its own phases (segment 0: 0-5, segment 1: 6-11)
    rdir, rdir2 = tmp_path / "rec", tmp_path / "rec2"
    for i, p in enumerate(rec.phases):
        cal.write_phase(rdir if p.segment == 0 else rdir2, i, p,
                        {"card": "synthetic", "driver": "model", "date": "2026-12-04", "synthetic": True})
    out = tmp_path / "cal.json"
    cache = ["--rom-cache", str(tmp_path / "roms")]
    with pytest.raises(cal.CalibrationError, match="at least 10"):        # one call's half alone
        bench.main(["--fit-only", str(rdir), "--geometry", str(gpath), "--out", str(out), *cache])
    # on the command line: one line naming the reason, exit 2, no traceback
    assert bench.cli(["--fit-only", str(rdir), "--geometry", str(gpath), "--out", str(out), *cache]) == 2
    assert "calibration refused: recording has 6 phases; calibration needs at least 10" in caplog.text
    bench.main(["--fit-only", str(rdir), str(rdir2), "--geometry", str(gpath), "--out", str(out), *cache])
    assert len(list((tmp_path / "roms").glob("*.npz"))) == 1
    d = json.loads(out.read_text())
    assert d["errors"]["goal"]["met"] is True
    assert abs(d["thermal"]["ambient_c"]["value"] - TRUE.coolant_c) < 0.1
    assert d["provenance"]["card"] == "synthetic"
    assert "goal met" in capsys.readouterr().out
    # a recording missing its last phases is refused by the fit (too few phases), with the reason
    # the same directory twice: refused (a phase in both)
    with pytest.raises(cal.CalibrationError, match="more than one"):
        bench.main(["--fit-only", str(rdir), str(rdir), "--geometry", str(gpath), "--out", str(out), *cache])


@pytest.mark.parametrize("argv,msg", [
    (["--record", "R", "--phase-s", "30"], "at least 60 s"),
    (["--record", "R", "--phases", "all"], "split them"),                # one call cannot hold the plan
    (["--record", "R", "--phases", "0-12"], "outside"),
    (["--record", "R", "--sample-hz", "500"], "only repeats"),
    (["--record", "R", "--skip-s", "70"], "skip-s"),
    (["--fit-only", "NOREC"], "no recording.json"),
    (["--fit-only", "NOREC", "--out", "/nonexistent/dir/cal.json"], "does not exist"),
])
def test_arguments_refused_before_any_gpu_time(bench, tmp_path, monkeypatch, argv, msg):
    """Every check runs before the preflight imports torch or touches NVML (this box has neither GPU nor NVML)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=msg):
        bench.main(argv)
