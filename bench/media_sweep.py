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
import datetime
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

from hbfd.media.bench import run_bench  # noqa: E402
from hbfd.media.geometry import MediaGeometry  # noqa: E402
from hbfcommon.profile import load_profile  # noqa: E402

PROFILES = ("conservative", "nominal", "aggressive", "ocp-sg1", "ocp-sg2", "ocp-sg3")
LOADS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 2.0, None)   # None: all at once


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--speed-requests", type=int, default=1_000_000)
    ap.add_argument("--speed-repeat", type=int, default=5)
    ap.add_argument("--write-requests", type=int, default=200_000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "media_sweep.json"))
    args = ap.parse_args(argv)
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
