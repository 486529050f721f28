#!/usr/bin/env python3
"""hbfcc rewrite time against ptxas time over the fixture corpus (issue 3, goal: median <= 0.2x).

For every module of the corpus (tests/fixtures: CUDA sources compiled by nvcc now, Triton PTX captured
on the H200): the in-process rewrite (parse + timing pass + print + helper linking) and the real
ptxas on the *original* PTX (``ptxas -arch=sm_90a -lineinfo -v X.ptx -o X.o``, what Triton runs),
each the median of ``--reps`` runs, side by side, one module after the other. Also the ptxas time of
the rewritten module (what instrumenting costs the build, helper compile included).

    python bench/hbfcc_speed.py [--reps 3] [--out bench/results/hbfcc_speed_cpu.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "fixtures"))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

from hbfcc import helpers as H  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402
from hbfcc.toolchain import find_real_ptxas, ptxas_version_text, rewriter_sha  # noqa: E402


def _ptxas_s(ptxas: str, text: str, d: Path, reps: int) -> float:
    p = d / "m.ptx"
    p.write_text(text)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        cp = subprocess.run([ptxas, "-arch=sm_90a", "-lineinfo", "-v", str(p), "-o", str(d / "m.o")],
                            capture_output=True, text=True)
        ts.append(time.perf_counter() - t0)
        if cp.returncode != 0:
            raise SystemExit(f"ptxas failed: {cp.stderr[:2000]}")
    return statistics.median(ts)


def _q(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "hbfcc_speed_cpu.json"))
    ap.add_argument("--helper", default=None, help="helper PTX (default: HBFCC_HELPER_PTX, else runtime_cuda/ptx/hbf_helpers.ptx)")
    ap.add_argument("--limit", type=int, default=0, help="first N modules only (smoke runs)")
    ns = ap.parse_args()

    import ptx_corpus
    corpus = {f"triton/{k}": v for k, v in ptx_corpus.triton_corpus().items()}
    if ptx_corpus.nvcc_path():
        cache = Path(tempfile.gettempdir()) / f"hbfcc-corpus-{os.getuid()}"
        corpus.update({f"cuda/{k}": v for k, v in ptx_corpus.build_cuda_corpus(cache).items()})
    items = sorted(corpus.items())
    if ns.limit:
        items = items[:ns.limit]
    helper = H.load_helper(ns.helper)
    ptxas = find_real_ptxas()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        for i, (name, path) in enumerate(items, 1):
            text = path.read_text()
            rts, stage = [], {}
            for _ in range(ns.reps):
                t0 = time.perf_counter()
                res = rewrite_text(text, filename=name, helper=helper)
                rts.append(time.perf_counter() - t0)
                stage = res.timings_s
            rw = statistics.median(rts)
            px = _ptxas_s(ptxas, text, d, ns.reps)
            px_rw = _ptxas_s(ptxas, res.text, d, ns.reps)
            sites = sum(f["sites"] for f in res.meta["timing"]["functions"])
            rows.append({"module": name, "lines": text.count("\n"), "sites": sites, "rewrite_s": rw,
                         "ptxas_s": px, "ratio": rw / px, "ptxas_rewritten_s": px_rw,
                         "stages_s": {k: round(v, 6) for k, v in stage.items()}})
            print(f"[{i}/{len(items)}] {name}: rewrite {rw * 1e3:.1f} ms, ptxas {px * 1e3:.1f} ms, "
                  f"ratio {rw / px:.3f}, ptxas(rewritten) {px_rw * 1e3:.1f} ms", file=sys.stderr)
    ratios = [r["ratio"] for r in rows]
    summary = {
        "modules": len(rows),
        "ratio_median": statistics.median(ratios),
        "ratio_p10": _q(ratios, 0.1), "ratio_p90": _q(ratios, 0.9),
        "ratio_min": min(ratios), "ratio_max": max(ratios),
        "rewrite_s_total": sum(r["rewrite_s"] for r in rows),
        "ptxas_s_total": sum(r["ptxas_s"] for r in rows),
        "ptxas_rewritten_over_original_median": statistics.median(r["ptxas_rewritten_s"] / r["ptxas_s"] for r in rows),
        "goal": "median ratio <= 0.2",
        "goal_met": statistics.median(ratios) <= 0.2,
    }
    doc = {"what": "hbfcc rewrite time vs ptxas time over the fixture corpus",
           "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
           "host": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
           "ptxas": {"path": ptxas, "version": ptxas_version_text(ptxas).strip().splitlines()[-2:]},
           "helper": {"path": helper.path, "sha256": helper.sha256},
           "rewriter_sha256": rewriter_sha(), "reps": ns.reps,
           "command": " ".join([Path(sys.executable).name] + sys.argv),
           "summary": summary, "rows": rows}
    atomic_write_json(ns.out, doc, end="\n", indent=1)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
