#!/usr/bin/env python3
"""Register cost of the L2 model's hooks (docs/design.md §3.12) with ptxas on the CPU, on the kernels of
bench/helper_registers.py: the direct helper build of a baseline revision (--baseline-rev, default HEAD: the
helpers as committed; the first run compared 9ef7f50, before the L2 model, which today's rewrite can no longer
link: it calls __hb_tma, added after it), the default direct build
now (no hooks: -DHBF_L2_MODEL=0 is its default) and the L2 build (-DHBF_L2_MODEL=1, runtime_cuda/ptx/
hbf_helpers_l2.ptx; the runtime knob HBF_L2_MODEL only decides at run time, so its registers are the same whether
the model is on or off): registers, spill stores, STL/LDL in the kernel's loops, and the function that sets the
kernel's register maximum (whole-program allocation).

    python3 bench/l2_registers.py [--out bench/results/l2_registers.json] [--kernels stream,softmax_row,...]
                                  [--baseline-rev HEAD]
"""
from __future__ import annotations

import argparse
import re
import datetime as _dt
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import helper_registers as HR  # noqa: E402

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

VARIANTS = {"default": (), "l2_build": ("-DHBF_L2_MODEL=1",)}


def _opcodes(cubin: Path) -> list[str]:
    """The cubin's SASS as (predicate, opcode) per instruction, operands left out (offsets and symbol names
    differ: the state block's counters grew, the helpers' compilation-unit hash)."""
    t = HR._run([HR._nvdisasm(), "-c", str(cubin)]).stdout
    return [(m.group(1) or "") + m.group(2) for m in
            (re.search(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", ln) for ln in t.splitlines()) if m]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "l2_registers.json"))
    ap.add_argument("--kernels", default="stream," + ",".join(HR.FIXTURES))
    ap.add_argument("--baseline-rev", default="HEAD",
                    help="the helpers to compare with (a revision whose helpers define every function today's rewrite "
                         "calls; 9ef7f50, before the L2 model, no longer links)")
    a = ap.parse_args(argv)
    names = [k for k in a.kernels.split(",") if k]
    known = {"stream", *HR.FIXTURES}
    if not names or set(names) - known:
        ap.error(f"unknown kernel(s) {sorted(set(names) - known)} (known: {', '.join(sorted(known))})")
    wd = Path(tempfile.mkdtemp(prefix="hbf-l2regs-"))
    src = REPO / "runtime_cuda" / "src" / "hbf_helpers.cu"
    helpers = {"before": HR.build_helper(HR.baseline_helper_src(a.baseline_rev, wd), wd / "before.ptx")}
    helpers.update({tag: HR.build_helper(src, wd / f"{tag}.ptx", d) for tag, d in VARIANTS.items()})
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
        seqs = {t: _opcodes(kd / f"{t}.cubin") for t in ("before", "default")}
        row["default_same_opcodes_as_before"] = seqs["before"] == seqs["default"]
        row["sass_instructions"] = {t: len(v) for t, v in seqs.items()}
        row["default_minus_before"] = (row["default"]["registers"] or 0) - (row["before"]["registers"] or 0)
        row["l2_minus_default"] = (row["l2_build"]["registers"] or 0) - (row["default"]["registers"] or 0)
        rows.append(row)
        print(f"{n:22s} " + " | ".join(f"{t} {row[t]['registers']:>4} spill {row[t]['spill_stores']:>3} "
                                       f"loop {row[t]['hot_loop_STL_LDL']:>3} max {row[t]['sets_max']}"
                                       for t in helpers), flush=True)
        atomic_write_json(a.out, {"experiment": "L2 model hooks: registers (ptxas -arch=sm_90a, direct helper build)",
                                  "date": _dt.date.today().isoformat(), "card": "CPU (this 2-core box): ptxas only",
                                  "command": "python3 bench/l2_registers.py " + " ".join(sys.argv[1:]),
                                  "rows": rows}, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
