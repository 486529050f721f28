"""The native entry (HBFCC_NATIVE_ENTRY, hbfcc/native_entry.py): each instrumented kernel with a native version
gets ``<name>__hbnat``, the original kernel untouched as its own .entry. It assembles for sm_90a, ptxas gives it
the plain kernel's registers, stack and shared memory (and, where cuobjdump is at hand, the plain kernel's SASS),
the artifact records it per kernel, the kernels' .entry order (their counter slots) does not move, and a kernel
without a native version is left as it was."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import native_entry as NE  # noqa: E402
from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402
from hbfcc.toolchain import parse_ptxas_v  # noqa: E402
from hbfcommon import artifact as A  # noqa: E402

sys.path.insert(0, str(U.REPO / "bench"))
import native_entry_static as NS  # noqa: E402

FIX = U.REPO / "tests" / "fixtures" / "triton"
# the three Triton TMA kernels of the native-cost bench's kind, an attention kernel, a wgmma matmul, simple ones
CORPUS = ["tma_matmul_host_desc_s3", "tma_matmul_device_desc_s4", "flash_attn_fwd_d64", "matmul_f16_s3",
          "vector_add_f32", "softmax_row"]


def _rewrite(text: str, monkeypatch, on: bool = True, **kw):
    monkeypatch.setenv("HBFCC_NATIVE_ENTRY", "1" if on else "0")
    return rewrite_text(text, filename="k.ptx", **kw)


def _stats(text: str) -> dict:
    cp = U.assemble(text)
    st = parse_ptxas_v(cp.stderr + cp.stdout)
    return {n: st.get(n) for n in st.functions}


def _sass(text: str, fn: str) -> list[str] | None:
    """The SASS of one function of the text's sm_90a build (bench/native_entry_static.py's reading of cuobjdump)."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.ptx"
        p.write_text(text)
        subprocess.run([U.tool("ptxas"), "-arch=sm_90a", str(p), "-o", str(Path(d) / "m.cubin")], check=True,
                       capture_output=True)
        return NS.sass_of(Path(d) / "m.cubin", fn)


@pytest.mark.parametrize("name", CORPUS)
def test_native_entry_is_the_plain_kernel(name, monkeypatch):
    U.tool("ptxas")
    src = (FIX / f"{name}.ptx").read_text()
    kernel = next(f.name for f in parse_module(src).functions() if f.is_entry and f.body is not None)
    res = _rewrite(src, monkeypatch)
    ne = NE.name_of(kernel)
    assert res.meta[NE.STAGE_NAME]["entries"] == {kernel: ne}
    rep = next(f for f in res.meta["timing"]["functions"] if f["name"] == kernel)
    assert rep["native_entry"] == ne and "native_entry_reason" not in rep
    out = parse_module(res.text)
    entries = [f.name for f in out.functions() if f.is_entry and f.body is not None]
    assert entries == [kernel, ne]                          # after the instrumented one: its index does not move
    orig = next(f for f in parse_module(src).functions() if f.name == kernel)
    nat = next(f for f in out.functions() if f.name == ne)
    assert nat.params == orig.params and nat.directives == orig.directives and nat.body == orig.body
    plain, inst = _stats(src), _stats(res.text)
    p, n = plain[kernel], inst[ne]
    assert (n.registers, n.stack_bytes, n.spill_stores, n.spill_loads, n.smem_bytes or 0) == \
        (p.registers, p.stack_bytes, p.spill_stores, p.spill_loads, p.smem_bytes or 0), (name, p, n)
    a, b = _sass(src, kernel), _sass(res.text, ne)
    if a is not None and b is not None:
        assert a == b, f"{name}: the native entry's SASS differs from the plain kernel's"


def test_on_by_default_and_off_records_why(monkeypatch):
    src = (FIX / "vector_add_f32.ptx").read_text()
    monkeypatch.delenv("HBFCC_NATIVE_ENTRY", raising=False)
    assert NE.SUFFIX in rewrite_text(src, filename="k.ptx").text               # default on since stop 49
    monkeypatch.setenv("HBFCC_NATIVE_ENTRY", "0")
    res = rewrite_text(src, filename="k.ptx")
    assert NE.SUFFIX not in res.text
    (rep,) = [f for f in res.meta["timing"]["functions"] if f["kind"] == "entry"]
    assert rep["native_entry"] is None and rep["native_entry_reason"] == NE.OFF
    on = _rewrite(src, monkeypatch)
    assert on.meta["timing"]["kernels"] == res.meta["timing"]["kernels"]      # the same kernel indices


SRC = """.version 8.0
.target sm_90a
.address_size 64
.func (.param .b32 ret) twice(.param .b64 p)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    ld.global.u32 %r1, [%rd1];
    add.u32 %r2, %r1, %r1;
    st.param.b32 [ret], %r2;
    ret;
}
.visible .entry caller(.param .u64 caller_p)
.maxntid 128, 1, 1
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [caller_p];
    cvta.to.global.u64 %rd2, %rd1;
    {
    .param .b64 a;
    .param .b32 r;
    st.param.b64 [a], %rd2;
    call.uni (r), twice, (a);
    ld.param.b32 %r1, [r];
    }
    st.global.u32 [%rd2+4], %r1;
    ret;
}
.visible .entry nosite(.param .u32 q)
{
    .reg .b32 %r<2>;
    ld.param.u32 %r1, [q];
    ret;
}
"""


def test_callees_copied_and_no_native_version_unaffected(monkeypatch):
    res = _rewrite(SRC, monkeypatch)
    ne = res.meta[NE.STAGE_NAME]
    assert ne["entries"] == {"caller": "caller__hbnat", "nosite": None}
    assert "no native version" in ne["reasons"]["nosite"]
    assert ne["functions"] == ["twice__hbnat"]
    out = parse_module(res.text)
    nat = next(f for f in out.functions() if f.name == "caller__hbnat")
    assert [i.call_target for i in nat.instructions() if i.opcode == "call"] == ["twice__hbnat"]
    assert nat.directives == next(f for f in parse_module(SRC).functions() if f.name == "caller").directives
    copy = next(f for f in out.functions() if f.name == "twice__hbnat" and f.body is not None)
    assert not any(i.call_target and i.call_target.startswith("__hb") for i in copy.instructions())
    assert "nosite__hbnat" not in res.text
    # nosite: the same function as without the knob
    off = _rewrite(SRC, monkeypatch, on=False)
    f_on = next(f for f in out.functions() if f.name == "nosite")
    f_off = next(f for f in parse_module(off.text).functions() if f.name == "nosite")
    assert f_on == f_off
    U.assemble(res.text)


def test_external_callee_and_other_passes_say_why(monkeypatch):
    ext = SRC.replace(".func (.param .b32 ret) twice(.param .b64 p)\n{", ".extern .func (.param .b32 ret) twice"
                      "(.param .b64 p);\n.func (.param .b32 ret) unused(.param .b64 p)\n{")
    res = _rewrite(ext, monkeypatch)
    assert res.meta[NE.STAGE_NAME]["entries"]["caller"] is None
    assert "not defined in this module" in res.meta[NE.STAGE_NAME]["reasons"]["caller"]
    res = _rewrite((FIX / "vector_add_f32.ptx").read_text(), monkeypatch, passes=("timing", "capacity"))
    (why,) = res.meta[NE.STAGE_NAME]["reasons"].values()
    assert "capacity" in why and NE.SUFFIX not in res.text


def test_hbfcc_ptxas_records_it(tmp_path):
    """Through hbfcc-ptxas: the cubin has both entries, the artifact names the native entry per kernel, the
    marker says the knob is on, and the runtime's reader finds it (hbfcommon.artifact.native_entries)."""
    U.tool("ptxas")
    src = tmp_path / "k.ptx"
    src.write_text((FIX / "vector_add_f32.ptx").read_text())
    kernel = next(f.name for f in parse_module(src.read_text()).functions() if f.is_entry)
    env = U.env_with(HBFCC_ARTIFACT_DIR=tmp_path / "store", HBFCC_REAL_PTXAS=U.tool("ptxas"),
                     HBFCC_HELPER_PTX=U.real_helper_ptx() or U.fixture_helper_ptx(), HBFCC_NATIVE_ENTRY="1",
                     PYTHONPATH=U.REPO)       # this tree's hbfcc, not the one the venv was installed from
    cp = subprocess.run([U.console("hbfcc-ptxas"), "-arch=sm_90a", str(src), "-o", str(tmp_path / "k.cubin")],
                        capture_output=True, text=True, env=env, cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr
    cubin = (tmp_path / "k.cubin").read_bytes()
    assert NE.name_of(kernel).encode() in cubin
    doc = json.loads((tmp_path / "k.cubin.hbfcc.json").read_text())
    A.validate(doc)
    (k,) = doc["kernels"]
    assert k["native_entry"] == NE.name_of(kernel) and k["kernel_index"] == 0
    assert [x[0] for x in A.kernels(doc)] == [kernel]                  # no kernel (slot) of its own
    assert A.native_entries(doc) == {kernel: NE.name_of(kernel)}
    assert "native-entry" not in doc["build"]["marker"]      # the default build: no marker word
    # two images, one without: no native entry for the kernel
    other = json.loads(json.dumps(doc))
    other["kernels"][0]["native_entry"] = None
    assert A.native_entries({"modules": [doc, other]}) == {}


def _hbfcc_ptxas(tmp_path, src: str, args, **env):
    p = tmp_path / "k.ptx"
    p.write_text(src)
    e = U.env_with(HBFCC_ARTIFACT_DIR=tmp_path / "store", HBFCC_CACHE_DIR=tmp_path / "hc",
                   HBFCC_REAL_PTXAS=U.tool("ptxas"), HBFCC_HELPER_PTX=U.real_helper_ptx() or U.fixture_helper_ptx(),
                   HBFCC_NATIVE_ENTRY="1", PYTHONPATH=U.REPO, **env)
    cp = subprocess.run([U.console("hbfcc-ptxas"), "-arch=sm_90a", *args, str(p)], capture_output=True, text=True,
                        env=e, cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr
    return cp


@pytest.mark.parametrize("mode", ["rdc", "separate"])
def test_relocatable_and_separate_link_builds_carry_it(mode, tmp_path):
    """-c (an -rdc object: the copies of the callees are module-local) and HBFCC_LINK=separate (the module -c, the
    helpers nvlink'd) keep the native entry, and the record names it."""
    U.tool("ptxas")
    if mode == "rdc":
        _hbfcc_ptxas(tmp_path, SRC, ["-c", "-o", str(tmp_path / "k.o")])
        out = tmp_path / "k.o"
    else:
        U.tool("nvlink")
        _hbfcc_ptxas(tmp_path, SRC, ["-o", str(tmp_path / "k.cubin")], HBFCC_LINK="separate")
        out = tmp_path / "k.cubin"
    data = out.read_bytes()
    assert b"caller__hbnat" in data and b"twice__hbnat" in data
    doc = json.loads(out.with_name(out.name + ".hbfcc.json").read_text())
    assert A.native_entries(doc) == {"caller": "caller__hbnat"}


def test_deferred_build_carries_it(tmp_path):
    """HBFCC_DEFER=1: the caller gets the plain cubin (no native entry in it), the record names the native entry,
    and the deferred instrumented build (hbfcommon.deferred.build, what the runtime's Triton hook loads) has it."""
    from hbfcommon import deferred as DF
    U.tool("ptxas")
    src = (FIX / "vector_add_f32.ptx").read_text()
    _hbfcc_ptxas(tmp_path, src, ["-o", str(tmp_path / "k.cubin")], HBFCC_DEFER="1")
    plain = (tmp_path / "k.cubin").read_bytes()
    assert b"add_kernel__hbnat" not in plain
    rec = json.loads(A.output_store_path(tmp_path / "store", hashlib.sha256(plain).hexdigest()).read_text())
    assert DF.recipe(rec) is not None and A.native_entries(rec) == {"add_kernel": "add_kernel__hbnat"}
    built = DF.build(rec, store=tmp_path / "store")
    assert b"add_kernel__hbnat" in built.cubin
