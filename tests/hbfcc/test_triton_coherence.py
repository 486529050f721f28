"""Triton friendliness (issue 18 item 4), with real Triton 3.6 compiles for sm_90a on the CPU:

* a kernel hbfcc does not admit is named, with the reason, on the compiling process's own output
  (Triton keeps ptxas's stderr in a log it deletes when ptxas succeeds);
* cache coherence between Triton's cache and the artifact store, at bind time
  (runtime_cuda.session.triton_record on the kernel's cache group): the record of the very cubin is
  found even after another configuration overwrote the store's entry for the PTX; a cubin built by another
  hbfcc configuration than the one Triton runs now (Triton hashes `ptxas --version` once per process, so a
  knob changed in the process reuses the old cubins), and an instrumented cubin whose record is gone
  (a warm Triton cache with an emptied store), are refused with the reason.

One child process does every compile (they share Triton's and hbfcc's start-up)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

pytest.importorskip("triton")
pytestmark = pytest.mark.slow

SCRIPT = r'''
import hashlib, json, os, shutil, sys
from pathlib import Path
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from runtime_cuda.session import triton_record
from workloads import triton_kernels

work = Path(sys.argv[1])
# the project's shared kernels: an admitted copy, and the copy with applypriority.global hbfcc refuses
K = triton_kernels.load(work / "tk_coherence.py", {"scale": "copy", "prio": "prio"})
scale, prio = K.scale, K.prio

SIG = {"x": "*fp32", "o": "*fp32", "n": "i32", "B": "constexpr"}
T = GPUTarget("cuda", 90, 32)
store = Path(os.environ["HBFCC_ARTIFACT_DIR"])

def compile_(fn):
    return triton.compile(triton.compiler.ASTSource(fn=fn, signature=SIG, constexprs={"B": 256}), target=T)

def sha(b):
    return hashlib.sha256(b).hexdigest()

def state(k):
    rec, why = triton_record(k.metadata_group)
    return {"cubin": sha(k.asm["cubin"]), "ptx": sha(k.asm["ptx"].encode()), "why": why,
            "admitted": None if rec is None else rec["admitted"],
            "build": None if rec is None else rec.get("build")}

out = {}
print("=== prio", flush=True)
out["prio"] = state(compile_(prio))
print("=== scale", flush=True)
os.environ["TRITON_CACHE_DIR"] = str(work / "cache-a")
a = compile_(scale)
out["a"] = state(a)
# another configuration in its own Triton cache: hbfcc-ptxas runs again and the store's entry for the
# PTX becomes this build's
os.environ["TRITON_CACHE_DIR"] = str(work / "cache-b")
os.environ["HBFCC_INLINE_ISSUE"] = "0"
out["b"] = state(compile_(scale))
out["by_ptx_after_b"] = json.loads((store / (out["a"]["ptx"] + ".hbfcc.json")).read_text())["build"]
# the first configuration again, its Triton cache warm: the record of its own cubin
del os.environ["HBFCC_INLINE_ISSUE"]
os.environ["TRITON_CACHE_DIR"] = str(work / "cache-a")
out["a_again"] = state(compile_(scale))
# a knob changed in this process: Triton's key (ptxas --version, hashed once per process) does not
# see it and hands over the old cubin
os.environ["HBFCC_INLINE_ISSUE"] = "0"
out["stale"] = state(compile_(scale))
del os.environ["HBFCC_INLINE_ISSUE"]
# the artifact store emptied while Triton's cache stays warm
shutil.rmtree(store)
out["empty_store"] = state(compile_(scale))
print("RESULT " + json.dumps(out), flush=True)
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    U.tool("ptxas")
    d = tmp_path_factory.mktemp("coherence")
    tmp = d / "tmp"
    tmp.mkdir()
    script = d / "coherence.py"
    script.write_text(SCRIPT)      # @triton.jit needs its source in a file
    cp = subprocess.run([sys.executable, str(script), str(d)], capture_output=True, text=True, cwd=U.REPO,
                        env=U.env_with(TRITON_CACHE_DIR=d / "cache-p", HBFCC_ARTIFACT_DIR=d / "store",
                                       HBFCC_CACHE_DIR=d / "hbfcc-cache", TMPDIR=tmp,
                                       HBFCC_HELPER_PTX=U.real_helper_ptx() or U.fixture_helper_ptx(),
                                       TRITON_PTXAS_PATH=U.console("hbfcc-ptxas"), HBFCC_LOG=None,
                                       HBFCC_INLINE_ISSUE=None, PYTHONPATH=U.REPO))
    assert cp.returncode == 0, cp.stderr[-4000:] + cp.stdout[-2000:]
    res = json.loads(next(l for l in cp.stdout.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    return res, cp.stdout, cp.stderr, tmp


def test_not_admitted_kernel_is_named_on_the_compiling_process_output(run):
    res, stdout, _, _ = run
    assert res["prio"]["admitted"] is False and res["prio"]["why"] is None
    prio_part = stdout.split("=== prio", 1)[1].split("=== scale", 1)[0]
    lines = [l for l in prio_part.splitlines() if "WARNING: kernel prio is NOT admitted" in l]
    assert lines and "applypriority" in lines[0], stdout[-3000:]
    # an admitted kernel compiles without a word
    assert "NOT admitted" not in stdout.split("=== scale", 1)[1].split("RESULT ", 1)[0]


def test_the_record_of_the_very_cubin_after_the_store_entry_was_overwritten(run):
    res, _, _, _ = run
    a, b, again = res["a"], res["b"], res["a_again"]
    assert a["why"] is None and a["admitted"] is True
    assert a["build"]["output_sha256"] == a["cubin"]
    assert "inline-issue off" not in a["build"]["marker"]
    # the other configuration built another cubin from the same PTX; the store's PTX entry is now its
    assert b["ptx"] == a["ptx"] and b["cubin"] != a["cubin"] and b["why"] is None
    assert "inline-issue off" in b["build"]["marker"]
    assert res["by_ptx_after_b"]["output_sha256"] == b["cubin"]
    # Triton's warm cache hands over cubin a again: its own record, not the PTX's latest one
    assert again["cubin"] == a["cubin"] and again["why"] is None
    assert again["build"] == a["build"]


def test_a_cubin_of_another_configuration_is_refused_with_the_reason(run):
    res, _, _, _ = run
    stale = res["stale"]
    assert stale["cubin"] == res["a"]["cubin"]            # Triton did reuse the old cubin
    assert stale["admitted"] is None
    assert "inline-issue off" in stale["why"] and "Triton's cache key did not see the change" in stale["why"]
    assert "cache-a" in stale["why"]                      # names the cache entry to remove


def test_an_instrumented_cubin_without_a_record_is_refused_with_the_reason(run):
    res, _, _, tmp = run
    e = res["empty_store"]
    assert e["cubin"] == res["a"]["cubin"] and e["admitted"] is None
    assert "without an admission record" in e["why"] and "warm Triton cache" in e["why"]
    assert sorted(tmp.iterdir()) == []                   # and no compile left a file in the temp dir
