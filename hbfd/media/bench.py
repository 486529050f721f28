"""``hbfd bench media``: drive the media model with a synthetic stream and report modeled latency,
bandwidth and how fast the model itself runs.

    hbfd bench media --profile nominal --requests 1000000 --bytes 4096 --op read --arrival-gap-ns 20 --json

Requests arrive every ``--arrival-gap-ns`` (0: all at once) at uniformly random page-aligned
addresses (``--pattern sequential`` for consecutive ones) and are submitted in batches of
``--batch`` (the daemon's ring scan hands the model batches the same way). Reported: modeled
latency average/p50/p99 (ns), makespan (first arrival to last completion), modeled bandwidth
(bytes / makespan), the geometry's bandwidth, host wall and CPU time of submit+collect (median of
``--repeat`` runs), and simulated requests per second (requests / wall time, and per CPU second).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .engine import REQUEST_BATCH_DTYPE, MediaEngine
from .geometry import PAGE_BYTES, MediaGeometry

def make_stream(g: MediaGeometry, n: int, nbytes: int, op: str, gap_ns: int, *, seed: int = 0,
                pattern: str = "random", write_fraction: float = 0.3, start_ns: int = 1_000_000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    b = np.zeros(n, REQUEST_BATCH_DTYPE)
    b["id"] = np.arange(n, dtype=np.uint64)
    b["arrival_ns"] = start_ns + np.arange(n, dtype=np.uint64) * np.uint64(gap_ns)
    span_units = g.capacity_bytes // nbytes if nbytes >= PAGE_BYTES else g.logical_pages
    if pattern == "sequential":
        units = np.arange(n, dtype=np.int64) % span_units
    else:
        units = rng.integers(0, span_units, n)
    if nbytes >= PAGE_BYTES:
        addr = units * nbytes
    else:   # a random aligned slot inside a random page
        addr = units * PAGE_BYTES + rng.integers(0, PAGE_BYTES // nbytes, n) * nbytes
    b["media_address"] = addr.astype(np.uint64)
    b["bytes"] = nbytes
    if op == "read":
        b["op"] = 0
    elif op == "write":
        b["op"] = 1
    else:
        b["op"] = np.where(rng.random(n) < write_fraction, 1, 0)
    return b


def run_bench(geometry: MediaGeometry, *, requests: int, nbytes: int, op: str, gap_ns: int,
              batch: int = 16384, seed: int = 0, pattern: str = "random",
              write_fraction: float = 0.3, repeat: int = 1, engine_cls: Any = None) -> dict[str, Any]:
    """``engine_cls``: the engine class to drive (default ``MediaEngine``; benches pass another
    build of it for side-by-side speed)."""
    engine_cls = MediaEngine if engine_cls is None else engine_cls
    stream = make_stream(geometry, requests, nbytes, op, gap_ns, seed=seed, pattern=pattern,
                         write_fraction=write_fraction)
    walls, cpus = [], []
    for _ in range(max(1, repeat)):
        eng = engine_cls(geometry)
        outs = []
        t0 = time.perf_counter()
        c0 = time.process_time()
        for k in range(0, requests, batch):     # as the daemon's ring loop does
            part = stream[k:k + batch]
            eng.submit(part)
            eng.advance(int(part["arrival_ns"].max()))
            outs.append(eng.collect())
        outs.append(eng.collect())          # a quiet scan: everything is decided
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    wall = float(np.median(walls))
    cpu = float(np.median(cpus))
    c = np.concatenate(outs)
    bad = int((c["status"] != 1).sum())
    lat = c["modeled_ns"].astype(np.int64)
    order = np.argsort(c["id"])
    arr = stream["arrival_ns"].astype(np.int64)
    comp = arr + lat[order]
    makespan = int(comp.max() - arr.min())
    total_bytes = requests * nbytes
    st = eng.stats()
    return {
        "requests": requests, "bytes": nbytes, "op": op, "pattern": pattern, "arrival_gap_ns": gap_ns,
        "batch": batch, "seed": seed, "errors": bad,
        "offered_bytes_per_s": (nbytes * 1e9 / gap_ns) if gap_ns else None,
        "latency_ns": {"avg": float(lat.mean()), "p50": float(np.percentile(lat, 50)),
                       "p99": float(np.percentile(lat, 99)), "max": int(lat.max())},
        "makespan_ns": makespan,
        "modeled_bytes_per_s": total_bytes / (makespan * 1e-9),
        "geometry_bytes_per_s": geometry.aggregate_bytes_per_s,
        "sensing_bytes_per_s": geometry.array_read_bytes_per_s,
        "read_bound_bytes_per_s": geometry.read_bound_bytes_per_s,
        "single_read_ns": geometry.single_read_ns(min(nbytes, PAGE_BYTES)),
        "host_wall_s": wall,
        "simulated_requests_per_s": requests / wall if wall > 0 else None,
        "host_cpu_s": cpu,
        "repeat": max(1, repeat), "host_wall_s_all": walls, "host_cpu_s_all": cpus,
        "simulated_requests_per_cpu_s_best": requests / min(cpus) if min(cpus) > 0 else None,
        "simulated_requests_per_cpu_s": requests / cpu if cpu > 0 else None,
        "queueing_delay_ns": st["queueing_delay_ns"],
        "channel_utilization_mean": float(np.mean(st["channel_utilization"])),
        "gc": st["gc"], "write_amplification": st["write_amplification"],
        "paths": {k: st["counts"][k] for k in ("fast_batches", "qd_bound_batches", "qd_bound_dies",
                                                  "event_batches", "event_dies")},
        "buffers": {k: st["counts"][k] for k in ("page_reads", "senses", "buffer_hits", "coalesced_reads")},
    }


def _parser() -> argparse.ArgumentParser:
    from hbfcommon.cliargs import Parser   # one-line command-line errors, like every hbfsim tool
    ap = Parser(prog="hbfd bench media", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", required=True, help="profile file, or the name of a bundled profile (nominal, ocp-sg1, ...)")
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--op", choices=("read", "write", "mixed"), default="read")
    ap.add_argument("--arrival-gap-ns", type=int, default=0)
    ap.add_argument("--batch", type=int, default=16384, help="requests per submit (default 16384)")
    ap.add_argument("--pattern", choices=("random", "sequential"), default="random")
    ap.add_argument("--write-fraction", type=float, default=0.3, help="stores among --op mixed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="run the stream this many times; report medians")
    ap.add_argument("--json", action="store_true")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    from hbfcommon.cliargs import parse
    args = parse(_parser(), sys.argv[1:] if argv is None else argv)
    from hbfcommon.errors import HbfError
    try:
        if args.requests < 1 or args.bytes < 1 or args.arrival_gap_ns < 0 or args.batch < 1 or args.repeat < 1:
            raise HbfError("--requests, --bytes, --batch, --repeat must be >= 1 and --arrival-gap-ns >= 0")
        if not 0.0 <= args.write_fraction <= 1.0:
            raise HbfError(f"--write-fraction must be in [0, 1] (got {args.write_fraction})")
        from hbfcommon.profile import load_profile
        prof = load_profile(args.profile)
        g = MediaGeometry.from_profile(prof)
        r = run_bench(g, requests=args.requests, nbytes=args.bytes, op=args.op, gap_ns=args.arrival_gap_ns,
                      batch=args.batch, seed=args.seed, pattern=args.pattern,
                      write_fraction=args.write_fraction, repeat=args.repeat)
        r["profile"] = {"name": prof.name, "path": str(prof.path), "sha256": prof.sha256}
    except HbfError as e:
        print(f"hbfd bench media: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        L = r["latency_ns"]
        print(f"profile {r['profile']['name']}: {r['requests']} x {r['bytes']} B {r['op']} "
              f"({r['pattern']}), arrival gap {r['arrival_gap_ns']} ns")
        print(f"  modeled latency  avg {L['avg']:.0f} ns  p50 {L['p50']:.0f} ns  p99 {L['p99']:.0f} ns "
              f"(idle single read {r['single_read_ns']} ns)")
        print(f"  makespan {r['makespan_ns']} ns  modeled bandwidth {r['modeled_bytes_per_s'] / 1e9:.2f} GB/s "
              f"(channels {r['geometry_bytes_per_s'] / 1e9:.2f} GB/s, sensing {r['sensing_bytes_per_s'] / 1e9:.2f} GB/s)")
        print(f"  host wall {r['host_wall_s']:.3f} s  simulated {r['simulated_requests_per_s'] / 1e6:.2f} M req/s "
              f"(cpu {r['host_cpu_s']:.3f} s: {r['simulated_requests_per_cpu_s'] / 1e6:.2f} M req/cpu-s)")
        if r["errors"]:
            print(f"  {r['errors']} request(s) did not complete READY")
    return 0 if r["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
