"""CFG over PTX function bodies: diamonds, loops, scoped inline-asm labels, predicated branches,
ret/exit, brx.idx, and statement-position -> block mapping."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import ptx_corpus  # noqa: E402

from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.ptx.cfg import build_cfg  # noqa: E402
from hbfcc.ptx.model import Instruction, Label  # noqa: E402
from hbfcommon.errors import PtxError  # noqa: E402

HDR = ".version 9.0\n.target sm_90a\n.address_size 64\n"


def cfg_of(body: str, name: str = "k"):
    m = parse_module(HDR + f".visible .entry {name}(.param .u64 p)\n{{\n{body}\n}}\n", "cfg.ptx")
    return build_cfg(m.function(name))


def shape(c):
    return [(len(b.instrs), [n for _, n in b.labels], sorted(b.succs)) for b in c.blocks]


@pytest.fixture(scope="session")
def cuda_ptx(tmp_path_factory):
    if ptx_corpus.nvcc_path() is None:
        pytest.skip("nvcc not installed")
    return ptx_corpus.build_cuda_corpus(tmp_path_factory.getbasetemp() / "hbf_cuda_ptx")


def test_diamond():
    c = cfg_of("""
\t.reg .pred %p<2>; .reg .b32 %r<5>; .reg .b64 %rd<2>;
\tld.param.u64 %rd1, [p];
\tld.global.u32 %r1, [%rd1];
\tsetp.ne.s32 %p1, %r1, 0;
\t@%p1 bra THEN;
\tmul.lo.s32 %r2, %r1, 2;
\tbra.uni JOIN;
THEN:
\tadd.s32 %r2, %r1, 1;
JOIN:
\tadd.s32 %r3, %r2, %r1;
\tret;
""")
    assert shape(c) == [(4, [], [1, 2]), (2, [], [3]), (1, ["THEN"], [3]), (2, ["JOIN"], [])]
    assert sorted(c.predecessors(3)) == [1, 2]
    assert c.exits() == [3]
    assert c.rpo()[0] == 0 and c.rpo()[-1] == 3


def test_loop_back_edge_and_predicated_exit():
    c = cfg_of("""
\t.reg .pred %p<3>; .reg .b32 %r<5>;
\tmov.u32 %r1, 0;
$L__BB0_1:
\tadd.s32 %r1, %r1, 1;
\tsetp.lt.s32 %p1, %r1, 10;
\tsetp.eq.s32 %p2, %r1, 7;
\t@%p2 exit;
\t@%p1 bra $L__BB0_1;
\tret;
""")
    # entry -> loop head; head ends with guarded exit: fall-through only; then the latch
    assert shape(c) == [(1, [], [1]), (4, ["$L__BB0_1"], [2]), (1, [], [1, 3]), (1, [], [])]
    assert c.blocks[1].preds == [0, 2]
    assert c.exits() == [1, 3]                    # the guarded exit may leave, and the final ret
    assert c.blocks[1].may_exit and not c.blocks[1].is_exit and c.blocks[3].is_exit


# one inline-asm wait loop, as Triton emits it for every use: the same label in its own {} scope
WAIT_LOOP = """\t{
\t.reg .pred complete;
waitLoop:
\tmbarrier.try_wait.parity.shared::cta.b64 complete, [%r1], %r2;
\t@!complete bra.uni waitLoop;
\t}
"""


def test_inline_asm_repeated_labels_resolve_in_their_scope():
    c = cfg_of("\n\t.reg .b32 %r<4>;\n" + WAIT_LOOP + "\tadd.s32 %r3, %r3, 1;\n" + WAIT_LOOP + "\tret;\n")
    assert shape(c) == [(2, ["waitLoop"], [0, 1]), (1, [], [2]), (2, ["waitLoop"], [2, 3]), (1, [], [])]
    assert c.unsupported == []


def test_label_in_enclosing_scope_and_block_end_label():
    c = cfg_of("""
\t.reg .pred %p<2>; .reg .b32 %r<3>;
\t{
\t@%p1 bra DONE;
\tadd.s32 %r1, %r1, 1;
DONE:
\t}
\t{
\t@%p1 bra OUTER;
\t}
\tmov.u32 %r2, 0;
OUTER:
\tret;
""")
    assert shape(c) == [(1, [], [1, 2]), (1, [], [2]), (1, ["DONE"], [3, 4]), (1, [], [4]), (1, ["OUTER"], [])]


def test_branch_to_end_of_function_makes_empty_exit_block():
    c = cfg_of("""
\t.reg .pred %p<2>;
\t@%p1 bra END;
\tmov.u32 %r1, 0;
END:
""")
    assert shape(c) == [(1, [], [1, 2]), (1, [], [2]), (0, ["END"], [])]
    assert c.exits() == [2]


def test_brx_idx_with_branchtargets():
    c = cfg_of("""
\t.reg .b32 %r<3>;
ts: .branchtargets L0, L1;
\tbrx.idx %r1, ts;
L0:
\tmov.u32 %r2, 0;
\tret;
L1:
\tmov.u32 %r2, 1;
\tret;
""")
    assert shape(c)[0][2] == [1, 2] and c.unsupported == []
    c2 = cfg_of("""
\t.reg .b32 %r<3>;
\t.reg .b64 %rd<2>;
\tbrx.idx %r1, %rd1;
A:
\tret;
B:
\tret;
""")
    assert c2.unsupported and "not resolved" in c2.unsupported[0][1]
    assert shape(c2)[0][2] == [1, 2]


def test_undefined_and_duplicate_labels_are_errors():
    with pytest.raises(PtxError, match="not a label in scope"):
        cfg_of("\t{\nIN:\n\tret;\n\t}\n\tbra.uni IN;\n")
    with pytest.raises(PtxError, match="duplicate label"):
        cfg_of("A:\n\tret;\nA:\n\tret;\n")


def test_block_of_maps_every_statement():
    c = cfg_of("""
\t.reg .pred %p<2>; .reg .b32 %r<3>;
\tmov.u32 %r1, 0;
\t@%p1 bra L;
\t.loc 1 2 3
L:
\tadd.s32 %r2, %r1, 1;
\tret;
""")
    lin = c.linear()
    for path, s in lin:
        b = c.block_of(path)
        if isinstance(s, Instruction):
            assert (path, s) in c.blocks[b].instrs
    label_path = [p for p, s in lin if isinstance(s, Label)][0]
    assert c.block_of(label_path) == 1
    loc_path = [p for p, s in lin if type(s).__name__ == "Directive" and s.name == "loc"][0]
    assert c.block_of(loc_path) == 1


def test_cuda_fixtures(cuda_ptx):
    m = parse_module(cuda_ptx["diamond"].read_text(), "diamond")
    c = build_cfg(m.function("diamond"))
    labels = [n for b in c.blocks for _, n in b.labels]
    assert "THEN" in labels and "JOIN" in labels
    join = [b for b in c.blocks if any(n == "JOIN" for _, n in b.labels)][0]
    assert len(join.preds) == 2
    m = parse_module(cuda_ptx["inline_ptx"].read_text(), "inline_ptx")
    c = build_cfg(m.function("inline_ptx"))
    loops = [b for b in c.blocks if any(n == "waitLoop" for _, n in b.labels)]
    assert len(loops) == 2 and all(b.index in b.succs for b in loops)   # each spins on itself
    m = parse_module(cuda_ptx["predicated_use"].read_text(), "predicated_use")
    c = build_cfg(m.function("predicated_first_use"))
    ld = [i for _, i in c.blocks[0].instrs if i.opcode == "ld" and i.state_space == "global"]
    assert len(c.blocks) == 1 and ld                                  # straight-line: guard, no branch


def _corpus_cfgs(cuda_ptx):
    """(file, function, its CFG) for every defined function of the Triton and CUDA corpora."""
    for p in list(ptx_corpus.triton_corpus().values()) + list(cuda_ptx.values()):
        for f in parse_module(p.read_text(), p.name).functions():
            if f.body is not None:
                yield p, f, build_cfg(f)


def test_whole_corpus_builds(cuda_ptx):
    n = 0
    for p, f, c in _corpus_cfgs(cuda_ptx):
        n += 1
        assert c.blocks and c.exits(), p.name
        for b in c.blocks:
            for s in b.succs:
                assert b.index in c.blocks[s].preds
        total = sum(len(b.instrs) for b in c.blocks)
        assert total == sum(1 for _ in f.instructions())
    assert n >= 70


def test_instruction_graph_of_a_diamond_and_an_end_label():
    c = cfg_of("""
\t.reg .pred %p<2>; .reg .b32 %r<5>; .reg .b64 %rd<2>;
\tld.param.u64 %rd1, [p];
\tsetp.ne.s32 %p1, %rd1, 0;
\t@%p1 bra THEN;
\tmov.u32 %r2, 2;
\tbra.uni JOIN;
THEN:
\tmov.u32 %r2, 1;
JOIN:
\tadd.s32 %r3, %r2, 1;
\t@%p1 bra END;
\tret;
END:
""")
    nodes, succ = c.instruction_graph()
    assert [i.opcode for _, i in nodes] == ["ld", "setp", "bra", "mov", "bra", "mov", "add", "bra", "ret"]
    assert succ == [[1], [2], [5, 3], [4], [6], [6], [7], [8], []]   # the branch to END (no instruction) exits
    assert [p for p, _ in nodes] == [p for p, s in c.linear() if isinstance(s, Instruction)]


def test_instruction_graph_follows_the_blocks_on_the_corpus(cuda_ptx):
    """Every instruction flows to the next unless it ends its block; a block's last instruction to
    the first instruction of each successor block; bra targets sit right after their label."""
    for p, f, c in _corpus_cfgs(cuda_ptx):
        nodes, succ = c.instruction_graph()
        assert [i for _, i in nodes] == list(f.instructions()), p.name
        lin = c.linear()
        pos = {path: k for k, (path, _) in enumerate(lin)}
        for k, (path, ins) in enumerate(nodes):
            if not ins.is_terminator:
                assert succ[k] == ([k + 1] if k + 1 < len(nodes) else []) or \
                    c.block_of(path) != c.block_of(nodes[k + 1][0]), (p.name, f.name, k)
            if ins.opcode in ("ret", "exit", "trap") and ins.guard is None:
                assert succ[k] == [], (p.name, f.name, k)
            if ins.opcode == "bra":
                for j in succ[k]:
                    if j == k + 1 and ins.guard is not None:
                        continue
                    labels, q = [], pos[nodes[j][0]] - 1     # the labels right before the target
                    while q >= 0 and not isinstance(lin[q][1], Instruction):
                        if isinstance(lin[q][1], Label):
                            labels.append(lin[q][1].name)
                        q -= 1
                    assert ins.branch_target in labels, (p.name, f.name, k)
