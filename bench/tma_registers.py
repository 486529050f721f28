#!/usr/bin/env python3
"""Register, stack and shared-memory growth of TMA kernels rewritten by hbfcc (issue 15). CPU only: what ptxas 13
decides for sm_90a; the run-time cost follows on the GPU (bench/tma_semantics.py --native-cost).

For each kernel (the Triton 3.6 TMA fixtures of tests/fixtures/triton/: host TensorDescriptor copy, device
tl.make_tensor_descriptor copy, the pipelined TMA matmuls with host and device descriptors):
  plain   : ptxas -arch=sm_90a -v on the plain PTX;
  stub    : rewritten and linked with a helper module whose functions return at once (hbfcc.helpers.stub_helper:
            the kernel's own instrumentation, without the helpers' registers that whole-program allocation adds);
  direct  : linked with runtime_cuda/ptx/hbf_helpers.ptx (the default build);
  lean    : linked with runtime_cuda/ptx/hbf_helpers_lean.ptx (HBF_OOL_OPAQUE=1);
  trusted : the direct build with -DHBF_TMA_TRUST_LAYOUT=1 (built here): the TensorMap decoder and the box walk are
            live code (the default build fails tensor copies closed while the decoder's layout is unverified, so
            ptxas drops that code from kernels whose copies are all tensor copies).
Registers, stack frame bytes, spill bytes and shared memory per variant; the rewrite's TMA counts.

    python3 bench/tma_registers.py [--out bench/results/tma_registers.json]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hbfcommon import resources  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

KERNELS = ["tma_host_desc_copy", "tma_device_desc_copy", "tma_matmul_host_desc_s3", "tma_matmul_device_desc_s4"]
_INFO = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes cumulative stack size)?"
                   r"(?:, (\d+) bytes smem)?")


def ptxas(text: str, wd: Path, tag: str) -> dict:
    exe = shutil.which("ptxas")
    if exe is None:
        raise SystemExit("ptxas not found (CUDA 13 toolkit on PATH)")
    p = wd / f"{tag}.ptx"
    p.write_text(text)
    cp = subprocess.run([exe, "-arch=sm_90a", "-v", str(p), "-o", str(wd / f"{tag}.cubin")], capture_output=True,
                        text=True)
    if cp.returncode != 0:
        return {"error": cp.stderr[-2000:]}
    out = {"spill_store_bytes": 0, "spill_load_bytes": 0}
    for line in cp.stderr.splitlines():
        m = _INFO.search(line)
        if m and "Used" in line:
            out["registers"] = int(m.group(1))
            out["stack_bytes"] = int(m.group(2) or 0)
            out["smem_bytes"] = int(m.group(3) or 0)
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out["spill_store_bytes"] += int(m.group(1))
            out["spill_load_bytes"] += int(m.group(2))
        m = re.search(r"(\d+) bytes stack frame", line)
        if m:
            out["frame_bytes"] = max(out.get("frame_bytes", 0), int(m.group(1)))
    return out


def main(argv=None) -> int:
    from hbfcc import helpers as H
    from hbfcc.rewrite import rewrite_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "tma_registers.json"))
    ap.add_argument("--kernels", default=",".join(KERNELS))
    a = ap.parse_args(argv)
    helpers = {"stub": H.stub_helper()}
    for tag in ("direct", "lean"):
        p = resources.helper_ptx_path(tag)
        if not p.is_file():
            raise SystemExit(f"{p} missing: run `make helpers-ptx` first")
        helpers[tag] = H.load_helper(str(p))
    rows = []
    with tempfile.TemporaryDirectory(prefix="tma_regs.") as d:
        wd = Path(d)
        tp = wd / "hbf_helpers_trusted.ptx"
        r = subprocess.run([sys.executable, "setup.py", "helper-ptx", "direct", str(tp)], cwd=REPO, capture_output=True,
                           text=True, env={**os.environ, "NVCC_APPEND_FLAGS": "-DHBF_TMA_TRUST_LAYOUT=1"})
        if r.returncode != 0 or not tp.is_file():
            raise SystemExit(f"the trusted helper build failed: {r.stderr[-2000:]}")
        helpers["trusted"] = H.load_helper(str(tp))
        for name in a.kernels.split(","):
            src = (REPO / "tests" / "fixtures" / "triton" / f"{name}.ptx").read_text()
            row = {"kernel": name, "plain": ptxas(src, wd, f"{name}.plain")}
            for tag, h in helpers.items():
                res = rewrite_text(src, helper=h)
                row[tag] = ptxas(res.text, wd, f"{name}.{tag}")
                if tag == "direct":
                    fn = res.meta["timing"]["functions"][0]
                    row["admitted"] = fn["admitted"]
                    row["tma"] = fn["tma"]
                    row["tma_hooks"] = fn["tma_hooks"]
            rows.append(row)
            print(f"{name}: " + ", ".join(f"{t} {row[t].get('registers')} regs / {row[t].get('stack_bytes')} B stack"
                                          for t in ("plain", "stub", "direct", "lean", "trusted")), flush=True)
    doc = {"what": "register / stack / smem growth of the Triton TMA kernels rewritten by hbfcc (ptxas 13, sm_90a)",
           "date": _dt.date.today().isoformat(), "card": "CPU (ptxas only; no GPU)",
           "command": "python3 bench/tma_registers.py", "rows": rows}
    atomic_write_json(Path(a.out), doc)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
