"""Triton kernels through the runtime, on the CPU: real Triton 3.6 compiles (sm_90a target, no GPU)
through hbfcc-ptxas, a real hbfd, the Session's Triton hooks (load: bind by the original PTX's
artifact; launch: the gate, with the launch's arguments found in the launcher's frame).

The launcher here is a Python stand-in with Triton's calling convention
(CudaLauncher.__call__(gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata,
enter_hook, exit_hook, *kernel_args)): the C launcher needs a GPU. bench/runtime_triton.py runs the
real one on the H200.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from hbfcommon import resources
from hbfcommon.errors import ErrorCode

ROOT = Path(__file__).resolve().parents[2]
HELPER = resources.helper_ptx_path("direct")

# k_add and k_prio (an applypriority.global: instrumented, not admitted) go through hbfcc-ptxas,
# k_copy_plain through the real ptxas (workloads/triton_kernels.py)
KERNELS = {"k_add": "add", "k_prio": "prio", "k_copy_plain": "copy"}


@pytest.fixture(scope="module")
def triton_kernels(tmp_path_factory):
    """{name: CompiledKernel}: k_add and k_prio through hbfcc-ptxas, k_copy_plain through the real ptxas."""
    pytest.importorskip("triton")
    real = shutil.which("ptxas")
    if real is None or not HELPER.is_file():
        pytest.skip("ptxas or the helper PTX (make helpers-ptx) missing")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from workloads import triton_kernels as tk
    d = tmp_path_factory.mktemp("triton")
    wrap = d / "hbfcc-ptxas"
    wrap.write_text(f"#!/bin/sh\nexec {sys.executable} -m hbfcc.cli ptxas \"$@\"\n")
    wrap.chmod(0o755)
    env = {"HBFCC_ARTIFACT_DIR": str(d / "art"), "HBFCC_CACHE_DIR": str(d / "hc"), "HBFCC_REAL_PTXAS": real,
           "HBFCC_HELPER_PTX": str(HELPER), "TRITON_CACHE_DIR": str(d / "tc"),
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    old = {k: os.environ.get(k) for k in list(env) + ["TRITON_PTXAS_PATH"]}
    os.environ.update(env)
    mod = tk.load(d / "tk_gate.py", KERNELS)
    out = {}
    try:
        for name, sig, ptxas in (("k_add", {"x": "*fp32", "y": "*fp32", "o": "*fp32", "n": "i32"}, str(wrap)),
                                 ("k_prio", {"x": "*fp32", "o": "*fp32", "n": "i32"}, str(wrap)),
                                 ("k_copy_plain", {"x": "*fp32", "o": "*fp32", "n": "i32"}, real)):
            os.environ["TRITON_PTXAS_PATH"] = ptxas
            src = ASTSource(fn=getattr(mod, name), signature={**sig, "B": "constexpr"}, constexprs={"B": 1024})
            out[name] = triton.compile(src, target=GPUTarget("cuda", 90, 32))
        yield out, env
    finally:
        for k, v in old.items():
            if k == "HBFCC_ARTIFACT_DIR":
                continue   # the session looks artifacts up in the test below; restored at the end
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class FakeTensor:
    """What the gate reads from a torch tensor (data_ptr, numel, element_size)."""

    def __init__(self, ptr: int, n: int) -> None:
        self.ptr, self.n = ptr, n

    def data_ptr(self) -> int:
        return self.ptr

    def numel(self) -> int:
        return self.n

    def element_size(self) -> int:
        return 4


def _launch(k, function: int, *kernel_args) -> None:
    """Triton's launcher calling convention (CudaLauncher.__call__ -> the C launch -> enter hook)."""
    from triton import knobs
    from triton.compiler.compiler import LazyDict

    def launcher(gridX, gridY, gridZ, stream, function, *args):   # noqa: N803 - Triton's names
        enter = args[2]
        enter(args[1])

    md = LazyDict({"name": k.name, "function": function, "stream": 0})
    launcher(1, 1, 1, 0, function, k.packed_metadata if hasattr(k, "packed_metadata") else (),
             md, knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *kernel_args)


def test_triton_hooks_bind_and_gate(triton_kernels, hbfd_daemon, monkeypatch):
    import runtime_cuda
    from runtime_cuda.session import LaunchRefused
    ks, env = triton_kernels
    monkeypatch.setenv("HBFCC_ARTIFACT_DIR", env["HBFCC_ARTIFACT_DIR"])
    assert b"__hb_issue" in ks["k_add"].asm["cubin"] and b"__hb_issue" not in ks["k_copy_plain"].asm["cubin"]
    sock, summary, _ = hbfd_daemon
    s = runtime_cuda.attach(socket=sock, allow_unmodeled=False, cuda=False)
    try:
        s.install_triton_hooks()
        s.install_triton_hooks()   # idempotent
        from triton import knobs
        assert knobs.runtime.launch_enter_hook.calls.count(s._triton_launch) == 1
        fn = {"k_add": 0x1001, "k_prio": 0x1002, "k_copy_plain": 0x1003}
        for i, (name, k) in enumerate(ks.items()):   # what CompiledKernel._init_handles calls
            knobs.runtime.kernel_load_end_hook(0x5000 + i, fn[name], k.name, k.metadata_group, k.hash)
        infos = {name: s.functions[fn[name]][1] for name in fn}
        assert infos["k_add"].admitted and not infos["k_prio"].admitted and not infos["k_copy_plain"].admitted
        assert any("applypriority" in r for r in infos["k_prio"].reasons), infos["k_prio"].reasons
        assert infos["k_copy_plain"].reasons == ["no admission artifact"]
        base = 0x7F00_0000_0000
        x, y, o = FakeTensor(base, 1 << 20), FakeTensor(base + (8 << 20), 1 << 20), FakeTensor(base + (16 << 20), 1 << 20)
        # nothing registered: everything launches
        _launch(ks["k_prio"], fn["k_prio"], x, o, 1 << 20, 1024)
        _launch(ks["k_copy_plain"], fn["k_copy_plain"], x, o, 1 << 20, 1024)
        s.register_timing_range(base + 4096, 4096)   # inside x's span, not at its base
        _launch(ks["k_add"], fn["k_add"], x, y, o, 1 << 20, 1024)          # admitted: runs
        _launch(ks["k_prio"], fn["k_prio"], y, o, 1 << 20, 1024)          # cannot reach the range: runs
        with pytest.raises(LaunchRefused) as ei:
            _launch(ks["k_prio"], fn["k_prio"], x, o, 1 << 20, 1024)
        assert ei.value.code == ErrorCode.LAUNCH_REFUSED and "applypriority" in ei.value.fields["reason"]
        with pytest.raises(LaunchRefused) as ei:
            _launch(ks["k_copy_plain"], fn["k_copy_plain"], base + 4096 + 8, o, 1 << 20, 1024)   # a raw int pointer
        assert "no admission artifact" in ei.value.fields["reason"]
        ev = s.refused_launches
        assert [e["kernel"] for e in ev] == ["k_prio", "k_copy_plain"] and all(e["arguments_known"] for e in ev)
        # the arguments cannot be found (no launcher frame): unknown -> any registered range counts
        from triton.compiler.compiler import LazyDict
        with pytest.raises(LaunchRefused):
            knobs.runtime.launch_enter_hook(LazyDict({"name": "k_prio", "function": fn["k_prio"], "stream": 0}))
        assert s.refused_launches[-1]["arguments_known"] is False
        # a kernel loaded before the hooks (unknown function): not admitted, says why
        with pytest.raises(LaunchRefused) as ei:
            _launch(ks["k_add"], 0xDEAD, x, y, o, 1 << 20, 1024)
        assert "before the session's Triton hooks" in ei.value.fields["reason"]
        rep = json.loads(s.client.call("GetSummary", s.client.pb.GetSummaryRequest()).summary_json)
        kinds = [r["kind"] for r in rep["reports"]]
        assert kinds.count("launch_refused") >= 3
    finally:
        s.close()
    assert s._triton_launch not in knobs.runtime.launch_enter_hook.calls


def test_triton_allow_unmodeled_runs_and_summary_says_so(triton_kernels, hbfd_daemon, monkeypatch):
    import runtime_cuda
    ks, env = triton_kernels
    monkeypatch.setenv("HBFCC_ARTIFACT_DIR", env["HBFCC_ARTIFACT_DIR"])
    sock, summary, _ = hbfd_daemon
    s = runtime_cuda.attach(socket=sock, allow_unmodeled=True, cuda=False)
    try:
        s.install_triton_hooks()
        from triton import knobs
        k = ks["k_prio"]
        knobs.runtime.kernel_load_end_hook(0x6000, 0x2002, k.name, k.metadata_group, k.hash)
        base = 0x7E00_0000_0000
        s.register_timing_range(base, 1 << 16)
        _launch(k, 0x2002, FakeTensor(base, 1024), FakeTensor(base + (1 << 20), 1024), 1024, 1024)
        assert s.unmodeled_launches and s.unmodeled_launches[-1]["allow_unmodeled"] is True
        assert "applypriority" in s.unmodeled_launches[-1]["reason"]
        rep = json.loads(s.client.call("GetSummary", s.client.pb.GetSummaryRequest()).summary_json)
        ums = [r for r in rep["reports"] if r["kind"] == "unmodeled_launch"]
        assert ums and ums[-1]["data"]["kernel"] == "k_prio"
        assert any(a["allow_unmodeled"] for a in rep["attaches"])
    finally:
        s.close()


def test_triton_instrumented_cubin_without_its_record_is_refused_loudly(triton_kernels, hbfd_daemon, monkeypatch,
                                                                        tmp_path, caplog):
    """A warm Triton cache with an emptied (here: another) artifact store (issue 18): the instrumented
    cubin is not admitted, a warning at load names the kernel and why, and a launch that would be
    modeled is refused with the same reason."""
    import logging

    import runtime_cuda
    from runtime_cuda.session import LaunchRefused
    ks, _ = triton_kernels
    monkeypatch.setenv("HBFCC_ARTIFACT_DIR", str(tmp_path / "empty-store"))
    caplog.set_level(logging.WARNING, logger="runtime_cuda.session")
    sock, _, _ = hbfd_daemon
    s = runtime_cuda.attach(socket=sock, allow_unmodeled=False, cuda=False)
    try:
        s.install_triton_hooks()
        from triton import knobs
        k = ks["k_add"]
        knobs.runtime.kernel_load_end_hook(0x6100, 0x3001, k.name, k.metadata_group, k.hash)
        info = s.functions[0x3001][1]
        assert not info.admitted and "without an admission record" in info.reasons[0], info.reasons
        assert any("Triton kernel k_add is NOT admitted" in r.getMessage() and "warm Triton cache" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
        base = 0x7D00_0000_0000
        s.register_timing_range(base, 1 << 16)
        x, y, o = FakeTensor(base, 1024), FakeTensor(base + (1 << 20), 1024), FakeTensor(base + (2 << 20), 1024)
        with pytest.raises(LaunchRefused) as ei:
            _launch(k, 0x3001, x, y, o, 1024, 1024)
        assert "without an admission record" in ei.value.fields["reason"]
    finally:
        s.close()
