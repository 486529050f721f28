"""HBFCC_JIT=1 (issue 18 item 3, cheap builds): hbfcc's nvcc wrapper builds every real GPU target as its virtual one,
so the object embeds the REWRITTEN PTX only (no SASS) and the driver JIT-compiles it at the first load; the launch
bound is decided as in the SASS build; where JIT cannot apply the build is the SASS one, the reason recorded.
The translation (hbfcc/nvcc_targets.py) is pure: tested form by form; the builds use the real CUDA 13 nvcc."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import artifact, nvcc_targets  # noqa: E402
from test_cli_nvcc import hbfcc_env as _env  # noqa: E402  (HBFCC_JIT, NVCC_*_FLAGS cleared)
from test_cli_nvcc import run_hbfcc as _hbfcc  # noqa: E402
from hbfcc.nvcc_targets import jit_plan, virtual  # noqa: E402

VECTOR = U.REPO / "tests" / "fixtures" / "cuda" / "vector.cu"


# ---- the translation -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("code,want", [("sm_90a", "compute_90a"), ("sm_90", "compute_90"), ("sm_100f", "compute_100f"),
                                       ("sm_120", "compute_120"), ("compute_90a", "compute_90a")])
def test_virtual(code, want):
    assert virtual(code) == want


@pytest.mark.parametrize("args,want,targets", [
    # -arch alone: nvcc's shorthand arch=compute_XX,code=[sm_XX,compute_XX] -> its PTX only
    (["-arch=sm_90a"], ["-arch=compute_90a", "-code=compute_90a"], ["compute_90a"]),
    (["-arch", "sm_90a"], ["-arch", "compute_90a", "-code", "compute_90a"], ["compute_90a"]),
    (["--gpu-architecture=sm_90"], ["--gpu-architecture=compute_90", "--gpu-code=compute_90"], ["compute_90"]),
    (["--gpu-architecture", "sm_100f"], ["--gpu-architecture", "compute_100f", "--gpu-code", "compute_100f"],
     ["compute_100f"]),
    # a virtual -arch alone is PTX only already: unchanged
    (["-arch=compute_90a"], ["-arch=compute_90a"], ["compute_90a"]),
    # -code lists: deduplicated, order kept; -arch then names the virtual architecture only
    (["-arch=sm_90a", "-code=sm_90a,compute_90a"], ["-arch=compute_90a", "-code=compute_90a"], ["compute_90a"]),
    (["-arch=compute_90a", "--gpu-code", "sm_90a"], ["-arch=compute_90a", "--gpu-code", "compute_90a"],
     ["compute_90a"]),
    (["-arch=compute_90", "-code=compute_90,sm_90,sm_90a"], ["-arch=compute_90", "-code=compute_90,compute_90a"],
     ["compute_90", "compute_90a"]),
    # -gencode: [a,b], "a,b", one code; = or two arguments; long form (CMake's)
    (["-gencode", "arch=compute_90a,code=[sm_90a,compute_90a]"], ["-gencode", "arch=compute_90a,code=compute_90a"],
     ["compute_90a"]),
    (["-gencode=arch=compute_90a,code=\"sm_90a,compute_90a\""], ["-gencode=arch=compute_90a,code=compute_90a"],
     ["compute_90a"]),
    (["-gencode", "arch=compute_90a,code=sm_90a"], ["-gencode", "arch=compute_90a,code=compute_90a"],
     ["compute_90a"]),
    (["--generate-code=arch=compute_90a,code=[compute_90a,sm_90a]"],
     ["--generate-code=arch=compute_90a,code=compute_90a"], ["compute_90a"]),
    (["--generate-code", "arch=compute_90,code=[sm_90,sm_90a]"],
     ["--generate-code", "arch=compute_90,code=[compute_90,compute_90a]"], ["compute_90", "compute_90a"]),
    # several -gencode: one equal to an earlier one after the translation is dropped
    (["-gencode", "arch=compute_90a,code=sm_90a", "-gencode", "arch=compute_90a,code=compute_90a",
      "-gencode", "arch=compute_100f,code=sm_100f"],
     ["-gencode", "arch=compute_90a,code=compute_90a", "-gencode", "arch=compute_100f,code=compute_100f"],
     ["compute_90a", "compute_100f"]),
])
def test_translation(args, want, targets):
    p = jit_plan(args + ["-c", "k.cu", "-o", "k.o"])
    assert p.applied and p.reason is None
    assert list(p.args) == want + ["-c", "k.cu", "-o", "k.o"]
    assert list(p.targets) == targets
    assert p.record() == {"requested": True, "applied": True, "reason": None, "targets": targets}


def test_env_flags_translated():
    """NVCC_PREPEND_FLAGS / NVCC_APPEND_FLAGS are nvcc's command line too: translated in place, -gencode
    deduplicated across them, a -code in one applies to an -arch in another."""
    p = jit_plan(["-c", "k.cu"], ["-arch=sm_90a", "-O3"], ["-gencode", "arch=compute_90a,code=compute_90a"])
    assert p.applied
    assert list(p.prepend) == ["-arch=compute_90a", "-code=compute_90a", "-O3"]
    assert list(p.append) == ["-gencode", "arch=compute_90a,code=compute_90a"]
    assert list(p.args) == ["-c", "k.cu"]
    p = jit_plan(["-arch=sm_90a", "-c", "k.cu"], [], ["-code=sm_90a"])
    assert list(p.args) == ["-arch=compute_90a", "-c", "k.cu"] and list(p.append) == ["-code=compute_90a"]
    p = jit_plan(["-arch=sm_90a", "-c", "k.cu"], ["-gencode", "arch=compute_90a,code=sm_90a"],
                 ["-gencode", "arch=compute_90a,code=[sm_90a]"])
    assert list(p.prepend) == ["-gencode", "arch=compute_90a,code=compute_90a"] and list(p.append) == []


@pytest.mark.parametrize("args,why", [
    (["-arch=all"], "picks the targets"),
    (["-arch=all-major"], "picks the targets"),
    (["-arch", "native"], "picks the targets"),
    ([], "no GPU target"),
    (["-arch=sm_90a", "-rdc=true"], "relocatable"),
    (["-arch=sm_90a", "-rdc", "true"], "relocatable"),
    (["-arch=sm_90a", "--relocatable-device-code=true"], "relocatable"),
    (["-arch=sm_90a", "-dc"], "relocatable"),
    (["-arch=sm_90a", "--device-c"], "relocatable"),
    (["-arch=sm_90a", "-dlink"], "device link"),
    (["-arch=sm_90a", "-cubin"], "cubin"),
    (["-arch=sm_90a", "-fatbin"], "fatbin"),
    (["-arch=sm_90a", "-ptx"], "ptx"),
    (["-gencode", "sm_90a"], "arch=...,code=..."),
])
def test_refusals_leave_the_command_line(args, why):
    full = args + ["-c", "k.cu", "-o", "k.o"]
    p = jit_plan(full, ["-O3"], ["-lineinfo"])
    assert not p.applied and why in p.reason
    assert (list(p.args), list(p.prepend), list(p.append)) == (full, ["-O3"], ["-lineinfo"])
    assert p.record()["applied"] is False and p.record()["targets"] == []


@pytest.mark.parametrize("content,why", [
    ("-I/x -DFOO=1", None),                                  # CMake's includes_CUDA.rsp: read, applies
    ("-arch=sm_90a", "GPU targets"),
    ("-gencode arch=compute_90a,code=sm_90a", "GPU targets"),
    ("-rdc=true", "GPU targets, -rdc"),
    ("-dc", "relocatable"),
    (None, "cannot be read"),
])
def test_options_files(content, why):
    files = {"inc.rsp": content}
    for form in (["--options-file", "inc.rsp"], ["--options-file=inc.rsp"], ["-optf", "inc.rsp"]):
        p = jit_plan(["-arch=sm_90a", *form, "-c", "k.cu"], read_options=lambda f: None if files.get(f) is None
                     else files[f].split())
        if why is None:
            assert p.applied and list(p.args) == ["-arch=compute_90a", "-code=compute_90a", *form, "-c", "k.cu"]
        else:
            assert not p.applied and why in p.reason and "inc.rsp" in p.reason


def test_link_only_step_refused():
    p = jit_plan(["-arch=sm_90a", "a.o", "b.o", "-o", "app"])
    assert not p.applied and "link-only" in p.reason


def test_rdc_false_applies():
    assert jit_plan(["-arch=sm_90a", "-rdc=false", "-c", "k.cu"]).applied


def test_not_requested_record():
    assert nvcc_targets.not_requested() == {"requested": False, "applied": False, "reason": None, "targets": []}


# ---- real builds (CUDA 13 nvcc) ------------------------------------------------------------------------------

def _ptx(entry) -> bytes:
    assert not entry["compressed"], "build with --no-compress"
    return entry["payload"].rstrip(b"\0")


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """vector.cu (three kernels, no __launch_bounds__) built eagerly and with HBFCC_JIT=1, uncompressed."""
    d = tmp_path_factory.mktemp("jit")
    out = {}
    for name, jit in (("eager", None), ("jit", "1")):
        cp = _hbfcc(["-arch=sm_90a", "--no-compress", "-c", str(VECTOR), "-o", f"{name}.o"], d, HBFCC_JIT=jit)
        assert cp.returncode == 0, cp.stderr
        out[name] = (U.fatbin_entries((d / f"{name}.o").read_bytes()),
                     json.loads((d / f"{name}.o.hbfcc.json").read_text()), cp)
    return out


def test_jit_object_is_ptx_only_and_rewritten(builds):
    entries, doc, cp = builds["jit"]
    # PTX (kind 1) for the virtual arch only (sm 90, the arch-specific flag), no ELF (kind 2)
    assert [(e["kind"], e["sm"], bool(e["flags"] & 0x100000)) for e in entries] == [(1, 90, True)]
    text = _ptx(entries[0]).decode()
    assert ".target sm_90a" in text and "__hb_issue" in text and "call" in text
    assert doc["jit"] == {"requested": True, "applied": True, "reason": None, "targets": ["compute_90a"]}
    assert doc["admitted"] is True and doc["nvcc_argv"][1:3] == ["-arch=compute_90a", "-code=compute_90a"]
    (m,) = doc["modules"]
    artifact.validate(m)
    assert m["ptxas"]["target"] == "compute_90a"
    assert m["build"]["jit_launch_bound"] == {"plain_target": "sm_90a", "plain_build": True}
    # the record is the embedded PTX's (fatbinary drops the PTX's comments: not its sha256, its kernels)
    assert {k["name"] for k in m["kernels"]} == set(re.findall(r"\.entry\s+(\w+)\(", text)) - \
        {n for n in re.findall(r"\.entry\s+(\w+)\(", text) if n.endswith("__hbnat")}
    assert "HBFCC_JIT" not in cp.stderr       # applied: no warning


def test_jit_launch_bound_equals_eager(builds):
    """The kernels without __launch_bounds__ get the .maxntid the SASS build gives them: the JIT object's PTX is
    byte for byte the eager object's compute_90a PTX (the one its sm_90a step rewrote in place), and the
    decisions recorded are the same."""
    je, jdoc, _ = builds["jit"]
    ee, edoc, _ = builds["eager"]
    eager_ptx = [e for e in ee if e["kind"] == 1 and e["flags"] & 0x100000]
    assert len(eager_ptx) == 1
    jtext, etext = _ptx(je[0]), _ptx(eager_ptx[0])
    assert re.findall(rb"\.maxntid\s+\d+", jtext) and re.findall(rb"\.maxntid\s+\d+", jtext) == \
        re.findall(rb"\.maxntid\s+\d+", etext)
    assert jtext == etext

    def decisions(doc, target):
        (m,) = [m for m in doc["modules"] if m["ptxas"]["target"] == target]
        return {k["name"]: (k["launch_bound"]["applied"], k["launch_bound"]["maxntid"],
                            k["launch_bound"]["plain_registers"]) for k in m["kernels"]}
    dj, de = decisions(jdoc, "compute_90a"), decisions(edoc, "sm_90a")
    assert dj == de and len(dj) == 3 and all(a and n == 1024 for a, n, _ in dj.values())


def test_default_build_unchanged(builds):
    """Knob unset: nvcc's command line as given, the SASS entry embedded, jit recorded as not requested."""
    entries, doc, _ = builds["eager"]
    assert doc["nvcc_argv"][1:] == ["-arch=sm_90a", "--no-compress", "-c", str(VECTOR), "-o", "eager.o"]
    assert any(e["kind"] == 2 for e in entries)
    assert doc["jit"] == nvcc_targets.not_requested()


def test_jit_compressed_object_is_ptx_only(tmp_path):
    """The default (compressed) fatbin: PTX only, the record admitted (its text is checked uncompressed above)."""
    cp = _hbfcc(["-arch=sm_90a", "-c", str(VECTOR), "-o", "v.o"], tmp_path, HBFCC_JIT="1")
    assert cp.returncode == 0, cp.stderr
    entries = U.fatbin_entries((tmp_path / "v.o").read_bytes())
    assert [e["kind"] for e in entries] == [1]
    doc = json.loads((tmp_path / "v.o.hbfcc.json").read_text())
    assert doc["admitted"] and doc["jit"]["applied"]


def test_jit_with_rdc_builds_sass(tmp_path):
    cp = _hbfcc(["-arch=sm_90a", "-rdc=true", "--no-compress", "-c", str(VECTOR), "-o", "r.o"], tmp_path,
                HBFCC_JIT="1")
    assert cp.returncode == 0, cp.stderr
    assert "HBFCC_JIT=1: relocatable device code" in cp.stderr
    assert any(e["kind"] == 2 for e in U.fatbin_entries((tmp_path / "r.o").read_bytes()))
    doc = json.loads((tmp_path / "r.o.hbfcc.json").read_text())
    assert doc["jit"]["requested"] and not doc["jit"]["applied"] and "relocatable" in doc["jit"]["reason"]
    assert doc["nvcc_argv"][1:3] == ["-arch=sm_90a", "-rdc=true"]
    for m in doc["modules"]:
        assert "jit_launch_bound" not in m["build"]


def test_jit_through_nvcc_prepend_flags(tmp_path):
    cp = _hbfcc(["--no-compress", "-c", str(VECTOR), "-o", "p.o"], tmp_path, HBFCC_JIT="1",
                NVCC_PREPEND_FLAGS="-arch=sm_90a")
    assert cp.returncode == 0, cp.stderr
    assert [e["kind"] for e in U.fatbin_entries((tmp_path / "p.o").read_bytes())] == [1]
    assert json.loads((tmp_path / "p.o.hbfcc.json").read_text())["jit"]["targets"] == ["compute_90a"]


def test_bad_knob_value(tmp_path):
    cp = _hbfcc(["-arch=sm_90a", "-c", str(VECTOR), "-o", "b.o"], tmp_path, HBFCC_JIT="maybe")
    assert cp.returncode != 0 and "HBFCC_JIT" in cp.stderr and "Traceback" not in cp.stderr


def test_check_step_bound_only_with_the_knob(tmp_path):
    """hbfcc-ptxas as nvcc's PTX check step (-arch=compute_90a, rewritten in place): with HBFCC_JIT=1 the entries get
    the bound from a plain sm_90a build; without it (an SASS build's extra PTX) none; HBFCC_LAUNCH_BOUND=0 none."""
    ptx = U.compile_cu(VECTOR.read_text(), arch="compute_90a")
    got = {}
    for name, kw in (("jit", {"HBFCC_JIT": "1"}), ("eager", {}), ("off", {"HBFCC_JIT": "1", "HBFCC_LAUNCH_BOUND": "0"})):
        p = tmp_path / f"{name}.ptx"
        p.write_text(ptx)
        cp = subprocess.run([U.console("hbfcc-ptxas"), "-arch=compute_90a", "-m64", str(p)], capture_output=True,
                            text=True, cwd=tmp_path, env=_env(tmp_path, HBFCC_NVCC_STEP="1", HBFCC_SIDECAR="1",
                                                              HBFCC_REAL_PTXAS=U.tool("ptxas"), **kw))
        assert cp.returncode == 0, cp.stderr
        text = p.read_text()
        assert "__hb_issue" in text
        doc = json.loads((tmp_path / f"{name}.ptx.hbfcc.json").read_text())
        got[name] = (re.findall(r"\.maxntid\s+(\d+)", text), doc["build"].get("jit_launch_bound"),
                     [(k.get("launch_bound") or {}).get("applied") for k in doc["kernels"]])
    assert got["jit"] == (["1024"] * 3, {"plain_target": "sm_90a", "plain_build": True}, [True] * 3)
    assert got["eager"] == ([], None, [None] * 3)
    assert got["off"] == ([], None, [None] * 3)


def test_compile_and_link_records_jit(tmp_path):
    """One nvcc call that compiles and links a program: the link record carries ``jit`` too."""
    (tmp_path / "app.cu").write_text(r"""
__global__ void k(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += 1.0f; }
int main() { return 0; }
""")
    cp = _hbfcc(["-arch=sm_90a", "app.cu", "-o", "app"], tmp_path, HBFCC_JIT="1")
    assert cp.returncode == 0, cp.stderr
    doc = json.loads((tmp_path / "app.hbfcc.json").read_text())
    assert doc["schema"] == "hbfcc.admission.link" and doc["admitted"]
    assert doc["jit"] == {"requested": True, "applied": True, "reason": None, "targets": ["compute_90a"]}
