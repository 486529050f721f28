"""Instrumentation at load (HBF_TRITON_INSTRUMENT=load) on the CPU: real Triton 3.6 compiles (sm_90a, no GPU) with
Triton's OWN ptxas (TRITON_PTXAS_PATH unset: its bundled one; no hbfcc at compile time); the runtime reconstructs
Triton's ptxas run from the kernel's metadata, verifies it reproduces the cached cubin byte for byte, and builds
the kernel through HBFCC_DEFER=rewrite's machinery (eager hbfcc-ptxas on the original PTX).

(a) the reconstruction reproduces Triton's cubin for add, softmax, matmul, a num_warps=8 + maxnreg kernel, one
with enable_fp_fusion=False + ptx_options and one compiled with TRITON_DISABLE_LINE_INFO=1; (b) the build is
byte-identical to what eager hbfcc-ptxas makes for that PTX (and, for add, to an eager Triton compile through
hbfcc-ptxas); (c) a tampered cubin, an option the reconstruction does not know or gets wrong, another Triton,
hbfcc-ptxas as Triton's ptxas, a group without its PTX: refused, naming the kernel and what differed; (d) the swap
at load through the stand-in loader of test_triton_defer_swap.py, the warm store reading the build back, a
refusal leaving the kernel NOT admitted, and the knob off leaving the kernel what Triton compiled."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_triton_defer_swap import FakeLoader, _init_handles, _reset, _session
from test_triton_gate import FakeTensor, _launch

from hbfcommon import artifact as A
from hbfcommon import deferred as DF
from hbfcommon import resources
from hbfcommon.errors import ErrorCode

ROOT = Path(__file__).resolve().parents[2]
HELPER = resources.helper_ptx_path("direct")
ADD = {"x": "*fp32", "y": "*fp32", "o": "*fp32", "n": "i32", "B": "constexpr"}
SOFT = {"x": "*fp32", "o": "*fp32", "ncols": "i32", "stride": "i32", "B": "constexpr"}
MM = {"a": "*fp16", "b": "*fp16", "c": "*fp16", "M": "i32", "N": "i32", "K": "i32", "sam": "i32", "sak": "i32",
      "sbk": "i32", "sbn": "i32", "scm": "i32", "scn": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
# name -> (kind, signature, constexprs, options, extra compile environment)
KERNELS = {
    "l_add": ("add", ADD, {"B": 1024}, {}, {}),
    "l_soft": ("softmax", SOFT, {"B": 1024}, {}, {}),
    "l_mm": ("matmul", MM, {"BM": 64, "BN": 64, "BK": 32}, {}, {}),
    "l_w8": ("softmax", SOFT, {"B": 2048}, {"num_warps": 8, "maxnreg": 64}, {}),
    "l_nofma": ("add", ADD, {"B": 512}, {"enable_fp_fusion": False, "ptx_options": "--maxrregcount=40"}, {}),
    "l_noline": ("add", ADD, {"B": 256}, {}, {"TRITON_DISABLE_LINE_INFO": "1"}),
}


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """({name: CompiledKernel} compiled by plain Triton, its bundled ptxas; the runtime's environment)."""
    pytest.importorskip("triton")
    if not HELPER.is_file():
        pytest.skip("the helper PTX (make helpers-ptx) missing")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from workloads import triton_kernels as tk
    d = tmp_path_factory.mktemp("triton-load")
    env = {"HBFCC_ARTIFACT_DIR": str(d / "art"), "HBFCC_CACHE_DIR": str(d / "hc"), "HBFCC_HELPER_PTX": str(HELPER),
           "TRITON_CACHE_DIR": str(d / "tc"), "HBF_TRITON_INSTRUMENT": "load"}
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        mp.delenv("TRITON_PTXAS_PATH", raising=False)
        mp.delenv("HBFCC_DEFER", raising=False)
        mod = tk.load(d / "tk_load.py", {n: v[0] for n, v in KERNELS.items()})
        for name, (_, sig, cx, opts, cenv) in KERNELS.items():
            with pytest.MonkeyPatch.context() as mp2:
                for k, v in cenv.items():
                    mp2.setenv(k, v)
                out[name] = triton.compile(ASTSource(fn=getattr(mod, name), signature=sig, constexprs=cx),
                                           target=GPUTarget("cuda", 90, 32), options=opts or None)
    return out, env


@pytest.fixture
def penv(plain, monkeypatch):
    ks, env = plain
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    monkeypatch.delenv("HBFCC_DEFER", raising=False)
    return ks, env


def _files(k) -> tuple[bytes, bytes, bytes]:
    from runtime_cuda.triton_load import group_file
    g = dict(k.metadata_group)
    return tuple(group_file(g, s)[0] for s in (".ptx", ".cubin", ".json"))   # type: ignore[return-value]


def _group_copy(k, tmp_path: Path) -> dict[str, str]:
    """A copy of a kernel's cache group (to tamper with)."""
    g = {}
    for key, p in dict(k.metadata_group).items():
        q = tmp_path / os.path.basename(p)
        shutil.copyfile(p, q)
        g[key] = str(q)
    return g


def _eager(ptx: bytes, argv: list[str], real: str, d: Path) -> bytes:
    """What eager hbfcc-ptxas makes of this PTX with these options (its own store)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "k.ptx").write_bytes(ptx)
    run = [sys.executable, "-m", "hbfcc.cli", "ptxas"] + [
        a.replace(DF.PTX_TOKEN, str(d / "k.ptx")).replace(DF.OUT_TOKEN, str(d / "k.cubin")) for a in argv]
    env = dict(os.environ, HBFCC_REAL_PTXAS=real, HBFCC_ARTIFACT_DIR=str(d / "art"), HBFCC_DEFER="0",
               HBFCC_SIDECAR="0", PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    cp = subprocess.run(run, capture_output=True, text=True, env=env)
    assert cp.returncode == 0, cp.stderr[-3000:]
    return (d / "k.cubin").read_bytes()


# ---- (a) + (b) ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(KERNELS))
def test_reconstruction_reproduces_tritons_cubin_and_the_build_is_the_eager_one(penv, name, tmp_path):
    from runtime_cuda import triton_load as TL
    ks, env = penv
    k = ks[name]
    ptx, cubin, meta = _files(k)
    assert b"__hb_" not in cubin                                    # Triton's own cubin
    p = TL.prepare(name, ptx, cubin, meta)
    rec, r = p.record, p.record["deferred"]
    argv = r["argv"]
    if name == "l_nofma":
        assert "--fmad=false" in argv and "--maxrregcount=40" in argv
    if name == "l_noline":
        assert argv[:2] == ["-lineinfo", "-suppress-debug-info"]
    if name == "l_w8":
        assert b".maxnreg 64" in ptx and "--gpu-name=sm_90a" in argv
    # (a) verified: the reconstruction on the PTX gave Triton's cubin byte for byte (prepare ran it) -- and again
    assert TL.verify(name, ptx, cubin, r["env"]["HBFCC_REAL_PTXAS"], argv) > 0
    assert rec["build"]["output_sha256"] == hashlib.sha256(cubin).hexdigest() and DF.is_pending(rec)
    assert A.lookup_by_output(cubin) == rec and TL.is_load_record(rec)
    assert DF.original_path(A.store_dir(), r["original_sha256"]).read_bytes() == ptx
    # (b) the build: eager hbfcc-ptxas on the original, byte for byte, with its admission record
    built = DF.build(rec)
    assert not built.cached and b"__hb_issue" in built.cubin and built.record is not None
    assert built.cubin == _eager(ptx, argv, r["env"]["HBFCC_REAL_PTXAS"], tmp_path / "eager")
    assert any(x.get("name") == name for x in built.record["kernels"])
    # a warm store: no ptxas run to verify, the build read back
    p2 = TL.prepare(name, ptx, cubin, meta)
    assert p2.verify_ns == 0 and not p2.written and p2.record == rec
    again = DF.build(p2.record)
    assert again.cached and again.cubin == built.cubin


def test_the_load_build_is_an_eager_triton_compile_through_hbfcc_ptxas(penv, tmp_path):
    """The add kernel compiled by Triton through hbfcc-ptxas (eager) gives the cubin the load build made."""
    from runtime_cuda import triton_load as TL
    ks, env = penv
    k = ks["l_add"]
    ptx, cubin, meta = _files(k)
    rec = TL.prepare("l_add", ptx, cubin, meta).record
    built = DF.build(rec)
    code = r'''
import importlib.util, os, sys, json
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
spec = importlib.util.spec_from_file_location("tk_load_eager", sys.argv[3])   # the same file: the same PTX
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
k = triton.compile(ASTSource(fn=mod.l_add, signature=json.loads(sys.argv[2]), constexprs={"B": 1024}),
                   target=GPUTarget("cuda", 90, 32))
open(sys.argv[1] + "/out.cubin", "wb").write(k.asm["cubin"])
open(sys.argv[1] + "/out.ptx", "w").write(k.asm["ptx"])
'''
    wrap = tmp_path / "hbfcc-ptxas"
    wrap.write_text(f"#!/bin/sh\nexec {sys.executable} -m hbfcc.ptxas_entry \"$@\"\n")
    wrap.chmod(0o755)
    cenv = dict(os.environ, TRITON_PTXAS_PATH=str(wrap), HBFCC_REAL_PTXAS=rec["deferred"]["env"]["HBFCC_REAL_PTXAS"],
                HBFCC_ARTIFACT_DIR=str(tmp_path / "art"), TRITON_CACHE_DIR=str(tmp_path / "tc"), HBFCC_DEFER="0",
                PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    src = Path(env["TRITON_CACHE_DIR"]).parent / "tk_load.py"
    cp = subprocess.run([sys.executable, "-c", code, str(tmp_path), json.dumps(ADD), str(src)], capture_output=True,
                        text=True, env=cenv, cwd=ROOT)
    assert cp.returncode == 0, cp.stderr[-3000:]
    assert (tmp_path / "out.ptx").read_bytes() == ptx
    assert (tmp_path / "out.cubin").read_bytes() == built.cubin


# ---- (c) refusals -------------------------------------------------------------------------------------------

def _refused(name, ptx, cubin, meta, *, match: str, store: Path):
    from runtime_cuda import triton_load as TL
    with pytest.raises(TL.LoadInstrumentError) as ei:
        TL.prepare(name, ptx, cubin, meta, store=store)
    e = ei.value
    assert e.code == ErrorCode.TOOLCHAIN and e.fields["kernel"] == name and name in str(e)
    assert match in str(e), str(e)
    assert not (store / "by-output").is_dir() or not list((store / "by-output").iterdir())   # no record written
    return e


def test_a_tampered_cubin_is_refused_with_what_differed(penv, tmp_path):
    ks, _ = penv
    ptx, cubin, meta = _files(ks["l_soft"])
    bad = bytearray(cubin)
    bad[len(bad) // 2] ^= 0x01
    e = _refused("l_soft", ptx, bytes(bad), meta, match="does not reproduce Triton's cubin", store=tmp_path / "s1")
    assert f"first differ at byte {len(bad) // 2}" in str(e) and "in Triton's:" in str(e)
    assert e.fields["got_sha256"] == hashlib.sha256(cubin).hexdigest()
    e = _refused("l_soft", ptx, cubin + b"\0", meta, match=f"first differ at byte {len(cubin)}", store=tmp_path / "s2")


def test_an_option_the_reconstruction_does_not_know_or_gets_wrong_is_refused(penv, tmp_path):
    ks, _ = penv
    ptx, cubin, meta = _files(ks["l_add"])
    m = json.loads(meta)
    _refused("l_add", ptx, cubin, json.dumps(dict(m, ptxas_flags_v2="-O1")).encode(),
             match="does not know the metadata options ['ptxas_flags_v2']", store=tmp_path / "s1")
    _refused("l_add", ptx, cubin, json.dumps(dict(m, triton_version="3.7.0")).encode(),
             match="Triton 3.7.0", store=tmp_path / "s2")
    # an option it knows, recorded differently from the compile: ptxas -O0 -g does not give Triton's cubin
    _refused("l_add", ptx, cubin, json.dumps(dict(m, DISABLE_PTXAS_OPT="1")).encode(),
             match="does not reproduce Triton's cubin", store=tmp_path / "s3")
    _refused("l_add", ptx, cubin, json.dumps({k: v for k, v in m.items() if k != "enable_fp_fusion"}).encode(),
             match="without ['enable_fp_fusion']", store=tmp_path / "s4")
    _refused("l_add", None, cubin, meta, match="lacks its .ptx", store=tmp_path / "s5")


def test_hbfcc_ptxas_as_tritons_ptxas_is_refused(penv, tmp_path, monkeypatch):
    from runtime_cuda import triton_load as TL
    ks, _ = penv
    ptx, cubin, meta = _files(ks["l_add"])
    real = TL.triton_ptxas(90)
    wrap = tmp_path / "hbfcc-ptxas"
    wrap.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m hbfcc.ptxas_entry \"$@\"\n")
    wrap.chmod(0o755)
    monkeypatch.setenv("HBFCC_REAL_PTXAS", real)          # (else hbfcc-ptxas would find itself through Triton)
    monkeypatch.setenv("TRITON_PTXAS_PATH", str(wrap))
    _refused("l_add", ptx, cubin, meta, match="is hbfcc-ptxas", store=tmp_path / "s")


# ---- (d) the runtime: the swap at load ----------------------------------------------------------------------

def test_the_load_hook_verifies_builds_and_swaps_in_a_plain_triton_kernel(penv, hbfd_daemon, monkeypatch, tmp_path):
    import runtime_cuda.session as S
    from runtime_cuda.session import LaunchRefused, triton_record
    ks, env = penv
    monkeypatch.setenv("HBFCC_ARTIFACT_DIR", str(tmp_path / "store"))      # a cold store
    k = ks["l_add"]
    plain_cubin = k.asm["cubin"]
    assert triton_record(k.metadata_group) == (None, None)                 # a plain Triton kernel
    loader = FakeLoader()
    monkeypatch.setattr(S, "triton_load_binary", loader)
    s = _session(hbfd_daemon)
    try:
        assert s.triton_instrument == "load"
        _reset(k)
        _init_handles(k, 0x5101, 0x1101)
        (name, cubin, shared), = loader.loaded
        assert name == "l_add" and b"__hb_issue" in cubin and shared == k.metadata.shared
        rec = A.lookup_by_output(plain_cubin)
        assert rec["deferred"]["mode"] == "load" and cubin == DF.build(rec).cubin
        assert (k.module, k.function) == (0x9001, 0x9101) and k.kernel == cubin
        assert k.asm["cubin"] == plain_cubin                                 # Triton's cache entry untouched
        assert s.functions[0x9101][1].admitted
        assert not s.functions[0x1101][1].admitted
        ev = s.deferred_builds[-1]
        assert ev["ok"] and ev["mode"] == "load" and not ev["cached"] and ev["verify_ns"] > 0 and ev["build_ns"] > 0
        base = 0x7A00_0000_0000
        x, y, o = FakeTensor(base, 1 << 20), FakeTensor(base + (8 << 20), 1 << 20), FakeTensor(base + (16 << 20), 1 << 20)
        s.register_timing_range(base, 1 << 16)
        _launch(k, k.function, x, y, o, 1 << 20, 1024)
        with pytest.raises(LaunchRefused):
            _launch(k, 0x1101, x, y, o, 1 << 20, 1024)
        n = len(loader.loaded)
        s.bind_triton_kernel(k)                                             # swapped already: bound as it runs
        assert len(loader.loaded) == n and s.functions[0x9101][1].admitted
        _reset(k)                                                           # another process: the warm store
        _init_handles(k, 0x5102, 0x1102)
        ev = s.deferred_builds[-1]
        assert ev["ok"] and ev["cached"] and ev["build_ns"] == 0 and ev["verify_ns"] == 0
        assert loader.loaded[-1][1] == cubin
    finally:
        s.close()
    # the knob off: the same kernel (and its load record in the store) is what Triton compiled, not admitted
    monkeypatch.setenv("HBF_TRITON_INSTRUMENT", "off")
    s = _session(hbfd_daemon)
    try:
        n = len(loader.loaded)
        _reset(k)
        _init_handles(k, 0x5103, 0x1103)
        assert len(loader.loaded) == n and k.function == 0x1103 and not s.functions[0x1103][1].admitted
    finally:
        s.close()


def test_a_kernel_that_cannot_be_verified_is_not_admitted_and_refused(penv, hbfd_daemon, monkeypatch, tmp_path,
                                                                     caplog):
    import runtime_cuda.session as S
    from runtime_cuda.session import LaunchRefused
    ks, env = penv
    monkeypatch.setenv("HBFCC_ARTIFACT_DIR", str(tmp_path / "store"))
    k = ks["l_soft"]
    g = _group_copy(k, tmp_path)
    cub = next(v for key, v in g.items() if key.endswith(".cubin"))
    data = bytearray(Path(cub).read_bytes())
    data[-1] ^= 0x01
    Path(cub).write_bytes(bytes(data))
    loader = FakeLoader()
    monkeypatch.setattr(S, "triton_load_binary", loader)
    caplog.set_level(logging.WARNING, logger="runtime_cuda.session")
    s = _session(hbfd_daemon)
    old = k.metadata_group
    try:
        k.metadata_group = g
        _reset(k)
        _init_handles(k, 0x5111, 0x1111)
        assert not loader.loaded and k.function == 0x1111
        info = s.functions[0x1111][1]
        why = info.reasons[0]
        assert not info.admitted and "instrumentation at load" in why and "l_soft" in why and "TOOLCHAIN" in why
        assert "does not reproduce Triton's cubin" in why
        assert any(r.levelno == logging.ERROR and "Triton kernel l_soft is NOT admitted" in r.getMessage()
                   for r in caplog.records)
        assert s.deferred_builds[-1]["ok"] is False and s.deferred_builds[-1]["mode"] == "load"
        base = 0x7900_0000_0000
        s.register_timing_range(base, 1 << 16)
        x, o = FakeTensor(base, 1024), FakeTensor(base + (1 << 20), 1024)
        with pytest.raises(LaunchRefused) as ei:
            _launch(k, 0x1111, x, o, 1000, 1024)
        assert ei.value.fields["kernel"] == "l_soft" and "instrumentation at load" in ei.value.fields["reason"]
    finally:
        k.metadata_group = old
        s.close()


def test_prebuild_triton_verifies_and_builds_a_plain_kernel(penv, monkeypatch, tmp_path):
    from runtime_cuda.session import prebuild_triton
    ks, _ = penv
    monkeypatch.setenv("HBFCC_ARTIFACT_DIR", str(tmp_path / "store"))
    b = prebuild_triton(ks["l_noline"])
    assert b"__hb_issue" in b.cubin and not b.cached
    assert prebuild_triton(ks["l_noline"]).cached


def test_the_knob(monkeypatch):
    from hbfcommon.errors import ConfigError
    from runtime_cuda import knobs
    for v, want in (("", "off"), ("0", "off"), ("off", "off"), ("load", "load"), ("LOAD", "load")):
        monkeypatch.setenv("HBF_TRITON_INSTRUMENT", v)
        assert knobs.triton_instrument() == want
    monkeypatch.setenv("HBF_TRITON_INSTRUMENT", "compile")
    with pytest.raises(ConfigError, match="HBF_TRITON_INSTRUMENT"):
        knobs.triton_instrument()
