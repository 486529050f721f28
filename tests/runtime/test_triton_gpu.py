"""GPU: a Triton kernel built through hbfcc-ptxas runs bound to a session (modeled accesses of the
registered tensor counted, output exact), and a plain-ptxas Triton kernel touching the registered
tensor is refused by the launch gate. Skips cleanly without a GPU, torch or ptxas.
The full proof is bench/runtime_triton.py."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from hbfcommon import resources

ROOT = Path(__file__).resolve().parents[2]

# the same kernel twice: add_hbf_t through hbfcc-ptxas, add_plain_t through the real ptxas
KERNELS = {"add_hbf_t": "add", "add_plain_t": "add"}


@pytest.mark.gpu
def test_triton_hbfcc_kernel_bound_counted_and_plain_refused(gpu, hbfd_daemon, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    real = shutil.which("ptxas") or os.path.join(os.path.dirname(os.path.realpath(shutil.which("nvcc") or "/x")), "ptxas")
    if not os.path.isfile(real) or not resources.helper_ptx_path("direct").is_file():
        pytest.skip("ptxas or the helper PTX missing")
    import triton

    import runtime_cuda
    from runtime_cuda.session import LaunchRefused
    from workloads import triton_kernels
    wrap = tmp_path / "hbfcc-ptxas"
    wrap.write_text(f"#!/bin/sh\nexec {sys.executable} -m hbfcc.cli ptxas \"$@\"\n")
    wrap.chmod(0o755)
    for k, v in {"HBFCC_ARTIFACT_DIR": tmp_path / "art", "HBFCC_CACHE_DIR": tmp_path / "hc", "HBFCC_REAL_PTXAS": real,
                 "TRITON_CACHE_DIR": tmp_path / "tc",
                 "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}.items():
        monkeypatch.setenv(k, str(v))
    K = triton_kernels.load(tmp_path / "tk_gpu_test.py", KERNELS)
    sock, _summary, _ = hbfd_daemon
    s = runtime_cuda.attach(socket=sock, allow_unmodeled=False)
    try:
        s.install_triton_hooks()
        n = 1 << 16
        x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
        s.register_timing_range(x.data_ptr(), x.numel() * 4, label="x")
        o = torch.empty_like(x)
        monkeypatch.setenv("TRITON_PTXAS_PATH", str(wrap))
        k = K.add_hbf_t[(triton.cdiv(n, 1024),)](x, y, o, n, B=1024)
        s.synchronize()
        assert b"__hb_issue" in k.asm["cubin"]
        assert torch.equal(o, x * 2.0 + y)
        b = s.bindings[int(k.module)]
        assert b.instrumented and s.functions[int(k.function)][1].admitted
        c = s.counters(publish=False)["kernels"]["add_hbf_t"]
        load = {op: c["ops"][op] for op in ("load", "cpasync")}
        assert sum(v["requests"] for v in load.values()) > 0
        assert sum(v["bytes"] for v in load.values()) == n * 4      # x only: y and o are not registered
        assert c["ops"]["store"]["requests"] == 0
        monkeypatch.setenv("TRITON_PTXAS_PATH", real)
        o2 = torch.full_like(x, -1.0)
        K.add_plain_t[(triton.cdiv(n, 1024),)](y, y, o2, n, B=1024)   # cannot reach x: runs
        torch.cuda.synchronize()
        assert torch.equal(o2, y * 2.0 + y)
        o2.fill_(-1.0)
        with pytest.raises(LaunchRefused) as ei:
            K.add_plain_t[(triton.cdiv(n, 1024),)](x, y, o2, n, B=1024)
        torch.cuda.synchronize()
        assert "no admission artifact" in ei.value.fields["reason"] and bool((o2 == -1.0).all())
    finally:
        s.close()
