#!/usr/bin/env python3
"""Native stream kernels at forced occupancy (issue 13 design input; H200).

The instrumented stream runs at 4 resident blocks per SM (118 registers) where the plain build runs 10 (41).
This measures what occupancy alone costs the *plain* kernels: the same Triton reduce and copy as
bench/devpath_cost.py's stream part (fp16, 1 GiB, EPP 16384, BLOCK 2048, 4 warps), launched with extra dynamic
shared memory so that the driver allows 10 / 8 / 6 / 5 / 4 blocks per SM (checked with
cuOccupancyMaxActiveBlocksPerMultiprocessor), timed with CUDA events, all settings interleaved in every round.
If the plain kernel at 4 blocks/SM is as slow as the instrumented one, occupancy explains the stream's
remaining gap and a call-free body at the plain kernel's registers would close it.

    python3 bench/occupancy_native.py [--out bench/results/occupancy_native.json] [--rounds 15]
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

log = logging.getLogger("occupancy_native")

SM_SHARED = 233472          # H200: shared memory per SM usable by blocks (bytes)
RESERVED = 1024             # per block, reserved by the system
TARGET_BLOCKS = (None, 8, 6, 5, 4)   # None = the plain launch (no extra shared memory)


def smem_for(blocks: int) -> int:
    return (SM_SHARED // blocks - RESERVED) // 128 * 128


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "occupancy_native.json"))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--gib", type=float, default=1.0)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    import torch
    from cuda.bindings import driver as cu
    import devpath_common as DC

    work = Path(tempfile.mkdtemp(prefix="hbf-occ."))
    # the stream part's own kernels (devpath_common.KERNEL_BODY), one copy per setting so that each has
    # its own compiled kernel (the launch's shared memory is per compiled kernel)
    sfx = [f"occ{i}" for i in range(len(TARGET_BLOCKS))]
    K = DC.import_source(work / "tk_occ.py", DC.KERNEL_HEADER + "".join(DC.KERNEL_BODY.replace("SFX", x) for x in sfx),
                         "tk_occ")
    EPP, BLOCK = 16384, 2048            # bench/devpath_cost.py's STREAM_EPP, STREAM_BLOCK
    n = int(a.gib * (1 << 30)) // 2 // EPP * EPP
    G = n // EPP
    x = torch.randn(n, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    out = torch.empty(G, device="cuda", dtype=torch.float32)
    res: dict = {"what": __doc__.split("\n\n")[0], "gpu": DC.gpu_info(), "n": n, "grid": G, "rounds": a.rounds,
                 "command": " ".join(["python3", "bench/occupancy_native.py"] + sys.argv[1:]), "kernels": {}}
    for name, args in (("reduce", (x, out, n)), ("copy", (x, y, n))):
        variants = []
        for i, tb in enumerate(TARGET_BLOCKS):
            ck = getattr(K, f"{name}_{sfx[i]}").warmup(*args, EPP=EPP, BLOCK=BLOCK, grid=(G,), num_warps=4)
            ck._init_handles()
            base_smem = int(ck.metadata.shared or 0)
            smem = base_smem if tb is None else max(base_smem, smem_for(tb))
            fn = cu.CUfunction(int(ck.function))
            if smem > 48 * 1024:
                err, = cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                             smem)
                if err != cu.CUresult.CUDA_SUCCESS:
                    raise SystemExit(f"cuFuncSetAttribute({smem}) failed: {err}")
            ck.packed_metadata = (ck.metadata.num_warps, ck.metadata.num_ctas, smem)
            bps = DC.driver_blocks_per_sm(int(ck.function), 128, smem)
            variants.append({"target_blocks": tb, "smem": smem, "blocks_per_sm": bps, "regs": ck.n_regs, "ck": ck})
            log.info("%s setting %d: smem %d -> %s blocks/SM (regs %s)", name, i, smem, bps, ck.n_regs)
        # a CompiledKernel's runner takes every argument of the signature, constexprs included
        runners = [(lambda r: (lambda *xs: r(*xs, EPP, BLOCK)))(v["ck"][(G, 1, 1)]) for v in variants]
        for r in runners:            # warm
            r(*args)
        torch.cuda.synchronize()
        ref = out.clone() if name == "reduce" else None
        times: list[list[float]] = [[] for _ in variants]
        for _ in range(a.rounds):
            for i, r in enumerate(runners):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                r(*args)
                e.record()
                e.synchronize()
                times[i].append(s.elapsed_time(e))
        if ref is not None and not torch.equal(ref, out):
            raise SystemExit("reduce output changed between launches")
        if name == "copy" and not torch.equal(x, y):
            raise SystemExit("copy output differs from its input")
        base = statistics.median(times[0])
        rows = []
        for v, t in zip(variants, times):
            med = statistics.median(t)
            rows.append({k: v[k] for k in ("target_blocks", "smem", "blocks_per_sm", "regs")} |
                        {"ms_median": med, "ms_min": min(t), "ms_max": max(t), "ratio_to_plain": med / base})
            log.info("%s %s blocks/SM: %.4f ms (x%.2f)", name, v["blocks_per_sm"], med, med / base)
        res["kernels"][name] = rows
    DC.write_json(Path(a.out), res)
    log.info("-> %s", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
