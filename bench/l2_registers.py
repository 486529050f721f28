#!/usr/bin/env python3
"""Register cost of the L2 model's hooks (docs/design.md §3.10) with ptxas on the CPU: the direct helper build
with the hooks compiled out (-DHBF_L2_MODEL=0: the helpers as before the L2 model) vs compiled in (the default;
the runtime knob HBF_L2_MODEL only decides at run time, so the registers are the same whether it is on or off),
on the kernels of bench/helper_registers.py: registers, spill stores, STL/LDL in the kernel's loops, and the
function that sets the kernel's register maximum (whole-program allocation).

    python3 bench/l2_registers.py [--out bench/results/l2_registers.json] [--kernels stream,softmax_row,...]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import helper_registers as HR  # noqa: E402

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

VARIANTS = {"l2_compiled_out": ("-DHBF_L2_MODEL=0",), "l2_hooks": ()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "l2_registers.json"))
    ap.add_argument("--kernels", default="stream," + ",".join(HR.FIXTURES))
    a = ap.parse_args(argv)
    names = [k for k in a.kernels.split(",") if k]
    known = {"stream", *HR.FIXTURES}
    if not names or set(names) - known:
        ap.error(f"unknown kernel(s) {sorted(set(names) - known)} (known: {', '.join(sorted(known))})")
    wd = Path(tempfile.mkdtemp(prefix="hbf-l2regs-"))
    src = REPO / "runtime_cuda" / "src" / "hbf_helpers.cu"
    helpers = {tag: HR.build_helper(src, wd / f"{tag}.ptx", d) for tag, d in VARIANTS.items()}
    srcs = HR.kernel_sources(wd, names)
    rows = []
    for n in names:
        kd = wd / n
        kd.mkdir(exist_ok=True)
        row = {"kernel": n}
        for tag, hptx in helpers.items():
            out = kd / f"{tag}.ptx"
            HR._run([sys.executable, "-m", "hbfcc.cli", "rewrite", str(srcs[n]), "-o", str(out), "--helper",
                     str(hptx)], cwd=REPO)
            info = HR.ptxas_info(out, kd / f"{tag}.cubin")
            sass = HR.sass_analysis(kd / f"{tag}.cubin")
            ent = next(iter(info))
            i, s = info[ent], sass.get(ent, {})
            row[tag] = {"registers": i.get("registers"), "spill_stores": i.get("spill_stores"),
                        "stack_frame": i.get("stack_frame"), "hot_loop_STL_LDL": (s.get("hot_loop_STL") or 0) + (s.get("hot_loop_LDL") or 0),
                        "sets_max": s.get("sets_max"),
                        "function_max_register": dict(list((s.get("function_max_register") or {}).items())[:6])}
        row["delta_registers"] = (row["l2_hooks"]["registers"] or 0) - (row["l2_compiled_out"]["registers"] or 0)
        rows.append(row)
        print(f"{n:22s} out {row['l2_compiled_out']['registers']:>4} spill {row['l2_compiled_out']['spill_stores']:>4} "
              f"loopSTL/LDL {row['l2_compiled_out']['hot_loop_STL_LDL']:>3} | hooks {row['l2_hooks']['registers']:>4} "
              f"spill {row['l2_hooks']['spill_stores']:>4} loopSTL/LDL {row['l2_hooks']['hot_loop_STL_LDL']:>3} "
              f"max by {row['l2_hooks']['sets_max']}", flush=True)
        atomic_write_json(a.out, {"experiment": "L2 model hooks: registers (ptxas -arch=sm_90a, direct helper build)",
                                  "date": _dt.date.today().isoformat(), "card": "CPU (this 2-core box): ptxas only",
                                  "command": "python3 bench/l2_registers.py " + " ".join(sys.argv[1:]),
                                  "rows": rows}, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
