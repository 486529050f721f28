"""Deferred instrumentation (HBFCC_DEFER=1) through the runtime, on the CPU: real Triton 3.6 compiles (sm_90a, no
GPU) through hbfcc-ptxas with the knob on hand Triton the plain cubin; the Session's load hook assembles the
instrumented build (hbfcommon.deferred), loads it the way Triton loads a kernel and swaps it into the
CompiledKernel; a build that cannot be made leaves the kernel NOT admitted with a coded reason naming it, and a
launch that would be modeled is refused (never run unmodeled).

Loading a cubin needs a GPU: ``runtime_cuda.session.triton_load_binary`` is replaced by a stand-in that
records the cubin and hands out fake handles, and the launcher is the Python stand-in of test_triton_gate.py.
tests/runtime/test_triton_gpu.py::test_triton_deferred_kernel_swapped_in_and_modeled runs it on a GPU."""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path

import pytest
from test_triton_gate import FakeTensor, _launch

from hbfcommon import artifact as A
from hbfcommon import deferred as DF
from hbfcommon import resources
from hbfcommon.errors import ErrorCode

ROOT = Path(__file__).resolve().parents[2]
HELPER = resources.helper_ptx_path("direct")
KERNELS = {"k_dadd": "add", "k_dprio": "prio"}


def _compile_deferred(tmp_path_factory, mode: str, kernels: dict[str, str], sigs: dict[str, dict]):
    """({name: CompiledKernel}, the environment they were compiled in): Triton compiles of ``kernels`` (names ->
    workloads.triton_kernels kinds) with HBFCC_DEFER=``mode`` through hbfcc-ptxas's console entry."""
    pytest.importorskip("triton")
    real = shutil.which("ptxas")
    if real is None or not HELPER.is_file():
        pytest.skip("ptxas or the helper PTX (make helpers-ptx) missing")
    import sys

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from workloads import triton_kernels as tk
    d = tmp_path_factory.mktemp(f"triton-defer-{mode}")
    wrap = d / "hbfcc-ptxas"
    wrap.write_text(f"#!/bin/sh\nexec {sys.executable} -m hbfcc.ptxas_entry \"$@\"\n")
    wrap.chmod(0o755)
    env = {"HBFCC_ARTIFACT_DIR": str(d / "art"), "HBFCC_CACHE_DIR": str(d / "hc"), "HBFCC_REAL_PTXAS": real,
           "HBFCC_HELPER_PTX": str(HELPER), "TRITON_CACHE_DIR": str(d / "tc"), "HBFCC_DEFER": mode,
           "TRITON_PTXAS_PATH": str(wrap), "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with pytest.MonkeyPatch.context() as mp:     # the compile's environment, for the compiles only
        for k, v in env.items():
            mp.setenv(k, v)
        mod = tk.load(d / f"tk_defer_{mode}.py", kernels)
        out = {name: triton.compile(ASTSource(fn=getattr(mod, name), signature={**sig, "B": "constexpr"},
                                              constexprs={"B": 1024}), target=GPUTarget("cuda", 90, 32))
               for name, sig in sigs.items()}
    return out, env


ADD_SIG = {"x": "*fp32", "y": "*fp32", "o": "*fp32", "n": "i32"}


@pytest.fixture(scope="module")
def deferred_kernels(tmp_path_factory):
    """{name: CompiledKernel} compiled with HBFCC_DEFER=1, and the environment they were compiled in."""
    return _compile_deferred(tmp_path_factory, "1", KERNELS,
                             {"k_dadd": ADD_SIG, "k_dprio": {"x": "*fp32", "o": "*fp32", "n": "i32"}})


@pytest.fixture
def denv(deferred_kernels, monkeypatch):
    """The compile's environment (the runtime compares the marker of the hbfcc-ptxas Triton runs now)."""
    ks, env = deferred_kernels
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return ks, env


class FakeLoader:
    """runtime_cuda.session.triton_load_binary without a GPU: records what it loads, hands out new handles."""

    def __init__(self, max_threads: int = 1024) -> None:
        self.loaded: list[tuple[str, bytes, int]] = []
        self.max_threads = max_threads

    def __call__(self, name: str, cubin: bytes, shared: int):
        self.loaded.append((name, cubin, shared))
        n = len(self.loaded)
        return 0x9000 + n, 0x9100 + n, 96, 0, self.max_threads


def _init_handles(self, module: int, function: int) -> None:
    """What CompiledKernel._init_handles does around the hook: handles set, then the load hook (its frame's
    ``self`` is the kernel, which is how the hook finds it)."""
    from triton import knobs
    self.module, self.function = module, function
    knobs.runtime.kernel_load_end_hook(self.module, self.function, self.name, self.metadata_group, self.hash)


def _session(hbfd_daemon):
    import runtime_cuda
    sock, _, _ = hbfd_daemon
    s = runtime_cuda.attach(socket=sock, allow_unmodeled=False, cuda=False)
    s.install_triton_hooks()
    return s


def _reset(k) -> None:
    """The kernel as Triton made it from its cache entry (not loaded; its plain cubin)."""
    k.module = k.function = None
    k.kernel = k.asm["cubin"]


def test_the_deferred_cubin_is_plain_and_the_load_swaps_the_instrumented_build_in(denv, hbfd_daemon, monkeypatch):
    import runtime_cuda.session as S
    from runtime_cuda.session import LaunchRefused
    ks, env = denv
    k = ks["k_dadd"]
    assert b"__hb_" not in k.asm["cubin"]                       # Triton holds the plain cubin
    rec = A.lookup_by_output(k.asm["cubin"])
    assert rec is not None and DF.recipe(rec) is not None
    loader = FakeLoader()
    monkeypatch.setattr(S, "triton_load_binary", loader)
    s = _session(hbfd_daemon)
    try:
        _reset(k)
        _init_handles(k, 0x5001, 0x1001)
        (name, cubin, shared), = loader.loaded
        assert name == "k_dadd" and shared == k.metadata.shared and b"__hb_issue" in cubin
        assert cubin == DF.build(rec).cubin                        # the record's build (now cached)
        assert (k.module, k.function, k.n_regs) == (0x9001, 0x9101, 96) and k.kernel == cubin
        assert s.functions[0x9101][1].admitted
        plain = s.functions[0x1001][1]
        assert not plain.admitted and "plain build of a deferred kernel" in plain.reasons[0]
        ev = s.deferred_builds[-1]
        assert ev["ok"] and ev["kernel"] == "k_dadd" and not ev["cached"] and ev["build_ns"] > 0
        base = 0x7C00_0000_0000
        x, y, o = FakeTensor(base, 1 << 20), FakeTensor(base + (8 << 20), 1 << 20), FakeTensor(base + (16 << 20), 1 << 20)
        s.register_timing_range(base, 1 << 16)
        _launch(k, k.function, x, y, o, 1 << 20, 1024)             # the instrumented function: admitted, runs
        with pytest.raises(LaunchRefused) as ei:                    # a launcher that kept the plain handle
            _launch(k, 0x1001, x, y, o, 1 << 20, 1024)
        assert "plain build of a deferred kernel" in ei.value.fields["reason"]
        # bound again by hand (a later session of this process): what runs is bound, nothing is built again
        n_loaded = len(loader.loaded)
        s.bind_triton_kernel(k)
        assert len(loader.loaded) == n_loaded and k.function == 0x9101 and s.functions[0x9101][1].admitted
        # loaded again (another session, another process): the build is read back, not assembled
        _reset(k)
        _init_handles(k, 0x5002, 0x1002)
        assert s.deferred_builds[-1]["cached"] and s.deferred_builds[-1]["build_ns"] == 0
        assert loader.loaded[-1][1] == cubin
    finally:
        s.close()


def test_a_failed_deferred_build_is_refused_with_a_coded_reason_naming_the_kernel(denv, hbfd_daemon, monkeypatch,
                                                                                   tmp_path, caplog):
    import runtime_cuda.session as S
    from runtime_cuda.session import LaunchRefused
    ks, env = denv
    store = tmp_path / "store"               # the store without the rewritten PTX (and no cached build)
    shutil.copytree(env["HBFCC_ARTIFACT_DIR"], store)
    shutil.rmtree(store / DF.SUBDIR)
    monkeypatch.setenv("HBFCC_ARTIFACT_DIR", str(store))
    loader = FakeLoader()
    monkeypatch.setattr(S, "triton_load_binary", loader)
    caplog.set_level(logging.WARNING, logger="runtime_cuda.session")
    k = ks["k_dadd"]
    s = _session(hbfd_daemon)
    try:
        _reset(k)
        _init_handles(k, 0x5011, 0x1011)
        assert not loader.loaded and k.function == 0x1011              # nothing swapped in
        info = s.functions[0x1011][1]
        assert not info.admitted
        why = info.reasons[0]
        assert "deferred instrumented build" in why and "k_dadd" in why and "TOOLCHAIN" in why and "gone" in why
        assert any(r.levelno == logging.ERROR and "Triton kernel k_dadd is NOT admitted" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
        assert s.deferred_builds[-1]["ok"] is False and s.deferred_builds[-1]["code"] == "TOOLCHAIN"
        base = 0x7B00_0000_0000
        x, y, o = FakeTensor(base, 1024), FakeTensor(base + (1 << 20), 1024), FakeTensor(base + (2 << 20), 1024)
        _launch(k, 0x1011, x, y, o, 1024, 1024)         # nothing registered: nothing to model, it runs
        s.register_timing_range(base, 1 << 16)
        with pytest.raises(LaunchRefused) as ei:
            _launch(k, 0x1011, x, y, o, 1024, 1024)
        assert ei.value.code == ErrorCode.LAUNCH_REFUSED and ei.value.fields["kernel"] == "k_dadd"
        assert "deferred instrumented build" in ei.value.fields["reason"]
        import json
        rep = json.loads(s.client.call("GetSummary", s.client.pb.GetSummaryRequest()).summary_json)
        assert "deferred_build_failed" in [r["kind"] for r in rep["reports"]]
    finally:
        s.close()


def test_an_instrumented_build_that_cannot_launch_the_kernels_block_is_refused(denv, hbfd_daemon, monkeypatch):
    import runtime_cuda.session as S
    ks, _ = denv
    monkeypatch.setattr(S, "triton_load_binary", FakeLoader(max_threads=32))
    k = ks["k_dadd"]
    s = _session(hbfd_daemon)
    try:
        _reset(k)
        _init_handles(k, 0x5021, 0x1021)
        assert k.function == 0x1021
        info = s.functions[0x1021][1]
        assert not info.admitted and "UNSUPPORTED" in info.reasons[0] and "at most 32 threads" in info.reasons[0]
    finally:
        s.close()


def test_a_warm_triton_cache_whose_deferred_record_is_gone_is_refused(denv, hbfd_daemon, monkeypatch, tmp_path):
    """Issue 18 item 4 under HBFCC_DEFER=1: the cubin is plain, so without its record only the hbfcc-ptxas Triton
    runs now (deferring) says it was meant to be instrumented: not admitted, the reason says so."""
    import runtime_cuda.session as S
    from runtime_cuda.session import LaunchRefused, triton_record
    ks, _ = denv
    monkeypatch.setenv("HBFCC_ARTIFACT_DIR", str(tmp_path / "empty-store"))
    monkeypatch.setattr(S, "triton_load_binary", FakeLoader())
    k = ks["k_dadd"]
    rec, why = triton_record(k.metadata_group)
    assert rec is None and "HBFCC_DEFER=1" in why and "no record" in why
    s = _session(hbfd_daemon)
    try:
        _reset(k)
        _init_handles(k, 0x5031, 0x1031)
        info = s.functions[0x1031][1]
        assert not info.admitted and "HBFCC_DEFER=1" in info.reasons[0]
        base = 0x7A00_0000_0000
        s.register_timing_range(base, 1 << 16)
        with pytest.raises(LaunchRefused):
            _launch(k, 0x1031, FakeTensor(base, 1024), FakeTensor(base + (1 << 20), 1024),
                    FakeTensor(base + (2 << 20), 1024), 1024, 1024)
    finally:
        s.close()
    # without the knob the same cubin is a plain kernel with no record (nothing says otherwise)
    monkeypatch.delenv("HBFCC_DEFER")
    assert triton_record(k.metadata_group) == (None, None)


def test_a_kernel_not_found_at_load_is_refused_then_bound_by_hand(denv, hbfd_daemon, monkeypatch):
    import runtime_cuda.session as S
    from triton import knobs
    ks, _ = denv
    loader = FakeLoader()
    monkeypatch.setattr(S, "triton_load_binary", loader)
    k = ks["k_dadd"]
    s = _session(hbfd_daemon)
    try:
        _reset(k)
        knobs.runtime.kernel_load_end_hook(0x5041, 0x1041, k.name, k.metadata_group, k.hash)   # no kernel frame
        info = s.functions[0x1041][1]
        assert not info.admitted and "bind_triton_kernel" in info.reasons[0]
        k.module, k.function = 0x5041, 0x1041
        s.bind_triton_kernel(k)
        assert k.function == 0x9101 and s.functions[0x9101][1].admitted
    finally:
        s.close()


def test_prebuild_moves_the_build_before_the_run(denv, tmp_path, monkeypatch):
    from runtime_cuda.session import prebuild_triton
    ks, env = denv
    store = tmp_path / "store"
    shutil.copytree(env["HBFCC_ARTIFACT_DIR"], store)
    shutil.rmtree(store / DF.SUBDIR / "built", ignore_errors=True)
    monkeypatch.setenv("HBFCC_ARTIFACT_DIR", str(store))
    b = prebuild_triton(ks["k_dprio"])
    assert not b.cached and b"__hb_" in b.cubin
    assert prebuild_triton(ks["k_dprio"].metadata_group).cached
    assert hashlib.sha256(b.path.read_bytes()).hexdigest() == hashlib.sha256(b.cubin).hexdigest()


def test_binding_the_plain_module_by_hand_does_not_admit_it(denv, hbfd_daemon):
    """Whoever binds a deferred kernel's module without the Triton hooks (bind_module with its record) binds the
    plain build: not admitted, so a launch that would be modeled is refused instead of running unmodeled."""
    from runtime_cuda.session import triton_artifact
    ks, _ = denv
    k = ks["k_dadd"]
    s = _session(hbfd_daemon)
    try:
        art = triton_artifact(k.metadata_group)
        assert art is not None and DF.recipe(art) is not None
        b = s.bind_module(0x5051, artifact=art, kernels=[k.name])
        info = b.kernel("k_dadd")
        assert not info.admitted and "plain build of a deferred kernel" in info.reasons[0]
    finally:
        s.close()


# ---- HBFCC_DEFER=rewrite: the rewrite at the load too -------------------------------------------------------

@pytest.fixture(scope="module")
def rewrite_deferred(tmp_path_factory):
    """k_radd compiled with HBFCC_DEFER=rewrite (hbfcc-ptxas's console entry serves it without the rewriter)."""
    ks, env = _compile_deferred(tmp_path_factory, "rewrite", {"k_radd": "add"}, {"k_radd": ADD_SIG})
    return ks["k_radd"], env


def test_rewrite_deferred_kernel_is_rewritten_built_and_swapped_in_at_load(rewrite_deferred, hbfd_daemon,
                                                                          monkeypatch):
    import runtime_cuda.session as S
    from runtime_cuda.session import triton_record
    k, env = rewrite_deferred
    for n, v in env.items():
        monkeypatch.setenv(n, v)
    rec, why = triton_record(k.metadata_group)
    assert why is None and DF.is_pending(rec) and b"__hb_" not in k.asm["cubin"]
    loader = FakeLoader()
    monkeypatch.setattr(S, "triton_load_binary", loader)
    s = _session(hbfd_daemon)
    try:
        _reset(k)
        _init_handles(k, 0x5061, 0x1061)
        (_, cubin, _), = loader.loaded
        assert b"__hb_issue" in cubin and k.function == 0x9101
        info = s.functions[0x9101][1]
        assert info.admitted, info.reasons                 # from the record the deferred rewrite wrote
        assert not s.functions[0x1061][1].admitted
    finally:
        s.close()
    # another process with other hbfcc knobs: the pending record does not describe its build
    monkeypatch.setenv("HBFCC_INLINE_ISSUE", "0")
    rec, why = triton_record(k.metadata_group)
    assert rec is None and "other hbfcc knobs" in why and "HBFCC_INLINE_ISSUE" in why
