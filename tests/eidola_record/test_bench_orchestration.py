"""bench/eidola_record_replay.py: loud refusal without GPUs, and its orchestration (record → WTT →
replay → compare → perturbation → variability) end to end on CPU, with the GPU recorder replaced by
the synthetic n-GPU model and the GPU replay by a stand-in that returns each run's real observation
with a known kernel-time error (the real backends are exercised on the H200 kinds only)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from eidola.from_recording import observation_from_recording
from workloads.gemv_allreduce.record.record import gpu_count

from synth_recording import SynthConfig, make_recording

BENCH = Path(__file__).resolve().parents[2] / "bench" / "eidola_record_replay.py"


def _bench():
    spec = importlib.util.spec_from_file_location("eidola_record_replay", BENCH)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_refuses_loudly_with_fewer_than_two_gpus(capsys):
    if gpu_count()[0] >= 2:
        pytest.skip("this machine has several GPUs")
    m = _bench()
    with pytest.raises(SystemExit) as ei:
        m.main(["--gpus", "2"])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert "needs 2 GPUs" in err and "nvidia-h200-x2" in err


def test_orchestration_end_to_end_with_stand_ins(tmp_path, capsys):
    m = _bench()
    calls = []

    def record_fn(cfg):
        calls.append(cfg)
        rec, _ = make_recording(SynthConfig(n_gpus=cfg.gpus, blocks=cfg.blocks, runs=cfg.runs,
                                            seed=3, slow_rank=cfg.slow_rank, slow_frac=cfg.slow_frac,
                                            local_ns=(100, 300), poll_ns=10, launch_gap_ns=500))
        rec["workload"] = {"name": "synthetic", "blocks": cfg.blocks, "warmup": cfg.warmup}
        rec["devices"] = [{"index": i, "name": "model"} for i in range(cfg.gpus)]
        return rec

    def backend(traces, *, engine, recording, target, slow_frac, device, lag_ns):
        out = []
        for k, tr in enumerate(traces):
            assert tr.header.target == target and tr.header.source == "recorded"
            o = observation_from_recording(recording, target, k)
            o["source"], o["engine"] = "replay", engine
            o["kernel_ns"] = round(o["kernel_ns"] * (1 + slow_frac) * 1.01)
            out.append(o)
        return out

    a = m.parse_args(["--gpus", "4", "--target", "1", "--runs", "6", "--warmup", "0", "--blocks", "4",
                      "--M", "256", "--work-dir", str(tmp_path / "w"), "--results", str(tmp_path / "r")])
    assert m.run_experiment(a, record_fn=record_fn, backend=backend) == 0
    assert [c.slow_frac for c in calls] == [0.0, 0.05, 0.10, 0.20]
    assert all(c.slow_rank == 1 for c in calls[1:])
    res = json.loads((tmp_path / "r" / "eidola_record_replay_4.json").read_text())
    assert set(res["engines_results"]) == {"eidolon_kernel", "virtual_loads"}
    for eng in res["engines_results"].values():
        s = eng["compare"]["summary"]
        assert s["pairs"] == 6 and s["bit_identical_all"]
        assert s["kernel_rel_error"]["median"] == pytest.approx(0.01, abs=2e-4)
        assert len(eng["perturbation_measured"]) == 3
    assert res["trace"]["flag_writes_per_run"] == 3 * 4
    assert len(list((tmp_path / "w" / "eidola_rr_4").glob("trace_t1_run*.jsonl.gz"))) == 6
    rows = res["perturbation_predicted"]["rows"]
    assert [r["slowdown"] for r in rows] == [0.0, 0.05, 0.10, 0.20]
    assert res["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert "engine eidolon_kernel" in capsys.readouterr().out


def test_one_gpu_smoke_mode_puts_all_ranks_on_gpu0_and_is_labelled(tmp_path):
    m = _bench()
    seen = []

    def record_fn(cfg):
        seen.append(cfg)
        rec, _ = make_recording(SynthConfig(n_gpus=cfg.gpus, blocks=3, runs=cfg.runs, seed=1))
        rec["workload"] = {"name": "synthetic", "blocks": 3, "warmup": 0}
        return rec

    def backend(traces, *, engine, recording, target, slow_frac, device, lag_ns):
        assert device == 0
        return [dict(observation_from_recording(recording, target, k), source="replay", engine=engine)
                for k in range(len(traces))]

    a = m.parse_args(["--gpus", "2", "--one-gpu-smoke", "--runs", "3", "--warmup", "0",
                      "--slowdowns", "0.1", "--work-dir", str(tmp_path), "--results", str(tmp_path)])
    assert m.run_experiment(a, record_fn=record_fn, backend=backend) == 0
    assert all(c.devices == (0, 0) and c.shared_gpu and c.blocks == 64 and c.M == 4096 for c in seen)
    res = json.loads((tmp_path / "eidola_record_replay_smoke1gpu_2.json").read_text())
    assert res["one_gpu_smoke"] is True
    assert not (tmp_path / "eidola_record_replay_2.json").exists()
