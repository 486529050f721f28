"""Register liveness on hand PTX (hbfcc/ptx/liveness.py): what is live right after a marked instruction -- loops,
guarded definitions (which do not kill), predicates and `p|q`, vector operands, a value live along one branch only,
nested `{ }` scopes that shadow a name, every branch form (bra, bra.uni, @p bra, brx.idx), ret/exit, instructions
without a destination, a .func's .reg return value."""
from __future__ import annotations

import pytest

from hbfcc.ptx import parse_module
from hbfcc.ptx.liveness import derived_values, liveness, reexecutable_values
from hbfcc.ptx.model import Instruction, walk

HDR = ".version 9.0\n.target sm_90a\n.address_size 64\n"
DECL = "\t.reg .pred %p<4>; .reg .b32 %r<20>; .reg .b64 %rd<8>;\n"


def fn_of(body: str, head: str = ".visible .entry k(.param .u64 k_p)"):
    return parse_module(HDR + f"{head}\n{{\n{DECL}{body}\n}}\n", "live.ptx").function("k")


def live_after(body: str, marker: str, head: str = ".visible .entry k(.param .u64 k_p)", nth: int = 0) -> set[str]:
    """Names live right after the ``nth`` instruction whose text contains ``marker``."""
    fn = fn_of(body, head)
    lv = liveness(fn)
    hits = [p for p, s in walk(fn.body) if type(s) is Instruction and marker in " ".join(str(s).split())]
    assert hits, marker
    return {n for _, n in lv.live_out_at(hits[nth])}


def test_straight_line():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, 1;
\tmov.u32 %r2, 2;
\tmov.u32 %r3, 3;
\tmembar.gl;
\tadd.s32 %r4, %r1, %r2;
\tmov.u32 %r3, 7;
\tst.global.u32 [%rd1], %r4;
\tst.global.u32 [%rd1+4], %r3;
\tret;"""
    # %r3 is overwritten before its next read: dead; %rd1, %r1, %r2 live; st (no destination) kills nothing
    assert live_after(body, "membar") == {"%rd1", "%r1", "%r2"}
    assert live_after(body, "st.global.u32 [%rd1], %r4") == {"%rd1", "%r3"}
    assert live_after(body, "ret") == set()


def test_loop_back_edge():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, 0;
\tmov.u32 %r2, 0;
LOOP:
\tmembar.gl;
\tadd.s32 %r2, %r2, %r1;
\tadd.s32 %r1, %r1, 1;
\tsetp.lt.u32 %p1, %r1, 10;
\t@%p1 bra LOOP;
\tst.global.u32 [%rd1], %r2;
\tret;"""
    # the accumulator and the counter are live around the loop (back edge), %p1 only up to its branch
    assert live_after(body, "membar") == {"%rd1", "%r1", "%r2"}
    assert live_after(body, "setp") == {"%rd1", "%r1", "%r2", "%p1"}
    assert live_after(body, "@%p1 bra") == {"%rd1", "%r1", "%r2"}


def test_guarded_definition_does_not_kill():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, 1;
\tsetp.ne.u32 %p1, %r1, 0;
\tmembar.gl;
\t@%p1 mov.u32 %r1, 5;
\tst.global.u32 [%rd1], %r1;
\tret;"""
    assert live_after(body, "membar") == {"%rd1", "%r1", "%p1"}
    unguarded = body.replace("@%p1 mov.u32 %r1, 5", "mov.u32 %r1, 5")
    assert live_after(unguarded, "membar") == {"%rd1"}


def test_predicates_pairs_and_negated_sources():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, %tid.x;
\tmembar.gl;
\tsetp.lt.u32 %p1|%p2, %r1, 4;
\tmembar.cta;
\t@%p2 bra SKIP;
\tselp.u32 %r2, 1, 0, %p1;
\tst.global.u32 [%rd1], %r2;
SKIP:
\tret;"""
    # both halves of p|q are defined by setp (neither live before it); special registers are not variables
    assert live_after(body, "membar.gl") == {"%rd1", "%r1"}
    assert live_after(body, "membar.cta") == {"%rd1", "%p1", "%p2"}
    vote = """
\tsetp.ne.u32 %p1, %r1, 0;
\tmembar.gl;
\tvote.sync.any.pred %p3, !%p1, -1;
\t@%p3 exit;
\tret;"""
    assert live_after(vote, "membar") == {"%p1"}


def test_vector_operands():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r9, 9;
\tmembar.gl;
\tld.global.v4.u32 {%r1, %r2, _, %r4}, [%rd1];
\tmembar.cta;
\tst.global.v2.u32 [%rd1+16], {%r1, %r9};
\tmov.b64 %rd2, {%r2, %r4};
\tst.global.u64 [%rd1], %rd2;
\tret;"""
    assert live_after(body, "membar.gl") == {"%rd1", "%r9"}
    assert live_after(body, "membar.cta") == {"%rd1", "%r1", "%r2", "%r4", "%r9"}
    assert live_after(body, "st.global.v2") == {"%rd1", "%r2", "%r4"}


def test_value_live_along_one_branch_only():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r5, 55;
\tsetp.eq.u32 %p1, %r1, 0;
\tmembar.gl;
\t@%p1 bra ONE;
\tmembar.cta;
\tst.global.u32 [%rd1], %r1;
\tbra.uni END;
ONE:
\tmembar.sys;
\tst.global.u32 [%rd1], %r5;
END:
\tret;"""
    assert live_after(body, "membar.gl") == {"%rd1", "%r1", "%r5", "%p1"}
    assert live_after(body, "membar.cta") == {"%rd1", "%r1"}         # %r5: the other branch's only
    assert live_after(body, "membar.sys") == {"%rd1", "%r5"}


def test_nested_scope_shadows_a_name():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, 1;
\t{
\t.reg .b32 %r1;
\tmov.u32 %r1, 2;
\tmembar.gl;
\tst.global.u32 [%rd1], %r1;
\t}
\tmembar.cta;
\tst.global.u32 [%rd1+4], %r1;
\tret;"""
    fn = fn_of(body)
    lv = liveness(fn)
    p = next(p for p, s in walk(fn.body) if type(s) is Instruction and "membar.gl" in str(s))
    got = lv.live_out_at(p)
    # the inner %r1 (declared in the block at body index 4: after the three .reg and one ld/mov) and the
    # function's %r1 are two variables: both live across the inner membar
    scopes = {sc for sc, n in got if n == "%r1"}
    assert len(scopes) == 2 and () in scopes
    assert lv.resolve(p[:-1], "%r1") != ((), "%r1")
    assert live_after(body, "membar.cta") == {"%rd1", "%r1"}


def test_inner_definition_does_not_kill_the_outer_name():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, 1;
\tmembar.gl;
\t{
\t.reg .b32 %r1;
\tmov.u32 %r1, 2;
\tst.global.u32 [%rd1], %r1;
\t}
\tst.global.u32 [%rd1+4], %r1;
\tret;"""
    fn = fn_of(body)
    lv = liveness(fn)
    p = next(p for p, s in walk(fn.body) if type(s) is Instruction and "membar.gl" in str(s))
    assert ((), "%r1") in lv.live_out_at(p)


def test_exit_ret_and_guarded_ret():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, %tid.x;
\tsetp.eq.u32 %p1, %r1, 0;
\tmembar.gl;
\t@%p1 ret;
\tst.global.u32 [%rd1], %r1;
\texit;
\tmov.u32 %r2, 3;
\tst.global.u32 [%rd1], %r2;"""
    assert live_after(body, "membar") == {"%rd1", "%r1", "%p1"}
    assert live_after(body, "@%p1 ret") == {"%rd1", "%r1"}      # a guarded ret falls through
    assert live_after(body, "exit") == set()


def test_brx_idx_table():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, 2;
\tmov.u32 %r3, 3;
\tmembar.gl;
TBL: .branchtargets A, B;
\tbrx.idx %r1, TBL;
A:
\tst.global.u32 [%rd1], %r2;
\tret;
B:
\tst.global.u32 [%rd1], %r3;
\tret;
C:
\tst.global.u32 [%rd1], %r1;
\tret;"""
    # A and B are the table's targets; C is not (%r1 is read by brx itself, not after it)
    assert live_after(body, "membar") == {"%rd1", "%r1", "%r2", "%r3"}
    assert live_after(body, "brx") == {"%rd1", "%r2", "%r3"}


def test_call_returns_and_arguments():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, 1;
\tmov.u32 %r2, 2;
\tmembar.gl;
\tcall.uni (%r3), f, (%r1);
\tadd.s32 %r4, %r3, %r2;
\tst.global.u32 [%rd1], %r4;
\tret;"""
    head = ".func (.reg .b32 f_r) f(.reg .b32 f_a)\n{\nmov.b32 f_r, f_a;\nret;\n}\n.visible .entry k(.param .u64 k_p)"
    assert live_after(body, "membar", head) == {"%rd1", "%r1", "%r2"}
    assert live_after(body, "call", head) == {"%rd1", "%r2", "%r3"}


def test_func_reg_return_is_read_at_ret():
    text = HDR + """
.func (.reg .b32 f_r) k(.reg .b32 f_a)
{
\t.reg .b32 %r<4>;
\tmov.b32 f_r, f_a;
\tmov.u32 %r1, 1;
\tmembar.gl;
\tret;
}
"""
    fn = parse_module(text).function("k")
    lv = liveness(fn)
    p = next(p for p, s in walk(fn.body) if type(s) is Instruction and "membar" in str(s))
    assert {n for _, n in lv.live_out_at(p)} == {"f_r"}
    assert lv.types[((), "f_r")] == ".b32"


@pytest.mark.parametrize("loop", [False, True])
def test_live_in_is_uses_plus_live_out_less_kills(loop):
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, 0;
L:
\tadd.s32 %r1, %r1, 1;
\tsetp.lt.u32 %p1, %r1, 3;
""" + ("\t@%p1 bra L;\n" if loop else "") + "\tst.global.u32 [%rd1], %r1;\n\tret;"
    fn = fn_of(body)
    lv = liveness(fn)
    p = next(p for p, s in walk(fn.body) if type(s) is Instruction and "add.s32" in str(s))
    assert {n for _, n in lv.live_in_at(p)} == {"%rd1", "%r1"}


# ---- values a restore can redo or recompute ------------------------------------------------------------------

def _at(body: str, marker: str, fn_fn, head: str = ".visible .entry k(.param .u64 k_p)"):
    fn = fn_of(body, head)
    p = next(p for p, s in walk(fn.body) if type(s) is Instruction and marker in " ".join(str(s).split()))
    return {n: " ".join(str(v if type(v) is Instruction else v[1]).split()) for (_, n), v in fn_fn(fn, [p])[p].items()}


def test_reexecutable_values():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, 0;
\tmov.u64 %rd2, %clock64;
\tmov.u32 %r3, 7;
\tsetp.ne.u32 %p1, %r1, 0;
\t@%p1 mov.u32 %r3, 8;
\tmov.u32 %r4, 1;
\t@%p1 bra L;
\tmov.u32 %r4, 1;
L:
\tmembar.gl;
\tst.global.u32 [%rd1], %r4;
\tret;"""
    got = _at(body, "membar", reexecutable_values)
    # the kernel parameter, %tid, the constant, the same constant on both paths; not %clock64, not a register
    # that two different constants reach (the guarded move)
    assert got == {"%rd1": "ld.param.u64 %rd1, [k_p];", "%r1": "mov.u32 %r1, %tid.x;", "%r2": "mov.u32 %r2, 0;",
                   "%r4": "mov.u32 %r4, 1;"}


def test_reexecutable_param_only_in_entries_and_not_call_returns():
    body = """
\tld.param.u64 %rd1, [k_p];
\t{ .param .b64 rv; call (rv), f, (); ld.param.b64 %rd2, [rv]; }
\tmembar.gl;
\tst.global.u64 [%rd1], %rd2;
\tret;"""
    head = ".func (.param .b64 r) f()\n{\nst.param.b64 [r], 0;\nret;\n}\n.visible .entry k(.param .u64 k_p)"
    assert _at(body, "membar", reexecutable_values, head) == {"%rd1": "ld.param.u64 %rd1, [k_p];"}
    fhead = ".visible .func k(.param .u64 k_p)"
    assert "%rd1" not in _at(body.replace("ret;", "ret;"), "membar", reexecutable_values, head.replace(
        ".visible .entry k(.param .u64 k_p)", fhead))


def test_derived_values_and_staleness():
    base = """
\tld.param.u64 %rd1, [k_p];
\tld.global.f32 %f1, [%rd1];
\tabs.f32 %f2, %f1;
\tsetp.lt.f32 %p1, %f1, 0f00000000;
\tadd.f32 %f3, %f1, %f1;
{MID}
\tmembar.gl;
\tselp.f32 %f4, %f2, %f3, %p1;
\tst.global.f32 [%rd1], %f4;
\tst.global.f32 [%rd1+4], %f1;
\tret;"""
    decl = "\t.reg .f32 %f<8>;\n"
    got = _at(decl + base.replace("{MID}", ""), "membar", derived_values)
    # |x| and x < 0 of a live x; not x + x (two register sources)
    assert got == {"%f2": "abs.f32 %f2, %f1;", "%p1": "setp.lt.f32 %p1, %f1, 0f00000000;"}
    for mid in ("\tld.global.f32 %f1, [%rd1+8];",                  # x written after them: stale
                "\tsetp.ne.u64 %p2, %rd1, 0;\n\t@%p2 ld.global.f32 %f1, [%rd1+8];"):   # a guarded write: maybe
        got = _at(decl + base.replace("{MID}", mid), "membar", derived_values)
        assert "%f2" not in got and "%p1" not in got, mid
    # x written, then the derived value computed again: fresh
    again = "\tld.global.f32 %f1, [%rd1+8];\n\tabs.f32 %f2, %f1;"
    assert "%f2" in _at(decl + base.replace("{MID}", again).replace(
        "\tsetp.lt.f32 %p1, %f1, 0f00000000;\n", ""), "membar", derived_values)


def test_derived_value_stale_around_a_loop():
    body = """
\t.reg .f32 %f<8>;
\tld.param.u64 %rd1, [k_p];
\tmov.f32 %f1, 0f3F800000;
\tmov.u32 %r1, 0;
L:
\tsetp.eq.u32 %p2, %r1, 0;
\t@%p2 bra SKIP;
\tabs.f32 %f2, %f1;
SKIP:
\tmembar.gl;
\tadd.f32 %f1, %f1, %f2;
\tadd.u32 %r1, %r1, 1;
\tsetp.lt.u32 %p1, %r1, 4;
\t@%p1 bra L;
\tst.global.f32 [%rd1], %f1;
\tret;"""
    # the second time round %f1 was written after |%f1| was last computed: not recomputable at the membar
    assert "%f2" not in _at(body, "membar", derived_values)
    assert "%f2" in _at(body.replace("\t@%p2 bra SKIP;\n", ""), "membar", derived_values)


def test_derived_value_with_different_definitions_is_not():
    body = """
\t.reg .f32 %f<8>;
\tld.param.u64 %rd1, [k_p];
\tld.global.f32 %f1, [%rd1];
\tsetp.ne.u64 %p1, %rd1, 0;
\t@%p1 bra A;
\tabs.f32 %f2, %f1;
\tbra.uni J;
A:
\tneg.f32 %f2, %f1;
J:
\tmembar.gl;
\tst.global.f32 [%rd1], %f2;
\tst.global.f32 [%rd1+4], %f1;
\tret;"""
    assert "%f2" not in _at(body, "membar", derived_values)
    same = body.replace("neg.f32 %f2, %f1;", "abs.f32 %f2, %f1;")   # the same text twice (as the native copy has)
    assert "%f2" in _at(same, "membar", derived_values)


def test_carry_writers_are_neither_redone_nor_recomputed():
    body = """
\tld.param.u64 %rd1, [k_p];
\tmov.u32 %r1, %tid.x;
\tadd.cc.u32 %r2, %r1, 1;
\tadd.cc.u32 %r3, 5, 1;
\tmembar.gl;
\tst.global.u32 [%rd1], %r2;
\tst.global.u32 [%rd1+4], %r3;
\tst.global.u32 [%rd1+8], %r1;
\tret;"""
    assert "%r3" not in _at(body, "membar", reexecutable_values)
    assert "%r2" not in _at(body, "membar", derived_values)
