"""PTX model semantics that passes rely on: defs/uses per instruction family, memory classification,
state spaces, immediates, parameters, walking nested blocks."""
from __future__ import annotations

import pytest

from hbfcc.ptx.model import (Address, Block, Comment, Immediate, Instruction, Label, Param, Register,
                             iter_instructions, walk)
from hbfcc.ptx.parser import parse_instruction

P = frozenset({"p", "complete"})


def I(text: str) -> Instruction:  # noqa: E743
    return parse_instruction(text, P)


@pytest.mark.parametrize("text,defs,uses", [
    ("ld.global.v4.f32 {%f1, _, %f3, %f4}, [%rd1+16];", ("%f1", "%f3", "%f4"), ("%rd1",)),
    ("@!%p1 ld.global.nc.f32 %f1, [%rd1];", ("%f1",), ("%p1", "%rd1")),
    ("st.global.v2.f32 [%rd2+-8], {%f1, %f2};", (), ("%rd2", "%f1", "%f2")),
    ("red.global.add.u32 [%rd3], %r1;", (), ("%rd3", "%r1")),
    ("atom.global.gpu.acq_rel.add.u32 %r2, [%rd3], 1;", ("%r2",), ("%rd3",)),
    ("atom.global.cas.b64 %rd4, [%rd3], %rd5, %rd6;", ("%rd4",), ("%rd3", "%rd5", "%rd6")),
    ("setp.lt.s32 %p1|%p2, %r1, %r2;", ("%p1", "%p2"), ("%r1", "%r2")),
    ("shfl.sync.bfly.b32 %r1|%p1, %r2, 16, 31, -1;", ("%r1", "%p1"), ("%r2",)),
    ("elect.sync _|%p2, -1;", ("%p2",), ()),
    ("vote.sync.all.pred %p1, !%p2, -1;", ("%p1",), ("%p2",)),
    ("bar.red.popc.u32 %r1, 0, %p1;", ("%r1",), ("%p1",)),
    ("bar.sync 0;", (), ()),
    ("mbarrier.init.shared::cta.b64 [%r1], 1;", (), ("%r1",)),
    ("mbarrier.arrive.expect_tx.shared.b64 _, [%r1], 16384;", (), ("%r1",)),
    ("mbarrier.arrive.shared::cta.b64 %rd1, [%r1];", ("%rd1",), ("%r1",)),
    ("mbarrier.try_wait.parity.shared::cta.b64 complete, [%r1], %r2;", ("complete",), ("%r1", "%r2")),
    ("@!complete bra.uni waitLoop;", (), ("complete",)),
    ("cp.async.cg.shared.global [%r4], [%rd1], 16, %r5;", (), ("%r4", "%rd1", "%r5")),
    ("cp.async.wait_group 1;", (), ()),
    ("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd8, {%r7, %r8}], [%r6];", (),
     ("%rd8", "%r7", "%r8", "%r6")),
    ("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%r1], %rd2;", (), ("%r1", "%rd2")),
    ("fence.proxy.tensormap::generic.acquire.gpu [%rd4], 128;", (), ("%rd4",)),
    ("prefetch.global.L2 [%rd1];", (), ("%rd1",)),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%f1, %f2, %f3, %f4}, %rd1, %rd2, p, 1, 1, 1, 1;",
     ("%f1", "%f2", "%f3", "%f4"), ("%f1", "%f2", "%f3", "%f4", "%rd1", "%rd2", "p")),
    ("call.uni (retval0), helper, (param0, param1);", (), ()),
    ("call (retval0), %rd5, (param0), prototype_0;", (), ("%rd5",)),
    ("mov.b64 {%r1, %r2}, %rd1;", ("%r1", "%r2"), ("%rd1",)),
    ("mov.b64 %rd1, {%r1, %r2};", ("%rd1",), ("%r1", "%r2")),
    ("mov.u32 %r1, %tid.x;", ("%r1",), ("%tid.x",)),
    ("ret;", (), ()),
    ("createpolicy.fractional.L2::evict_last.b64 %rd1, 1.0;", ("%rd1",), ()),
    ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1, %r2, %r3, %r4}, [%r5];", ("%r1", "%r2", "%r3", "%r4"), ("%r5",)),
    ("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%r5], {%r1, %r2};", (), ("%r5", "%r1", "%r2")),
])
def test_defs_uses(text, defs, uses):
    ins = I(text)
    assert ins.defs() == defs
    assert ins.uses() == uses


@pytest.mark.parametrize("text,mem,space,family", [
    ("ld.u32 %r1, [%rd1];", True, "generic", "ld"),
    ("ld.param.b64 %rd1, [k_param_0];", True, "param", "ld"),
    ("ld.shared::cta.b32 %r1, [%r2];", True, "shared::cta", "ld"),
    ("ld.global.nc.L1::evict_last.v2.f32 {%f1, %f2}, [%rd1];", True, "global", "ld"),
    ("st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r1], %r2, [%r3];", True, "shared::cluster", "st.async"),
    ("cp.async.ca.shared.global [%r1], [%rd1], 4;", True, "shared", "cp.async"),
    ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r3, %r4}], [%r1];",
     True, "shared::cluster", "cp.async.bulk.tensor"),
    ("cp.async.bulk.commit_group;", True, "generic", "cp.async.bulk.commit_group"),
    ("cp.reduce.async.bulk.tensor.1d.global.shared::cta.add.tile.bulk_group [%rd1, {%r1}], [%r2];", True,
     "global", "cp.reduce.async.bulk.tensor"),
    ("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd1], [%r1], 128;",
     True, "global", "tensormap.cp_fenceproxy"),
    ("atom.shared.add.u32 %r1, [%r2], 1;", True, "shared", "atom"),
    ("add.f32 %r1, %r2, %r3;", False, None, "add"),
    ("fence.proxy.async.shared::cta;", False, None, "fence.proxy"),
    ("isspacep.global %p1, %rd1;", False, None, "isspacep"),
])
def test_memory_classification(text, mem, space, family):
    ins = I(text)
    assert ins.is_memory_op is mem
    assert ins.state_space == space
    assert ins.family == family


def test_copy_spaces_and_vector_width():
    assert I("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd8, {%r7, %r8}], [%r6];").copy_spaces() \
        == ("global", "shared::cta")
    assert I("cp.async.cg.shared.global [%r4], [%rd1], 16;").copy_spaces() == ("shared", "global")
    assert I("ld.global.u32 %r1, [%rd1];").copy_spaces() is None
    assert I("ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];").vector_width == 4
    assert I("ld.global.b32 %r1, [%rd1];").vector_width == 1
    assert I("ld.global.acquire.gpu.b32 %r1, [%rd1];").has("gpu", "acquire", "global")
    assert not I("ld.global.b32 %r1, [%rd1];").has("volatile")


@pytest.mark.parametrize("text,value", [
    ("0f3F800000", 1.0), ("0fBF800000", -1.0), ("0d3FF0000000000000", 1.0), ("-16", -16), ("0x10", 16),
    ("0X7fffffff", 2147483647), ("4294967295U", 4294967295), ("010", 8), ("0b101", 5), ("1.5", 1.5),
    ("0", 0),
])
def test_immediates(text, value):
    assert Immediate(text).value == value


def test_param_size_and_printing_of_instruction():
    assert Param("param", ".b8", "tm", 64, (128,)).size_bytes == 128
    assert Param("param", ".u64", "p", None, (), "global", 1).size_bytes == 8
    ins = I("@!%p1 ld.global.v2.f32 {%f1, %f2}, [%rd1+-8];")
    assert str(ins) == "@!%p1 ld.global.v2.f32 \t{%f1, %f2}, [%rd1+-8];"
    assert I(str(ins)) == ins
    assert ins.address == Address(Register("%rd1"), -8)


def test_walk_and_iter_instructions():
    a, b, c = I("mov.u32 %r1, 0;"), I("add.s32 %r1, %r1, 1;"), I("ret;")
    body = (a, Block((Comment("// x"), Label("L"), b)), c)
    assert list(iter_instructions(body)) == [a, b, c]
    paths = [p for p, _ in walk(body)]
    assert paths == [(0,), (1,), (1, 0), (1, 1), (1, 2), (2,)]
