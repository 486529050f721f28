#!/usr/bin/env python3
"""HBFCC_PREFETCH_GROUP on the CPU (issue 13, stop 56): what an issue group's L2 prefetches of its own loads cost the
build. Per PTX module (default: every Triton fixture of tests/fixtures/triton and the stream reduce loop of
tests/hbfcc/merge_fixtures), the rewrite with the knob off and on (everything else the default, HBFCC_FULL_WARP=1 so
both builds are one ptxas run each), ptxas -v of the rewrite: each entry's registers, stack and spills, and the
prefetches emitted. The summary counts the entries whose registers or spills rose, fell or stayed. No GPU.

    PYTHONPATH=$PWD python bench/prefetch_group_static.py --out bench/results/prefetch_group_static_cpu.json
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hbfcc.toolchain import parse_ptxas_v  # noqa: E402

log = logging.getLogger("prefetch_group_static")


def default_paths() -> list[Path]:
    return sorted((ROOT / "tests" / "fixtures" / "triton").glob("*.ptx")) + \
        [ROOT / "tests" / "hbfcc" / "merge_fixtures" / "stream_reduce_loop.ptx"]


def build(p: Path, on: bool, arch: str, ptxas: str, helper) -> dict:
    from hbfcc.rewrite import rewrite_text
    os.environ["HBFCC_PREFETCH_GROUP"] = "1" if on else "0"
    try:
        r = rewrite_text(p.read_text(), filename=str(p), helper=helper)
    finally:
        os.environ.pop("HBFCC_PREFETCH_GROUP", None)
    fns = r.meta["timing"]["functions"]
    v: dict = {k: sum(f.get(k, 0) for f in fns) for k in ("sites", "issue_groups", "group_prefetches",
                                                       "next_prefetches")}
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "m.ptx"
        src.write_text(r.text)
        cp = subprocess.run([ptxas, f"-arch={arch}", "-v", str(src), "-o", str(Path(d) / "m.cubin")],
                            capture_output=True, text=True)
    if cp.returncode != 0:
        v["ptxas_error"] = cp.stderr[-600:]
        return v
    st = parse_ptxas_v(cp.stderr)
    names = re.findall(r"Compiling entry function '([^']+)'", cp.stderr)
    v["entries"] = {k: st.get(k).to_dict() for k in names if not k.endswith("__hbnat") and st.get(k) is not None}
    return v


def summarize(mods: dict) -> dict:
    up = down = same = spill_up = spill_down = 0
    deltas, rows = [], []
    for name, rec in mods.items():
        a, b = rec.get("off", {}).get("entries") or {}, rec.get("on", {}).get("entries") or {}
        if not rec.get("on", {}).get("group_prefetches"):
            continue
        for k in a.keys() & b.keys():
            ra, rb = a[k]["registers"], b[k]["registers"]
            sa = a[k].get("spill_store_bytes", 0) + a[k].get("stack_bytes", 0)
            sb = b[k].get("spill_store_bytes", 0) + b[k].get("stack_bytes", 0)
            deltas.append(rb - ra)
            up += rb > ra
            down += rb < ra
            same += rb == ra
            spill_up += sb > sa
            spill_down += sb < sa
            if rb != ra or sb != sa:
                rows.append({"module": name, "entry": k, "registers": [ra, rb], "stack_plus_spill": [sa, sb]})
    return {"entries_with_prefetches": len(deltas), "registers_up": up, "registers_down": down,
            "registers_same": same, "stack_or_spill_up": spill_up, "stack_or_spill_down": spill_down,
            "register_delta_median": statistics.median(deltas) if deltas else None,
            "register_delta_max": max(deltas) if deltas else None,
            "register_delta_min": min(deltas) if deltas else None, "changed": rows}


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ptx", nargs="*", default=None)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--out", default="/tmp/prefetch_group_static.json")
    a = ap.parse_args()
    from hbfcc import helpers as H
    os.environ["HBFCC_FULL_WARP"] = "1"
    ptxas = os.environ.get("HBFCC_REAL_PTXAS") or shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    paths = [Path(x) if Path(x).is_absolute() else ROOT / x for x in a.ptx] if a.ptx else default_paths()
    mods: dict = {}
    for i, p in enumerate(paths):
        helper = H.load_helper(module_text=p.read_text())
        mods[p.stem] = {"off": build(p, False, a.arch, ptxas, helper), "on": build(p, True, a.arch, ptxas, helper)}
        log.info("[%d/%d] %s: prefetches %s, %s", i + 1, len(paths), p.stem, mods[p.stem]["on"].get("group_prefetches"),
                 {k: (mods[p.stem]["off"].get("entries", {}).get(k, {}).get("registers"), e["registers"])
                  for k, e in (mods[p.stem]["on"].get("entries") or {}).items()})
    res = {"what": __doc__.split("\n\n")[0], "arch": a.arch, "ptxas": ptxas, "full_warp": "1",
           "summary": summarize(mods), "modules": mods}
    tmp = Path(a.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=1) + "\n")
    tmp.replace(a.out)
    log.info("summary %s", json.dumps({k: v for k, v in res["summary"].items() if k != "changed"}))
    log.info("wrote %s", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
