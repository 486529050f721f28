"""Media model sweep: modeled latency and bandwidth against offered load for the bundled device
profiles, and how fast the model runs. Writes bench/results/media_sweep.json and prints the
markdown table for docs/RESULTS.md.

    .venv/bin/python bench/media_sweep.py [--requests 200000] [--out bench/results/media_sweep.json]

Also the host speed of write-heavy streams (nominal: whole-page stores, and 30 % stores).
Host speed: median over --repeat runs of wall time and of CPU time (the CI box is shared: CPU time
is the fairer number). Random 4 KiB reads, one every G ns (G from the offered load as a fraction of the geometry's page
rate; G = 0 is one burst), submitted in batches of 16384. CPU only.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

from hbfd.media.bench import run_bench  # noqa: E402
from hbfd.media.geometry import MediaGeometry  # noqa: E402
from hbfcommon.profile import MAX_DIE_QUEUE_SLOTS, load_profile  # noqa: E402

import numpy as np  # noqa: E402

PROFILES = ("conservative", "nominal", "aggressive", "ocp-sg1", "ocp-sg2", "ocp-sg3")
LOADS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 2.0, None)   # None: all at once


def _load_engine(spec: str):
    """``DIR:module`` (e.g. ``/tmp/oldmedia:media_old.engine``, a copy of hbfd/media as package
    ``media_old``) -> its MediaEngine class."""
    import importlib
    d, mod = spec.split(":", 1)
    sys.path.insert(0, d)
    return importlib.import_module(mod).MediaEngine


def batch_cost(cls, g, b: int, iters: int) -> list[int]:
    """CPU ns of one submit + advance + collect + quiet-scan collect per batch of ``b`` random 128 B
    reads, arrivals 2 us apart per request (bench/ring_throughput.py's engine_batch_cost stream);
    the first 10 % dropped."""
    sys.path.insert(0, str(ROOT / "bench"))
    from ring_throughput import engine_batch_stream, engine_batch_times  # noqa: PLC0415
    return engine_batch_times(cls(g), engine_batch_stream(b, iters), time.process_time_ns)[iters // 10:]


ENGINE_REGIMES = (
    # (name, profile, op, write_fraction, load (None: burst), batch, requests)
    ("read burst b16384", "nominal", "read", 0.0, None, 16384, 200_000),
    ("read 10% b16384", "nominal", "read", 0.0, 0.1, 16384, 200_000),
    ("read burst b4096", "nominal", "read", 0.0, None, 4096, 200_000),
    ("read 10% b4096", "nominal", "read", 0.0, 0.1, 4096, 200_000),
    ("read burst b4096 ocp-sg1", "ocp-sg1", "read", 0.0, None, 4096, 200_000),
    ("read 10% b4096 ocp-sg1", "ocp-sg1", "read", 0.0, 0.1, 4096, 200_000),
    ("write burst", "nominal", "write", 0.0, None, 16384, 100_000),
    ("write 10%", "nominal", "write", 0.0, 0.1, 16384, 100_000),
    ("mixed 50/50 burst", "nominal", "mixed", 0.5, None, 16384, 50_000),
    ("mixed 50/50 10%", "nominal", "mixed", 0.5, 0.1, 16384, 50_000),
    ("mixed 90/10 burst", "nominal", "mixed", 0.1, None, 16384, 50_000),
    ("mixed 90/10 10%", "nominal", "mixed", 0.1, 0.1, 16384, 50_000),
)


def _warm_accel() -> float:
    """Run a small read, write and mixed stream with the compiled twins on, so that the timed runs do not
    include numba's compile (or its cache load); returns the seconds that took."""
    from hbfd.media.engine import MediaEngine, warm_twins
    os.environ["HBFD_ACCEL"] = "on"
    g = MediaGeometry.from_profile(load_profile("nominal"))
    t0 = time.perf_counter()
    warm_twins(g)                        # every twin (what the daemon's make_engine does)
    for op, wf in (("read", 0.0), ("write", 0.0), ("mixed", 0.5)):
        run_bench(g, requests=3000, nbytes=4096, op=op, gap_ns=0, batch=1000, write_fraction=wf, repeat=1,
                  engine_cls=MediaEngine)
    return time.perf_counter() - t0


def _compile_times() -> dict:
    """numba's compile cost of the media twins: a fresh process with an empty cache (``$NUMBA_CACHE_DIR``: a new
    temporary folder) runs the warm-up streams twice, then a second fresh process with that cache does the
    same; the first warm-up of each process minus its second is what compiling (or loading the cache) cost."""
    import json
    import subprocess
    import tempfile
    code = ("import json, sys, time; sys.path.insert(0, %r); import bench.media_sweep as m; "
            "t0 = time.perf_counter(); import numba; imp = time.perf_counter() - t0; "
            "a = m._warm_accel(); b = m._warm_accel(); print(json.dumps([imp, a, b]))") % str(ROOT)
    out = {}
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "NUMBA_CACHE_DIR": d, "PYTHONPATH": str(ROOT)}
        for k in ("empty_cache", "cached"):
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            imp, a, b = json.loads(r.stdout.strip().splitlines()[-1])
            out[k] = {"numba_import_s": imp, "first_warmup_s": a, "second_warmup_s": b,
                      "compile_or_load_s": a - b}
    return out


def engine_speed(args, argv=None) -> int:
    """Media engine host speed, this tree (``new``) against ``--old-engine`` (``old``), runs
    interleaved: M simulated requests per CPU-second (median of --repeat, min-max) per regime, and
    the per-batch CPU cost of tiny batches (1 / 16 / 256 reads)."""
    from hbfd.media.engine import MediaEngine
    from hbfd import accel
    engines = {"new": MediaEngine}
    if args.old_engine:
        engines = {"old": _load_engine(args.old_engine), "new": MediaEngine}
    modes = {k: os.environ.get("HBFD_ACCEL", "auto") for k in engines}
    compile_s = None
    if args.accel_compare:               # this tree with its compiled twins off and on (hbfd/accel.py)
        engines = {"off": MediaEngine, "on": MediaEngine}
        modes = {"off": "off", "on": "on"}
        compile_s = {"this_process_first_warmup_s": _warm_accel(), "this_process_second_warmup_s": _warm_accel(),
                     "fresh_processes": _compile_times()}
        print(f"compile: {compile_s}", file=sys.stderr, flush=True)
    env0 = os.environ.get("HBFD_ACCEL")
    rows = []
    for name, pname, op, wf, load, b, n in ENGINE_REGIMES:
        if args.only and not any(w in name for w in args.only.split(",")):
            continue
        g = MediaGeometry.from_profile(load_profile(pname))
        if args.queue_depth == "unbounded":      # the one semantics has no die queue depth (design.md §3.9)
            g = dataclasses.replace(g, queue_depth=MAX_DIE_QUEUE_SLOTS // g.dies)
        gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
        cpu = {k: [] for k in engines}
        for _ in range(args.repeat):
            for k, cls in engines.items():
                os.environ["HBFD_ACCEL"] = modes[k]
                r = run_bench(g, requests=n, nbytes=4096, op=op, gap_ns=gap, batch=b, write_fraction=wf,
                              repeat=1, engine_cls=cls)
                cpu[k].append(r["host_cpu_s"])
        row = {"regime": name, "profile": pname, "op": op, "write_fraction": wf, "arrival_gap_ns": gap,
               "batch": b, "requests": n, "queue_depth": g.queue_depth}
        for k, v in cpu.items():
            m = [n / x / 1e6 for x in v]
            row[k] = {"cpu_s": v, "mreq_per_cpu_s_median": float(np.median(m)), "min": min(m), "max": max(m)}
        rows.append(row)
        print(f"{name:26s} " + "  ".join(f"{k} {row[k]['mreq_per_cpu_s_median']:5.2f} "
                                         f"({row[k]['min']:.2f}-{row[k]['max']:.2f})" for k in engines)
              + " M req/cpu-s", file=sys.stderr, flush=True)
    tiny = []
    g = MediaGeometry.from_profile(load_profile("nominal"))
    for b in (1, 16, 256) if args.batch_iters > 0 else ():
        med = {k: [] for k in engines}
        for _ in range(args.repeat):
            for k, cls in engines.items():
                os.environ["HBFD_ACCEL"] = modes[k]
                med[k].append(float(np.median(batch_cost(cls, g, b, args.batch_iters))) / 1e3)
        row = {"batch": b, "iters": args.batch_iters}
        for k, v in med.items():
            row[k] = {"median_us_per_batch": float(np.median(v)), "runs_median_us": v,
                      "mreq_per_cpu_s": b / float(np.median(v))}
        tiny.append(row)
        print(f"batch {b:4d}: " + "  ".join(f"{k} {row[k]['median_us_per_batch']:7.1f} us ({min(v):.1f}-{max(v):.1f})"
                                           for k, v in med.items()), file=sys.stderr, flush=True)
    if env0 is None:
        os.environ.pop("HBFD_ACCEL", None)
    else:
        os.environ["HBFD_ACCEL"] = env0
    doc = {"what": "media engine host speed (issue 14 item 5): M simulated requests per CPU-second, one core",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "card": "CPU (this 2-core box)",
           "host": {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
                    "loadavg_1m": os.getloadavg()[0]},
           "command": "python bench/media_sweep.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "queue_depth": args.queue_depth,
           "old_engine": args.old_engine, "accel_modes": modes, "accel": accel.describe(),
           "accel_compile": compile_s, "malloc": getattr(args, "malloc_applied", None), "goal": {"every_regime_mreq_per_cpu_s": 5.0, "write_heavy": 1.0},
           "regimes": rows, "tiny_batches": tiny}
    atomic_write_json(args.engine_out, doc, indent=1)
    print("| regime | batch | " + " | ".join(f"{k} M req/CPU-s median (min-max)" for k in engines) + " |")
    print("|---|---|" + "---|" * len(engines))
    for r in rows:
        print(f"| {r['regime']} | {r['batch']} | " + " | ".join(
            f"{r[k]['mreq_per_cpu_s_median']:.2f} ({r[k]['min']:.2f}-{r[k]['max']:.2f})" for k in engines) + " |")
    print()
    print("| batch | " + " | ".join(f"{k} us per batch, median (runs min-max)" for k in engines) + " |")
    print("|---|" + "---|" * len(engines))
    for r in tiny:
        print(f"| {r['batch']} | " + " | ".join(
            f"{r[k]['median_us_per_batch']:.1f} ({min(r[k]['runs_median_us']):.1f}-{max(r[k]['runs_median_us']):.1f})"
            for k in engines) + " |")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine-speed", action="store_true",
                    help="only the engine's host speed per regime (bench/results/media_engine_speed.json)")
    ap.add_argument("--old-engine", default=None, help="DIR:module of another engine build to run side by side")
    ap.add_argument("--accel-compare", action="store_true",
                    help="--engine-speed: this tree with HBFD_ACCEL=off and =on side by side (needs numba)")
    ap.add_argument("--batch-iters", type=int, default=400, help="tiny-batch iterations (0: no tiny batches)")
    ap.add_argument("--queue-depth", choices=("profile", "unbounded"), default="profile",
                    help="--engine-speed: each profile's die queue depth (default) or none binding (the one "
                         "semantics has none)")
    ap.add_argument("--only", default="", help="--engine-speed: regimes whose name contains one of these "
                    "(comma-separated)")
    ap.add_argument("--malloc", choices=("tuned", "default"), default="tuned",
                    help="glibc malloc as hbfd sets it (HBFD_MALLOC_TUNE, hbfd/memtune.py; default) or glibc's defaults")
    ap.add_argument("--engine-out", default=str(ROOT / "bench" / "results" / "media_engine_speed.json"))
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--speed-requests", type=int, default=1_000_000)
    ap.add_argument("--speed-repeat", type=int, default=5)
    ap.add_argument("--write-requests", type=int, default=200_000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "media_sweep.json"))
    args = ap.parse_args(argv)
    from hbfd.memtune import tune_malloc
    args.malloc_applied = tune_malloc(args.malloc == "tuned")
    if args.engine_speed:
        return engine_speed(args, argv)
    rows = []
    for name in PROFILES:
        prof = load_profile(name)
        g = MediaGeometry.from_profile(prof)
        page_rate = g.aggregate_bytes_per_s / 4096
        seen = set()
        for load in LOADS:
            gap = 0 if load is None else max(1, round(1e9 / (load * page_rate)))
            if gap in seen:
                continue
            seen.add(gap)
            r = run_bench(g, requests=args.requests, nbytes=4096, op="read", gap_ns=gap, repeat=args.repeat)
            r["profile"] = {"name": prof.name, "sha256": prof.sha256}
            r["offered_load"] = (4096e9 / gap) / g.aggregate_bytes_per_s if gap else None
            rows.append(r)
            print(f"{name:12s} gap {gap:5d} ns load {r['offered_load'] or float('inf'):5.2f}  "
                  f"avg {r['latency_ns']['avg']:12.0f}  p99 {r['latency_ns']['p99']:12.0f}  "
                  f"bw {r['modeled_bytes_per_s'] / 1e9:7.1f}/{g.aggregate_bytes_per_s / 1e9:.1f} GB/s  "
                  f"{r['simulated_requests_per_s'] / 1e6:5.2f} M req/s", file=sys.stderr, flush=True)
    # host speed: 1M random 4 KiB reads at 10 % load, batches of 16384 and of 4096 (the ring size)
    speed = []
    for name in PROFILES:
        prof = load_profile(name)
        g = MediaGeometry.from_profile(prof)
        gap = round(1e9 / (0.1 * g.aggregate_bytes_per_s / 4096))
        for b in (16384, 4096):
            r = run_bench(g, requests=args.speed_requests, nbytes=4096, op="read", gap_ns=gap, batch=b,
                          repeat=args.speed_repeat)
            speed.append({"profile": name, "batch": b, "arrival_gap_ns": gap, "requests": args.speed_requests,
                          "wall_s": r["host_wall_s_all"], "cpu_s": r["host_cpu_s_all"],
                          "median_requests_per_wall_s": r["simulated_requests_per_s"],
                          "median_requests_per_cpu_s": r["simulated_requests_per_cpu_s"],
                          "best_requests_per_cpu_s": r["simulated_requests_per_cpu_s_best"]})
            print(f"speed {name:12s} batch {b:6d}: median {r['simulated_requests_per_cpu_s'] / 1e6:.2f} M req/cpu-s, "
                  f"{r['simulated_requests_per_s'] / 1e6:.2f} M req/wall-s", file=sys.stderr, flush=True)
    # write-heavy host speed (nominal): whole-page stores / 30 % stores, burst and 10 % load
    wspeed = []
    prof = load_profile("nominal")
    g = MediaGeometry.from_profile(prof)
    for op in ("write", "mixed"):
        for load in (0.1, None):
            gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
            r = run_bench(g, requests=args.write_requests, nbytes=4096, op=op, gap_ns=gap, repeat=args.repeat)
            wspeed.append({"profile": "nominal", "op": op, "arrival_gap_ns": gap, "requests": args.write_requests,
                           "cpu_s": r["host_cpu_s_all"], "median_requests_per_cpu_s": r["simulated_requests_per_cpu_s"],
                           "median_requests_per_wall_s": r["simulated_requests_per_s"], "paths": r["paths"]})
            print(f"write speed {op:6s} gap {gap:4d}: median {r['simulated_requests_per_cpu_s'] / 1e6:.2f} M req/cpu-s",
                  file=sys.stderr, flush=True)
    over = [r for r in rows if r["modeled_bytes_per_s"] > r["read_bound_bytes_per_s"]]
    doc = {
        "what": "media model: random 4 KiB reads vs offered load",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "card": "CPU, this 2-core box (one core per run)",
        "host": {"python": platform.python_version(), "machine": platform.machine(),
                 "cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0]},
        "command": "python bench/media_sweep.py --requests %d --repeat %d --speed-requests %d --speed-repeat %d"
                   " --write-requests %d"
                   % (args.requests, args.repeat, args.speed_requests, args.speed_repeat, args.write_requests),
        "bandwidth_exceeded_bound": len(over),
        "rows": rows,
        "speed": speed,
        "write_speed": wspeed,
    }
    atomic_write_json(args.out, doc, indent=1)
    print("| profile | gap ns | offered load | lat avg ns | p50 ns | p99 ns | modeled GB/s | bound GB/s (channels / sensing) | sim M req/s wall (cpu) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        L = r["latency_ns"]
        ol = "burst" if r["offered_load"] is None else f"{r['offered_load']:.2f}"
        print(f"| {r['profile']['name']} | {r['arrival_gap_ns']} | {ol} | {L['avg']:.0f} | {L['p50']:.0f} | "
              f"{L['p99']:.0f} | {r['modeled_bytes_per_s'] / 1e9:.1f} | {r['geometry_bytes_per_s'] / 1e9:.1f} / "
              f"{r['sensing_bytes_per_s'] / 1e9:.1f} | {r['simulated_requests_per_s'] / 1e6:.2f} "
              f"({r['simulated_requests_per_cpu_s'] / 1e6:.2f}) |")
    print()
    print("| profile | batch | M req/s per CPU-s (median of %d; best) | M req/s wall (median) |" % args.speed_repeat)
    print("|---|---|---|---|")
    for r in speed:
        print(f"| {r['profile']} | {r['batch']} | {r['median_requests_per_cpu_s'] / 1e6:.2f}; "
              f"{r['best_requests_per_cpu_s'] / 1e6:.2f} | {r['median_requests_per_wall_s'] / 1e6:.2f} |")
    print()
    print("| op | gap ns | M req/s per CPU-s (median of %d) |" % args.repeat)
    print("|---|---|---|")
    for r in wspeed:
        print(f"| {r['op']} | {r['arrival_gap_ns']} | {r['median_requests_per_cpu_s'] / 1e6:.2f} |")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
