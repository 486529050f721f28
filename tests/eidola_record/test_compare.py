"""compare.py metrics on synthetic real/replay pairs with known, constructed differences."""
from __future__ import annotations

import copy
import json
import random

import pytest

from hbfcommon.errors import TraceError
from eidola.compare import (compare_observations, compare_runs, ks_2samp, load_observations,
                                 main, percentile, predict_perturbation, report_markdown,
                                 variability, write_report)
from eidola.from_recording import observations_from_recording

from synth_recording import SynthConfig, make_recording


def obs(kernel_ns=10_000, seen=(), waits=(), sha="ab" * 32, flag_reads=100, nonflag=5000, run=0,
        source="real"):
    return {"format": "hbfsim.eidola.observation", "version": 1, "source": source,
            "engine": "nvlink" if source == "real" else "virtual_loads", "target": 0, "n_gpus": 4,
            "run": run, "kernel_ns": kernel_ns, "output_sha256": sha, "flag_reads": flag_reads,
            "nonflag_reads": nonflag,
            "flags": [{"src": 1 + i % 3, "buffer": "flags", "offset": 4 * i, "seq": 1, "seen_ns": s,
                       "polls": 3} for i, s in enumerate(seen)],
            "workgroups": [{"wg": i, "start_ns": 0, "end_ns": kernel_ns, "wait_ns": w}
                           for i, w in enumerate(waits)]}


def test_ks_distance_exact_cases_and_matches_scipy():
    assert ks_2samp([1, 2, 3, 4], [3, 4, 5, 6])["d"] == pytest.approx(0.5)
    assert ks_2samp([1, 2, 3], [1, 2, 3])["d"] == 0.0
    assert ks_2samp([1, 2], [10, 20, 30])["d"] == 1.0
    # ties across samples
    assert ks_2samp([1, 1, 2, 2], [1, 2, 2, 2])["d"] == pytest.approx(0.25)
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(0)
    for _ in range(20):
        a = [rng.randint(0, 50) for _ in range(rng.randint(1, 40))]
        b = [rng.randint(10, 70) for _ in range(rng.randint(1, 40))]
        assert ks_2samp(a, b)["d"] == pytest.approx(scipy_stats.ks_2samp(a, b).statistic)
    with pytest.raises(TraceError):
        ks_2samp([], [1])


def test_percentile_nearest_rank():
    xs = list(range(1, 101))
    assert percentile(xs, 99) == 99 and percentile(xs, 50) == 50 and percentile(xs, 100) == 100
    assert percentile([5], 99) == 5
    assert percentile([3, 1, 2], 0) == 1


def test_pair_metrics_are_exactly_the_constructed_differences():
    real_seen = [1000 + 100 * i for i in range(100)]
    errs = [(-1) ** i * (i + 1) for i in range(100)]       # |err| = 1..100
    real = obs(kernel_ns=20_000, seen=real_seen, waits=[100, 200, 300, 400], flag_reads=1000)
    rep = obs(kernel_ns=20_300, seen=[s + e for s, e in zip(real_seen, errs)],
              waits=[300, 400, 500, 600], flag_reads=1030, source="replay")
    c = compare_observations(real, rep)
    assert c["output"]["bit_identical"] and c["output"]["status"] == "equal"
    assert c["kernel_time"]["error_ns"] == 300
    assert c["kernel_time"]["rel_error"] == pytest.approx(0.015)
    assert c["kernel_time"]["pass"]
    fs = c["flag_seen"]
    assert fs["matched"] == 100 and fs["only_real"] == 0 and fs["only_replay"] == 0
    assert fs["median_abs_ns"] == pytest.approx(50.5)
    assert fs["p99_abs_ns"] == 99
    assert fs["max_abs_ns"] == 100
    assert c["wg_wait"]["ks"]["d"] == pytest.approx(0.5)
    assert c["flag_reads"]["error"] == 30 and c["flag_reads"]["rel_error"] == pytest.approx(0.03)
    assert c["nonflag_reads"]["equal"]
    assert all(c["pass"].values())


def test_failures_are_reported_not_hidden():
    real = obs(kernel_ns=10_000, seen=[1, 2])
    rep = obs(kernel_ns=10_500, seen=[1], sha="cd" * 32, nonflag=5001, source="replay")
    c = compare_observations(real, rep)
    assert not c["output"]["bit_identical"] and c["output"]["status"] == "differ"
    assert not c["kernel_time"]["pass"]                    # 5% > 2%
    assert not c["nonflag_reads"]["equal"]
    assert c["flag_seen"]["only_real"] == 1
    # a missing hash is a failure, not a pass
    rep2 = obs(kernel_ns=10_000, sha=None, source="replay")
    c2 = compare_observations(real, rep2)
    assert c2["output"]["status"] == "missing" and not c2["output"]["bit_identical"]


def test_variability_ks_medians_spreads():
    real = list(range(1000, 1100))
    rep = [x + 50 for x in real]
    v = variability(real, rep)
    assert v["ks"]["d"] == pytest.approx(0.5)
    assert v["replay"]["median"] - v["real"]["median"] == pytest.approx(50)
    assert v["iqr_ratio"] == pytest.approx(1.0)
    wide = [1000 + 2 * (x - 1000) for x in real]
    assert variability(real, wide)["iqr_ratio"] == pytest.approx(2.0, rel=0.05)


def test_compare_runs_pairs_by_run_and_summarizes():
    reals = [obs(kernel_ns=10_000 + 10 * k, run=k, waits=[1, 2, 3]) for k in range(10)]
    reps = [obs(kernel_ns=10_000 + 10 * k + 100, run=k, waits=[1, 2, 3], source="replay")
            for k in reversed(range(10))]
    rep = compare_runs(reals, reps)
    s = rep["summary"]
    assert s["pairs"] == 10 and s["bit_identical_all"] and s["nonflag_reads_equal_all"]
    assert s["kernel_rel_error"]["within_goal"] == 10 and s["pass"]
    assert all(p["kernel_time"]["error_ns"] == 100 for p in rep["pairs"])
    md = report_markdown(rep)
    assert md.count("\n| ") >= 10 and "KS distance" in md
    with pytest.raises(TraceError):
        compare_runs(reals, [obs(run=99, source="replay")])


def test_perturbation_open_loop_diverges_with_slowdown():
    cfg = SynthConfig(n_gpus=4, blocks=6, runs=4, seed=12, poll_ns=10, local_ns=(100, 300),
                      launch_gap_ns=500)
    rec, _ = make_recording(cfg)
    p = predict_perturbation(rec, target=1, slowdowns=(0.0, 0.05, 0.10, 0.20))
    assert p["model_fit"]["max_abs_residual_ns"] <= cfg.poll_ns
    rows = {r["slowdown"]: r for r in p["rows"]}
    assert max(abs(x) for x in rows[0.0]["divergence_ns"]) <= cfg.poll_ns
    # the first launch has no feedback through the peers: open loop is exact there
    assert all(abs(r["divergence_ns"][0]) <= cfg.poll_ns for r in p["rows"])
    # later launches diverge, more with more slowdown
    assert rows[0.20]["max_abs_divergence_rel"] > rows[0.05]["max_abs_divergence_rel"] > 0
    assert p["monotone_in_slowdown"]
    # closed-loop target kernel time grows with slowdown
    assert rows[0.20]["closed_kernel_ns"][0] > rows[0.0]["closed_kernel_ns"][0]


def test_cli_round_trip(tmp_path, capsys):
    rec, _ = make_recording(SynthConfig(n_gpus=2, blocks=4, runs=3))
    reals = observations_from_recording(rec, 0)
    reps = copy.deepcopy(reals)
    for o in reps:
        o["source"], o["engine"] = "replay", "eidolon_kernel"
        o["kernel_ns"] += 50
    (tmp_path / "real.json").write_text(json.dumps(reals))
    (tmp_path / "replay.json").write_text(json.dumps({"format": "hbfsim.eidola.observation_set",
                                                      "runs": reps}))
    rc = main([str(tmp_path / "real.json"), str(tmp_path / "replay.json"), "--json",
               "--out", str(tmp_path / "r.json"), "--md", str(tmp_path / "r.md")])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["summary"]["pairs"] == 3
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["pairs"] == 3
    assert "bit-identical" in (tmp_path / "r.md").read_text()
    assert len(load_observations(tmp_path / "replay.json")) == 3
    # strict mode fails on a non-identical output
    reps[0]["output_sha256"] = "00" * 32
    (tmp_path / "replay.json").write_text(json.dumps(reps))
    assert main([str(tmp_path / "real.json"), str(tmp_path / "replay.json"), "--strict"]) == 1
    (tmp_path / "bad.json").write_text(json.dumps({"format": "nope"}))
    assert main([str(tmp_path / "real.json"), str(tmp_path / "bad.json")]) == 2
    write_report(printed, md_path=tmp_path / "x.md")
    assert (tmp_path / "x.md").exists()
