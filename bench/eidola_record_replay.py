#!/usr/bin/env python3
"""E4/E5 — record on n real GPUs, replay on one GPU with n−1 eidolons, compare (issue 8).

One command per machine kind (x2 / x4 / x8):

    python3 bench/eidola_record_replay.py --gpus 4

Steps (each result lands in bench/results/eidola_record_replay_<n>.json, plus a markdown table):
  1. record   ``runs`` back-to-back launches of the fused GEMV+AllReduce on n GPUs (peer pointers,
              NVLink ping-pong clock alignment at start and end), and again with the target rank
              slowed by each perturbation fraction (real, closed-loop);
  2. WTT      one trace per recorded launch for the target rank (eidola.from_recording);
  3. replay   every trace on ONE GPU with both engines (eidolon kernel / virtualized flag loads),
              unslowed and slowed by each fraction (open-loop), through the replay backend;
  4. compare  per launch: bit-identical output, kernel time error (goal ≤ 2%), per-flag seen-time
              error (median, p99), per-workgroup wait KS distance, flag-read count error, non-flag
              reads equal; variability: kernel-time distributions real vs replay (KS, medians,
              spreads); perturbation: measured divergence (replay-slowed vs real-slowed) beside the
              model's prediction (eidola.compare.predict_perturbation).

It refuses loudly (exit 2) with fewer than 2 GPUs, or fewer than ``--gpus``. NVLink multicast is
never used: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 are set
in this process (workloads.gemv_allreduce.record.knobs) and in every child.

The replay backend is ``--replay-backend MODULE:FUNCTION`` (default
``workloads.gemv_allreduce.record.replay:replay_observations``), called as

    FUNCTION(traces, *, engine, recording, target, slow_frac, device, lag_ns) -> list[observation]

with observations in the ``hbfsim.eidola.observation`` format (eidola/compare.py).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import logging
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from workloads.gemv_allreduce.record import knobs  # noqa: E402  (no-multicast env before CUDA)

from hbfcommon.errors import HbfError  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("eidola_record_replay")
ENGINES = ("eidolon_kernel", "virtual_loads")
DEFAULT_BACKEND = "workloads.gemv_allreduce.record.replay:replay_observations"


class NotEnoughGpus(SystemExit):
    pass


def require_gpus(n: int) -> int:
    from workloads.gemv_allreduce.record.record import gpu_count

    have, how = gpu_count()
    if have < 2 or have < n:
        msg = (f"eidola_record_replay needs {max(n, 2)} GPUs on one host with NVLink peer access; "
               f"found {have} ({how}).\n"
               f"  This experiment cannot run here. Run it on the nvidia-h200-x{max(n, 2)} kind:\n"
               f"    python3 bench/eidola_record_replay.py --gpus {max(n, 2)}\n"
               f"  (docs/eidola-record-replay.md lists the runs that remain.)")
        print("ERROR: " + msg, file=sys.stderr)
        raise NotEnoughGpus(2)
    return have


def load_backend(spec: str):
    mod, _, fn = spec.partition(":")
    try:
        m = importlib.import_module(mod)
        f = getattr(m, fn or "replay_observations")
    except (ImportError, AttributeError) as e:
        print(f"ERROR: replay backend {spec!r} is not available: {e}\n"
              "  The one-GPU replay with both engines comes from issue 7 (runtime_cuda eidola engines +"
              " workloads/gemv_allreduce/record/replay.py). See docs/eidola-record-replay.md.",
              file=sys.stderr)
        raise SystemExit(2)
    return f


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, required=True, help="GPUs to record on (2, 4 or 8)")
    ap.add_argument("--target", type=int, default=0, help="rank replayed on one GPU")
    ap.add_argument("--runs", type=int, default=50, help="recorded launches (variability sample)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--M", type=int, default=8192)
    ap.add_argument("--K", type=int, default=8192, help="K per rank")
    ap.add_argument("--blocks", type=int, default=None,
                    help="workgroups per rank (default 128; with --one-gpu-smoke 128/gpus)")
    ap.add_argument("--one-gpu-smoke", action="store_true",
                    help="all ranks co-resident on GPU 0: checks the whole pipeline on the one-GPU "
                         "kind (no NVLink; written as ..._smoke1gpu_<n>.json, never an E4 result)")
    ap.add_argument("--slowdowns", default="0.05,0.10,0.20")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--policy", default="seen", choices=("seen", "hybrid"))
    ap.add_argument("--replay-device", type=int, default=0)
    ap.add_argument("--lag-ns", type=int, default=500,
                    help="engine (a) visibility lag subtracted from every wakeup (calibrate with "
                         "issue 7's probe; notes §3.4 measured ~500 ns)")
    ap.add_argument("--replay-backend", default=DEFAULT_BACKEND)
    ap.add_argument("--work-dir", default=None, help="recordings/traces (default: $OUT or /tmp)")
    ap.add_argument("--results", default=str(ROOT / "bench" / "results"))
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    # Loud refusal first: nothing else runs without the GPUs.
    if a.one_gpu_smoke:
        from workloads.gemv_allreduce.record.record import gpu_count
        if gpu_count()[0] < 1:
            print(f"ERROR: --one-gpu-smoke needs a GPU; found none ({gpu_count()[1]})", file=sys.stderr)
            raise NotEnoughGpus(2)
    else:
        require_gpus(a.gpus)
    backend = load_backend(a.replay_backend)
    from workloads.gemv_allreduce.record.record import record

    return run_experiment(a, record_fn=record, backend=backend)


def run_experiment(a: argparse.Namespace, *, record_fn, backend) -> int:
    """The experiment proper; ``record_fn(RecordConfig) -> recording`` and ``backend`` are the
    real recorder and replay backend in main(), stand-ins in the CPU test of the orchestration."""
    from eidola.compare import compare_runs, predict_perturbation, report_markdown, write_report
    from eidola.from_recording import (build_trace, link_latencies, clock_model,
                                            observations_from_recording, save_json)
    from eidola.trace import write_trace
    from workloads.gemv_allreduce.record.record import RecordConfig

    slowdowns = [float(s) for s in a.slowdowns.split(",") if s.strip()]
    engines = [e for e in a.engines.split(",") if e]
    bad = [e for e in engines if e not in ENGINES]
    if bad:
        print(f"ERROR: unknown engines {bad}; choose from {ENGINES}", file=sys.stderr)
        return 2
    tag = f"smoke1gpu_{a.gpus}" if getattr(a, "one_gpu_smoke", False) else str(a.gpus)
    work = Path(a.work_dir or os.environ.get("OUT") or "/tmp") / f"eidola_rr_{tag}"
    work.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    res: dict = {"experiment": "eidola_record_replay", "gpus": a.gpus, "target": a.target,
                 "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                 "host": platform.node(), "argv": sys.argv, "env": knobs.check_no_multicast(),
                 "policy": a.policy, "engines": engines, "slowdowns": slowdowns, "lag_ns": a.lag_ns}
    try:
        # 1. record (baseline + perturbed)
        smoke = bool(getattr(a, "one_gpu_smoke", False))
        blocks = a.blocks or (128 // a.gpus if smoke else 128)
        M = a.M if a.blocks or not smoke else blocks * (a.M // 128)
        base_cfg = dict(gpus=a.gpus, M=M, K=a.K, blocks=blocks, runs=a.runs, warmup=a.warmup,
                        devices=(0,) * a.gpus if smoke else None)
        res["one_gpu_smoke"] = smoke
        res["shape"] = {"M": M, "K_per_rank": a.K, "blocks": blocks}
        log.info("recording %d launches on %d GPUs", a.runs, a.gpus)
        rec = record_fn(RecordConfig(**base_cfg, out=str(work / "rec.json.gz")))
        cm = clock_model(rec, ref=a.target)
        res["devices"] = rec.get("devices")
        res["clock"] = {"timer_resolution_ns": rec.get("timer_resolution_ns"),
                        "offsets_to_target": cm.to_dict()["ranks"],
                        "drift_estimated": cm.drift_estimated,
                        "links": {f"{s}->{d}": v for (s, d), v in link_latencies(rec, cm).items()}}
        real = observations_from_recording(rec, a.target)
        perturbed = {}
        for s in slowdowns:
            log.info("recording with rank %d slowed by %.0f%%", a.target, 100 * s)
            prec = record_fn(RecordConfig(**base_cfg, slow_rank=a.target, slow_frac=s,
                                          out=str(work / f"rec_slow{int(round(s * 100))}.json.gz")))
            perturbed[s] = observations_from_recording(prec, a.target)
        # 2. WTT traces, one per recorded launch
        traces = []
        for k in range(len(rec["runs"])):
            tr = build_trace(rec, a.target, k, policy=a.policy)
            write_trace(work / f"trace_t{a.target}_run{k}.jsonl.gz", tr)
            traces.append(tr)
        res["trace"] = {"writes_per_run": len(traces[0].writes),
                        "flag_writes_per_run": len(traces[0].flag_writes()),
                        "censored_first_run": traces[0].header.meta["flags_censored"],
                        "clamped_first_run": traces[0].header.meta["flags_clamped_to_zero"]}
        # 3 + 4. replay with both engines, compare
        res["engines_results"] = {}
        for eng in engines:
            log.info("replaying %d launches with engine %s", len(traces), eng)
            rep = backend(traces, engine=eng, recording=rec, target=a.target, slow_frac=0.0,
                          device=a.replay_device, lag_ns=a.lag_ns)
            cmp_ = compare_runs(real, rep)
            write_report(cmp_, md_path=work / f"compare_{eng}.md")
            pert_rows = []
            for s in slowdowns:
                rep_s = backend(traces, engine=eng, recording=rec, target=a.target, slow_frac=s,
                                device=a.replay_device, lag_ns=a.lag_ns)
                c = compare_runs(perturbed[s], rep_s)
                pert_rows.append({"slowdown": s, "kernel_rel_error": c["summary"]["kernel_rel_error"],
                                  "ks_d": c["variability"]["ks"]["d"],
                                  "real_median_ns": c["variability"]["real"]["median"],
                                  "replay_median_ns": c["variability"]["replay"]["median"],
                                  "divergence_median_rel": c["variability"]["median_rel_error"]})
            res["engines_results"][eng] = {"compare": cmp_, "markdown": report_markdown(cmp_),
                                           "perturbation_measured": pert_rows}
        res["perturbation_predicted"] = predict_perturbation(rec, a.target, [0.0] + slowdowns)
        res["wall_s"] = time.time() - t_start
    except HbfError as e:
        res["error"] = e.to_dict()
        print(f"ERROR: {e}", file=sys.stderr)
        out = Path(a.results) / f"eidola_record_replay_{tag}.failed.json"
        save_json(out, res)
        return 1
    out = Path(a.results) / f"eidola_record_replay_{tag}.json"
    atomic_write_json(out, res, end="\n", indent=1, sort_keys=True, default=str)
    for eng, r in res["engines_results"].items():
        print(f"## engine {eng}\n{r['markdown']}")
    pp = res["perturbation_predicted"]["rows"]
    print("predicted open-loop divergence (max |rel|): " +
          ", ".join(f"{100 * r['slowdown']:.0f}%: {100 * r['max_abs_divergence_rel']:.2f}%" for r in pp))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
