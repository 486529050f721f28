"""Triton 3.6 through TRITON_PTXAS_PATH=hbfcc-ptxas, compiled on the CPU for GPUTarget('cuda', 90, 32)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import artifact  # noqa: E402

pytest.importorskip("triton")
pytestmark = pytest.mark.slow

SCRIPT = r'''
import hashlib, json, sys
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget

@triton.jit
def axpy_atomic(x_ptr, y_ptr, acc_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for it in range(ITERS):
        offs = (pid * ITERS + it) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m, other=0.0)
        y = tl.load(y_ptr + offs, mask=m, other=0.0)
        tl.store(y_ptr + offs, 2.0 * x + y, mask=m)
        total += x
    tl.atomic_add(acc_ptr, tl.sum(total, axis=0))

src = triton.compiler.ASTSource(
    fn=axpy_atomic,
    signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "acc_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr",
               "ITERS": "constexpr"},
    constexprs={"BLOCK": 256, "ITERS": 4})
k = triton.compile(src, target=GPUTarget("cuda", 90, 32))
print(json.dumps({"ptx_sha256": hashlib.sha256(k.asm["ptx"].encode()).hexdigest(),
                  "ptx_has_hb": "__hb_issue" in k.asm["ptx"],
                  "cubin_has_hb": b"__hb_issue" in k.asm["cubin"],
                  "ptxas": str(triton.knobs.nvidia.ptxas.path)}))
'''


def compile_once(tmp_path, **env):
    base = {"TRITON_CACHE_DIR": tmp_path / "triton-cache", "HBFCC_ARTIFACT_DIR": tmp_path / "store",
            "HBFCC_HELPER_PTX": U.real_helper_ptx() or U.fixture_helper_ptx(), "TRITON_PTXAS_PATH": None}
    base.update(env)
    script = tmp_path / "triton_axpy.py"
    script.write_text(SCRIPT)      # @triton.jit needs its source in a file
    cp = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=U.env_with(**base))
    assert cp.returncode == 0, cp.stderr[-4000:]
    return json.loads(cp.stdout.strip().splitlines()[-1])


def test_triton_compiles_through_hbfcc_ptxas_and_cache_is_not_shared(tmp_path):
    U.tool("ptxas")
    plain = compile_once(tmp_path)
    assert not plain["cubin_has_hb"]
    tmp = tmp_path / "tmp"          # Triton's temp files (and anything hbfcc-ptxas would leave) go here
    tmp.mkdir()
    inst = compile_once(tmp_path, TRITON_PTXAS_PATH=U.console("hbfcc-ptxas"), TMPDIR=tmp)
    assert sorted(tmp.iterdir()) == []        # no litter: Triton removed its files, hbfcc left none
    # same cache dir: the instrumented build did not reuse the plain cubin (the --version marker
    # is part of Triton's cache key), and it really ran hbfcc-ptxas (no silent fallback)
    assert inst["ptxas"].endswith("hbfcc-ptxas")
    assert inst["cubin_has_hb"]
    assert not inst["ptx_has_hb"]             # Triton keeps the pre-rewrite PTX in asm["ptx"]
    # the admission artifact is found by the sha of the PTX Triton keeps
    doc = json.loads((tmp_path / "store" / f"{inst['ptx_sha256']}.hbfcc.json").read_text())
    artifact.validate(doc)
    assert doc["admitted"] is True
    k = doc["kernels"][0]
    assert k["name"] == "axpy_atomic"
    assert k["classes"]["ld.global"]["rewritten"] >= 2 and k["classes"]["st.global"]["rewritten"] >= 1
    assert k["classes"]["atom.global"]["rewritten"] >= 1
    assert doc["ptxas"]["argv"][1:4] == ["-lineinfo", "-v", "--gpu-name=sm_90a"]
    # the ptxas plain Triton runs (the one in its wheel: TRITON_PTXAS_PATH names hbfcc-ptxas), recorded
    import triton
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    assert doc["ptxas"]["source"] == "triton bundled"
    assert Path(doc["ptxas"]["path"]).resolve() == bundled.resolve()
    assert plain["ptxas"] and Path(plain["ptxas"]).resolve() == bundled.resolve()
    # compiling again hits the instrumented cache entry
    again = compile_once(tmp_path, TRITON_PTXAS_PATH=U.console("hbfcc-ptxas"))
    assert again["cubin_has_hb"] and again["ptx_sha256"] == inst["ptx_sha256"]
