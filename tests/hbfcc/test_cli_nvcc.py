"""hbfcc as nvcc: the shadow toolkit makes both ptxas steps of nvcc run the rewriter, so the PTX
that fatbinary embeds is the rewritten PTX; -dlto / lto_* are refused."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import artifact  # noqa: E402

KERNEL = r"""
__global__ void k(float* y, const float* __restrict__ x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + y[i];
}
"""


def hbfcc_env(tmp_path, **kw):
    base = {"HBFCC_ARTIFACT_DIR": tmp_path / "store", "HBFCC_CACHE_DIR": tmp_path / "cache",
            "HBFCC_HELPER_PTX": U.real_helper_ptx() or U.fixture_helper_ptx(),
            "NVCC_PREPEND_FLAGS": None, "NVCC_APPEND_FLAGS": None, "HBFCC_JIT": None}
    base.update(kw)
    return U.env_with(**base)


def run_hbfcc(args, tmp_path, **kw):
    U.tool("nvcc")
    return subprocess.run([U.console("hbfcc"), *args], capture_output=True, text=True, cwd=tmp_path,
                          env=hbfcc_env(tmp_path, **kw))


def check_object(obj: Path) -> list[dict]:
    """Every PTX entry embedded in the object is instrumented; every ELF entry carries the helpers."""
    entries = U.fatbin_entries(obj.read_bytes())
    ptx = [e for e in entries if e["kind"] == 1]
    elf = [e for e in entries if e["kind"] == 2]
    assert ptx and elf
    for e in entries:
        assert not e["compressed"], "build with --no-compress"
    for e in ptx:
        text = e["payload"].decode("utf-8", "replace")
        assert "__hb_issue" in text and "call" in text, f"PTX entry sm_{e['sm']} not instrumented"
        # the helpers' globals are .weak (one per device link); the functions too, except in a relocatable
        # (-rdc) build, where they are module-local (hbfcc/rdc.py)
        assert ".weak .global" in text
        assert re.search(r"^(\.weak )?\.func .*__hb_issue\(", text, re.M)
    # the helpers the module reaches (hbfcc.link.closure): the kernel hooks only where it has a kernel
    # (scale.cu of the CMake project has a device function alone)
    kernels = any(re.search(r"\.entry\s", e["payload"].decode("utf-8", "replace")) for e in ptx)
    for e in elf:
        assert b"__hb_issue" in e["payload"] and (b"__hb_kernel_enter" in e["payload"] or not kernels)
    return entries


def test_compile_object_embeds_rewritten_ptx(tmp_path):
    (tmp_path / "k.cu").write_text(KERNEL)
    cp = run_hbfcc(["-arch=sm_90a", "--no-compress", "-c", "k.cu", "-o", "k.o"], tmp_path)
    assert cp.returncode == 0, cp.stderr
    entries = check_object(tmp_path / "k.o")
    # CUDA 13: -arch=sm_90a embeds compute_90 PTX as well; both ptxas steps went through hbfcc
    assert sorted((e["kind"], e["sm"], bool(e["flags"] & 0x100000)) for e in entries) == \
        [(1, 90, False), (1, 90, True), (2, 90, True)]
    doc = json.loads((tmp_path / "k.o.hbfcc.json").read_text())
    assert doc["admitted"] is True and len(doc["modules"]) == 2
    for m in doc["modules"]:
        artifact.validate(m)
        assert m["kernels"][0]["name"] == "_Z1kPfPKfi"
    targets = sorted(m["ptxas"]["target"] for m in doc["modules"])
    assert targets == ["compute_90", "sm_90a"]


def test_rdc_two_modules_link_with_weak_helpers(tmp_path):
    (tmp_path / "a.cu").write_text(r"""
__device__ float scale(float x);
__global__ void k(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = scale(y[i]); }
int main() { return 0; }
""")
    (tmp_path / "b.cu").write_text(r"""
__device__ float g_bias = 1.0f;
__device__ float scale(float x) { return x * 2.0f + g_bias; }
""")
    cp = run_hbfcc(["-arch=sm_90a", "-rdc=true", "a.cu", "b.cu", "-o", "app"], tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert (tmp_path / "app").is_file()
    # per module, k calls scale() in the other module: not admitted there ...
    assert "NOT admitted" in cp.stderr and "_Z5scalef" in cp.stderr
    # ... but the link resolves it: every function k reaches was rewritten with nothing refused
    doc = json.loads((tmp_path / "app.hbfcc.json").read_text())
    assert doc["schema"] == "hbfcc.admission.link"
    assert doc["kernels"] == [{"name": "_Z1kPfi", "admitted": True, "reason": ""}] and doc["admitted"]


def test_ptx_mode_output_is_rewritten(tmp_path):
    (tmp_path / "k.cu").write_text(KERNEL)
    cp = run_hbfcc(["-arch=sm_90a", "-ptx", "k.cu", "-o", "k.ptx"], tmp_path)
    assert cp.returncode == 0, cp.stderr
    text = (tmp_path / "k.ptx").read_text()
    assert "__hb_issue" in text
    U.assemble(text)
    artifact.validate(json.loads((tmp_path / "k.ptx.hbfcc.json").read_text()))


def test_launcher_mode(tmp_path):
    (tmp_path / "k.cu").write_text(KERNEL)
    cp = run_hbfcc([U.tool("nvcc"), "-arch=sm_90a", "--no-compress", "-c", "k.cu", "-o", "k.o"], tmp_path)
    assert cp.returncode == 0, cp.stderr
    check_object(tmp_path / "k.o")


@pytest.mark.parametrize("args", [
    ["-dlto", "-arch=sm_90a", "-c", "k.cu"],
    ["-gencode", "arch=compute_90a,code=lto_90a", "-c", "k.cu"],
    ["-arch=lto_90a", "-c", "k.cu"],
    ["--dont-use-profile", "-arch=sm_90a", "-c", "k.cu"],
])
def test_lto_and_profile_bypass_refused(tmp_path, args):
    (tmp_path / "k.cu").write_text(KERNEL)
    cp = run_hbfcc(args, tmp_path)
    assert cp.returncode != 0
    assert "hbfcc refuses this build" in cp.stderr
    assert not (tmp_path / "k.o").exists()


def test_lto_in_nvcc_append_flags_refused(tmp_path):
    (tmp_path / "k.cu").write_text(KERNEL)
    cp = run_hbfcc(["-arch=sm_90a", "-c", "k.cu"], tmp_path, NVCC_APPEND_FLAGS="-dlto")
    assert cp.returncode != 0 and "-dlto" in cp.stderr


def test_dryrun_shows_shadow_and_real_top(tmp_path):
    (tmp_path / "k.cu").write_text(KERNEL)
    cp = run_hbfcc(["-arch=sm_90a", "--dryrun", "-c", "k.cu"], tmp_path)
    assert cp.returncode == 0
    out = cp.stderr + cp.stdout
    from hbfcc.shadow import real_toolkit_bin
    real_top = os.path.realpath(os.path.join(real_toolkit_bin(U.tool("nvcc")), ".."))
    top = [l for l in out.splitlines() if l.startswith("#$ TOP=")][0].split("=", 1)[1]
    assert os.path.realpath(top) == real_top                  # CMake reads TOP to find the toolkit
    path_line = [l for l in out.splitlines() if l.startswith("#$ PATH=")][0]
    assert path_line.split("=", 1)[1].split(":")[0].endswith("/bin/shim")


def test_ptx_input_is_not_modified(tmp_path):
    """nvcc passes a .ptx input to ptxas by its own path: hbfcc rewrites a copy, never the user's file."""
    (tmp_path / "k.cu").write_text(KERNEL)
    U.tool("nvcc")
    src = tmp_path / "k.ptx"
    src.write_text(U.compile_cu(KERNEL))
    before = src.read_bytes()
    cp = run_hbfcc(["-arch=sm_90a", "-cubin", "k.ptx", "-o", "k.cubin"], tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert src.read_bytes() == before
    assert b"__hb_issue" in (tmp_path / "k.cubin").read_bytes()
    doc = json.loads((tmp_path / "k.cubin.hbfcc.json").read_text())
    assert doc["admitted"] is True and doc["modules"][0]["kernels"][0]["name"] == "_Z1kPfPKfi"
