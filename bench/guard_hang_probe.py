#!/usr/bin/env python3
"""Diagnose the occupancy guard's hang (issue 13): the streaming reduction of bench/devpath_cost.py
(fp16, 16384 elements per program in chunks of 2048, 4 warps) built with ``.maxnreg`` never ends on the
H200 under the fixed source, while the single-chunk reductions of the stress matrix end.

    HBFCC_OCCUPANCY_GUARD=1 PYTHONUNBUFFERED=1 python3 bench/guard_hang_probe.py --out $OUT/gh [--grids 1,132]

For each grid: launch the instrumented kernel on a registered tensor (fixed 0 ns), poll its completion
for --timeout-s; on a hang, attach cuda-gdb to this process (batch: the kernels, the warps with their
PCs, the SASS around the first warp's PC) and record what it prints, then end this process (the context
cannot be recovered). Also writes the guarded kernel's SASS (cuobjdump) and its hbfcc artifact decisions.
Writes <out>/guard_hang_probe.json after every step.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import devpath_common as DC  # noqa: E402
from devpath_common import log  # noqa: E402

EPP, BLOCK = 16384, 2048


def _gdb(pid: int, extra: list[str]) -> str:
    cmds = ["set pagination off", "info cuda kernels", "info cuda warps", "info cuda lanes"] + extra
    argv = ["cuda-gdb", "-batch", "-p", str(pid)] + [x for c in cmds for x in ("-ex", c)]
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        return (cp.stdout + cp.stderr)[-60000:]
    except Exception as e:  # noqa: BLE001 -- a diagnostic: record why it could not run
        return f"cuda-gdb failed: {type(e).__name__}: {e}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--grids", default="1,132,32768")
    ap.add_argument("--timeout-s", type=float, default=8.0)
    ap.add_argument("--work", default="")
    a = ap.parse_args()
    out, jpath, work, _env = DC.prepare_run(a.out, "guard_hang_probe", a.work)
    import torch

    import runtime_cuda
    res: dict = {"what": __doc__.split("\n\n")[0], "gpu": DC.gpu_info(), "env": {
        k: os.environ.get(k) for k in ("HBFCC_OCCUPANCY_GUARD", "HBF_INLINE_ISSUE", "HBFCC_INLINE_ISSUE")}, "runs": []}
    K = DC.load_kernels(work)
    spec = {"kernel": "reduce", "dtype": "float16", "const": {"EPP": EPP, "BLOCK": BLOCK}, "warps": 4, "ints": [1]}
    tmp = work / "gh"
    tmp.mkdir(exist_ok=True)
    prof = DC.source_profile(tmp, "fixed0")
    with DC.hbfd_daemon(tmp, prof) as sock:
        s = runtime_cuda.attach(socket=sock)
        s.install_triton_hooks()
        kh = DC.warm(K, spec, "hbf")
        DC.warm(K, spec, "plain")
        res["kernel"] = {"n_regs": getattr(kh, "n_regs", None), "n_spills": getattr(kh, "n_spills", None)}
        try:
            cub = work / "reduce_hbf.cubin"
            cub.write_bytes(kh.asm["cubin"])
            sass = subprocess.run(["cuobjdump", "-sass", str(cub)], capture_output=True, text=True, timeout=120).stdout
            (out / "guard_hang_probe_reduce_hbf.sass").write_text(sass)
            res["sass_lines"] = sass.count("\n")
        except Exception as e:  # noqa: BLE001
            res["sass_error"] = str(e)
        DC.write_json(jpath, res)
        for g in [int(x) for x in a.grids.split(",") if x]:
            n = g * EPP
            x = torch.randn(n, device="cuda", dtype=torch.float16)
            o = torch.empty(g, device="cuda", dtype=torch.float32)
            r = s.register_timing_range(x.data_ptr(), x.numel() * 2, label="gh.x")
            ev = torch.cuda.Event()
            t0 = time.time()
            DC.use_ptxas("hbf")
            K.reduce_hbf[(g,)](x, o, n, EPP=EPP, BLOCK=BLOCK, num_warps=4)
            ev.record()
            while not ev.query() and time.time() - t0 < a.timeout_s:
                time.sleep(0.01)
            done = ev.query()
            rec = {"grid": g, "ended": bool(done), "seconds": round(time.time() - t0, 3)}
            log(f"grid {g}: ended {done} after {rec['seconds']} s")
            if not done:
                rec["cuda_gdb"] = _gdb(os.getpid(), ["cuda kernel 0 block 0 thread 0", "bt", "x/40i $pc-256",
                                                     "info registers"])
                res["runs"].append(rec)
                DC.write_json(jpath, res)
                log("hang: cuda-gdb output recorded; ending the process")
                os._exit(3)
            s.synchronize()
            s.unregister(r)
            res["runs"].append(rec)
            DC.write_json(jpath, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
