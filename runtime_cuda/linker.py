"""Link CUDA C++ that calls the helpers (hbf_abi.h) directly with the helper PTX into one loadable cubin.

Offline, with the CUDA toolkit's own tools (no GPU needed): ptxas -c each PTX into relocatable
device code, then nvlink into an executable cubin for cuModuleLoadData -- separate compilation, as
nvcc -rdc does. This is the route for code written against the ABI (workloads/microbench, the
calibration probe); it holds no PTX linker of its own. Rewritten modules are linked differently, at
the PTX level, by hbfcc (hbfcc.link, one module for ptxas in whole-program mode); the runtime does
not import the compiler, and the microbenchmarks keep the separately compiled code their recorded
numbers were measured with (docs/RESULTS.md: 150 registers through nvlink against 84-96 when hbfcc
links whole-program).
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from hbfcommon.errors import ToolchainError
from hbfcommon.fsutil import atomic_output, atomic_write_bytes

from . import knobs

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parent.parent


def tool(name: str) -> str:
    p = shutil.which(name)
    if p is None:
        for d in ("/usr/local/cuda/bin", "/usr/local/cuda-13.0/bin"):
            if os.access(os.path.join(d, name), os.X_OK):
                return os.path.join(d, name)
        raise ToolchainError(f"{name} not found on PATH", argv=[name])
    return p


def run(argv: Sequence[str]) -> str:
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolchainError(f"{Path(argv[0]).name} failed", argv=list(argv), returncode=r.returncode,
                             stderr=r.stderr + r.stdout)
    return r.stdout + r.stderr


def helper_ptx(build: bool = True) -> Path:
    """The helper PTX module; built with `make helpers-ptx` semantics when missing."""
    p = knobs.helper_ptx()
    if p.exists() or not build:
        return p
    src = ROOT / "runtime_cuda" / "src" / "hbf_helpers.cu"
    with atomic_output(p, suffix=".ptx.tmp") as tmp:
        run([tool("nvcc"), "-std=c++17", "-O3", "-arch=compute_90a", "-rdc=true", "-ptx",
             f"-I{ROOT / 'runtime_cuda' / 'include'}", str(src), "-o", str(tmp)])
        text = tmp.read_text().replace("\n.visible .func", "\n.weak .func")
        tmp.write_text(text)
    return p


def cu_to_ptx(src: Path, out: Path, arch: str = "sm_90a", extra: Sequence[str] = ()) -> Path:
    run([tool("nvcc"), "-std=c++17", "-O3", f"-arch={arch}", "-rdc=true", "-ptx",
         f"-I{ROOT / 'runtime_cuda' / 'include'}", *extra, str(src), "-o", str(out)])
    return out


def link_cubin(ptx_files: Sequence[Path], out: Path, arch: str = "sm_90a", with_helpers: bool = True) -> Path:
    """ptxas -c every PTX (+ the helper PTX), nvlink into one cubin at `out` (atomic replace)."""
    files = list(ptx_files) + ([helper_ptx()] if with_helpers else [])
    with tempfile.TemporaryDirectory(prefix="hbf-link-") as td:
        objs = []
        for i, f in enumerate(files):
            o = Path(td) / f"{i}_{Path(f).stem}.o"
            run([tool("ptxas"), f"-arch={arch}", "-c", "-O3", str(f), "-o", str(o)])
            objs.append(str(o))
        tmp = Path(td) / "linked.cubin"
        run([tool("nvlink"), f"-arch={arch}", *objs, "-o", str(tmp)])
        atomic_write_bytes(out, tmp.read_bytes())
    return out


def build_microbench(outdir: Path | None = None) -> dict[str, Path]:
    """Build workloads/microbench/hbf_microbench.cu: the PTX and the cubin linked with the helpers."""
    outdir = outdir or ROOT / "build" / "microbench"
    outdir.mkdir(parents=True, exist_ok=True)
    src = ROOT / "workloads" / "microbench" / "hbf_microbench.cu"
    ptx = cu_to_ptx(src, outdir / "hbf_microbench.ptx")
    cubin = link_cubin([ptx], outdir / "hbf_microbench.cubin")
    return {"ptx": ptx, "cubin": cubin, "helper_ptx": helper_ptx(),
            "helper_sha256": hashlib.sha256(helper_ptx().read_bytes()).hexdigest()}
