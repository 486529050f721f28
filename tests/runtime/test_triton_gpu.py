"""GPU: a Triton kernel built through hbfcc-ptxas runs bound to a session (modeled accesses of the
registered tensor counted, output exact), and a plain-ptxas Triton kernel touching the registered
tensor is refused by the launch gate. Skips cleanly without a GPU, torch or ptxas.
The full proof is bench/runtime_triton.py."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hbfcommon import resources

ROOT = Path(__file__).resolve().parents[2]

# the same kernel twice: add_hbf_t through hbfcc-ptxas, add_plain_t through the real ptxas
KERNELS = {"add_hbf_t": "add", "add_plain_t": "add"}


def _toolchain(tmp_path, monkeypatch):
    """(the real ptxas, an hbfcc-ptxas wrapper of this checkout), with a private artifact store, hbfcc cache and
    Triton cache in the environment; skips without Triton, ptxas or the helper PTX."""
    pytest.importorskip("triton")
    from hbfcc.toolchain import cli_wrapper
    real = shutil.which("ptxas") or os.path.join(os.path.dirname(os.path.realpath(shutil.which("nvcc") or "/x")), "ptxas")
    if not os.path.isfile(real) or not resources.helper_ptx_path("direct").is_file():
        pytest.skip("ptxas or the helper PTX missing")
    for k, v in {"HBFCC_ARTIFACT_DIR": tmp_path / "art", "HBFCC_CACHE_DIR": tmp_path / "hc", "HBFCC_REAL_PTXAS": real,
                 "TRITON_CACHE_DIR": tmp_path / "tc",
                 "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}.items():
        monkeypatch.setenv(k, str(v))
    return real, cli_wrapper(tmp_path / "hbfcc-ptxas", "ptxas")


def _attached(hbfd_daemon, torch):
    """A session with the Triton hooks, x registered, y and o not: (session, n, x, y, o)."""
    import runtime_cuda
    sock, _summary, _ = hbfd_daemon
    s = runtime_cuda.attach(socket=sock, allow_unmodeled=False)
    s.install_triton_hooks()
    n = 1 << 16
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    s.register_timing_range(x.data_ptr(), x.numel() * 4, label="x")
    return s, n, x, y, torch.empty_like(x)


@pytest.mark.gpu
def test_triton_hbfcc_kernel_bound_counted_and_plain_refused(gpu, hbfd_daemon, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    real, wrap = _toolchain(tmp_path, monkeypatch)
    import triton

    from runtime_cuda.session import LaunchRefused
    from workloads import triton_kernels
    K = triton_kernels.load(tmp_path / "tk_gpu_test.py", KERNELS)
    s, n, x, y, o = _attached(hbfd_daemon, torch)
    try:
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


def _swapped_and_modeled(s, kernel, name, torch, n, x, y, o) -> dict:
    """The first launch of a Triton add kernel compiled plain, with x registered: exact output, the instrumented
    build swapped in and admitted, its loads counted (requests, and the bytes of x and y); the build's event."""
    import triton
    k = kernel[(triton.cdiv(n, 1024),)](x, y, o, n, B=1024)
    s.synchronize()
    assert torch.equal(o, x * 2.0 + y)
    assert b"__hb_" not in k.asm["cubin"] and b"__hb_issue" in k.kernel     # compiled plain, runs instrumented
    ev = s.deferred_builds[-1]
    assert ev["ok"] and ev["kernel"] == name, s.deferred_builds
    assert s.bindings[int(k.module)].instrumented and s.functions[int(k.function)][1].admitted
    load = {op: s.counters(publish=False)["kernels"][name]["ops"][op] for op in ("load", "cpasync")}
    assert sum(v["requests"] for v in load.values()) > 0
    assert sum(v["bytes"] for v in load.values()) == n * 4
    return ev


@pytest.mark.gpu
def test_triton_deferred_kernel_swapped_in_and_modeled(gpu, hbfd_daemon, tmp_path, monkeypatch):
    """HBFCC_DEFER=1 (NOT yet run on a GPU when written, 2026-12-06): Triton compiles the plain cubin; the first
    launch in the session loads the kernel, the load hook assembles the instrumented build and swaps it into
    the CompiledKernel; the launch with a registered tensor is modeled (loads counted), the output exact
    (bench/triton_defer_gpu.py compares with the eager build). A second kernel whose rewritten PTX is
    gone from the store is refused (LaunchRefused naming it), its output untouched."""
    torch = pytest.importorskip("torch")
    _, wrap = _toolchain(tmp_path, monkeypatch)
    monkeypatch.setenv("TRITON_PTXAS_PATH", str(wrap))
    monkeypatch.setenv("HBFCC_DEFER", "1")
    import triton

    from hbfcommon import artifact as A
    from hbfcommon import deferred as DF
    from runtime_cuda.session import LaunchRefused
    from workloads import triton_kernels
    K = triton_kernels.load(tmp_path / "tk_gpu_defer.py", {"add_def_t": "add", "add_gone_t": "add"})
    s, n, x, y, o = _attached(hbfd_daemon, torch)
    try:
        _swapped_and_modeled(s, K.add_def_t, "add_def_t", torch, n, x, y, o)
        # the rewritten PTX of the second kernel is gone: compiled (plain), then refused at its modeled launch
        o2 = torch.full_like(x, -1.0)
        k2 = K.add_gone_t.warmup(x, y, o2, n, B=1024, grid=(1,))
        rec = A.lookup_by_output(k2.asm["cubin"])
        DF.ptx_path(A.store_dir(), rec["deferred"]["ptx_sha256"]).unlink()
        with pytest.raises(LaunchRefused) as ei:
            K.add_gone_t[(triton.cdiv(n, 1024),)](x, y, o2, n, B=1024)
        torch.cuda.synchronize()
        assert ei.value.fields["kernel"] == "add_gone_t" and "deferred instrumented build" in ei.value.fields["reason"]
        assert bool((o2 == -1.0).all())
    finally:
        s.close()


@pytest.mark.gpu
def test_triton_plain_kernel_instrumented_at_load_and_modeled(gpu, hbfd_daemon, tmp_path, monkeypatch):
    """HBF_TRITON_INSTRUMENT=load (NOT yet run on a GPU when written, 2026-12-06): Triton compiles with its own ptxas
    (TRITON_PTXAS_PATH unset), no hbfcc at compile time; the first launch in the session loads the kernel, the load
    hook verifies the reconstructed ptxas run against the cached cubin, builds with eager hbfcc-ptxas and swaps it
    in; the launch is modeled, the output exact. A kernel whose cached cubin was altered is refused."""
    torch = pytest.importorskip("torch")
    _toolchain(tmp_path, monkeypatch)
    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    monkeypatch.delenv("HBFCC_REAL_PTXAS", raising=False)
    monkeypatch.setenv("HBF_TRITON_INSTRUMENT", "load")
    import triton

    from runtime_cuda.session import LaunchRefused
    from workloads import triton_kernels
    K = triton_kernels.load(tmp_path / "tk_gpu_load.py", {"add_load_t": "add", "add_alt_t": "add"})
    s, n, x, y, o = _attached(hbfd_daemon, torch)
    try:
        ev = _swapped_and_modeled(s, K.add_load_t, "add_load_t", torch, n, x, y, o)
        assert ev["mode"] == "load" and ev["verify_ns"] > 0
        o2 = torch.full_like(x, -1.0)
        k2 = K.add_alt_t.warmup(x, y, o2, n, B=1024, grid=(1,))
        p = Path(next(v for key, v in k2.metadata_group.items() if str(key).endswith(".cubin")))
        data = bytearray(p.read_bytes())
        data[-1] ^= 0x01
        p.write_bytes(bytes(data))
        with pytest.raises(LaunchRefused) as ei:
            K.add_alt_t[(triton.cdiv(n, 1024),)](x, y, o2, n, B=1024)
        torch.cuda.synchronize()
        assert ei.value.fields["kernel"] == "add_alt_t" and "instrumentation at load" in ei.value.fields["reason"]
        assert bool((o2 == -1.0).all())
    finally:
        s.close()
