"""CPU time and minor page faults of a read burst's final quiet-scan collect (the one that decides every deferred
transfer), with the compiled twins on (issue 14 item 5). The burst is run as bench/media_sweep.py --engine-speed
runs it (batches of --batch, advance, collect); each repetition builds a fresh engine in this process. Run it
with and without glibc's ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` to see what returning freed
memory to the kernel (and faulting it in again) costs. CPU only.

    PYTHONPATH=$PWD .venv/bin/python bench/media_final_collect_faults.py [--repeat 5] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="nominal")
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=16384)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None, help="JSON file (default: none, the table only)")
    args = ap.parse_args(argv)
    os.environ["HBFD_ACCEL"] = "on"
    from hbfcommon.profile import load_profile
    from hbfd.media.bench import make_stream
    from hbfd.media.engine import MediaEngine, warm_twins
    from hbfd.media.geometry import MediaGeometry
    g = MediaGeometry.from_profile(load_profile(args.profile))
    warm_twins(g)
    s = make_stream(g, args.requests, 4096, "read", 0, seed=0)
    runs = []
    for _ in range(args.repeat + 1):               # (the first: a warm-up, not reported)
        e = MediaEngine(g)
        for k in range(0, len(s), args.batch):
            p = s[k:k + args.batch]
            e.submit(p)
            e.advance(int(p["arrival_ns"].max()))
            e.collect()
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        c0 = time.process_time_ns()
        e.collect()
        runs.append({"cpu_ms": (time.process_time_ns() - c0) / 1e6,
                     "minor_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0})
    runs = runs[1:]
    doc = {"what": "read burst: the final quiet-scan collect, CPU ms and minor page faults (HBFD_ACCEL=on)",
           "profile": args.profile, "requests": args.requests, "batch": args.batch,
           "malloc_env": {k: os.environ.get(k) for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")},
           "loadavg_1m": os.getloadavg()[0], "runs": runs,
           "cpu_ms_median": float(np.median([r["cpu_ms"] for r in runs])),
           "minor_faults_median": float(np.median([r["minor_faults"] for r in runs]))}
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    sys.stdout.write(f"final collect: {doc['cpu_ms_median']:.1f} CPU ms (runs "
                     f"{min(r['cpu_ms'] for r in runs):.1f}-{max(r['cpu_ms'] for r in runs):.1f}), "
                     f"{doc['minor_faults_median']:.0f} minor faults (median of {len(runs)}), malloc env "
                     f"{doc['malloc_env']}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
