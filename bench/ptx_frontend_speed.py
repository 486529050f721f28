#!/usr/bin/env python3
"""Speed of the hbfcc PTX front end (parse, print, CFG) against ptxas, over the fixture corpus.

For every PTX file (tests/fixtures/triton/*.ptx, tests/fixtures/{triton,nvcc}_large/*.ptx and, when nvcc is
present, the CUDA fixtures compiled to PTX) it measures, side by side in one run:
  parse_s   CPU time of parse_module with cold operand caches (median of --reps); parse_warm_s warm
  print_s   CPU time of print_module (median of --reps)
  cfg_s     CPU time of build_cfg over every function body (median of --reps)
  ptxas_s   CPU time of `ptxas -arch=sm_90a -lineinfo -v FILE -o /dev/null` (child rusage, median of 3)
CPU time (not wall) is used so that other load on the machine does not distort the ratio.
Writes bench/results/ptx_frontend_speed.json and prints a summary.

    .venv/bin/python bench/ptx_frontend_speed.py [--reps 5] [--no-cuda]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

import ptx_corpus  # noqa: E402

from hbfcc.ptx.cfg import build_cfg  # noqa: E402
from hbfcc.ptx.parser import clear_caches, parse_module  # noqa: E402
from hbfcc.ptx.printer import print_module  # noqa: E402


def _cpu(fn, reps):
    ts = []
    out = None
    for _ in range(reps):
        t = time.process_time()
        out = fn()
        ts.append(time.process_time() - t)
    return statistics.median(ts), out


def _ptxas_cpu(path: Path, reps: int = 3):
    exe = ptx_corpus.ptxas_path()
    ts = []
    for _ in range(reps):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run([exe, "-arch=sm_90a", "-lineinfo", "-v", str(path), "-o", os.devnull],
                           capture_output=True, text=True, check=False)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            return None
        ts.append((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-cuda", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "ptx_frontend_speed.json"))
    args = ap.parse_args()
    files = dict(ptx_corpus.triton_corpus())
    files.update({p.stem: p for p in sorted((ROOT / "tests" / "fixtures" / "triton_large").glob("*.ptx"))})
    files.update({p.stem: p for p in sorted((ROOT / "tests" / "fixtures" / "nvcc_large").glob("*.ptx"))})
    if not args.no_cuda and ptx_corpus.nvcc_path():
        cache = Path(tempfile.gettempdir()) / "hbf_cuda_ptx_bench"
        files.update({f"cuda_{k}": v for k, v in ptx_corpus.build_cuda_corpus(cache).items()})
    rows = []
    for name, path in files.items():
        text = path.read_text()
        # cold: caches cleared before each parse, as in a fresh hbfcc-ptxas process per file
        parse_s, m = _cpu(lambda: (clear_caches(), parse_module(text, name))[1], args.reps)
        warm_s, _ = _cpu(lambda: parse_module(text, name), args.reps)
        print_s, _ = _cpu(lambda: print_module(m), args.reps)
        cfg_s, _ = _cpu(lambda: [build_cfg(f) for f in m.functions() if f.body is not None], args.reps)
        ptxas_s = _ptxas_cpu(path) if ptx_corpus.ptxas_path() else None
        rows.append({"name": name, "lines": text.count("\n"), "parse_s": parse_s, "parse_warm_s": warm_s,
                     "print_s": print_s,
                     "cfg_s": cfg_s, "ptxas_s": ptxas_s,
                     "ratio_parse_print_to_ptxas": (parse_s + print_s) / ptxas_s if ptxas_s else None})
        print(f"{name:60s} {rows[-1]['lines']:6d} lines  parse {parse_s*1e3:7.2f} ms  print {print_s*1e3:6.2f} ms"
              f"  cfg {cfg_s*1e3:6.2f} ms  ptxas {ptxas_s*1e3 if ptxas_s else float('nan'):8.1f} ms", flush=True)
    ratios = [r["ratio_parse_print_to_ptxas"] for r in rows if r["ratio_parse_print_to_ptxas"]]
    lines = sum(r["lines"] for r in rows)
    tot_parse = sum(r["parse_s"] for r in rows)
    summary = {
        "files": len(rows), "lines": lines,
        "parse_total_s": tot_parse, "parse_us_per_line": tot_parse / lines * 1e6,
        "print_total_s": sum(r["print_s"] for r in rows),
        "cfg_total_s": sum(r["cfg_s"] for r in rows),
        "ptxas_total_s": sum(r["ptxas_s"] or 0 for r in rows),
        "ratio_median": statistics.median(ratios) if ratios else None,
        "ratio_p90": sorted(ratios)[int(0.9 * (len(ratios) - 1))] if ratios else None,
        "ratio_max": max(ratios) if ratios else None,
    }
    res = {"what": "hbfcc PTX front end (parse+print) CPU time vs ptxas -arch=sm_90a CPU time, per file",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": platform.node(), "cpu": platform.processor() or platform.machine(),
           "python": platform.python_version(), "reps": args.reps,
           "command": "python bench/ptx_frontend_speed.py " + " ".join(sys.argv[1:]),
           "summary": summary, "rows": rows}
    atomic_write_json(args.out, res, indent=1)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
