"""Code versioning in the timing pass: a launch with nothing registered runs an untouched copy of the
original body (the native version), so the native path executes the plain instruction stream."""
from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import helpers as H  # noqa: E402
from hbfcc.passes.timing import timing_pass  # noqa: E402
from hbfcc.ptx import parse_module, print_module  # noqa: E402
from hbfcc.ptx.model import Block, Instruction, Label  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

SRC = """.version 9.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 k_p, .param .u32 k_n, .param .u32 k_sel)
{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<16>;
    .shared .align 4 .b8 smem[512];
    ld.param.u64 %rd1, [k_p];
    ld.param.u32 %r1, [k_n];
    ld.param.u32 %r9, [k_sel];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r2, 0;
    mov.u32 %r3, 0;
$L_loop:
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r4, [%rd4];
    add.u32 %r3, %r3, %r4;
    st.shared.u32 [smem], %r3;
    add.u32 %r2, %r2, 1;
    setp.lt.u32 %p1, %r2, %r1;
    @%p1 bra $L_loop;
    {
        .reg .b32 %t;
        ts: .branchtargets $L_a, $L_b;
        brx.idx %r9, ts;
    }
$L_a:
    add.u32 %r3, %r3, 7;
    bra.uni $L_end;
$L_b:
    add.u32 %r3, %r3, 9;
$L_end:
    st.global.u32 [%rd2+4], %r3;
    ret;
}

.visible .entry nosite(.param .u32 q)
{
    .reg .b32 %r<2>;
    ld.param.u32 %r1, [q];
    ret;
}
"""


def _insts(body, out, stop_at=None, start_at=None):
    on = start_at is None
    for s in body:
        if type(s) is Label and s.name == start_at:
            on = True
            continue
        if type(s) is Label and s.name == stop_at:
            break
        if type(s) is Block:
            if on:
                _insts(s.body, out)
        elif type(s) is Instruction and on:
            out.append(" ".join(str(s).split()))
    return out


def test_native_version_is_the_original_body():
    orig = parse_module(SRC)
    meta: dict = {}
    m = timing_pass(orig, meta)
    f = m.function("k")
    labels = [s.name for s in f.body if type(s) is Label]
    assert labels.count("$__hb_native") == 1
    native = _insts(f.body, [], start_at="$__hb_native")
    # the copy: exactly the original instructions, labels renamed; no helper call at all
    want = [re.sub(r"(\$L_\w+|\bts\b)", r"\1_hbn", x) for x in _insts(orig.function("k").body, [])]
    assert native == want
    # reached only when nothing is registered: right after the prologue, before kernel_enter
    txt = print_module(m)
    i_enter, i_bra = txt.index("call \t__hb_kernel_enter"), txt.index("@%__hb_n bra.uni \t$__hb_native")
    assert i_bra < i_enter < txt.index("ld.param.u64 \t%rd1, [k_p]")
    # the function's own declarations are not repeated (static shared memory not doubled)
    assert len(re.findall(r"\.shared \.align 4 \.b8\s+smem\[512\]", txt)) == 1
    assert meta["timing"]["functions"][0]["native_version"] is True
    # a kernel without access sites gets no copy
    assert "$__hb_native" not in [s.name for s in m.function("nosite").body if type(s) is Label]
    assert meta["timing"]["functions"][1]["native_version"] is False


def test_native_version_assembles_with_the_helpers():
    res = rewrite_text(SRC, helper=H.load_helper(U.real_helper_ptx() or U.fixture_helper_ptx()))
    cp = U.assemble(res.text)
    assert "Used" in cp.stderr
    # the instrumented entry's loop, its native copy's, and the native entry's (k__hbnat: the original untouched)
    assert res.text.count("$L_loop_hbn:") == 1 and res.text.count("$L_loop:") == 2


def test_the_attach_switch_comes_first_in_the_constant_bank():
    """The detached test: the module defines the switch (.weak .const .u64 __hb_detached: one per link, like
    __hb_state, which the helper module defines), and the prologue reads it with ld.const and branches to the native
    copy before its first global load (__hb_state); the span test after the prologue stays (attached, nothing
    registered). A module without a native version gets no switch."""
    from hbfcommon import abi
    from hbfcc.ptx.model import Address, LabelRef, Symbol
    m = timing_pass(parse_module(SRC), {})
    txt = print_module(m)
    decl = re.findall(r"^\.weak \.const \.align 8 \.u64\s+__hb_detached;$", txt, re.M)
    assert len(decl) == 1 and txt.index("__hb_detached;") < txt.index(".visible .entry k")
    seq = _insts(m.function("k").body, [], stop_at="$__hb_native")
    i_sw = seq.index("ld.const.u64 %__hb_s, [__hb_detached];")
    assert seq[i_sw + 1:i_sw + 3] == ["setp.ne.u64 %__hb_off, %__hb_s, 0;", "@%__hb_off bra.uni $__hb_native;"]
    i_state = seq.index("ld.global.u64 %__hb_s, [__hb_state];")
    assert i_sw < i_state and not any("ld.global" in x or "ld.param" in x for x in seq[:i_sw])
    assert seq.index("@%__hb_n bra.uni $__hb_native;") > i_state
    # one switch per function, the native branch targets the one copy
    branches = [st for st in m.function("k").body if type(st) is Instruction and st.opcode == "bra"
                and st.operands == (LabelRef("$__hb_native"),)]
    assert len(branches) == 2
    reads = [st for st in m.function("k").body if type(st) is Instruction
             and any(type(o) is Address and o.base == Symbol(abi.DETACHED_GLOBAL) for o in st.operands)]
    assert len(reads) == 1 and reads[0].modifiers == ("const", "u64")
    assert "__hb_detached" not in "".join(print_module(m).split(".visible .entry nosite")[1:])
    only_nosite = SRC[SRC.index(".visible .entry nosite"):]
    assert "__hb_detached" not in print_module(timing_pass(parse_module(SRC[:SRC.index(".visible .entry k")]
                                                                          + only_nosite), {}))


def test_the_switch_assembles_whole_and_relocatable():
    """The switch's definition with the helpers linked: ptxas takes it whole-program and relocatable (-c: a .weak
    definition per object, nvlink keeps one, as for the helpers' .weak __hb_state; tests/hbfcc/test_rdc_cap.py
    nvlinks two such objects)."""
    res = rewrite_text(SRC, helper=H.load_helper(U.real_helper_ptx() or U.fixture_helper_ptx()))
    assert re.search(r"^\.weak \.const \.align 8 \.u64\s+__hb_detached;$", res.text, re.M)
    assert "Used" in U.assemble(res.text).stderr
    U.assemble(res.text, extra=("-c",))


def test_the_native_copy_declares_its_own_registers(monkeypatch):
    """HBFCC_NATIVE_SCOPE=1 (default off since stop 48): the copy is one nested block that starts with the function's top-level .reg
    declarations again (ptxas then allocates it as the plain function: docs/RESULTS.md "wt/nat15"); the shared
    declaration stays the function's (not doubled); off (meta native_scope False), the copy shares the registers, as
    before. Both assemble."""
    from hbfcc.ptx.model import VarDecl
    orig = parse_module(SRC)
    regs = [st for st in orig.function("k").body if type(st) is VarDecl and st.space == "reg"]
    meta: dict = {"native_scope": True}
    m = timing_pass(orig, meta)
    body = m.function("k").body
    i = next(j for j, st in enumerate(body) if type(st) is Label and st.name == "$__hb_native")
    assert type(body[i + 1]) is Block and i + 2 == len(body)
    inner = body[i + 1].body
    assert list(inner[:len(regs)]) == regs and not any(type(st) is VarDecl for st in inner[len(regs):])
    assert meta["timing"]["native_scope"] is True
    txt = print_module(m)
    assert len(re.findall(r"\.shared \.align 4 \.b8\s+smem\[512\]", txt)) == 1
    assert len(re.findall(r"\.reg \.b32\s+%r<16>;", txt)) == 2
    meta_off: dict = {}             # the default: shared registers
    off = timing_pass(parse_module(SRC), meta_off)
    body = off.function("k").body
    i = next(j for j, st in enumerate(body) if type(st) is Label and st.name == "$__hb_native")
    assert type(body[i + 1]) is not Block and meta_off["timing"]["native_scope"] is False
    assert len(re.findall(r"\.reg \.b32\s+%r<16>;", print_module(off))) == 1
    assert _insts(body, [], start_at="$__hb_native") == _insts(m.function("k").body, [], start_at="$__hb_native")
    helper = H.load_helper(U.real_helper_ptx() or U.fixture_helper_ptx())
    for scope in ("1", "0"):
        monkeypatch.setenv("HBFCC_NATIVE_SCOPE", scope)
        res = rewrite_text(SRC, helper=helper)
        assert res.meta["timing"]["native_scope"] is (scope == "1")
        U.assemble(res.text)
