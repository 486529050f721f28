#!/usr/bin/env python3
"""E1 / E2-Hoare on the GEMV+AllReduce made Eidola-aware purely by hbfcc, side by side with the
hand-instrumented build (issue 7: "rewritten loads of a registered flag range return the value the
table makes visible at that instant"; "hbfcc can optionally rewrite a recognized spin-wait loop into
monitor/mwait"; flag vs non-flag reads counted by rewritten code).

Builds (on the machine that runs it):
  hand   workloads/gemv_allreduce/gemv_allreduce.cu (flag loads / monitor / mwait / non-flag counting
         written by hand in the source; built by workloads/gemv_allreduce/fused.py build_module)
  plain  workloads/gemv_allreduce/gemv_allreduce_plain.cu (volatile loads in a plain spin loop, no eidola
         code) compiled by hbfcc's nvcc entry point with HBFCC_PASSES=timing,flags (E1) and
         HBFCC_PASSES=timing,flags,mwait (E2-Hoare); loaded with the driver API, __hb_eidola_state bound
         to the same Replay (workloads/gemv_allreduce/plain.py)

Both run on the same buffers, the same Write Tracking Table per delay (eidola.generator.uniform_delay),
interleaved rep by rep. Per run: flag / non-flag reads (per thread, per warp-instruction), monitor arms,
mwaits, the kernels' own poll counts, kernel time, y bitwise against the host reference.

    python3 bench/eidola_hbfcc_flags_e1.py --out bench/results            # on the GPU
    python3 bench/eidola_hbfcc_flags_e1.py --out bench/results --results-rows
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
log = logging.getLogger("eidola_hbfcc_flags_e1")
NAME = "eidola_hbfcc_flags_e1.json"
KEYS = ("flag_reads_thread", "flag_reads_warp", "nonflag_reads_thread", "nonflag_reads_warp", "monitor_arms",
        "mwait_calls", "virtual_loads", "wake_word_reads")


def _dist(x) -> dict:
    a = np.asarray(x, float)
    return {"n": int(a.size), "median": float(np.median(a)), "p05": float(np.percentile(a, 5)),
            "p95": float(np.percentile(a, 95)), "min": float(a.min()), "max": float(a.max())}


def _row(o: dict, ref: np.ndarray, build: str, wait: str, engine: str, d: int, rep: int, shape) -> dict:
    acc = o["accounting"]
    polls = np.asarray(o["polls"], np.int64)
    waiting = np.ones_like(polls, bool)
    waiting[:, 0] = False                                         # rank 0 does not wait on itself
    p = polls[waiting]
    if build == "plain" and wait == "hoare":
        # peeled first read, then per loop iteration: the monitor's read + the (Mesa-safe) load
        expected = int((2 * p - 1).sum())
    else:
        expected = int(p.sum())                                   # one read per poll
    r = {"build": build, "wait": wait, "engine": engine, "delay_ns": d, "rep": rep, "kernel_ns": int(o["kernel_ns"]),
         "polls_sum": int(p.sum()), "flag_reads_expected_from_polls": expected,
         "flag_reads_match_polls": int(acc["flag_reads_thread"]) == expected,
         "y_bitwise_equal_reference": bool(np.array_equal(o["y"].view(np.uint32), ref.view(np.uint32))),
         "wait_ns_median": float(np.median(o["marks"][:, 4] - o["marks"][:, 3]))}
    r.update({k: int(acc[k]) for k in KEYS})
    return r


def run(args) -> dict:
    from eidola.accounting import linear_fit
    from eidola.generator import uniform_delay
    from eidola.wtt import WriteTrackingTable
    from eidola.replay import EidolaRuntime, Replay, build_module
    from workloads.gemv_allreduce.fused import GarShape, GemvAllReduce
    from workloads.gemv_allreduce.fused import build_module as build_workload
    from workloads.gemv_allreduce.plain import PlainKernel, build_plain, run_plain

    work = Path(tempfile.mkdtemp(prefix="hbfcc-flags-e1."))
    t = time.perf_counter()
    module = build_module()
    build_workload()
    t_lib = time.perf_counter() - t
    builds = {}
    for wait, passes in (("spin", ("timing", "flags")), ("hoare", ("timing", "flags", "mwait"))):
        t = time.perf_counter()
        cubin, doc = build_plain(work, passes=passes)
        k = doc["kernels"][0]
        builds[wait] = {"cubin": cubin, "artifact": {
            "passes": doc["passes"], "admitted": doc["admitted"], "kernel": k["name"], "kernel_admitted": k["admitted"],
            "not_admitted_reasons": k["not_admitted_reasons"], "eidola_helper": doc["eidola_helper"],
            "helper_sha256": (doc.get("helper") or {}).get("sha256"),
            "flags": {x: doc["flags"][x] for x in ("rewritten_loads", "spin_loops_parked", "nonflag_sites", "extern")},
            "ptxas_before": k.get("ptxas_before"), "ptxas_after": k.get("ptxas_after")},
            "build_s": round(time.perf_counter() - t, 2)}
        log.info("built plain/%s: %s", wait, builds[wait]["artifact"])
        if not doc["admitted"]:
            raise SystemExit(f"plain build {passes} is not admitted: {k['not_admitted_reasons']}")
    rt = EidolaRuntime.create(module=module)
    kern = {w: PlainKernel(b["cubin"], rt.device) for w, b in builds.items()}
    shape = GarShape(n_gpus=args.n_gpus, M=args.M, Kl=args.Kl, tiles=args.tiles)
    g = GemvAllReduce(rt, shape)
    ref = g.reference_y()
    delays = [d * 1000 for d in range(0, args.max_us + 1, args.step_us)]
    lag = args.lag_ns
    rows = []
    configs = [("spin", "virtual")] + [("hoare", e) for e in args.hoare_engines]
    errors = {}
    for wait, engine in configs:
        try:
            for d in delays:
                tr = uniform_delay(n_gpus=shape.n_gpus, tiles=shape.tiles, tile_rows=shape.tile_rows, delay_ns=d)
                rep = Replay(rt, [g.flag_region()], arm_slots=shape.tiles * shape.threads)
                rep.use_table(WriteTrackingTable.from_trace(tr, g.bases()).freeze())
                rep.install(engine=engine, mon_mode="off" if wait == "spin" else "hoare",
                            lag_ns=lag if engine == "eidolon" else 0)
                for r in range(args.reps):
                    for build in (("hand", "plain") if r % 2 == 0 else ("plain", "hand")):
                        if build == "hand":
                            o = g.run_replay(rep, wait=wait, engine=engine)
                        else:
                            o = run_plain(kern[wait], g, rep, engine=engine)
                        rows.append(_row(o, ref, build, wait, engine, d, r, shape))
        except Exception as e:  # noqa: BLE001  (a device trap ends the context: later configs fail too)
            log.exception("%s/%s failed", wait, engine)
            errors[f"{wait}/{engine}"] = repr(e)
    summary = {}
    for wait, engine in configs:
        sel = [x for x in rows if x["wait"] == wait and x["engine"] == engine]
        if not sel:
            continue
        s: dict = {}
        for build in ("hand", "plain"):
            b = [x for x in sel if x["build"] == build]
            med = {d: {k: float(np.median([x[k] for x in b if x["delay_ns"] == d])) for k in KEYS + ("kernel_ns",)}
                   for d in delays if any(x["delay_ns"] == d for x in b)}
            ds = sorted(med)
            knee = [d for d in ds if d >= args.knee_us * 1000]
            s[build] = {
                "median_by_delay": med,
                "fit_flag_reads_thread_vs_delay_us": linear_fit([d / 1000 for d in ds], [med[d]["flag_reads_thread"] for d in ds])
                if len(ds) >= 2 else None,
                "fit_above_knee": linear_fit([d / 1000 for d in knee], [med[d]["flag_reads_thread"] for d in knee])
                if len(knee) >= 2 else None,
                "nonflag_reads_thread_unique": sorted({x["nonflag_reads_thread"] for x in b}),
                "nonflag_reads_warp_unique": sorted({x["nonflag_reads_warp"] for x in b}),
                "flag_reads_match_polls_all": all(x["flag_reads_match_polls"] for x in b),
                "all_outputs_bitwise_equal": all(x["y_bitwise_equal_reference"] for x in b),
                "kernel_ns": _dist([x["kernel_ns"] for x in b]),
                "flag_reads_per_waiting_lane": _dist([x["flag_reads_thread"] / (shape.tiles * (shape.n_gpus - 1)) for x in b]),
            }
        h, p = s["hand"], s["plain"]
        s["compare"] = {
            "nonflag_thread_equal": h["nonflag_reads_thread_unique"] == p["nonflag_reads_thread_unique"],
            "nonflag_warp_equal": h["nonflag_reads_warp_unique"] == p["nonflag_reads_warp_unique"],
            "flag_reads_thread_ratio_plain_over_hand_by_delay": {
                d: (p["median_by_delay"][d]["flag_reads_thread"] / h["median_by_delay"][d]["flag_reads_thread"])
                if h["median_by_delay"][d]["flag_reads_thread"] else None for d in delays
                if d in h["median_by_delay"] and d in p["median_by_delay"]},
            "kernel_ns_ratio_plain_over_hand_median": p["kernel_ns"]["median"] / h["kernel_ns"]["median"],
        }
        summary[f"{wait}/{engine}"] = s
    return {"shape": vars(shape), "delays_ns": delays, "reps": args.reps, "lag_ns_eidolon": lag,
            "library_build_s": round(t_lib, 2), "plain_builds": {w: {k: v for k, v in b.items() if k != "cubin"}
                                                                 for w, b in builds.items()},
            "rows": rows, "summary": summary, "errors": errors}


def results_rows(doc: dict, command: str, card: str) -> str:
    out = []
    date = doc["date_utc"][:10]
    for key, s in doc["result"]["summary"].items():
        h, p, c = s["hand"], s["plain"], s["compare"]
        fh, fp = h["fit_above_knee"] or h["fit_flag_reads_thread_vs_delay_us"], p["fit_above_knee"] or p["fit_flag_reads_thread_vs_delay_us"]
        what = (f"Eidola {'E1 spin' if key.startswith('spin') else 'E2-Hoare mwait'} ({key.split('/')[1]}), GEMV+AllReduce "
                f"made Eidola-aware by hbfcc (HBFCC_PASSES={'+'.join(doc['result']['plain_builds'][key.split('/')[0]]['artifact']['passes'])}) "
                "vs hand-instrumented")
        num = (f"flag reads/thread vs delay slope above knee: plain {fp['slope']:.0f}/us (R2 {fp['r2']:.3f}) vs hand "
               f"{fh['slope']:.0f}/us (R2 {fh['r2']:.3f}); flag reads per waiting lane median plain "
               f"{p['flag_reads_per_waiting_lane']['median']:.1f} vs hand {h['flag_reads_per_waiting_lane']['median']:.1f}; "
               f"non-flag reads equal: thread {c['nonflag_thread_equal']} warp {c['nonflag_warp_equal']} "
               f"({p['nonflag_reads_thread_unique']}); counts == kernels' own polls: plain {p['flag_reads_match_polls_all']} "
               f"hand {h['flag_reads_match_polls_all']}; y bitwise: plain {p['all_outputs_bitwise_equal']} hand "
               f"{h['all_outputs_bitwise_equal']}; kernel time plain/hand median {c['kernel_ns_ratio_plain_over_hand_median']:.2f}")
        out.append(f"| {what} | {num} | {date} | {card} | `{command}` | bench/results/{NAME} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n-gpus", type=int, default=4)
    ap.add_argument("--M", type=int, default=1024)
    ap.add_argument("--Kl", type=int, default=2048)
    ap.add_argument("--tiles", type=int, default=128)
    ap.add_argument("--max-us", type=int, default=40)
    ap.add_argument("--step-us", type=int, default=4)
    ap.add_argument("--knee-us", type=int, default=8)
    ap.add_argument("--hoare-engines", default="virtual,eidolon")
    ap.add_argument("--lag-ns", type=int, default=None, help="engine (a) lag; default from eidola_E0.json, else 500")
    ap.add_argument("--results-rows", action="store_true", help="print docs/RESULTS.md rows for --out's JSON")
    ap.add_argument("--card", default="NVIDIA H200")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = Path(args.out)
    cmd = "python3 bench/eidola_hbfcc_flags_e1.py --out $OUT"
    if args.results_rows:
        print(results_rows(json.loads((out / NAME).read_text()), cmd, args.card))
        return 0
    args.hoare_engines = [e for e in args.hoare_engines.split(",") if e]
    if args.lag_ns is None:
        try:
            e0 = json.loads((ROOT / "bench" / "results" / "eidola_E0.json").read_text())["result"]
            args.lag_ns = int(e0.get("engine_a_min8_lag_estimate_ns", e0.get("engine_a_lag_estimate_ns", 500)))
        except Exception:  # noqa: BLE001
            args.lag_ns = 500
    t = time.perf_counter()
    rec = {"experiment": "eidola_hbfcc_flags_e1", "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "host": platform.node(), "argv": sys.argv, "env": {k: os.environ.get(k) for k in ("CUDA_MODULE_LOADING",)}}
    try:
        import subprocess
        rec["device"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True).stdout.strip()
    except OSError:
        rec["device"] = None
    rec["result"] = run(args)
    rec["wall_s"] = round(time.perf_counter() - t, 1)
    out.mkdir(parents=True, exist_ok=True)
    from hbfcommon.fsutil import atomic_write_json
    atomic_write_json(out / NAME, rec, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))
    short = {k: {"compare": v["compare"], **{b: {x: v[b][x] for x in ("fit_above_knee", "flag_reads_per_waiting_lane",
                                                                       "nonflag_reads_thread_unique", "nonflag_reads_warp_unique",
                                                                       "flag_reads_match_polls_all", "all_outputs_bitwise_equal",
                                                                       "kernel_ns")} for b in ("hand", "plain")}}
             for k, v in rec["result"]["summary"].items()}
    print("SUMMARY " + json.dumps({"errors": rec["result"]["errors"], "summary": short,
                                   "builds": {w: b["artifact"]["flags"] for w, b in rec["result"]["plain_builds"].items()},
                                   "wall_s": rec["wall_s"]}, default=str))
    print(results_rows(rec, cmd, args.card))
    return 0 if not rec["result"]["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
