"""Admission records in every build mode (issue 18 item 2), never modifying inputs, no litter, the
word on non-admission at compile time, hbfcc's own --help/--version, and the ptxas hbfcc-ptxas runs.

Every build here is a real program built by hbfcc (nvcc and ptxas of the toolkit); each record is read
with the runtime's reader (hbfcommon.artifact.kernels) and must name each kernel with admitted
true/false and a non-empty reason when false."""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import knobs  # noqa: E402
from hbfcommon import artifact as A  # noqa: E402

SRC = r"""
__global__ void ok(float* y, const float* __restrict__ x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + y[i];
}
__global__ void bad(float* p) {
    asm volatile("discard.global.L2 [%0], 128;" :: "l"(p) : "memory");
    p[threadIdx.x] = 1.0f;
}
__global__ void aaa(float* p) { p[threadIdx.x] = 0.0f; }
int main() { return 0; }
"""
OK, BAD, AAA = "_Z2okPfPKfi", "_Z3badPf", "_Z3aaaPf"   # .entry order; not the names' sorted order
# cuda-samples' default -gencode list, cut to what this toolkit and the helper make interesting
GENCODES = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
            "-gencode", "arch=compute_90,code=compute_90"]


def env(tmp_path, **kw):
    base = {"HBFCC_ARTIFACT_DIR": tmp_path / "store", "HBFCC_CACHE_DIR": tmp_path / "cache",
            "HBFCC_HELPER_PTX": U.real_helper_ptx() or U.fixture_helper_ptx(),
            "NVCC_PREPEND_FLAGS": None, "NVCC_APPEND_FLAGS": None, "HBFCC_REAL_PTXAS": None,
            "TRITON_PTXAS_PATH": None, "HBFCC_SIDECAR": None, "HBFCC_LOG": None}
    base.update(kw)
    return U.env_with(**base)


def hbfcc(args, tmp_path, **kw):
    """Build in tmp_path with a private TMPDIR; every build mode must leave its inputs byte-identical,
    nothing in the temp directory, and nothing in the build directory but its output and the output's
    record (<output>.hbfcc.json)."""
    U.tool("nvcc")
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    kw.setdefault("TMPDIR", tmp)
    out = args[args.index("-o") + 1] if "-o" in args else None
    before = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p.name != out}
    cp = subprocess.run([U.console("hbfcc"), *args], capture_output=True, text=True, cwd=tmp_path,
                        env=env(tmp_path, **kw))
    assert cp.returncode == 0, cp.stderr
    assert {p: p.read_bytes() for p in before} == before                 # inputs untouched
    assert _listing(Path(kw["TMPDIR"])) == []                             # no litter in the temp dir
    new = {p.name for p in tmp_path.iterdir() if p.is_file() and p not in before}
    assert new <= ({out, out + ".hbfcc.json"} if out else set()), new     # nor beside the output
    return cp


def ptxas(args, tmp_path, **kw):
    U.tool("ptxas")
    kw.setdefault("HBFCC_BASELINE", "0")     # the plain build's facts are not what these tests check
    return subprocess.run([U.console("hbfcc-ptxas"), *args], capture_output=True, text=True, cwd=tmp_path,
                          env=env(tmp_path, **kw))


def record(path: Path) -> dict[str, tuple[bool, list[str]]]:
    doc = json.loads(path.read_text())
    return {n: (adm, why) for n, adm, why in A.kernels(doc)}


def check(path: Path, expect=None) -> dict:
    """The record names each kernel, admitted as expected, with a reason (naming the refused
    instruction) when not admitted."""
    expect = {OK: True, BAD: False, AAA: True} if expect is None else expect
    got = record(path)
    assert list(got) == list(expect), got       # every kernel, in .entry order (the runtime's slot order)
    for name, adm in expect.items():
        assert got[name][0] is adm, (name, got[name])
        if not adm:
            assert got[name][1] and all(r.strip() for r in got[name][1]), (name, got[name])
    if expect.get(BAD) is False and expect.get(OK) is True:      # refused for its discard
        assert any("discard" in r for r in got[BAD][1]), got[BAD]
    return json.loads(path.read_text())


def warned(stderr: str, kernel: str) -> list[str]:
    return [l for l in stderr.splitlines() if f"WARNING: kernel {kernel} is NOT admitted" in l]


# ---- build modes ------------------------------------------------------------------------------

def test_multi_gencode_compile_and_link(tmp_path):
    (tmp_path / "k.cu").write_text(SRC)
    cp = hbfcc([*GENCODES, "k.cu", "-o", "app"], tmp_path)
    doc = check(tmp_path / "app.hbfcc.json")
    assert doc["schema"] == "hbfcc.admission.link"
    # one record per image target: sm_80 is below the helper's target, left plain and not counted
    # (a GPU where hbfsim models loads the sm_90 image); every kernel there says why
    assert set(doc["targets"]) == {"sm_80", "sm_90"}
    assert doc["targets"]["sm_80"]["counted"] is False and doc["targets"]["sm_90"]["counted"] is True
    for t in doc["targets"].values():
        for k in t["kernels"]:
            assert k["admitted"] or k["reason"]
    assert all(m["ptxas"]["source"] == "nvcc toolkit" for m in doc["modules"])   # nvcc's own ptxas
    # compile time: one warning naming the refused kernel and why; none for the admitted one
    assert warned(cp.stderr, BAD) and all("discard" in l for l in warned(cp.stderr, BAD))
    assert not warned(cp.stderr, OK)


def test_multi_gencode_separate_compile_then_link(tmp_path):
    (tmp_path / "k.cu").write_text(SRC)
    hbfcc([*GENCODES, "-c", "k.cu", "-o", "k.o"], tmp_path)
    doc = check(tmp_path / "k.o.hbfcc.json")
    assert doc["schema"] == "hbfcc.admission.nvcc" and set(doc["targets"]) == {"sm_80", "sm_90"}
    hbfcc([*GENCODES, "k.o", "-o", "app"], tmp_path)
    check(tmp_path / "app.hbfcc.json")


def test_only_targets_below_the_helper_are_not_admitted_with_reason(tmp_path):
    (tmp_path / "k.cu").write_text(SRC)
    hbfcc(["-gencode", "arch=compute_80,code=sm_80", "-c", "k.cu", "-o", "k.o"], tmp_path)
    got = check(tmp_path / "k.o.hbfcc.json", {OK: False, BAD: False, AAA: False})
    assert all("sm_80" in k["reason"] and "NOT instrumented" in k["reason"] for k in got["kernels"])


def test_ptx_mode_records_the_kernels_and_keeps_the_store_sound(tmp_path):
    (tmp_path / "k.cu").write_text(SRC)
    hbfcc(["-arch=sm_90a", "-ptx", "k.cu", "-o", "k.ptx"], tmp_path)
    text = (tmp_path / "k.ptx").read_text()
    assert "__hb_issue" in text
    doc = check(tmp_path / "k.ptx.hbfcc.json")
    A.validate(doc)
    assert doc["input"]["already_instrumented"] is False
    # the store's entries name the kernels (nothing empty written over them)
    store = tmp_path / "store"
    for p in [store / f"{doc['input']['original_sha256']}.hbfcc.json",
              store / "by-transformed" / f"{doc['input']['transformed_sha256']}.hbfcc.json"]:
        check(p)
    import hashlib
    assert doc["input"]["transformed_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    # a later assembly of that PTX finds its record
    hbfcc(["-arch=sm_90a", "-cubin", "k.ptx", "-o", "k.cubin"], tmp_path)
    assert (tmp_path / "k.ptx").read_text() == text
    check(tmp_path / "k.cubin.hbfcc.json")
    check(store / "by-transformed" / f"{doc['input']['transformed_sha256']}.hbfcc.json")


def test_cubin_mode(tmp_path):
    (tmp_path / "k.cu").write_text(SRC)
    hbfcc(["-arch=sm_90a", "-cubin", "k.cu", "-o", "k.cubin"], tmp_path)
    assert b"__hb_issue" in (tmp_path / "k.cubin").read_bytes()
    check(tmp_path / "k.cubin.hbfcc.json")


def test_fatbin_mode(tmp_path):
    (tmp_path / "k.cu").write_text(SRC)
    hbfcc(["-arch=sm_90a", "-fatbin", "k.cu", "-o", "k.fatbin"], tmp_path)
    doc = check(tmp_path / "k.fatbin.hbfcc.json")
    assert sorted(doc["targets"]) == ["compute_90", "sm_90a"]


def test_device_debug_mode(tmp_path):
    (tmp_path / "k.cu").write_text(SRC)
    hbfcc(["-arch=sm_90a", "-G", "-c", "k.cu", "-o", "k.o"], tmp_path)
    check(tmp_path / "k.o.hbfcc.json")
    hbfcc(["-arch=sm_90a", "-G", "k.o", "-o", "app"], tmp_path)
    check(tmp_path / "app.hbfcc.json")


def test_rdc_and_dlink(tmp_path):
    (tmp_path / "a.cu").write_text(SRC.replace("2.0f * x[i]", "scale(x[i])").replace(
        "__global__ void ok", "__device__ float scale(float);\n__global__ void ok"))
    (tmp_path / "b.cu").write_text("__device__ float scale(float v) { return 2.0f * v; }\n")
    for f in ("a", "b"):
        hbfcc(["-arch=sm_90a", "-rdc=true", "-c", f"{f}.cu", "-o", f"{f}.o"], tmp_path)
    # per module, ok() calls scale() of the other module: not admitted there, with the callee named
    comp = record(tmp_path / "a.o.hbfcc.json")
    assert comp[OK][0] is False and any("_Z5scalef" in r for r in comp[OK][1])
    cp = hbfcc(["-arch=sm_90a", "-dlink", "a.o", "b.o", "-o", "dlink.o"], tmp_path)
    doc = check(tmp_path / "dlink.o.hbfcc.json")      # the device link resolves it
    assert doc["schema"] == "hbfcc.admission.link"
    assert warned(cp.stderr, BAD) and not warned(cp.stderr, OK)


# ---- inputs, litter --------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _plain_ptx() -> str:
    return U.compile_cu(SRC)


def _ptx(tmp_path, version=None) -> str:
    text = _plain_ptx()
    if version:
        text = re.sub(r"^\.version \d+\.\d+", f".version {version}", text, flags=re.M)
    return text


def test_hbfcc_ptxas_never_modifies_its_input(tmp_path):
    p = tmp_path / "k.ptx"
    p.write_text(_ptx(tmp_path))
    os.utime(p, ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    before, st = p.read_bytes(), p.stat()
    cp = ptxas(["-lineinfo", "-v", "--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path,
               HBFCC_REAL_PTXAS=U.tool("ptxas"))
    assert cp.returncode == 0, cp.stderr
    assert p.read_bytes() == before and p.stat().st_mtime_ns == st.st_mtime_ns
    assert b"__hb_issue" in Path(str(p) + ".o").read_bytes()      # the private copy was assembled
    check(Path(str(p) + ".o.hbfcc.json"))
    # a rejected build leaves the input too
    p.write_text(before.decode().replace("ret;", "add.s32 %r99, %r98, 1;\n\tret;", 1))
    bad = p.read_bytes()
    cp = ptxas(["--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path, HBFCC_REAL_PTXAS=U.tool("ptxas"))
    assert cp.returncode != 0 and "reproduce:" in cp.stderr
    assert p.read_bytes() == bad


def test_nvcc_step_rewrites_in_place(tmp_path):
    """Only nvcc's steps (the shadow toolkit's shim) rewrite in place: fatbinary embeds that file."""
    p = tmp_path / "x.compute_90a.ptx"
    p.write_text(_ptx(tmp_path))
    cp = ptxas(["-arch=sm_90a", str(p), "-o", str(tmp_path / "x.cubin")], tmp_path,
               HBFCC_REAL_PTXAS=U.tool("ptxas"), **{knobs.ENV_NVCC_STEP: "1"})
    assert cp.returncode == 0, cp.stderr
    assert "__hb_issue" in p.read_text()


def _listing(d: Path) -> list[str]:
    return sorted(str(x.relative_to(d)) for x in d.rglob("*"))


# nvcc builds: every hbfcc() call above checks its private TMPDIR is left empty


def test_no_litter_in_tmpdir_triton_style(tmp_path):
    """Triton writes /tmp/tmp<random>.ptx, runs ptxas ... -o /tmp/tmp<random>.ptx.o and removes both: nothing
    of hbfcc's may stay behind (the record is in the store)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    src = tmp / "tmpab12cd.ptx"
    text = _ptx(tmp_path)
    src.write_text(text)
    cp = ptxas(["-lineinfo", "-v", "--gpu-name=sm_90a", str(src), "-o", str(src) + ".o"], tmp_path,
               TMPDIR=tmp, HBFCC_REAL_PTXAS=U.tool("ptxas"))
    assert cp.returncode == 0, cp.stderr
    assert _listing(tmp) == ["tmpab12cd.ptx", "tmpab12cd.ptx.o"]
    import hashlib
    check(tmp_path / "store" / f"{hashlib.sha256(text.encode()).hexdigest()}.hbfcc.json")
    # HBFCC_SIDECAR=1 asks for the record beside the output anyway
    cp = ptxas(["--gpu-name=sm_90a", str(src), "-o", str(src) + ".o"], tmp_path, TMPDIR=tmp,
               HBFCC_REAL_PTXAS=U.tool("ptxas"), HBFCC_SIDECAR="1")
    assert cp.returncode == 0 and (tmp / "tmpab12cd.ptx.o.hbfcc.json").is_file()
    assert ptxas(["--version"], tmp_path, HBFCC_SIDECAR="sometimes").returncode != 0


# ---- compile-time warning ----------------------------------------------------------------------

def test_hbfcc_ptxas_warns_naming_kernel_and_reason(tmp_path):
    p = tmp_path / "k.ptx"
    p.write_text(_ptx(tmp_path))
    cp = ptxas(["--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path, HBFCC_REAL_PTXAS=U.tool("ptxas"))
    assert cp.returncode == 0, cp.stderr
    lines = warned(cp.stderr, BAD)
    assert len(lines) == 1 and lines[0].startswith("hbfcc-ptxas: WARNING:") and "discard" in lines[0]
    assert not warned(cp.stderr, OK)
    # a logged warning: HBFCC_LOG=ERROR silences it
    cp = ptxas(["--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path, HBFCC_REAL_PTXAS=U.tool("ptxas"),
               HBFCC_LOG="ERROR")
    assert cp.returncode == 0 and not warned(cp.stderr, BAD)


# ---- --help / --version ------------------------------------------------------------------------

def test_hbfcc_help_is_its_own_then_nvcc(tmp_path):
    cp = hbfcc(["--help"], tmp_path)
    out = cp.stdout
    assert out.startswith("hbfcc: nvcc that instruments")
    for var, _, _ in knobs.DOCS:
        assert var in out, var
    own, _, rest = out.partition("The options of the nvcc it wraps")
    assert "--gpu-architecture" in rest and "--gpu-architecture" not in own   # nvcc's text follows


def test_hbfcc_version_is_its_own_then_nvcc(tmp_path):
    for args in (["--version"], [U.tool("nvcc"), "--version"]):       # drop-in and launcher mode
        lines = hbfcc(args, tmp_path).stdout.splitlines()
        assert re.fullmatch(r"hbfcc \(hbfsim \S+.*\)", lines[0]), lines[0]
        assert re.match(r"hbfcc \d+ [0-9a-f]{16} helper ([0-9a-f]{16}|none)", lines[1]), lines[1]
        assert "release" not in lines[0] + lines[1]
        assert any(re.search(r"release \d+\.\d+", l) for l in lines[2:])          # nvcc's own text


def test_hbfcc_ptxas_help(tmp_path):
    cp = ptxas(["--help"], tmp_path, HBFCC_REAL_PTXAS=U.tool("ptxas"))
    assert cp.returncode == 0
    assert cp.stdout.startswith("hbfcc-ptxas: a drop-in ptxas") and "HBFCC_REAL_PTXAS" in cp.stdout
    assert "--gpu-name" in cp.stdout.partition("The real ptxas's options follow")[2]


# ---- which ptxas hbfcc-ptxas runs --------------------------------------------------------------

def fake_ptxas(path: Path, real: str, log: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexec {real} \"$@\"\n")
    path.chmod(0o755)
    return path


def _doc(out: Path) -> dict:
    return json.loads(Path(str(out) + ".hbfcc.json").read_text())


def test_triton_ptxas_path_is_the_ptxas_that_runs(tmp_path):
    log = tmp_path / "fake.log"
    fake = fake_ptxas(tmp_path / "bin" / "ptxas", U.tool("ptxas"), log)
    p = tmp_path / "k.ptx"
    p.write_text(_ptx(tmp_path))
    cp = ptxas(["-lineinfo", "-v", "--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path,
               TRITON_PTXAS_PATH=fake)
    assert cp.returncode == 0, cp.stderr
    ptx = _doc(Path(str(p) + ".o"))["ptxas"]
    assert ptx["path"] == str(fake) and ptx["source"] == "TRITON_PTXAS_PATH"
    assert "--gpu-name=sm_90a" in log.read_text()
    # the knob wins
    cp = ptxas(["--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path, TRITON_PTXAS_PATH=fake,
               HBFCC_REAL_PTXAS=U.tool("ptxas"))
    assert cp.returncode == 0
    ptx = _doc(Path(str(p) + ".o"))["ptxas"]
    assert ptx["path"] == U.tool("ptxas") and ptx["source"] == "HBFCC_REAL_PTXAS"


def test_triton_bundled_ptxas_when_triton_ptxas_path_is_hbfcc(tmp_path):
    """TRITON_PTXAS_PATH=hbfcc-ptxas: the ptxas plain Triton would run is the one in its wheel (a
    fake triton package here, whose bundled ptxas logs and runs CUDA's)."""
    log = tmp_path / "bundled.log"
    pkg = tmp_path / "fake_site" / "triton"
    (pkg / "backends" / "nvidia" / "bin").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    fake = fake_ptxas(pkg / "backends" / "nvidia" / "bin" / "ptxas", U.tool("ptxas"), log)
    p = tmp_path / "k.ptx"
    p.write_text(_ptx(tmp_path))
    pypath = os.pathsep.join([str(tmp_path / "fake_site"), os.environ.get("PYTHONPATH", "")])
    cp = ptxas(["--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path, PYTHONPATH=pypath,
               TRITON_PTXAS_PATH=U.console("hbfcc-ptxas"))
    assert cp.returncode == 0, cp.stderr
    ptx = _doc(Path(str(p) + ".o"))["ptxas"]
    assert ptx["path"] == str(fake) and ptx["source"] == "triton bundled"
    assert "--gpu-name=sm_90a" in log.read_text()
    # --version prints that ptxas's text (what Triton hashes and reads its PTX version from)
    cp = ptxas(["--version"], tmp_path, PYTHONPATH=pypath, TRITON_PTXAS_PATH=U.console("hbfcc-ptxas"))
    assert cp.returncode == 0 and "--version" in log.read_text()


def test_real_triton_bundled_ptxas_and_ptx_version_cap(tmp_path):
    """With Triton installed, its bundled ptxas (12.8: PTX <= 8.7) assembles Triton's PTX; the helper
    (.version 9.0) is linked without raising the module above what that ptxas accepts."""
    from hbfcc.toolchain import _triton_bundled, max_ptx_version
    bundled = [b for b in _triton_bundled("ptxas") if os.path.isfile(b)]
    if not bundled:
        pytest.skip("Triton (with its bundled ptxas) not installed")
    cap = max_ptx_version(bundled[0])
    p = tmp_path / "tmpk.ptx"
    p.write_text(_ptx(tmp_path, version=f"{cap[0]}.{cap[1]}"))
    cp = ptxas(["-lineinfo", "-v", "--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path,
               TRITON_PTXAS_PATH=U.console("hbfcc-ptxas"), HBFCC_DUMP_DIR=tmp_path / "dump")
    assert cp.returncode == 0, cp.stderr
    doc = _doc(Path(str(p) + ".o"))
    assert doc["ptxas"]["path"] == bundled[0] and doc["ptxas"]["source"] == "triton bundled"
    assert doc["ptxas"]["max_ptx_version"] == f"{cap[0]}.{cap[1]}"
    out = (next((tmp_path / "dump").iterdir()) / "05-print.ptx").read_text()
    assert re.search(rf"^\.version {cap[0]}\.{cap[1]}$", out, re.M)
    assert b"__hb_issue" in Path(str(p) + ".o").read_bytes()
    # PTX newer than that ptxas takes cannot come from Triton with it: CUDA's ptxas assembles it, loudly
    r = tmp_path / "cuda13.ptx"
    r.write_text(_ptx(tmp_path))
    if max_ptx_version(U.tool("ptxas")) >= (9, 0) > cap:
        cp = ptxas(["--gpu-name=sm_90a", str(r), "-o", str(r) + ".o"], tmp_path,
                   TRITON_PTXAS_PATH=U.console("hbfcc-ptxas"))
        assert cp.returncode == 0, cp.stderr
        assert "newer than" in cp.stderr and "HBFCC_REAL_PTXAS" in cp.stderr
        d = _doc(Path(str(r) + ".o"))["ptxas"]
        assert d["path"] == U.tool("ptxas") and d["source"] == "PATH"
        assert d["instead_of"]["path"] == bundled[0] and d["instead_of"]["source"] == "triton bundled"
    # newer than any ptxas here takes: a clear error naming the knob, the input untouched
    q = tmp_path / "new.ptx"
    q.write_text(_ptx(tmp_path, version="9.9"))
    before = q.read_bytes()
    cp = ptxas(["--gpu-name=sm_90a", str(q), "-o", str(q) + ".o"], tmp_path,
               TRITON_PTXAS_PATH=U.console("hbfcc-ptxas"))
    assert cp.returncode != 0 and "HBFCC_REAL_PTXAS" in cp.stderr and "Traceback" not in cp.stderr
    assert q.read_bytes() == before
