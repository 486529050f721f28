"""CMake builds through hbfcc: as CUDACXX, as CMAKE_CUDA_COMPILER_LAUNCHER, and as FindCUDA's
CUDA_NVCC_EXECUTABLE. The built objects' embedded PTX must carry the helper calls."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402
from test_cli_nvcc import check_object, hbfcc_env  # noqa: E402

PROJ = Path(__file__).resolve().parent / "cmake_project"

pytestmark = pytest.mark.slow


def cmake_build(src: Path, build: Path, env: dict, *defs: str) -> None:
    cmake = U.tool("cmake")
    U.tool("nvcc")
    cp = subprocess.run([cmake, "-S", str(src), "-B", str(build), *defs], capture_output=True, text=True, env=env)
    assert cp.returncode == 0, cp.stdout[-4000:] + cp.stderr[-4000:]
    cp = subprocess.run([cmake, "--build", str(build), "--", "VERBOSE=1"], capture_output=True, text=True, env=env)
    assert cp.returncode == 0, cp.stdout[-4000:] + cp.stderr[-4000:]
    return cp


def check_saxpy_build(build: Path, cp, link_artifact: bool = True) -> None:
    objdir = build / "CMakeFiles" / "saxpy.dir"
    for name in ("saxpy.cu.o", "scale.cu.o"):
        check_object(objdir / name)
        doc = json.loads((objdir / (name + ".hbfcc.json")).read_text())
        assert doc["modules"], name
    # the kernel's module calls scale() in the other module: recorded, and not claimed as observed
    doc = json.loads((objdir / "saxpy.cu.o.hbfcc.json").read_text())
    k = [k for m in doc["modules"] for k in m["kernels"]][0]
    assert k["external_calls"] == ["_Z5scalef"] and not k["admitted"]
    assert (build / "saxpy").is_file()       # nvlink accepted two modules carrying the helpers (rdc: module-local)
    if not link_artifact:     # the launcher only prefixes compile rules, not the device link
        assert not (objdir / "cmake_device_link.o.hbfcc.json").exists()
        return
    # the device link resolves admission across the two modules
    link = json.loads((objdir / "cmake_device_link.o.hbfcc.json").read_text())
    assert link["kernels"] == [{"name": "_Z5saxpyifPKfPf", "admitted": True, "reason": ""}]


def test_cmake_cudacxx(tmp_path):
    env = hbfcc_env(tmp_path, HBFCC_BASELINE=0, CUDACXX=U.console("hbfcc"))
    cp = cmake_build(PROJ, tmp_path / "b", env)
    assert "hbfcc" in cp.stdout
    check_saxpy_build(tmp_path / "b", cp)


def test_cmake_compiler_launcher(tmp_path):
    env = hbfcc_env(tmp_path, HBFCC_BASELINE=0, CUDACXX=U.tool("nvcc"))
    cp = cmake_build(PROJ, tmp_path / "b", env, f"-DCMAKE_CUDA_COMPILER_LAUNCHER={U.console('hbfcc')}")
    assert U.console("hbfcc") + " " in cp.stdout
    check_saxpy_build(tmp_path / "b", cp, link_artifact=False)


def test_findcuda_nvcc_executable(tmp_path):
    env = hbfcc_env(tmp_path, HBFCC_BASELINE=0, CUDA_NVCC_EXECUTABLE=U.console("hbfcc"))
    cmake_build(PROJ / "findcuda", tmp_path / "b", env)
    objs = list((tmp_path / "b").rglob("*generated_k.cu.o"))
    assert len(objs) == 1
    check_object(objs[0])
    doc = json.loads(Path(str(objs[0]) + ".hbfcc.json").read_text())
    assert doc["admitted"] is True
