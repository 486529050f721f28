"""PTX front end: the whole fixture corpus round-trips (parse -> print -> parse equal) and the
printed text assembles with ptxas for sm_90a; focused parser/model checks on each syntax form."""
from __future__ import annotations

import concurrent.futures as cf
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import ptx_corpus  # noqa: E402

from hbfcc.ptx import parse_module, print_module  # noqa: E402
from hbfcc.ptx.model import (  # noqa: E402
    Address, ArgList, Block, Comment, Directive, Function, Immediate, Instruction, Label, LabelRef,
    Negated, PredPair, Register, Sink, Symbol, VarDecl, Vector,
)
from hbfcommon.errors import PtxError  # noqa: E402

needs_nvcc = pytest.mark.skipif(ptx_corpus.nvcc_path() is None, reason="nvcc not installed")
needs_ptxas = pytest.mark.skipif(ptx_corpus.ptxas_path() is None, reason="ptxas not installed")

TRITON = ptx_corpus.triton_corpus()
CUDA = ptx_corpus.cuda_sources()


@pytest.fixture(scope="session")
def cuda_ptx(tmp_path_factory):
    if ptx_corpus.nvcc_path() is None:
        pytest.skip("nvcc not installed")
    return ptx_corpus.build_cuda_corpus(tmp_path_factory.getbasetemp() / "hbf_cuda_ptx")


def _roundtrip(text: str, name: str):
    m = parse_module(text, name)
    printed = print_module(m)
    m2 = parse_module(printed, name + ".printed")
    assert m2 == m, f"{name}: parse(print(m)) != m"
    assert print_module(m2) == printed, f"{name}: printing is not a fixed point"
    return m, printed


def test_corpus_size():
    assert len(TRITON) >= 30
    assert len(CUDA) >= 14


@pytest.mark.parametrize("name", sorted(TRITON))
def test_triton_roundtrip(name):
    m, _ = _roundtrip(TRITON[name].read_text(), name)
    assert any(f.is_entry and f.body for f in m.functions())


def test_large_triton_roundtrip():
    """The 22k-line Triton PTX (speed input) round-trips too."""
    for p in sorted((ptx_corpus.HERE / "triton_large").glob("*.ptx")):
        m, _ = _roundtrip(p.read_text(), p.name)
        assert sum(1 for f in m.functions() for _ in f.instructions()) > 10000


@pytest.mark.parametrize("name", ["thrust_sort_reduce", "cub_wmma_cg_G"])
def test_large_nvcc_roundtrip(name):
    """Committed nvcc output too slow to compile in CI (thrust/CUB, -G debug build) round-trips."""
    p = ptx_corpus.HERE / "nvcc_large" / f"{name}.ptx"
    m, _ = _roundtrip(p.read_text(), p.name)
    assert len([f for f in m.functions() if f.body is not None]) >= 10


@needs_nvcc
@pytest.mark.parametrize("name", sorted(CUDA))
def test_cuda_roundtrip(name, cuda_ptx):
    m, _ = _roundtrip(cuda_ptx[name].read_text(), name)
    assert any(f.is_entry and f.body for f in m.functions())


@needs_ptxas
def test_printed_corpus_assembles_to_identical_code(cuda_ptx, tmp_path):
    """Every printed module assembles with ptxas -arch=sm_90a, and to the same code as the original:
    every cubin section except debug info (SASS, .nv.info, constants, symbols) is byte-identical.
    ptxas runs 2 at a time."""
    files = {**{f"triton/{k}": v for k, v in TRITON.items()}, **{f"cuda/{k}": v for k, v in cuda_ptx.items()}}
    jobs = []
    for name, p in files.items():
        stem = tmp_path / name.replace("/", "__")
        q = stem.with_suffix(".printed.ptx")
        q.write_text(print_module(parse_module(p.read_text(), name)))
        jobs.append((name, p, q, str(stem) + ".orig.cubin", str(stem) + ".printed.cubin"))

    def run(job):
        name, p, q, c1, c2 = job
        r1 = ptx_corpus.run_ptxas(p, out=c1)
        r2 = ptx_corpus.run_ptxas(q, out=c2)
        if r2.returncode != 0:
            return name, "printed PTX rejected: " + r2.stderr[-800:]
        if r1.returncode != 0:
            return name, "original PTX rejected: " + r1.stderr[-800:]
        a, b = ptx_corpus.code_sections(Path(c1)), ptx_corpus.code_sections(Path(c2))
        diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        return name, (f"code sections differ: {diff}" if diff else None)

    with cf.ThreadPoolExecutor(max_workers=2) as ex:
        results = list(ex.map(run, jobs))
    bad = [(n, why) for n, why in results if why]
    assert not bad, bad
    assert len(results) >= 70


# ---------------------------------------------------------------------------------------------
# Focused forms
# ---------------------------------------------------------------------------------------------

HDR = ".version 9.0\n.target sm_90a\n.address_size 64\n"


def _body(src: str, params: str = ".param .u64 k_param_0") -> tuple:
    m = parse_module(HDR + f".visible .entry k({params})\n{{\n{src}\n}}\n", "t.ptx")
    _roundtrip(HDR + f".visible .entry k({params})\n{{\n{src}\n}}\n", "t.ptx")
    return m.function("k").body


def _insns(body):
    out = []
    for s in body:
        if isinstance(s, Instruction):
            out.append(s)
        elif isinstance(s, Block):
            out.extend(_insns(s.body))
    return out


def test_triton_style_forms():
    body = _body("""
\t.reg .pred \t%p<3>;
\t.reg .b32 \t%r<45>;
\t.reg .b64 \t%rd<5>;
\t// begin inline asm
\tmov.u32 %r1, 0x0;
\t@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd2 + 0 ];
\t// end inline asm
\tadd.f32 \t%r33, %r1, %r2;
\t@!%p2 st.global.b32 [ %rd2 + -16 ], { %r5 };
\tmov.u32 %r6, 0f3F800000; mov.b32 %r7, -1;
\tld.param.b64 %rd3, [k_param_0];
\tst.global.v2.b32 [%rd1+8], {%r1, _};
""")
    ins = _insns(body)
    ld = ins[1]
    assert ld.guard.reg == Register("%p1") and not ld.guard.negated
    assert (ld.opcode, ld.modifiers) == ("ld", ("global", "v4", "b32"))
    assert ld.operands[1] == Address(Register("%rd2"), 0)
    assert ld.defs() == ("%r1", "%r2", "%r3", "%r4") and ld.uses() == ("%p1", "%rd2")
    assert ld.state_space == "global" and ld.vector_width == 4 and ld.is_memory_op
    assert ins[2].operands[0] == Register("%r33")              # f32 math on .b32 registers
    st = ins[3]
    assert st.guard.negated and st.operands[0] == Address(Register("%rd2"), -16)
    assert st.defs() == () and st.uses() == ("%p2", "%rd2", "%r5")
    assert ins[4].operands[1] == Immediate("0f3F800000") and ins[4].operands[1].value == 1.0
    assert ins[5].operands[1].value == -1                     # two statements on one line
    assert ins[6].operands[1] == Address(Symbol("k_param_0"), 0) and ins[6].state_space == "param"
    assert ins[7].operands[1] == Vector((Register("%r1"), Sink()))
    assert isinstance(body[0], VarDecl) and body[1].decls[0].count == 45
    assert body[1].decls[0].names()[44] == "%r44"
    assert isinstance(body[3], Comment) and body[3].text == "// begin inline asm"


def test_inline_asm_blocks_labels_and_plain_registers():
    body = _body("""
\t.reg .b32 %r<4>;
\t.reg .b64 %rd<3>;
\t{
\t.reg .pred complete;
\twaitLoop:
\tmbarrier.try_wait.parity.shared::cta.b64 complete, [%r1], %r2;
\t@!complete bra.uni waitLoop;
\t}
\t{ .reg .pred complete; waitLoop: mbarrier.try_wait.parity.shared::cta.b64 complete, [%r1], %r2; @!complete bra.uni waitLoop; }
\tmbarrier.arrive.expect_tx.shared.b64 _, [%r1], 16384;
\tsetp.lt.s32 %r3|%r3, %r1, 4;
\tvote.sync.all.pred %r3, !%r3, -1;
""")
    b1, b2 = body[2], body[3]
    assert isinstance(b1, Block) and b1 == Block(b2.body)        # one-line and multi-line blocks equal
    assert isinstance(b1.body[1], Label) and b1.body[1].name == "waitLoop"
    tw, br = b1.body[2], b1.body[3]
    assert tw.operands[0] == Register("complete")                 # plain .reg name is a register
    assert tw.defs() == ("complete",) and tw.family == "mbarrier.try_wait"
    assert br.guard.reg == Register("complete") and br.operands == (LabelRef("waitLoop"),)
    assert br.branch_target == "waitLoop" and br.is_terminator
    arr = body[4]
    assert arr.operands[0] == Sink() and arr.defs() == () and arr.uses() == ("%r1",)
    setp = body[5]
    assert setp.operands[0] == PredPair(Register("%r3"), Register("%r3"))
    assert setp.defs() == ("%r3", "%r3")
    assert body[6].operands[1] == Negated(Register("%r3")) and body[6].uses() == ("%r3",)


def test_module_level_forms():
    text = """//
// Generated by LLVM NVPTX Back-End
//

.version 8.7
.target sm_90a
.address_size 64

\t// .globl\tkern
.extern .shared .align 16 .b8 global_smem[];
.global .align 1 .b8 assertMessage_0[3] = {105, 110, 0};
.visible .global .u64 __hb_ring_base;
.extern .func __assertfail
(
\t.param .b64 __assertfail_param_0,
\t.param .b32 __assertfail_param_1
)
.noreturn;
.weak .func (.param .b32 func_retval0) helper(.param .b64 helper_param_0) ;
.visible .entry kern(
\t.param .align 64 .b8 kern_param_0[128],
\t.param .u64 .ptr .global .align 1 kern_param_1,
\t.param .u32 kern_param_2
)
.reqntid 128
.maxnreg 64
{
\t.reg .b64 %rd<4>;
\t.reg .b32 %r<3>;
\t.local .align 4 .b8 __local_depot0[28];
\t.loc\t1 42 7 // k.py:42:7
\tmov.b64 %rd1, kern_param_0; cvta.param.u64 %rd2, %rd1;
\t.pragma "nounroll";
\t/* block
\t   comment */
\t{
\t.reg .b32 hbr;
\t.param .b64 hbp0;
\t.param .b32 hbret;
\tst.param.b64 [hbp0], %rd2;
\tcall.uni (hbret), helper, (hbp0);
\tld.param.b32 hbr, [hbret];
\t}
\tret;
}
\t.file\t1 "/tmp/k.py"
\t.section\t.debug_abbrev
\t{
.b8 1
.b8 17
\t}
\t.section\t.debug_macinfo\t{\t}
"""
    m, printed = _roundtrip(text, "mod.ptx")
    assert (m.version, m.target, m.address_size) == ("8.7", ("sm_90a",), 64)
    assert m.header_comments[1].text == "// Generated by LLVM NVPTX Back-End"
    kinds = [type(i).__name__ for i in m.items]
    assert kinds == ["Comment", "VarDecl", "VarDecl", "VarDecl", "Function", "Function", "Function",
                     "Directive", "Directive", "Directive"]
    smem = m.items[1]
    assert smem.linkage == (".extern",) and smem.space == "shared" and smem.align == 16
    assert smem.decls[0].dims == (None,)
    assert m.items[2].decls[0].init == ("{", "105", ",", "110", ",", "0", "}")
    af = m.items[4]
    assert af.is_declaration and af.linkage == (".extern",) and af.directives[0].name == "noreturn"
    helper = m.items[5]
    assert helper.kind == "func" and helper.returns[0].name == "func_retval0"
    k = m.function("kern")
    p0, p1 = k.params[0], k.params[1]
    assert (p0.align, p0.type, p0.dims, p0.size_bytes) == (64, ".b8", (128,), 128)
    assert (p1.ptr_space, p1.ptr_align, p1.type) == ("global", 1, ".u64")
    assert [d.name for d in k.directives] == ["reqntid", "maxnreg"]
    assert any(isinstance(s, Directive) and s.name == "pragma" and s.args == ('"nounroll"',) for s in k.body)
    loc = [s for s in k.body if isinstance(s, Directive) and s.name == "loc"][0]
    assert loc.args == ("1", "42", "7")
    call = [i for i in k.instructions() if i.opcode == "call"][0]
    assert call.operands == (ArgList((Symbol("hbret"),)), Symbol("helper"), ArgList((Symbol("hbp0"),)))
    ldp = [i for i in k.instructions() if i.opcode == "ld"][0]
    assert ldp.operands[0] == Register("hbr") and ldp.defs() == ("hbr",)
    sec = m.items[8]
    assert sec.name == "section" and sec.args == (".debug_abbrev",) and sec.raw == ".b8 1\n.b8 17"
    assert ".section .debug_macinfo" in printed


def test_indirect_call_and_loc_forms(cuda_ptx):
    m = parse_module(cuda_ptx["indirect_call"].read_text(), "indirect_call")
    k = m.function("indirect")
    stmts = [s for s in _walk(k.body)]
    proto = [s for s in stmts if isinstance(s, Directive) and s.name == "callprototype"]
    assert proto and proto[0].args[:4] == ("(", ".param", ".b32", "_")
    labels = [s.name for s in stmts if isinstance(s, Label)]
    assert any(n.startswith("prototype_") for n in labels)
    icall = [i for i in k.instructions() if i.opcode == "call" and isinstance(i.operands[1], Register)]
    assert icall and isinstance(icall[0].operands[-1], Symbol) and icall[0].operands[-1].name.startswith("prototype_")
    assert icall[0].uses()[0] == icall[0].operands[1].name          # the function pointer is read
    loc = [s for s in stmts if isinstance(s, Directive) and s.name == "loc" and "inlined_at" in s.args]
    assert loc and loc[0].args[3] == ","
    fib = [f for f in m.functions() if "fib" in f.name and f.body is not None][0]   # _Z3fibi
    assert fib.kind == "func" and any(i.opcode == "call" and i.operands[1] == Symbol(fib.name)
                                      for i in fib.instructions())


def _walk(body):
    for s in body:
        yield s
        if isinstance(s, Block):
            yield from _walk(s.body)


def test_memory_op_classification():
    body = _body("""
\t.reg .b32 %r<9>;
\t.reg .b64 %rd<9>;
\tld.u32 %r1, [%rd1];
\tld.global.nc.L1::evict_last.f32 %r2, [%rd1+4];
\tld.acquire.sys.global.u32 %r3, [%rd2];
\tred.global.add.u32 [%rd3], 1;
\tatom.global.cas.b64 %rd4, [%rd3], %rd5, %rd6;
\tcp.async.cg.shared.global [%r4], [%rd1], 16, %r5;
\tcp.async.commit_group;
\tcp.async.wait_group 1;
\tcp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd7, {%r3, %r4}], [%r2];
\tst.shared.v2.f32 [%r6], {%r7, %r8};
\tadd.s32 %r1, %r1, 1;
""")
    ins = _insns(body)
    assert ins[0].state_space == "generic"
    assert ins[1].has("nc", "global") and ins[1].state_space == "global"
    assert ins[2].has("acquire", "sys")
    assert ins[3].defs() == () and ins[3].uses() == ("%rd3",) and ins[3].state_space == "global"
    assert ins[4].defs() == ("%rd4",) and ins[4].uses() == ("%rd3", "%rd5", "%rd6")
    assert ins[5].family == "cp.async" and ins[5].copy_spaces() == ("shared", "global")
    assert ins[5].uses() == ("%r4", "%rd1", "%r5")
    assert ins[6].family == "cp.async.commit_group" and ins[7].family == "cp.async.wait_group"
    tma = ins[8]
    assert tma.family == "cp.async.bulk.tensor" and tma.copy_spaces() == ("shared::cluster", "global")
    assert tma.operands[1] == Address(Register("%rd7"), 0, Vector((Register("%r3"), Register("%r4"))))
    assert tma.uses() == ("%r1", "%rd7", "%r3", "%r4", "%r2")
    assert ins[9].state_space == "shared" and ins[9].defs() == ()
    assert not ins[10].is_memory_op and ins[10].state_space is None


@pytest.mark.parametrize("src,line,needle", [
    (HDR + ".entry k()\n{\n\tadd.s32 %r1, %r1, 1\n}\n", 6, "missing ';'"),
    (HDR + ".entry k()\n{\n\tret;\n", 5, "unterminated"),
    (HDR + ".entry k()\n{\n\tmov.u32 %r1, #3;\n}\n", 6, "bad operand"),
    (HDR + ".entry k()\n{\n\tld.global.u32 %r1, [%rd1+];\n}\n", 6, "address"),
    (HDR + "foo:\n", 4, "label"),
    (".target sm_90a\n", 1, ".version"),
    (HDR + ".entry k()\n{\n\tret; /* open\n}\n", 6, "comment"),
    (HDR + ".entry k()\n{\n\tst.global.u32 [%rd1], {%r1;\n}\n", 6, ""),
])
def test_errors_carry_line_and_column(src, line, needle):
    with pytest.raises(PtxError) as ei:
        parse_module(src, "bad.ptx")
    e = ei.value
    assert e.fields["line"] >= 1 and "column" in e.fields
    if line:
        assert e.fields["line"] == line, str(e)
    assert needle in str(e)
    assert str(e).startswith("bad.ptx:")


def test_inspect_cli(tmp_path, capsys):
    from hbfcc.ptx.__main__ import main
    f = TRITON["spin_wait_inline_asm"]
    assert main([str(f), "--check"]) == 0
    assert "equal" in capsys.readouterr().out
    assert main([str(f), "--cfg", "flag_wait_asm"]) == 0
    out = capsys.readouterr().out
    assert "[waitLoop]" in out and "EXIT" in out
    assert main([str(f)]) == 0
    assert "ld.global" in capsys.readouterr().out
    bad = tmp_path / "bad.ptx"
    bad.write_text(HDR + ".entry k()\n{\n\tmov.u32 %r1, #;\n}\n")
    assert main([str(bad)]) == 2
    assert "bad.ptx:6:" in capsys.readouterr().err
