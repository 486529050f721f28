"""A Triton kernel built through hbfcc-ptxas finds its admission artifact by its original PTX.

Triton caches the PRE-rewrite PTX (kernel.asm["ptx"]) and nothing of hbfcc's; the runtime must still
find the artifact (hbfcc-ptxas stores it by the original PTX's sha256), or every Triton kernel would
be refused by the launch gate as "no admission artifact".
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hbfcommon import resources
from hbfcommon.artifact import kernels as artifact_kernels
from runtime_cuda.session import triton_artifact

PTX = """.version 8.7
.target sm_90a
.address_size 64
.visible .entry add_one(.param .u64 p, .param .u32 n)
{
 .reg .pred %p<2>; .reg .b32 %r<6>; .reg .b64 %rd<5>;
 ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [n];
 mov.u32 %r2, %tid.x; setp.ge.u32 %p1, %r2, %r1; @%p1 bra DONE;
 cvta.to.global.u64 %rd2, %rd1; mul.wide.u32 %rd3, %r2, 4; add.s64 %rd4, %rd2, %rd3;
 ld.global.u32 %r3, [%rd4]; add.s32 %r4, %r3, 1; st.global.u32 [%rd4], %r4;
DONE:
 ret;
}
"""


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not installed")
def test_triton_kernel_artifact_found_by_original_ptx(tmp_path, monkeypatch):
    helper = resources.helper_ptx_path("direct")
    if not helper.is_file():
        pytest.skip("helper PTX not built (make helpers-ptx)")
    store = tmp_path / "store"
    env = dict(os.environ, HBFCC_ARTIFACT_DIR=str(store), HBFCC_CACHE_DIR=str(tmp_path / "cache"))
    work = tmp_path / "triton_tmp"
    work.mkdir()
    src = work / "tmpk.ptx"
    src.write_text(PTX)
    # Triton's exact argv (notes §1.2); hbfcc-ptxas rewrites the temp .ptx and stores the artifact
    cp = subprocess.run([sys.executable, "-c", "import sys; from hbfcc.cli import ptxas_main; sys.exit(ptxas_main())",
                         "-lineinfo", "-v", "--gpu-name=sm_90a", str(src), "-o", str(work / "tmpk.ptx.o")],
                        env=env, capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    # what Triton keeps in its cache group: the ORIGINAL PTX
    cache = tmp_path / "triton_cache"
    cache.mkdir()
    (cache / "add_one.ptx").write_text(PTX)
    monkeypatch.setenv("HBFCC_ARTIFACT_DIR", str(store))
    art = triton_artifact({"add_one.ptx": str(cache / "add_one.ptx"), "add_one.json": str(cache / "x.json")})
    assert art is not None, "artifact not found by the original PTX's sha256"
    ks = {name: (admitted, reasons) for name, admitted, reasons in artifact_kernels(art)}
    assert ks["add_one"][0] is True, ks
    # a kernel hbfcc never saw has no artifact: not admitted (fail closed)
    (cache / "other.ptx").write_text(PTX.replace("add_one", "other"))
    assert triton_artifact({"other.ptx": str(cache / "other.ptx")}) is None
    assert triton_artifact(None) is None
