"""Build a device header's host probe with the host compilers found here (nvcc as CUDA, c++ as C++): the tests that
check a header's device logic as host code (hbf_curve.h, hbf_thc.h) parametrize over both."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def host_compilers() -> list[tuple[str, list[str]]]:
    found = []
    nvcc = shutil.which("nvcc")
    if nvcc:
        found.append(("nvcc", [nvcc, "-x", "cu", "-std=c++17", "-O2"]))
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx:
        found.append(("c++", [cxx, "-x", "c++", "-std=c++17", "-O2", "-Wall", "-Werror"]))
    return found


def compiler_params() -> list[str]:
    """The fixture params: one per compiler found ("none" when there is none: the fixture then skips)."""
    return [c[0] for c in host_compilers()] or ["none"]


def build_probe(tmp_path_factory, compiler: str, what: str, source: str, include: Path) -> Path:
    """``source`` compiled with ``compiler`` (a name from :func:`host_compilers`) against ``include``; the
    executable's path. Skips when no host compiler exists; a compile error fails with the compiler's output."""
    comps = dict(host_compilers())
    if compiler not in comps:
        pytest.skip(f"no host compiler (nvcc or c++) to build {what} as host code")
    d = tmp_path_factory.mktemp(f"{what.split('.')[0]}_{compiler}")
    src = d / "probe.cu"
    src.write_text(source)
    exe = d / "probe"
    r = subprocess.run([*comps[compiler], f"-I{include}", str(src), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe
