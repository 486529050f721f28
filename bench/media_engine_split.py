"""Where the media engine's CPU time goes in a read stream, with the compiled twins on (issue 14 item 5): CPU
time of the whole submit / advance / collect loop (as bench/media_sweep.py --engine-speed runs it), split into
the compiled read pass (``kernels._read_pass``), the rest of ``submit``, ``advance``, the per-batch ``collect``
and the final quiet-scan ``collect`` (which decides every deferred transfer), and inside that quiet scan the
packed-key channel loop. Median of --repeat runs after one warm-up run. CPU only.

    PYTHONPATH=$PWD .venv/bin/python bench/media_engine_split.py [--requests 200000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

REGIMES = (("read burst b16384", "nominal", None, 16384), ("read 10% b16384", "nominal", 0.1, 16384),
           ("read burst b4096", "nominal", None, 4096), ("read 10% b4096", "nominal", 0.1, 4096),
           ("read burst b4096 ocp-sg1", "ocp-sg1", None, 4096), ("read 10% b4096 ocp-sg1", "ocp-sg1", 0.1, 4096))


def split(g, stream, b: int) -> dict:
    """One run: CPU ms per part."""
    from hbfd.media import engine as E
    acc = dict.fromkeys(("read_pass", "submit_rest", "advance", "collect", "final_collect", "final_chan_loop"), 0)
    T = time.process_time_ns
    orig_pass, orig_packed = E._read_pass, E._chan_fcfs_packed

    def timed(key, f):
        def w(*a):
            t = T()
            r = f(*a)
            acc[key] += T() - t
            return r
        return w
    E._read_pass, E._chan_fcfs_packed = timed("read_pass", orig_pass), timed("final_chan_loop", orig_packed)
    try:
        eng = E.MediaEngine(g)
        t_all = T()
        sub = 0
        for k in range(0, len(stream), b):
            part = stream[k:k + b]
            t0 = T()
            eng.submit(part)
            t1 = T()
            eng.advance(int(part["arrival_ns"].max()))
            t2 = T()
            eng.collect()
            t3 = T()
            sub += t1 - t0
            acc["advance"] += t2 - t1
            acc["collect"] += t3 - t2
        t0 = T()
        eng.collect()
        acc["final_collect"] = T() - t0
        total = T() - t_all
    finally:
        E._read_pass, E._chan_fcfs_packed = orig_pass, orig_packed
    acc["submit_rest"] = sub - acc["read_pass"]
    out = {k: v / 1e6 for k, v in acc.items()}
    out["total"] = total / 1e6
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "media_engine_split.json"))
    args = ap.parse_args(argv)
    os.environ["HBFD_ACCEL"] = "on"
    from hbfcommon.fsutil import atomic_write_json
    from hbfcommon.profile import load_profile
    from hbfd.media.bench import make_stream
    from hbfd.media.engine import warm_twins
    from hbfd.media.geometry import MediaGeometry
    rows = []
    for name, pname, load, b in REGIMES:
        g = MediaGeometry.from_profile(load_profile(pname))
        warm_twins(g)
        gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
        stream = make_stream(g, args.requests, 4096, "read", gap)
        split(g, stream, b)
        runs = [split(g, stream, b) for _ in range(args.repeat)]
        med = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
        rows.append({"regime": name, "batch": b, "requests": args.requests, "cpu_ms_median": med,
                     "ns_per_request": {k: v * 1e6 / args.requests for k, v in med.items()}})
        print(f"{name:26s} " + "  ".join(f"{k} {v:6.1f}" for k, v in med.items()) + "  (CPU ms, median)",
              file=sys.stderr, flush=True)
    doc = {"what": "media engine CPU time split, read streams, HBFD_ACCEL=on (issue 14 item 5)",
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "card": "CPU (this 2-core box)",
           "loadavg_1m": os.getloadavg()[0],
           "command": "python bench/media_engine_split.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "rows": rows}
    atomic_write_json(args.out, doc, indent=1)
    print(json.dumps({r["regime"]: {k: round(v) for k, v in r["ns_per_request"].items()} for r in rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
