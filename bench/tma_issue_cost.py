#!/usr/bin/env python3
"""The TMA issue cost on the CPU (issue 15; docs/design.md §3.3 "The issue cost"): what one copy of the Stop-44
Triton kernels costs the issuing thread in the per-run issue (hbf_tma.cuh built with -DHBF_TMA_BATCH=0, and the
issue of a421f2d, before this change) and in the batched one (the default), and what the helper costs a kernel.

    python3 bench/tma_issue_cost.py --out bench/results        # CPU, ~1 min (nvcc, ptxas)

Two parts, both CPU only (the device time comes from bench/gpu_calls/stop45_tmacost.sh):

* work per copy, counted from the issue's loops for each copy shape of bench/tma_triton.py's kernels (the boxes'
  runs from hbfcommon/tensormap.box_runs on the kernels' geometry, the requests as tests/tma/test_tma_cost.py
  counts them): box-walk row visits (the per-run issue walks the box once per chunk of HB_TMA_CHUNK runs), range
  classifications, media-request calls (hb_group_request: admission, refresh claim, deadline, bias each),
  counter atomics (a421f2d: requests, bytes, program bytes, modeled ns per request; since: 4 per copy), for the
  FIXED source (stop 44's) and for CURVE / FAST (the requests are still made, per page span).
* the helper's static cost: ptxas -v of a kernel that calls __hb_tma (whole program: the registers the helper's call
  graph needs), for the direct and the lean build of a421f2d, of the per-run build and of the batched one; the sum
  of the lean build's stack frames (devstate.HELPER_STACK_BOUND) and the PTX instructions of the TMA functions.
"""
from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hbfcommon import tensormap as tm  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("tma_issue_cost")

BASE_REV = "a421f2d"         # the issue before the batched path (stop 44's helpers)
CHUNK = 16                   # HB_TMA_CHUNK
PAGE_SHIFT, GRANULE_SHIFT = 12, 6
FP16, BF16_DTYPE = 2, 6      # tm dtype 6: 2-byte float (the kernels' fp16)

KERNEL = r'''
#include "hbf_helpers.cu"
extern "C" __global__ void k_tma(unsigned long long g, unsigned int* o) {
    o[threadIdx.x] = (unsigned int)__hb_tma(g, threadIdx.x, 1, 2, 3, 4, 128, 0, o[0], 0, 0, 7);
}
'''


def copy_shapes() -> dict[str, tuple[tm.TensorMap, tuple[int, int], int]]:
    """The kernels' load boxes (tma_triton.py: matmul M = N = K = 1024, BM = BN = 128, BK = 64, boxes clamped to a
    128-byte inner extent; attention N_CTX = 1024, D = 64, BM = 128, BN = 64) -> (map, coords, copies per launch)."""
    def m2(rows: int, cols: int, box_rows: int, box_cols: int) -> tm.TensorMap:
        return tm.TensorMap(base=1 << 32, dtype=BF16_DTYPE, dims=(cols, rows), gstrides=(cols * FP16,),
                            box=(box_cols, box_rows), estrides=(1, 1), interleave=0, swizzle=3, l2promo=2, fill=0)
    return {"matmul A [128 x 64]": (m2(1024, 1024, 128, 64), (64, 128), 1024),
            "matmul B [64 x 64] (two per tile)": (m2(1024, 1024, 64, 64), (64, 64), 2048),
            "attn K/V [64 x 64]": (m2(8 * 1024, 64, 64, 64), (0, 64), 2048)}


def per_copy_work(m: tm.TensorMap, coords) -> dict:
    runs, _ = tm.box_runs(m, coords)
    page, g = 1 << PAGE_SHIFT, 1 << GRANULE_SHIFT
    nreq = 0
    for a, n in runs:
        media, left = a - m.base, n
        while left:
            pl = min(page - media % page, left)
            nreq += 1
            media += pl
            left -= pl
    chunks = -(-len(runs) // CHUNK)
    tma_reds = 4                                   # tma_copies, tma_hbf_bytes, overhead_ns (+ hbm / oob when any)
    return {
        "runs": len(runs), "requests": nreq,
        "per_run_a421f2d": {"walk_row_visits": chunks * len(runs), "classifications": len(runs),
                            "request_calls": nreq, "counter_atomics": 4 * nreq + tma_reds},
        "batched_fixed": {"walk_row_visits": len(runs), "classifications": 1, "request_calls": 1,
                          "counter_atomics": 4 + tma_reds},
        "batched_curve_fast": {"walk_row_visits": chunks * len(runs), "classifications": 1, "request_calls": nreq,
                               "counter_atomics": 4 + tma_reds},
    }


def _regs(src_dir: Path, work: Path, tag: str, defines: list[str]) -> dict:
    k = work / f"k_{tag}.cu"
    k.write_text(KERNEL)
    r = subprocess.run(["nvcc", "-std=c++17", "-O3", "-arch=sm_90a", "-cubin", f"-I{src_dir / 'runtime_cuda' / 'include'}",
                        f"-I{src_dir / 'runtime_cuda' / 'src'}", *defines, "-Xptxas", "-v", str(k), "-o",
                        str(work / f"k_{tag}.cubin")], capture_output=True, text=True)
    if r.returncode:
        return {"error": r.stderr[-2000:]}
    m = re.search(r"Used (\d+) registers.*?(\d+) bytes cumulative stack size", r.stderr)
    return {"registers": int(m.group(1)), "cumulative_stack_bytes": int(m.group(2))}


def _lean(src_dir: Path, work: Path, tag: str, defines: list[str]) -> dict:
    ptx = work / f"lean_{tag}.ptx"
    r = subprocess.run(["nvcc", "-std=c++17", "-O3", "-arch=compute_90a", "-rdc=true", "-ptx",
                        f"-I{src_dir / 'runtime_cuda' / 'include'}", "-DHBF_OOL_OPAQUE=1", *defines,
                        str(src_dir / "runtime_cuda" / "src" / "hbf_helpers.cu"), "-o", str(ptx)],
                       capture_output=True, text=True)
    if r.returncode:
        return {"error": r.stderr[-2000:]}
    r = subprocess.run(["ptxas", "-arch=sm_90a", "-c", "-v", str(ptx), "-o", str(work / f"lean_{tag}.o")],
                       capture_output=True, text=True)
    frames = re.findall(r"Function properties for (\S+)\n\s+(\d+) bytes stack frame", r.stderr)
    tma_instr = {}
    # function definitions (a prototype ends with ';' before any '{'): their instruction lines up to the closing '}'
    blocks = re.split(r"^(?=(?:\.visible |\.weak )?\.func)", ptx.read_text(), flags=re.M)
    for b in blocks:
        head = re.match(r"(?:\.visible |\.weak )?\.func[^(]*?(?:\([^)]*\)\s*)?(\w+)", b)
        if not head or "tma" not in head.group(1) or "{" not in b:
            continue
        brace, semi = b.index("{"), b.find(";")
        if 0 <= semi < brace and not re.search(r"\)\s*\{", b[:brace + 1]) and b[:brace].count("(") == 0:
            continue
        body = b[brace:b.index("\n}", brace)] if "\n}" in b[brace:] else b[brace:]
        name = re.sub(r"_ZN\d+_INTERNAL_\w+?hbf_helpers_cu_[0-9a-f]+", "", head.group(1))[:40]
        tma_instr[name] = sum(1 for ln in body.splitlines()
                              if ln.strip().endswith(";") and not ln.strip().startswith((".reg", ".param", ".local", "//")))
    return {"ptxas_rc": r.returncode, "frames_sum_bytes": sum(int(b) for _, b in frames),
            "tma_frames": {re.sub(r"_ZN\d+_INTERNAL_\w+?hbf_helpers_cu_[0-9a-f]+", "", n)[:40]: int(b)
                           for n, b in frames if "tma" in n},
            "tma_ptx_instructions": tma_instr}


def static_cost(work: Path) -> dict:
    base = work / "base"
    base.mkdir(parents=True, exist_ok=True)
    subprocess.run(f"git -C {ROOT} archive {BASE_REV} runtime_cuda | tar x -C {base}", shell=True, check=True)
    out = {}
    for tag, src, d in ((f"{BASE_REV} (before)", base, []), ("per-run (-DHBF_TMA_BATCH=0)", ROOT, ["-DHBF_TMA_BATCH=0"]),
                        ("batched (default)", ROOT, [])):
        t = re.sub(r"\W+", "_", tag)
        out[tag] = {"direct_kernel": _regs(src, work, t + "_d", d),
                    "lean_kernel": _regs(src, work, t + "_l", d + ["-DHBF_OOL_OPAQUE=1"]),
                    "lean_build": _lean(src, work, t, d)}
        log.info("%s: %s", tag, out[tag])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    t = time.time()
    work = {name: per_copy_work(m, c) | {"copies_per_launch": n} for name, (m, c, n) in copy_shapes().items()}
    for name, w in work.items():
        log.info("%s: %s", name, w)
    res = {"what": "TMA issue cost per copy (counted from the issue's loops) and the helper's static cost",
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "card": "CPU",
           "command": "python3 bench/tma_issue_cost.py --out bench/results", "per_copy": work}
    with tempfile.TemporaryDirectory(prefix="tmacost") as d:
        res["static"] = static_cost(Path(d))
    res["seconds"] = round(time.time() - t, 1)
    out = Path(a.out) / "tma_issue_cost_cpu.json"
    atomic_write_json(out, res, indent=1, end="\n")
    log.info("wrote %s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
