#!/usr/bin/env python3
"""HBFCC_MERGE_LOADS on the CPU (issue 13, docs/RESULTS.md "wt/merge13"): per kernel, the rewrite with the merge off
(0: the pass of before) and on (1) -- merged requests and sites, issue groups, the inline fast path's PTX
instructions (every group's code from its first setup line to its warp vote, without the until-ask path, plus its
count block: what a thread runs per pass over its loads when the vote passes), ptxas -v registers / stack / spills of
the entries, SASS instructions (cuobjdump -sass of the cubin, Triton's cuobjdump when none is on PATH) and, for the
masked-tail reduction of the quick matrix, the counters the model books per launch. No GPU.

    PYTHONPATH=$PWD python bench/merge_loads_static.py --out /tmp/merge_loads_static.json
    PYTHONPATH=$PWD python bench/merge_loads_static.py --ptx a.ptx b.ptx --out /tmp/x.json

Default kernels: tests/hbfcc/merge_fixtures (the quick matrix's reduce fp16 8192/8192/4 warps, masked tail and
vectorized: triton.compile for sm_90a) and the corpus fixtures whose rewrite the merge changes (tests/fixtures).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from inline_multi_static import _sass_counts  # noqa: E402

from hbfcc.toolchain import parse_ptxas_v  # noqa: E402

log = logging.getLogger("merge_loads_static")

DEFAULT = ["tests/hbfcc/merge_fixtures/reduce_f16_tail.ptx", "tests/hbfcc/merge_fixtures/reduce_f16_vec.ptx",
           "tests/fixtures/triton/vector_add_f16_unaligned.ptx", "tests/fixtures/triton/fp64_int64_stride.ptx",
           "tests/fixtures/triton/branches_scalar_if.ptx", "tests/fixtures/triton/layernorm_bwd_spinlock.ptx",
           "tests/fixtures/triton/transpose_2d.ptx", "tests/fixtures/triton/bmm_3d_grid.ptx"]
_SETUP = ("%__hb_ga", "%__hb_b,", "%__hb_gp", "%__hb_gany", "%__hb_gin", "%__hb_ipb, %__hb_b", "activemask",
          "%__hb_il, %__hb_lmlt", "%__hb_im, %__hb_im")


def fast_path_instructions(text: str) -> int:
    """PTX instructions of every issue group's served path (see the module doc): summed over the module's groups."""
    lines = [ln.strip() for ln in text.split("\n")]
    total = 0
    for v, ln in enumerate(lines):
        if not (ln.startswith("vote.sync.any.pred") and "%__hb_gany" in ln):   # a group (not a helper's vote)
            continue
        s = v
        while s > 0 and any(x in lines[s - 1] for x in _SETUP):
            s -= 1
        e = next(i for i in range(v, len(lines)) if lines[i].startswith("vote.sync.all.pred"))
        skip, depth = False, 0
        for x in lines[s:e + 1]:
            if x.startswith("neg.s64 \t%__hb_ix, %__hb_iur"):
                skip = True                 # the until-ask path, to the label after it
            elif skip and x.endswith(":"):
                skip = False
            if x == "{":
                depth += 1
            elif x == "}":
                depth -= 1
            elif not skip and not depth and x.endswith(";") and not x.startswith("."):
                total += 1
        total += 5                          # the count block: 4 adds / cvt into the thread's counters, its branch
    return total


def tail_counters(merged: bool) -> dict:
    """What the model books for the quick matrix's masked tail (reduce fp16, 8192 elements per program, 4 warps, 1024
    programs, n = 1024 * 8192 - 37): per warp 64 scalar sites of 2 bytes, lane l at 16 l + 2 k of each 512-byte
    chunk (8 chunks 2 KiB apart per thread: 8 x 16 B); 64-byte granules. The last program's 37 missing elements
    are ignored in requests and media bytes (a few lanes of one program)."""
    warps = 1024 * 4
    per_warp_req = 8 if merged else 64
    gran_per_req = (32 * 16) // 64      # a request's 32 lanes span 512 B either way (a site's: stride 16 B)
    return {"requests": warps * per_warp_req, "media_bytes": warps * per_warp_req * gran_per_req * 64,
            "program_bytes": 1024 * 8192 * 2 - 37 * 2}


def measure(paths: list[Path], arch: str) -> dict:
    from hbfcc import helpers as H
    from hbfcc.rewrite import rewrite_text
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    cuobjdump = shutil.which("cuobjdump") or next(
        (str(p) for p in Path(sys.prefix).glob("lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump")), "")
    helper = H.load_helper()
    res: dict = {"arch": arch, "ptxas": ptxas, "helper": helper.path, "kernels": {}}
    for p in paths:
        rec: dict = {}
        for m in ("0", "1"):
            os.environ["HBFCC_MERGE_LOADS"] = m
            r = rewrite_text(p.read_text(), filename=str(p), helper=helper)
            fns = r.meta["timing"]["functions"]
            v: dict = {k: sum(f.get(k, 0) for f in fns) for k in ("sites", "issue_groups", "grouped_issues",
                                                               "merged_requests", "merged_sites", "moved_loads")}
            v["fast_path_ptx_instructions"] = fast_path_instructions(r.text)
            with tempfile.TemporaryDirectory() as d:
                src, cub = Path(d) / "m.ptx", Path(d) / "m.cubin"
                src.write_text(r.text)
                cp = subprocess.run([ptxas, f"-arch={arch}", "-v", str(src), "-o", str(cub)], capture_output=True,
                                    text=True)
                if cp.returncode != 0:          # recorded, not fatal (an nvcc module may need nvcc's ptxas options)
                    v["ptxas_error"] = cp.stderr[-600:]
                    rec["merge" + m] = v
                    log.warning("%s merge=%s: ptxas failed: %s", p.name, m, cp.stderr[-300:])
                    continue
                st = parse_ptxas_v(cp.stderr)       # the entries' own registers / stack / spills
                names = re.findall(r"Compiling entry function '([^']+)'", cp.stderr)
                v["entries"] = {k: st.get(k).to_dict() for k in names if not k.endswith("__hbnat")}
                if cuobjdump:
                    sass = _sass_counts(cub, cuobjdump)
                    v["sass_entry_instructions"] = {k: n for k, n in sass.items() if k in v["entries"]}
            rec["merge" + m] = v
            log.info("%s merge=%s %s", p.name, m, json.dumps(v))
        res["kernels"][p.stem] = rec
    os.environ.pop("HBFCC_MERGE_LOADS", None)
    res["tail_counters_model"] = {"merge0": tail_counters(False), "merge1": tail_counters(True)}
    return res


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ptx", nargs="*", default=None, help="PTX files (default: the merge fixtures and corpus)")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--out", default="/tmp/merge_loads_static.json")
    a = ap.parse_args()
    paths = [Path(x) if Path(x).is_absolute() else ROOT / x for x in (a.ptx or DEFAULT)]
    res = measure(paths, a.arch)
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    log.info("wrote %s", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
