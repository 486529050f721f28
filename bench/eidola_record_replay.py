#!/usr/bin/env python3
"""E4/E5 — record on n real GPUs, replay on one GPU with n−1 eidolons, compare (issue 8).

One command per machine kind (x2 / x4 / x8):

    python3 bench/eidola_record_replay.py --gpus 4

Steps (each result lands in bench/results/eidola_record_replay_<n>.json, plus a markdown table):
  1. record   ``runs`` back-to-back launches of the fused GEMV+AllReduce on n GPUs (peer pointers,
              NVLink ping-pong clock alignment at start and end), and again with the target rank
              slowed by each perturbation fraction (real, closed-loop);
  2. WTT      one trace per recorded launch for the target rank (hbfd.eidola.from_recording);
  3. replay   every trace on ONE GPU with both engines (eidolon kernel / virtualized flag loads),
              unslowed and slowed by each fraction (open-loop), through the replay backend;
  4. compare  per launch: bit-identical output, kernel time error (goal ≤ 2%), per-flag seen-time
              error (median, p99), per-workgroup wait KS distance, flag-read count error, non-flag
              reads equal; variability: kernel-time distributions real vs replay (KS, medians,
              spreads); perturbation: measured divergence (replay-slowed vs real-slowed) beside the
              model's prediction (hbfd.eidola.compare.predict_perturbation).

It refuses loudly (exit 2) with fewer than 2 GPUs, or fewer than ``--gpus``. NVLink multicast is
never used: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 are set
in this process (workloads.gemv_allreduce.record.knobs) and in every child.

The replay backend is ``--replay-backend MODULE:FUNCTION`` (default
``workloads.gemv_allreduce.record.replay:replay_observations``), called as

    FUNCTION(traces, *, engine, recording, target, slow_frac, device, lag_ns) -> list[observation]

with observations in the ``hbfsim.eidola.observation`` format (hbfd/eidola/compare.py).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
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
              " workloads/gemv_allreduce). See docs/eidola-record-replay.md, 'Replay backend'.",
              file=sys.stderr)
        raise SystemExit(2)
    return f


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, required=True, help="GPUs to record on (2, 4 or 8)")
    ap.add_argument("--target", type=int, default=0, help="rank replayed on one GPU")
    ap.add_argument("--runs", type=int, default=50, help="recorded launches (variability sample)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--M", type=int, default=8192)
    ap.add_argument("--K", type=int, default=8192, help="K per rank")
    ap.add_argument("--blocks", type=int, default=128)
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
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    # Loud refusal first: nothing else runs without the GPUs.
    require_gpus(a.gpus)
    backend = load_backend(a.replay_backend)

    from hbfd.eidola.compare import compare_runs, predict_perturbation, report_markdown, write_report
    from hbfd.eidola.from_recording import (build_trace, link_latencies, clock_model,
                                            observations_from_recording, save_json)
    from hbfd.eidola.trace import write_trace
    from workloads.gemv_allreduce.record.record import RecordConfig, record

    slowdowns = [float(s) for s in a.slowdowns.split(",") if s.strip()]
    engines = [e for e in a.engines.split(",") if e]
    bad = [e for e in engines if e not in ENGINES]
    if bad:
        print(f"ERROR: unknown engines {bad}; choose from {ENGINES}", file=sys.stderr)
        return 2
    work = Path(a.work_dir or os.environ.get("OUT") or "/tmp") / f"eidola_rr_{a.gpus}"
    work.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    res: dict = {"experiment": "eidola_record_replay", "gpus": a.gpus, "target": a.target,
                 "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                 "host": platform.node(), "argv": sys.argv, "env": knobs.check_no_multicast(),
                 "policy": a.policy, "engines": engines, "slowdowns": slowdowns}
    try:
        # 1. record (baseline + perturbed)
        base_cfg = dict(gpus=a.gpus, M=a.M, K=a.K, blocks=a.blocks, runs=a.runs, warmup=a.warmup)
        rec = record(RecordConfig(**base_cfg, out=str(work / "rec.json.gz")))
        cm = clock_model(rec, ref=a.target)
        res["devices"] = rec["devices"]
        res["clock"] = {"timer_resolution_ns": rec["timer_resolution_ns"],
                        "offsets_to_target": cm.to_dict()["ranks"],
                        "drift_estimated": cm.drift_estimated,
                        "links": {f"{s}->{d}": v for (s, d), v in link_latencies(rec, cm).items()}}
        real = observations_from_recording(rec, a.target)
        perturbed = {}
        for s in slowdowns:
            prec = record(RecordConfig(**base_cfg, slow_rank=a.target, slow_frac=s,
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
                        "censored_first_run": traces[0].header.meta["flags_censored"]}
        # 3 + 4. replay with both engines, compare
        res["engines_results"] = {}
        for eng in engines:
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
                                  "variability": c["variability"],
                                  "real_median_ns": c["variability"]["real"]["median"],
                                  "replay_median_ns": c["variability"]["replay"]["median"]})
            res["engines_results"][eng] = {"compare": cmp_, "markdown": report_markdown(cmp_),
                                           "perturbation_measured": pert_rows}
        res["perturbation_predicted"] = predict_perturbation(rec, a.target, [0.0] + slowdowns)
        res["wall_s"] = time.time() - t_start
    except HbfError as e:
        res["error"] = e.to_dict()
        print(f"ERROR: {e}", file=sys.stderr)
        out = Path(a.results) / f"eidola_record_replay_{a.gpus}.failed.json"
        save_json(out, res)
        return 1
    out = Path(a.results) / f"eidola_record_replay_{a.gpus}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(res, indent=1, sort_keys=True, default=str) + "\n")
    os.replace(tmp, out)
    for eng, r in res["engines_results"].items():
        print(f"## engine {eng}\n{r['markdown']}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
