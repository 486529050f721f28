"""HBFCC_CALL_ISOLATION (hbfcc/passes/call_isolation.py): around each timing-helper call the registers live across it
are saved to a per-thread .local buffer (volatile, generic address) and restored after it; re-executable values
(constants, kernel parameters, stable special registers) are redone instead. What is saved and what is not, guarded
calls, device functions, the native copy untouched, the knob off byte-identical, and (slow) the corpus assembled
with the real helpers, registers compared with the knob off."""
from __future__ import annotations

import concurrent.futures as cf
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
import hbfcc_testutil as U  # noqa: E402

from hbfcc.passes.call_isolation import BUF, ISOLATED, isolate_function  # noqa: E402
from hbfcc.ptx import parse_module, print_module  # noqa: E402
from hbfcc.ptx.model import Instruction, Label, walk  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

try:
    import ptx_corpus  # noqa: E402
except ImportError:  # pragma: no cover
    ptx_corpus = None

HDR = ".version 9.0\n.target sm_90a\n.address_size 64\n"
PROTO = (".extern .func (.param .b64 fut) __hb_issue(.param .b64 addr, .param .b32 bytes, .param .b32 flags, "
         ".param .b32 site);\n")


def call_block(guard: str = "", ret: str = "%rd2") -> str:
    return f"""
\t{{
\t.param .b64 __hb_p0; .param .b32 __hb_p1; .param .b32 __hb_p2; .param .b32 __hb_p3; .param .b64 __hb_rv;
\tst.param.b64 [__hb_p0], %rd1;
\tst.param.b32 [__hb_p1], 4;
\tst.param.b32 [__hb_p2], 1;
\tst.param.b32 [__hb_p3], 7;
\t{guard}call (__hb_rv), __hb_issue, (__hb_p0, __hb_p1, __hb_p2, __hb_p3);
\tld.param.b64 {ret}, [__hb_rv];
\t}}"""


KERNEL = HDR + PROTO + """
.visible .entry k(.param .u64 k_p)
{
\t.reg .pred %p<4>; .reg .b32 %r<10>; .reg .b64 %rd<10>; .reg .b16 %rs<4>;
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, 0;
\tld.global.u32 %r3, [%rd1];
\tcvt.u16.u32 %rs1, %r3;
\tsetp.ne.u32 %p1, %r3, 0;
\tld.global.u16 %rs2, [%rd1+2];
\tld.global.u32 %r7, [%rd1+4];
\tsetp.gt.u32 %p2, %r3, %r7;
\tmov.u32 %r4, 5;
\tmov.u64 %rd3, %clock64;
""" + "{CALL}" + """
\tmov.u32 %r4, 6;
\tadd.s32 %r5, %r1, %r2;
\tadd.s32 %r5, %r5, %r3;
\tadd.s32 %r5, %r5, %r4;
\tcvt.u32.u16 %r6, %rs1;
\tadd.s32 %r5, %r5, %r6;
\t@%p1 add.s32 %r5, %r5, 1;
\tcvt.u32.u16 %r8, %rs2;
\tadd.s32 %r5, %r5, %r8;
\t@%p2 add.s32 %r5, %r5, 2;
\tst.global.u32 [%rd1], %r5;
\tst.global.u64 [%rd1+8], %rd2;
\tst.global.u64 [%rd1+16], %rd3;
\tret;
}
"""


def _kernel(guard: str = ""):
    return parse_module(KERNEL.replace("{CALL}", call_block(guard)), "k.ptx")


def _texts(fn) -> list[str]:
    return [" ".join(str(s).split()) for _, s in walk(fn.body) if type(s) is Instruction]


def _saves(lines):
    """{offset: register} stored (predicates through selp) and loaded (through setp), in order."""
    st, ld = {}, {}
    for i, t in enumerate(lines):
        m = re.match(r"st\.volatile\.\w+ \[%__hb_sva\+?(\d*)\], (\S+);", t)
        if m:
            r = m.group(2)
            if r == "%__hb_svt":
                r = re.match(r"selp\.u32 %__hb_svt, 1, 0, (\S+);", lines[i - 1]).group(1)
            st[int(m.group(1) or 0)] = r
        m = re.match(r"ld\.volatile\.\w+ (\S+), \[%__hb_sva\+?(\d*)\];", t)
        if m:
            r = m.group(1)
            if r == "%__hb_svt":
                r = re.match(r"setp\.ne\.u32 (\S+), %__hb_svt, 0;", lines[i + 1]).group(1)
            ld[int(m.group(2) or 0)] = r
    return st, ld


def test_saves_exactly_the_live_registers_and_redoes_the_reexecutable_ones():
    m = _kernel()
    fn, rep = isolate_function(m.function("k"))
    lines = _texts(fn)
    st, ld = _saves(lines)
    # saved: %r3 (loaded), %rs2 (16-bit), %p2 (a predicate of two registers), %rd3 (%clock64: not
    # stable); the same offsets come back into the same registers
    assert sorted(st.values()) == ["%p2", "%r3", "%rd3", "%rs2"] and st == ld
    assert st[0] == "%rd3"                                         # 64-bit first, at offset 0
    c = lines.index(next(t for t in lines if t.startswith("call")))
    after = lines[c + 1:]
    # redone after the call, not saved: the kernel parameter, the special register, the constant
    for redo in ("ld.param.u64 %rd1, [k_p];", "mov.u32 %r1, %tid.x;", "mov.u32 %r2, 0;"):
        assert redo in after[:16], redo
    # recomputed from the restored %r3, after it: its 16-bit truncation and the compare with 0
    r3 = after.index(next(t for t in after if t.startswith("ld.volatile.b32 %r3")))
    for again in ("cvt.u16.u32 %rs1, %r3;", "setp.ne.u32 %p1, %r3, 0;"):
        assert again in after[r3 + 1:16], again
    # not saved: %r4 (overwritten after the call), %r7 (dead after it), %rd2 (the call's return, read from param
    # space after the call)
    assert not {"%r4", "%r7", "%rd2"} & set(st.values())
    # every restore is after the call and before the return value's ld.param
    ret = next(i for i, t in enumerate(lines) if t.startswith("ld.param.b64 %rd2"))
    loads = [i for i, t in enumerate(lines) if t.startswith("ld.volatile")]
    stores = [i for i, t in enumerate(lines) if t.startswith("st.volatile")]
    assert max(stores) < c < min(loads) and max(loads) < ret
    assert rep.calls == 1 and rep.saved == 4 and rep.redone == 3 and rep.recomputed == 2 and rep.saved_max == 4
    assert rep.buffer_bytes == 24                                  # 8 + 4 + 4 + 2, rounded to 8
    text = print_module(m.__class__(m.version, m.target, m.address_size,
                                    tuple(fn if getattr(i, "name", None) == "k" else i for i in m.items)))
    assert f".local .align 8 .b8 {BUF}[24];" in " ".join(text.split())
    parse_module(text)                                             # prints and parses back


def test_guarded_call_is_branched_around():
    fn, rep = isolate_function(_kernel("@%p1 ").function("k"))
    lines = _texts(fn)
    c = next(i for i, t in enumerate(lines) if "call" in t)
    assert lines[c].startswith("call (__hb_rv), __hb_issue")       # the call itself is no longer guarded
    first = next(i for i, t in enumerate(lines) if t.startswith("@!%p1 bra $__hb_cs0"))
    assert first < min(i for i, t in enumerate(lines) if "volatile" in t)
    seq = [s.name if type(s) is Label else " ".join(str(s).split()) for _, s in walk(fn.body)
           if type(s) in (Label, Instruction)]
    lab = seq.index("$__hb_cs0")                                   # the skip label: after the restores and the
    assert lab > max(i for i, t in enumerate(seq) if "ld.volatile" in t or t.startswith("mov.u32 %r2, 0"))
    assert seq[lab + 1].startswith("ld.param.b64 %rd2")            # redone moves, before the return value's read


def test_no_helper_call_no_change():
    m = parse_module(HDR + """
.visible .entry k(.param .u64 k_p)
{
\t.reg .b64 %rd<3>;
\tld.param.u64 %rd1, [k_p];
\tst.global.u64 [%rd1], %rd1;
\tret;
}
""")
    f = m.function("k")
    assert isolate_function(f)[0] is f
    other = KERNEL.replace("{CALL}", call_block()).replace("__hb_issue", "__hb_cap_xlate")
    g = parse_module(other).function("k")
    assert isolate_function(g)[0] is g                             # the capacity helper is hot: not isolated
    assert "__hb_cap_xlate" not in ISOLATED


def test_device_function_calls_are_isolated(monkeypatch):
    """The timing pass instruments .func bodies too (each access calls __hb_issue: no inline path there)."""
    text = HDR + """
.func (.param .b32 r) load2(.param .b64 p)
{
\t.reg .b32 %r<4>; .reg .b64 %rd<3>;
\tld.param.u64 %rd1, [p];
\tld.global.u32 %r1, [%rd1];
\tld.global.u32 %r2, [%rd1+4];
\tadd.s32 %r3, %r1, %r2;
\tst.param.b32 [r], %r3;
\tret;
}
.visible .entry k(.param .u64 k_p)
{
\t.reg .b32 %r<4>; .reg .b64 %rd<3>;
\tld.param.u64 %rd1, [k_p];
\t{ .param .b64 a; .param .b32 b; st.param.b64 [a], %rd1; call.uni (b), load2, (a); ld.param.b32 %r1, [b]; }
\tst.global.u32 [%rd1], %r1;
\tret;
}
"""
    monkeypatch.setenv("HBFCC_CALL_ISOLATION", "1")
    res = rewrite_text(text, filename="f.ptx", link=False)
    rep = res.meta["call_isolation"]
    assert rep["load2"]["calls"] >= 2 and rep["load2"]["saved"] >= 1
    f = res.module.function("load2")
    assert any(type(s) is Instruction and s.opcode == "st" and "volatile" in s.modifiers for _, s in walk(f.body))
    funcs = {f["name"]: f for f in res.meta["timing"]["functions"]}
    assert funcs["load2"]["call_isolation"] == rep["load2"]        # the artifact's function record carries it


def test_knob_off_is_byte_identical(monkeypatch):
    text = (Path(__file__).resolve().parents[1] / "fixtures" / "triton" / "custom_reduce.ptx").read_text()
    monkeypatch.delenv("HBFCC_CALL_ISOLATION", raising=False)
    a = rewrite_text(text, filename="c.ptx", link=False)
    monkeypatch.setenv("HBFCC_CALL_ISOLATION", "0")
    b = rewrite_text(text, filename="c.ptx", link=False)
    assert a.text == b.text and BUF not in a.text and "call_isolation" not in a.timings_s
    assert "call_isolation" not in a.meta["timing"]["functions"][0]
    monkeypatch.setenv("HBFCC_CALL_ISOLATION", "1")
    c = rewrite_text(text, filename="c.ptx", link=False)
    assert BUF in c.text and "call_isolation" in c.timings_s and c.meta["call_isolation"]


def _triton_corpus():
    if ptx_corpus is None:
        pytest.skip("fixture corpus not present")
    return ptx_corpus.triton_corpus()


SAVE_LINE = r"(st\.volatile|selp\.u32 %__hb_svt|mov\.u64 %__hb_sva|cvta\.local)"
RESTORE_LINE = r"(ld\.volatile|setp\.ne\.u32 \S+ %__hb_svt|mov\.u64 %__hb_sva|cvta\.local)"


def _native(text: str) -> list[str]:
    """Each function's native copy: from $__hb_native: to the function's closing brace."""
    return re.findall(r"^\$__hb_native:\n(.*?)^\}$", text, re.M | re.S)


def test_native_copy_untouched_and_saves_symmetric_over_the_triton_corpus(monkeypatch):
    """Every Triton fixture (rewrite only, no ptxas): the native copies are the same text with the knob on and
    off; every wrapped call stores and loads the same registers at the same offsets."""
    n_native = n_calls = 0
    for name, path in _triton_corpus().items():
        text = path.read_text()
        monkeypatch.setenv("HBFCC_CALL_ISOLATION", "0")
        off = rewrite_text(text, filename=name, link=False)
        monkeypatch.setenv("HBFCC_CALL_ISOLATION", "1")
        on = rewrite_text(text, filename=name, link=False)
        assert _native(on.text) == _native(off.text), name
        n_native += len(_native(off.text))
        for f in on.module.functions():
            if f.body is None or f.name not in on.meta["call_isolation"]:
                continue
            lines = _texts(f)
            # each wrapped call: the save sequence right before it and the restore sequence right after it
            for c, t in enumerate(lines):
                if not (t.startswith("call") and any(h + "," in t for h in ISOLATED)):
                    continue
                a = c
                while a > 0 and re.match(SAVE_LINE, lines[a - 1]):
                    a -= 1
                b = c + 1
                while b < len(lines) and re.match(RESTORE_LINE, lines[b]):
                    b += 1
                st, _ = _saves(lines[a:c])
                _, ld = _saves(lines[c:b])
                assert st == ld, (name, f.name, c)
                n_calls += bool(st)
    assert n_native > 10 and n_calls > 100


# ---- slow: the corpus assembled with the real helpers, knob on and off ---------------------------------------

# entries whose registers are HIGHER with the isolation (ptxas 13.0, sm_90a, the real direct helpers, measured
# by bench/call_isolation_static.py; docs/RESULTS.md "wt/csave"): the reason the knob is off by default. The
# test fails when another entry rises (or one of these stops rising: then update the list and the results).
KNOWN_RISES: set[tuple[str, str]] = {
    ("triton/math_bf16", "math_kernel"),            # 128 -> 152 (109 values live across a call, many derived)
    ("cuda/generic_ptr", "generic_select"),         # 104 -> 116
    # with the group-synced helpers (wt/grp13, HBF_GROUP_SYNC): transpose_2d 255 -> 255 and shared_local 138 -> 128
    # no longer rise; this one does
    ("triton/inductor_12_triton_poi_fused_index_mul_2", "triton_poi_fused_index_mul_2"),   # 128 -> 136
    # with merged requests (wt/merge13, HBFCC_MERGE_LOADS=1): the build without isolation fell 255 -> 252 (its 32 lone
    # issues now 4 groups of 8); the isolation's stays 255
    ("triton/transpose_2d", "transpose_kernel"),    # 252 -> 255
}


def _regs(text: str) -> dict[str, int]:
    from hbfcc.toolchain import parse_ptxas_v
    err = U.assemble(text, "sm_90a").stderr
    entries = set(re.findall(r"Compiling entry function '([^']+)'", err))
    return {n: f.registers for n, f in parse_ptxas_v(err).functions.items() if n in entries}


def _one(name: str, text: str, helper) -> tuple[str, dict, dict]:
    from hbfcc.passes import get
    from hbfcc import link as L
    from hbfcc.rewrite import print_text
    off = rewrite_text(text, filename=name, link=False).module
    on = get("call_isolation")(off, {})
    stage = L.stage(helper, None, prune=True)[1]
    return name, _regs(print_text(stage(off, {}))), _regs(print_text(stage(on, {})))


@pytest.mark.slow
def test_corpus_assembles_and_registers_do_not_rise():
    helper_ptx = U.real_helper_ptx()
    if helper_ptx is None or ptx_corpus is None:
        pytest.skip("the real helper PTX or the corpus is missing")
    U.tool("ptxas")
    from hbfcc import helpers as H
    helper = H.load_helper(helper_ptx)
    mods = {f"triton/{k}": v for k, v in ptx_corpus.triton_corpus().items()}
    if ptx_corpus.nvcc_path():
        cache = Path(tempfile.gettempdir()) / f"hbfcc-corpus-{os.getuid()}"
        mods.update({f"cuda/{k}": v for k, v in ptx_corpus.build_cuda_corpus(cache).items()})
    rose, fell = set(), 0
    with cf.ThreadPoolExecutor(2) as ex:
        for name, off, on in ex.map(lambda kv: _one(kv[0], kv[1].read_text(), helper), mods.items()):
            assert set(on) == set(off), name
            for e in off:
                if on[e] > off[e]:
                    rose.add((name, e))
                fell += on[e] < off[e]
    assert rose == KNOWN_RISES, sorted(rose ^ KNOWN_RISES)
    assert fell > 30
