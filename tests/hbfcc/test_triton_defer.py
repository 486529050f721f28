"""Deferred instrumentation (HBFCC_DEFER=1, issue 18 item 3), real Triton 3.6 compiles for sm_90a on the CPU:

* a deferred compile hands Triton the PLAIN cubin (byte-identical to plain Triton's, no ``__hb_`` helper in
  it), and the store has the admission record (by PTX, by the plain cubin) with the recipe, and the
  rewritten PTX under its sha256;
* the deferred build (hbfcommon.deferred.build, what the runtime and ``hbfcc prebuild`` run) is
  byte-identical to the cubin eager hbfcc-ptxas gives Triton for the same kernel, and is built once;
* what cannot be built is refused loudly, naming the kernel: rewritten PTX gone or damaged, a damaged recipe;
* ``hbfcc prebuild --triton-cache`` builds the deferred kernels of a Triton cache, and names the cubins
  with no record;
* HBFCC_DEFER=rewrite: the compile keeps only the original PTX (a pending record, no rewrite, no warning) and
  hands Triton the plain cubin; its build runs hbfcc-ptxas and is the eager cubin byte for byte, with the
  admission record of that cubin.

One child process does every compile (the plain, the eager and the deferred build of each kernel, each in
its own Triton cache)."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcommon import artifact as A  # noqa: E402
from hbfcommon import deferred as DF  # noqa: E402
from hbfcommon.errors import ErrorCode  # noqa: E402

pytest.importorskip("triton")
pytestmark = pytest.mark.slow

KERNELS = {"d_add": "add", "d_prio": "prio", "d_soft": "softmax", "d_small": "add"}
# HBFCC_FULL_WARP=auto (the default) decides these from ptxas's builds of the rewrite both ways (an issue group of
# more than 4 sites: at B = 1024 and 4 warps a thread's 8 floats are two vector loads of each input and two stores):
# HBFCC_DEFER=1 keeps their ORIGINAL PTX and their deferred build runs hbfcc-ptxas eagerly; d_small (the add at
# B = 128: one float per thread, a group of 3 sites) keeps the stored rewrite
EAGER = {"d_add", "d_prio", "d_soft"}
ADMITTED = {"d_add", "d_soft", "d_small"}
SCRIPT = r'''
import hashlib, json, os, sys
from pathlib import Path
import triton
from triton.backends.compiler import GPUTarget
from workloads import triton_kernels

work = Path(sys.argv[1])
K = triton_kernels.load(work / "tk_defer.py", json.loads(sys.argv[2]))
SIGS = {"d_add": {"x": "*fp32", "y": "*fp32", "o": "*fp32", "n": "i32", "B": "constexpr"},
        "d_prio": {"x": "*fp32", "o": "*fp32", "n": "i32", "B": "constexpr"},
        "d_soft": {"x": "*fp32", "o": "*fp32", "ncols": "i32", "stride": "i32", "B": "constexpr"},
        "d_small": {"x": "*fp32", "y": "*fp32", "o": "*fp32", "n": "i32", "B": "constexpr"}}
T = GPUTarget("cuda", 90, 32)
plain_ptxas = os.environ.pop("PLAIN_PTXAS")
hbfcc_ptxas = os.environ["TRITON_PTXAS_PATH"]
out = {}
for variant in ("plain", "eager", "defer", "lazy"):
    os.environ["TRITON_CACHE_DIR"] = str(work / f"cache-{variant}")
    os.environ["TRITON_PTXAS_PATH"] = plain_ptxas if variant == "plain" else hbfcc_ptxas
    if variant in ("defer", "lazy"):
        os.environ["HBFCC_DEFER"] = "1" if variant == "defer" else "rewrite"
    if variant == "lazy":   # the plain cubins are the defer variant's: one store keeps one record per cubin
        os.environ["HBFCC_ARTIFACT_DIR"] = str(work / "store-lazy")
    for name in SIGS:
        k = triton.compile(triton.compiler.ASTSource(fn=getattr(K, name), signature=SIGS[name],
                                                     constexprs={"B": 128 if name == "d_small" else 1024}),
                            target=T)
        d = work / "cubins" / variant
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{name}.cubin").write_bytes(k.asm["cubin"])
        out[f"{variant}/{name}"] = {"ptx": hashlib.sha256(k.asm["ptx"].encode()).hexdigest(),
                                    "cubin": hashlib.sha256(k.asm["cubin"]).hexdigest()}
print("RESULT " + json.dumps(out), flush=True)
'''


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    real = shutil.which("ptxas")
    if real is None:
        pytest.skip("ptxas not installed")
    d = tmp_path_factory.mktemp("defer")
    wrap = d / "hbfcc-ptxas"            # this tree's hbfcc (the venv's console script may be another tree's)
    wrap.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; from hbfcc.ptxas_entry import main; "
                    f"sys.exit(main())' \"$@\"\n")      # what the hbfcc-ptxas console script runs
    wrap.chmod(0o755)
    script = d / "defer.py"
    script.write_text(SCRIPT)
    env = U.env_with(HBFCC_ARTIFACT_DIR=d / "store", HBFCC_CACHE_DIR=d / "hc", TMPDIR=None, HBFCC_DEFER=None,
                     HBFCC_HELPER_PTX=U.real_helper_ptx() or U.fixture_helper_ptx(), HBFCC_REAL_PTXAS=real,
                     TRITON_PTXAS_PATH=wrap, PLAIN_PTXAS=real, HBFCC_LOG=None, PYTHONPATH=U.REPO)
    cp = subprocess.run([sys.executable, str(script), str(d), json.dumps(KERNELS)], capture_output=True, text=True,
                        cwd=U.REPO, env=env)
    assert cp.returncode == 0, cp.stderr[-4000:] + cp.stdout[-2000:]
    res = json.loads(next(ln for ln in cp.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])
    return res, d, cp.stdout


def _record(d: Path, res: dict, name: str) -> dict:
    return json.loads(A.output_store_path(d / "store", res[f"defer/{name}"]["cubin"]).read_text())


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_deferred_compile_gives_the_plain_cubin_and_stores_the_rewrite(compiled, name):
    res, d, _ = compiled
    plain, defer, eager = res[f"plain/{name}"], res[f"defer/{name}"], res[f"eager/{name}"]
    assert plain["ptx"] == defer["ptx"] == eager["ptx"]       # the same kernel, the same PTX
    assert defer["cubin"] == plain["cubin"] != eager["cubin"]  # Triton got plain Triton's own cubin
    cubin = (d / "cubins" / "defer" / f"{name}.cubin").read_bytes()
    assert b"__hb_" not in cubin and b"__hb_" in (d / "cubins" / "eager" / f"{name}.cubin").read_bytes()
    rec = _record(d, res, name)
    A.validate(rec)
    assert rec == json.loads(A.store_path(d / "store", defer["ptx"]).read_text())   # by PTX: the same record
    assert DF.MARKER_WORDS["1"] in rec["build"]["marker"] and rec["build"]["output_sha256"] == plain["cubin"]
    r = rec["deferred"]
    assert DF.PTX_TOKEN in r["argv"] and DF.OUT_TOKEN in r["argv"] and "-lineinfo" in r["argv"]
    assert r["plain_output_sha256"] == plain["cubin"]
    if name in EAGER:
        assert r["mode"] == DF.EAGER_MODE and "HBFCC_FULL_WARP=auto decides " + name in r["why"], r
        assert set(DF.PENDING_KEYS) <= set(r) and "ptx_sha256" not in r
        assert r["builder"][-3:] == list(DF.BUILDER_ARGS) and r["env"]["HBFCC_REAL_PTXAS"]
        text = DF.original_path(d / "store", r["original_sha256"]).read_bytes()
        assert hashlib.sha256(text).hexdigest() == r["original_sha256"] == defer["ptx"]
        assert not DF.ptx_path(d / "store", rec["input"]["transformed_sha256"]).exists()   # no rewrite kept
    else:
        assert "mode" not in r and set(DF.RECIPE_KEYS) <= set(r)
        text = DF.ptx_path(d / "store", r["ptx_sha256"]).read_bytes()
        assert hashlib.sha256(text).hexdigest() == r["ptx_sha256"] == rec["input"]["transformed_sha256"]
        assert b"__hb_issue" in text or b"__hb_kernel_enter" in text
    assert rec["kernels"][0]["name"] == name and rec["kernels"][0]["admitted"] is (name in ADMITTED)
    assert rec["kernels"][0]["ptxas_before"]["registers"] > 0     # the plain build's facts
    assert not DF.cubin_path(d / "store", r["key"]).exists()        # nothing assembled yet


def test_the_eager_record_is_unchanged_without_the_knob(compiled):
    res, d, _ = compiled
    rec = json.loads(A.output_store_path(d / "store", res["eager/d_add"]["cubin"]).read_text())
    assert "deferred" not in rec and DF.MARKER_WORDS["1"] not in rec["build"]["marker"]
    assert "eager_because" not in rec["build"]


def test_a_not_admitted_kernel_is_still_named_at_compile_time(compiled):
    _, _, stdout = compiled
    assert stdout.count("WARNING: kernel d_prio is NOT admitted") == 2, stdout[-3000:]   # eager and deferred


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_deferred_build_is_the_eager_cubin_byte_for_byte_and_built_once(compiled, name):
    res, d, _ = compiled
    rec = _record(d, res, name)
    b = DF.build(rec, store=d / "store")
    assert not b.cached and b.build_ns > 0
    assert hashlib.sha256(b.cubin).hexdigest() == res[f"eager/{name}"]["cubin"]
    assert b.cubin == (d / "cubins" / "eager" / f"{name}.cubin").read_bytes()
    again = DF.build(rec, store=d / "store")
    assert again.cached and again.cubin == b.cubin and again.build_ns == 0 and again.path == b.path


def _refused_gone_damaged_changed(rec: dict, name: str, store: Path, stored: Path, change, full_store: Path,
                                  what: str) -> None:
    """A deferred record's build refused, naming the kernel: its stored text gone from ``store`` (the store emptied
    since the compile, the record kept elsewhere), then another text under its sha256 at ``stored``, then the recipe
    changed after the compile (``change(recipe)``: no longer its key's content) against the full store."""
    with pytest.raises(DF.DeferredBuildError) as ei:
        DF.build(rec, store=store)
    assert ei.value.code == ErrorCode.TOOLCHAIN and name in str(ei.value) and what in str(ei.value) \
        and "gone" in str(ei.value)
    assert ei.value.fields["kernels"] == [name]
    stored.parent.mkdir(parents=True)
    stored.write_text("// not the stored text\n")
    with pytest.raises(DF.DeferredBuildError, match="does not have the recorded sha256"):
        DF.build(rec, store=store)
    bad = json.loads(json.dumps(rec))
    change(bad["deferred"])
    with pytest.raises(DF.DeferredBuildError, match="damaged record"):
        DF.build(bad, store=full_store)


def test_what_cannot_be_built_is_refused_loudly(compiled, tmp_path):
    res, d, _ = compiled
    rec = _record(d, res, "d_small")
    store = tmp_path / "store"
    _refused_gone_damaged_changed(rec, "d_small", store, DF.ptx_path(store, rec["deferred"]["ptx_sha256"]),
                                  lambda r: r["argv"].append("-O0"), d / "store", "rewritten PTX")
    # ptxas rejecting the stored text: the failed PTX kept, the command to reproduce given
    broken = "// broken\n.version 8.7\n.target sm_90a\n.address_size 64\n.visible .entry k() { bogus; }\n"
    sha = DF.store_ptx(store, broken)
    rec2 = json.loads(json.dumps(rec))
    rec2["deferred"]["ptx_sha256"] = sha
    rec2["deferred"]["key"] = DF.recipe_key(sha, rec2["deferred"]["argv"], rec2["ptxas"]["version"])
    with pytest.raises(DF.DeferredBuildError) as ei:
        DF.build(rec2, store=store)
    assert "ptxas failed" in str(ei.value) and "reproduce:" in str(ei.value) and ei.value.returncode
    with pytest.raises(DF.DeferredBuildError, match="not of a deferred build"):
        DF.build({k: v for k, v in rec.items() if k != "deferred"}, store=store)


def test_an_eager_recipe_that_cannot_be_built_is_refused_loudly(compiled, tmp_path):
    """HBFCC_DEFER=1's eager recipe (HBFCC_FULL_WARP=auto decides the module): its original PTX gone or damaged,
    its options changed after the compile: refused, naming the kernel; the build's own record is the eager one."""
    res, d, _ = compiled
    rec = _record(d, res, "d_add")
    store = tmp_path / "store"
    # a knob changed after the compile: not its key's content
    _refused_gone_damaged_changed(rec, "d_add", store, DF.original_path(store, rec["deferred"]["original_sha256"]),
                                  lambda r: r["env"].update(HBFCC_FULL_WARP="1"), d / "store", "original PTX")
    b = DF.build(rec, store=d / "store")
    assert b.record is not None and "deferred" not in b.record and b.record["kernels"][0]["name"] == "d_add"
    assert b.record["build"]["output_sha256"] == res["eager/d_add"]["cubin"]
    assert b.record["kernels"][0]["full_warp_auto"]["chosen"] in ("1", "all")    # auto decided it, as eagerly


def test_prebuild_builds_a_triton_caches_deferred_kernels(compiled, tmp_path):
    res, d, _ = compiled
    store = tmp_path / "store"
    shutil.copytree(d / "store", store)
    shutil.rmtree(store / DF.SUBDIR / "built", ignore_errors=True)
    cmd = [sys.executable, "-m", "hbfcc.cli", "prebuild", "--store", str(store), "--jobs", "2"]
    env = U.env_with(PYTHONPATH=U.REPO)
    cp = subprocess.run(cmd + ["--triton-cache", str(d / "cache-defer")], capture_output=True, text=True, env=env,
                        cwd=U.REPO)
    assert cp.returncode == 0, cp.stderr
    assert f"{len(KERNELS)} of {len(KERNELS)} deferred build(s) ready" in cp.stderr
    for name in KERNELS:
        rec = _record(d, res, name)
        got = DF.cubin_path(store, rec["deferred"]["key"]).read_bytes()
        assert hashlib.sha256(got).hexdigest() == res[f"eager/{name}"]["cubin"]
    # the plain cache's cubins are the deferred ones (same bytes, same records); the eager cache's are
    # instrumented already: nothing to build
    cp = subprocess.run(cmd + ["--triton-cache", str(d / "cache-eager")], capture_output=True, text=True, env=env,
                        cwd=U.REPO)
    assert cp.returncode == 0 and "0 of 0" in cp.stderr and "have no record" not in cp.stderr, cp.stderr
    # a cubin the store knows nothing about: named
    other = tmp_path / "other-cache" / "X"
    other.mkdir(parents=True)
    (other / "k.cubin").write_bytes(b"\x7fELF not one of ours")
    cp = subprocess.run(cmd + ["--triton-cache", str(other.parent)], capture_output=True, text=True, env=env,
                        cwd=U.REPO)
    assert cp.returncode == 0 and "have no record" in cp.stderr and "k.cubin" in cp.stderr, cp.stderr
    # a store whose rewritten PTX is gone: exit 1, the kernel named
    shutil.rmtree(store / DF.SUBDIR)
    cp = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=U.REPO)
    assert cp.returncode == 1 and "d_add" in cp.stderr and "gone" in cp.stderr, cp.stderr


# ---- HBFCC_DEFER=rewrite ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(KERNELS))
def test_rewrite_deferred_compile_keeps_the_original_and_gives_the_plain_cubin(compiled, name):
    res, d, _ = compiled
    lazy, plain = res[f"lazy/{name}"], res[f"plain/{name}"]
    assert lazy["ptx"] == plain["ptx"] and lazy["cubin"] == plain["cubin"]
    rec = json.loads(A.output_store_path(d / "store-lazy", lazy["cubin"]).read_text())
    assert DF.is_pending(rec) and rec["entries"] == [name] and rec["build"]["output_sha256"] == plain["cubin"]
    r = rec["deferred"]
    assert r["mode"] == "rewrite" and set(DF.PENDING_KEYS) <= set(r) and "HBFCC_DEFER" not in r["env"]
    assert r["env"]["HBFCC_REAL_PTXAS"] == shutil.which("ptxas")
    assert not (d / "store-lazy" / DF.SUBDIR / "built").exists()           # nothing rewritten or assembled
    assert sorted(p.name for p in (d / "store-lazy").iterdir()) == ["by-output", DF.SUBDIR]
    assert DF.original_path(d / "store-lazy", r["original_sha256"]).read_bytes() == \
        (d / "cache-lazy").glob(f"*/{name}.ptx").__next__().read_bytes()


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_rewrite_deferred_build_is_the_eager_cubin_with_its_record(compiled, name, tmp_path):
    res, d, _ = compiled
    store = tmp_path / "store"
    shutil.copytree(d / "store-lazy", store)
    rec = json.loads(A.output_store_path(store, res[f"lazy/{name}"]["cubin"]).read_text())
    b = DF.build(rec, store=store)
    assert not b.cached and b.cubin == (d / "cubins" / "eager" / f"{name}.cubin").read_bytes()
    assert b.record["kernels"][0]["name"] == name and b.record["admitted"] is (name in ADMITTED)
    assert b.record["build"]["output_sha256"] == res[f"eager/{name}"]["cubin"]
    again = DF.build(rec, store=store)
    assert again.cached and again.cubin == b.cubin and again.record == b.record
    # the original gone (and nothing built): refused, naming the kernel
    DF.original_path(store, rec["deferred"]["original_sha256"]).unlink()
    b.path.unlink()
    with pytest.raises(DF.DeferredBuildError) as ei:
        DF.build(rec, store=store)
    assert name in str(ei.value) and "gone" in str(ei.value) and ei.value.code == ErrorCode.TOOLCHAIN
