"""Issue 16: hbfcc's capacity pass over the PTX fixture corpus (CUDA sources compiled by nvcc, Triton PTX captured
on the H200) -- does every rewritten + linked module assemble with ptxas for sm_90a, how many access sites are
translated, which kernels are not capacity-admitted and why (the refusals), and what it costs in registers
against the timing pass alone. CPU only (ptxas -c); nothing runs.

    PYTHONPATH=$PWD .venv/bin/python bench/capacity_pass_corpus.py [--only triton,cuda]

Writes bench/results/capacity_pass_corpus.json.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

import ptx_corpus  # noqa: E402

from hbfcc.rewrite import rewrite_text  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402


def ptxas_regs(ptx: str, d: Path) -> tuple[bool, dict[str, int], str]:
    (d / "m.ptx").write_text(ptx)
    p = subprocess.run(["ptxas", "-arch=sm_90a", "-c", "-v", str(d / "m.ptx"), "-o", str(d / "m.o")],
                       capture_output=True, text=True)
    regs = {m.group(1): int(m.group(2)) for m in re.finditer(
        r"Compiling entry function '(\w+)'.*?Used (\d+) registers", p.stderr, flags=re.S)}
    return p.returncode == 0, regs, p.stderr[-400:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="triton,cuda")
    ap.add_argument("--out", default=str(ROOT / "bench/results/capacity_pass_corpus.json"))
    a = ap.parse_args()
    mods: dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as td:
        d = Path(td)
        if "cuda" in a.only:
            mods |= {f"cuda/{k}": v for k, v in ptx_corpus.build_cuda_corpus(d / "cuda-cache").items()}
        if "triton" in a.only:
            mods |= {f"triton/{k}": v for k, v in ptx_corpus.triton_corpus().items()}
        rows = []
        for name, path in sorted(mods.items()):
            text = path.read_text()
            row: dict = {"module": name}
            try:
                cap = rewrite_text(text, filename=str(path), passes=("timing", "capacity"))
                tim = rewrite_text(text, filename=str(path), passes=("timing",))
            except Exception as e:   # noqa: BLE001 -- a rewrite error is a result here
                rows.append(row | {"rewrite_error": f"{type(e).__name__}: {e}"[:300]})
                print(name, "rewrite error", e, flush=True)
                continue
            ok, regs, err = ptxas_regs(cap.text, d)
            ok0, regs0, _ = ptxas_regs(tim.text, d)
            fns = cap.meta.get("capacity", {}).get("functions", [])
            tm = {f["name"]: f for f in cap.meta["timing"]["functions"] if f.get("kind") == "entry"}
            row |= {"assembles": ok, "ptxas_error": None if ok else err, "sites": sum(f["sites"] for f in fns),
                    "kernels": len(tm),
                    "capacity_admitted": sum(1 for f in tm.values() if f.get("capacity_admitted")),
                    "refusals": sorted({r["reason"] for f in fns for r in f["refused"]}),
                    "timing_admitted": sum(1 for f in tm.values() if f.get("admitted")),
                    "reg_delta": {k: regs[k] - regs0[k] for k in regs if k in regs0} if ok and ok0 else None}
            rows.append(row)
            print(name, "assembles" if ok else "PTXAS ERROR", row["sites"], "sites,",
                  f"{row['capacity_admitted']}/{row['kernels']} capacity-admitted", flush=True)
    deltas = [v for r in rows if r.get("reg_delta") for v in r["reg_delta"].values()]
    reasons = collections.Counter(x for r in rows for x in r.get("refusals", []))
    doc = {"what": "issue 16: hbfcc capacity pass over the fixture corpus (ptxas -c sm_90a)",
           "date": datetime.date.today().isoformat(), "card": "CPU (this 2-core box)",
           "command": " ".join(["bench/capacity_pass_corpus.py"] + sys.argv[1:]),
           "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip(),
           "modules": len(rows), "assemble": sum(1 for r in rows if r.get("assembles")),
           "rewrite_errors": sum(1 for r in rows if "rewrite_error" in r),
           "kernels": sum(r.get("kernels", 0) for r in rows),
           "kernels_capacity_admitted": sum(r.get("capacity_admitted", 0) for r in rows),
           "kernels_timing_admitted": sum(r.get("timing_admitted", 0) for r in rows),
           "sites": sum(r.get("sites", 0) for r in rows), "refusal_reasons": dict(reasons),
           "registers_added_vs_timing": None if not deltas else {
               "median": statistics.median(deltas), "min": min(deltas), "max": max(deltas), "n": len(deltas)},
           "rows": rows}
    atomic_write_json(a.out, doc, end="\n")
    print({k: v for k, v in doc.items() if k != "rows"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
