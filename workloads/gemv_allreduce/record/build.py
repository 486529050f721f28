"""Build the recording kernel (gemv_ar_record.cu) into a cubin for sm_90a."""
from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from hbfcommon.errors import ToolchainError
from hbfcommon.fsutil import atomic_output
from workloads.gemv_allreduce.record import knobs

SRC = Path(__file__).with_name("gemv_ar_record.cu")
HEADER = Path(__file__).with_name("gar_record.h")
PROBE = Path(__file__).with_name("layout_probe.cu")
ROOT = Path(__file__).resolve().parents[3]
EIDOLA_INC = ROOT / "eidola" / "src"
PTX_INC = ROOT / "runtime_cuda" / "src"  # hbf_ptx.cuh, included by hbf_eidola.cuh
EIDOLA_HDR = EIDOLA_INC / "hbf_eidola.cuh"
ARCH = "sm_90a"
KERNELS = ("gemv_ar_record", "pingpong_initiator", "pingpong_responder", "timer_resolution")


def nvcc_argv(out: Path, *, arch: str = ARCH, src: Path = SRC, max_ranks: int = 8,
              eidola: bool = True, fmt: str = "-cubin") -> list[str]:
    return [knobs.NVCC, "-std=c++17", "-O3", f"-arch={arch}", fmt, f"-DGAR_MAX_RANKS={max_ranks}",
            f"-DGAR_EIDOLA={int(eidola)}", f"-I{EIDOLA_INC}", f"-I{PTX_INC}", str(src), "-o", str(out)]


def build_cubin(out_dir: str | os.PathLike[str] | None = None, *, arch: str = ARCH,
                eidola: bool = True) -> Path:
    """Compile (cached by source hash and arch); raises ToolchainError with the argv on failure."""
    src = SRC.read_bytes() + HEADER.read_bytes() + (EIDOLA_HDR.read_bytes() if eidola else b"")
    key = hashlib.sha256(src + arch.encode() + bytes([eidola])).hexdigest()[:16]
    d = Path(out_dir or knobs.CACHE_DIR)
    d.mkdir(parents=True, exist_ok=True)
    out = d / f"gemv_ar_record.{arch}.{'eidola' if eidola else 'plain'}.{key}.cubin"
    if out.exists():
        return out
    with atomic_output(out, suffix=".tmp") as tmp:
        argv = nvcc_argv(tmp, arch=arch, eidola=eidola)
        try:
            p = subprocess.run(argv, capture_output=True, text=True, env=knobs.child_env())
        except FileNotFoundError as e:
            raise ToolchainError("nvcc not found", argv=argv, returncode=None, stderr=str(e)) from e
        if p.returncode != 0:
            raise ToolchainError("nvcc failed to build the recording kernel", argv=argv,
                                 returncode=p.returncode, stderr=p.stderr)
    return out


def layout_probe(out_dir: str | os.PathLike[str]) -> dict:
    """Compile and run (on the CPU) the offsetof probe of ``struct GarParams``."""
    import json

    exe = Path(out_dir) / "gar_layout_probe"
    argv = [knobs.NVCC, "-std=c++17", f"-I{SRC.parent}", f"-I{EIDOLA_INC}", f"-I{PTX_INC}", str(PROBE), "-o", str(exe)]
    p = subprocess.run(argv, capture_output=True, text=True, env=knobs.child_env())
    if p.returncode != 0:
        raise ToolchainError("nvcc failed to build the layout probe", argv=argv,
                             returncode=p.returncode, stderr=p.stderr)
    q = subprocess.run([str(exe)], capture_output=True, text=True)
    if q.returncode != 0:
        raise ToolchainError("layout probe failed", argv=[str(exe)], returncode=q.returncode,
                             stderr=q.stderr)
    return json.loads(q.stdout)
