"""Merged requests (HBFCC_MERGE_LOADS, hbfcc/passes/timing.py _merge_sets, docs/design.md "Merged requests"):
adjacent plain global loads of one issue group whose addresses are one register plus constants within one 32-byte
block are booked as ONE inline request of their span (issue 13: a Triton masked fp16 tail issues 8 scalar
``ld.global.b16`` per 16 bytes, each its own warp-request before this).

What is pinned here: which shapes merge and which do not; the counts a merged group adds, by running its emitted
fast path for a whole warp on a host interpreter of the instructions it uses (ballot, shfl, votes included) against
the rule (one request per span with an accessing lane, one granule per change of the span's granule along the
ascending lanes, the members' bytes where their guards hold, every member's future the group's deadline on its own
lanes); a span that may leave its 32-byte block failing the group's vote; the real Triton tail kernel
(merge_fixtures/reduce_f16_tail.ptx: triton.compile of a masked fp16 reduction for sm_90a, n not a multiple of 16;
reduce_f16_vec.ptx the same kernel with n divisible by 16) merged and assembled by ptxas; HBFCC_MERGE_LOADS=0 the
pass of main byte for byte. The GPU side is bench/gpu_calls/stop50_merge.sh.

wt/merge13b: merge_fixtures/reduce_f16_tail_dm.ptx is the quick matrix's own case (bench/devpath_matrix.py
reduce_float16_e8192_b8192_w4_g1024_tail, triton.compile for sm_90a as its --cpu-check does; the same code as
reduce_f16_tail.ptx): its warps run, from the kernel's own index code, through the entry's band check and every
group on the descriptor the runtime writes for the tensor as registered (16,777,142 bytes), as on the card."""
from __future__ import annotations

import importlib.util
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402
from test_inline_multi_walk import cload, decode, operand, setp  # noqa: E402

from hbfcommon import abi  # noqa: E402
from hbfcc import helpers as H  # noqa: E402
from hbfcc.passes import timing as T  # noqa: E402
from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.ptx.printer import print_module  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402
from hbfcc.toolchain import parse_ptxas_v  # noqa: E402

HERE = Path(__file__).resolve().parent
TAIL = (HERE / "merge_fixtures" / "reduce_f16_tail.ptx").read_text()
VEC = (HERE / "merge_fixtures" / "reduce_f16_vec.ptx").read_text()
M64 = (1 << 64) - 1


def meta(merge: bool = True, **kw) -> dict:
    return {"inline_issues": True, "group_issues": True, "hoist_issues": True, "merge_loads": merge, **kw}


def run_pass(text: str, merge: bool = True, **kw) -> tuple[str, dict]:
    m = meta(merge, **kw)
    out = print_module(T.timing_pass(parse_module(text), m))
    return out, m["timing"]["functions"][0]


def scalar_loads(n: int = 8, ty: str = "b16", step: int = 2, between: str = "", at: int = 4,
                 addr=None, guard: bool = True) -> str:
    """An entry whose thread loads n scalars of ``ty`` at [%rd4 + step*k] (16 bytes per thread from a 16-aligned
    base, Triton's masked-tail shape), each under its own guard %p<k+1> (the lane's element k < n), then uses them;
    ``between`` goes before load ``at``; ``addr(k)`` overrides an address. A barrier before the loads keeps their
    issues below it: the group reads %rd4 and the guards themselves, no hoisting copies."""
    full = ty if ty.startswith("ld") else f"ld.global.{ty}"
    is16 = full.endswith("b16")
    body = []
    for k in range(n):
        if k == at and between:
            body.append("    " + between)
        a = addr(k) if addr else f"[%rd4+{step * k}]"
        g = f"@%p{k + 1} " if guard else ""
        body.append(f"    mov.b16 %rs{k + 1}, 0;" if is16 else f"    mov.b32 %r{20 + k}, 0;")
        dst = f"%rs{k + 1}" if is16 else f"%r{20 + k}"
        if ".v4." in full:
            dst = f"{{%r{20 + k}, %r{50 + 3 * k}, %r{51 + 3 * k}, %r{52 + 3 * k}}}"
        body.append(f"    {g}{full} {dst}, {a};")
    if is16:
        uses = [f"    cvt.u32.u16 %r{40 + k}, %rs{k + 1};\n    add.s32 %r8, %r8, %r{40 + k};" for k in range(n)]
    else:
        uses = [f"    add.s32 %r8, %r8, %r{20 + k};" for k in range(n)]
    guards = [f"    add.u32 %r{60 + k}, %r3, {k};\n    setp.lt.u32 %p{k + 1}, %r{60 + k}, %r1;" for k in range(n)]
    return entry(["    mul.wide.u32 %rd3, %r2, 16;", "    add.s64 %rd4, %rd1, %rd3;", "    add.s64 %rd5, %rd1, 4096;",
                  "    shl.b32 %r3, %r2, 3;"] + guards, body + uses)


def entry(setup: list[str], body: list[str]) -> str:
    """The test kernel: its pointer %rd1, n in %r1, %tid.x in %r2, ``setup``, a barrier (the loads' issues stay
    below it), ``body``, the sum %r8 stored."""
    return """.version 8.7
.target sm_90a
.address_size 64

.visible .entry k(.param .u64 k_p, .param .u32 k_n)
{
    .reg .pred %p<20>;
    .reg .b16 %rs<20>;
    .reg .b32 %r<80>;
    .reg .b64 %rd<20>;
    ld.param.u64 %rd1, [k_p];
    ld.param.u32 %r1, [k_n];
    mov.u32 %r2, %tid.x;
    mov.u32 %r8, 0;
""" + "\n".join(setup + ["    bar.sync 0;"] + body) + """
    st.global.u32 [%rd1], %r8;
    ret;
}
"""


# ---- which shapes merge -----------------------------------------------------------------------------------------

def test_eight_scalar_loads_of_one_16_byte_span_are_one_request():
    out, rep = run_pass(scalar_loads())
    assert rep["merged_requests"] == 1 and rep["merged_sites"] == 8 and rep["issue_groups"] == 1
    assert rep["grouped_issues"] == 8
    fp = out[out.index("vote.sync.any.pred"):out.index("vote.sync.all.pred")]
    # once per request: the lanes (an OR of the members' P_j), one ballot, one granule key, one shuffle
    assert fp.count("vote.sync.ballot.b32") == 1 and fp.count("shfl.sync.idx.b32") == 1
    assert "mov.pred \t%__hb_ipa, %__hb_gp0;" in fp and "or.pred \t%__hb_ipa, %__hb_ipa, %__hb_gp7;" in fp
    assert "shr.b64 \t%__hb_ix, %rd4, %__hb_ih;" in fp                       # the span's start: the +0 member
    # the span is 16 bytes, its members 2-byte aligned only: one granule checked per lane, into R_GOK
    assert "add.u64 \t%__hb_ix, %rd4, 15;\n\txor.b64 \t%__hb_ix, %__hb_ix, %rd4;\n\tshr.b64 \t%__hb_ix, %__hb_ix, " \
        "%__hb_ih;\n\tsetp.eq.u64 \t%__hb_ipb, %__hb_ix, 0;" in fp
    assert "@%__hb_ipa and.pred \t%__hb_gok, %__hb_gok, %__hb_ipb;" in fp
    # per member: its bytes where its own guard holds, its future on its own lanes
    for j in range(8):
        assert f"@%__hb_gp{j} add.u32 \t%__hb_gbn, %__hb_gbn, 2;" in fp
        assert f"@%p{j + 1} selp.b64 \t%__hb_f{j}, %__hb_it, 0, %__hb_gp{j};" in fp
    off, rep0 = run_pass(scalar_loads(), merge=False)
    assert rep0["merged_requests"] == 0 and rep0["merged_sites"] == 0
    fp0 = off[off.index("vote.sync.any.pred"):off.index("vote.sync.all.pred")]
    assert fp0.count("vote.sync.ballot.b32") == 8 and fp0.count("shfl.sync.idx.b32") == 8


@pytest.mark.parametrize("why,src", [
    ("a store between", scalar_loads(between="st.global.u32 [%rd1+8192], %r2;")),
    ("an atomic between", scalar_loads(between="atom.global.add.u32 %r9, [%rd1+8192], 1;")),
    ("a fence between", scalar_loads(between="fence.acq_rel.gpu;")),
    ("a barrier between", scalar_loads(between="bar.sync 0;")),
    ("a volatile load between", scalar_loads(between="ld.volatile.global.u32 %r9, [%rd1+8192];")),
    ("the base redefined (not an add of a constant)", scalar_loads(between="mov.b64 %rd4, %rd5;")),
])
def test_what_sits_between_two_halves_keeps_them_apart(why, src):
    """Loads 0..3 and 4..7 each merge among themselves (two requests of 4); never one request across what is
    between them."""
    _, rep = run_pass(src)
    assert rep["merged_requests"] == 2 and rep["merged_sites"] == 8, why


def test_a_base_moved_by_a_constant_is_followed():
    """``add.s64 %rd4, %rd4, 8`` between loads 3 and 4: the later loads' issues read a copy R + 8, so loads 4..7 at
    [%rd4 + 8..14] are R + 16..22 -- a 24-byte span with loads 0..3 (R + 0..6): too wide for a checked span (16);
    two requests of 4 (R + 0..8 and R + 16..24)."""
    _, rep = run_pass(scalar_loads(between="add.s64 %rd4, %rd4, 8;"))
    assert rep["merged_requests"] == 2 and rep["merged_sites"] == 8


@pytest.mark.parametrize("why,src", [
    ("different bases", scalar_loads(addr=lambda k: f"[%rd4+{2 * k}]" if k % 2 == 0 else f"[%rd5+{2 * k}]")),
    ("a span wider than 32 bytes", scalar_loads(n=2, step=32)),
    ("two 16-byte vectors at +0 and +16 (a 32-byte span, 16-byte aligned: straddles in half the lanes)",
     scalar_loads(n=2, ty="v4.b32", step=16)),
    ("relaxed loads", scalar_loads(ty="ld.relaxed.gpu.global.b16")),
    ("generic loads (their space is known only at run time)", scalar_loads(ty="ld.b16")),
    ("different cache operators", scalar_loads(addr=None).replace("@%p2 ld.global.b16", "@%p2 ld.global.nc.b16")
     .replace("@%p4 ld.global.b16", "@%p4 ld.global.nc.b16").replace("@%p6 ld.global.b16", "@%p6 ld.global.nc.b16")
     .replace("@%p8 ld.global.b16", "@%p8 ld.global.nc.b16")),
])
def test_shapes_that_do_not_merge(why, src):
    _, rep = run_pass(src)
    assert rep["merged_requests"] == 0 and rep["merged_sites"] == 0, why


def test_volatile_loads_are_never_group_sites():
    _, rep = run_pass(scalar_loads(ty="ld.volatile.global.b16"))
    assert rep["merged_sites"] == 0 and rep["grouped_issues"] == 0


def test_the_span_rule():
    assert T._merge_span([(2 * k, 2) for k in range(8)]) == (0, 16, True)        # checked per lane
    assert T._merge_span([(0, 16), (4, 4)]) == (0, 16, False)                    # the vector's alignment proves it
    assert T._merge_span([(0, 16), (16, 16)]) is None                            # 32 bytes, 16-aligned: no
    assert T._merge_span([(0, 32), (8, 8)]) == (0, 32, False)                    # a 32-byte vector covers it
    assert T._merge_span([(0, 2), (32, 2)]) is None                              # wider than 32 bytes
    assert T._merge_span([(8, 8), (16, 8)]) == (8, 16, True)
    assert T._merge_span([(-4, 4), (0, 4)]) == (-4, 8, True)


# ---- the counts of a merged group: its fast path run for a whole warp -------------------------------------------

def warp_block(out: str) -> list[str]:
    """The first group's code from its first setup line to its warp vote (included)."""
    lines = [ln.strip() for ln in out.split("\n")]
    v = next(i for i, ln in enumerate(lines) if ln.startswith("vote.sync.any.pred"))
    setup = ("%__hb_ga", "%__hb_b,", "%__hb_gp", "%__hb_gany", "%__hb_gin", "%__hb_ipb, %__hb_b", "activemask",
             "%__hb_il, %__hb_lmlt", "%__hb_im, %__hb_im", "%__hb_x_", "%__hb_it, %globaltimer")        # with the hoisting copies
    s = v
    while s > 0 and any(x in lines[s - 1] for x in setup):
        s -= 1
    return [ln for ln in lines[s:vote_end(lines, v) + 1] if ln]


def vote_end(lines: list[str], v: int) -> int:
    """The line of the group's warp vote after line ``v``: its first ``vote.sync.all``, or with HBFCC_FULL_WARP's
    copies (a branch on %__hb_ifw before it) the full-mask copy's vote, where a whole warp goes."""
    e = next(i for i in range(v, len(lines)) if lines[i].startswith("vote.sync.all.pred"))
    fw = next((ln for ln in lines[v:e] if ln.startswith("@%__hb_ifw bra")), None)
    if fw is None:
        return e
    lab = lines.index(fw.split()[-1].rstrip(";") + ":")
    return next(i for i in range(lab, len(lines)) if lines[i].startswith("vote.sync.all.pred"))


def run_warp(lines: list[str], lanes: list[dict], cmem: bytes) -> list[dict]:
    """The 32 lanes through the block in lockstep (every branch must be uniform); their registers after it."""
    labels = {ln[:-1]: i for i, ln in enumerate(lines) if ln.endswith(":")}
    R = [dict(x) for x in lanes]
    val = operand

    pc = 0
    while True:
        ln = lines[pc]
        pc += 1
        dec = decode(ln)
        if dec is None:
            continue
        neg, g, parts, ops = dec
        act = [g is None or (not r[g]) == bool(neg) for r in R]
        name = parts[0]
        if name == "bra":
            assert len(set(act)) == 1, f"divergent branch {ln}"
            if act[0]:
                pc = labels[ops[0]]
            continue
        if name == "vote":
            vals = [bool(val(r, ops[1])) for r in R]
            res = {"any": any(vals), "all": all(vals),
                   "ballot": sum(1 << i for i, v in enumerate(vals) if v)}[parts[2]]
            for r, a in zip(R, act):
                if a:
                    r[ops[0]] = res
            if parts[2] == "all":
                return R
            continue
        if name == "shfl":
            src = [R[val(r, ops[2]) & 31][ops[1]] for r in R]
            for r, a, v in zip(R, act, src):
                if a:
                    r[ops[0]] = v
            continue
        for r, a in zip(R, act):
            if not a:
                continue
            w = M64 if parts[-1].endswith("64") else 0xFFFFFFFF
            if name == "activemask":
                r[ops[0]] = 0xFFFFFFFF
            elif name == "ld":
                r[ops[0]] = cload(r, ops[1], 1 if parts[-1] == "u8" else 8, cmem)
            elif name == "mov":
                r[ops[0]] = val(r, ops[1])
            elif name in ("add", "sub", "xor") or (name in ("or", "and") and parts[1] != "pred"):
                x, y = val(r, ops[1]), val(r, ops[2])
                r[ops[0]] = {"add": x + y, "sub": x - y, "xor": x ^ y, "or": x | y, "and": x & y}[name] & w
            elif name in ("or", "and"):
                x, y = val(r, ops[1]), val(r, ops[2])
                r[ops[0]] = (x or y) if name == "or" else (x and y)
            elif name == "not":
                r[ops[0]] = not val(r, ops[1])
            elif name == "neg":
                r[ops[0]] = (-val(r, ops[1])) & M64
            elif name == "clz":
                x = val(r, ops[1])
                r[ops[0]] = 32 - x.bit_length()
            elif name == "shr":
                r[ops[0]] = val(r, ops[1]) >> val(r, ops[2])
            elif name == "shl":
                r[ops[0]] = (val(r, ops[1]) << val(r, ops[2])) & w
            elif name == "cvt":
                r[ops[0]] = val(r, ops[1]) & (0xFFFFFFFF if parts[1] == "u32" else M64)
            elif name == "mad":                     # mad.wide.s32 d, a, b, c
                x = val(r, ops[1])
                x = x - (1 << 32) if parts[2] == "s32" and x >> 31 else x
                r[ops[0]] = (x * val(r, ops[2]) + val(r, ops[3])) & M64
            elif name == "selp":
                r[ops[0]] = val(r, ops[1]) if val(r, ops[3]) else val(r, ops[2])
            elif name == "setp":
                r[ops[0]] = setp(r, parts, ops)
            else:
                raise AssertionError(f"instruction not modeled: {ln}")


GSHIFT, DELAY, NOW = 6, 1000, 1 << 40
LO, BASE = 1 << 36, (1 << 36) + (1 << 20)


def cmem() -> bytes:
    b = bytearray(abi.CDESC_BYTES)
    b[abi.CDESC_INL_READ_DELAY_OFF:abi.CDESC_INL_READ_DELAY_OFF + 8] = DELAY.to_bytes(8, "little")
    b[abi.CDESC_READ_GSHIFT_OFF] = GSHIFT
    return bytes(b)


def warp_run(out: str, base, guards) -> list[dict]:
    """base(lane): %rd4; guards[lane][k]: %p<k+1>. The descriptor: one range [BASE, BASE + 1 MiB), its band from
    LO (a guard zone below it), the until in force."""
    lanes = []
    for ln in range(32):
        r = {"%rd4": base(ln), "%__hb_lo": LO, "%__hb_span": BASE + (1 << 20) - LO, "%__hb_gz": BASE - LO,
             "%__hb_cdb": True, "%__hb_lmlt": (1 << ln) - 1, "%__hb_iur": NOW + 10 ** 9, "%globaltimer": NOW}
        for k, gk in enumerate(guards[ln]):
            r[f"%p{k + 1}"] = gk
            r[f"%__hb_f{k}"] = 0
        lanes.append(r)
    return run_warp(warp_block(out), lanes, cmem())


def expected(base, guards, reqs: list[tuple[int, ...]], offs: list[int], widths: list[int]):
    """(requests, granules, bytes) by the rule: per request, its lanes are those with any member's guard; one
    request if any, one granule per change of (lane's span start >> GSHIFT) along the lanes; bytes per member."""
    nreq = ngr = nby = 0
    for q in reqs:
        lo = min(offs[j] for j in q)
        keys = [(base(ln) + lo) >> GSHIFT for ln in range(32) if any(guards[ln][j] for j in q)]
        if keys:
            nreq += 1
            ngr += 1 + sum(1 for a, b in zip(keys, keys[1:]) if a != b)
    for ln in range(32):
        nby += sum(widths[j] for j in range(len(offs)) if guards[ln][j])
    return nreq, ngr, nby


def totals(R: list[dict]) -> tuple[int, int, int]:
    return (sum(r["%__hb_gc"] for r in R), sum(r["%__hb_gg"] for r in R), sum(r["%__hb_gbn"] for r in R))


@pytest.mark.parametrize("seed", range(6))
def test_a_merged_group_counts_one_request_per_span_and_every_byte(seed):
    rng = random.Random(seed)
    out, rep = run_pass(scalar_loads())
    assert rep["merged_requests"] == 1
    base = (lambda ln: BASE + 4096 + 16 * ln)                     # 16 bytes per lane, 16-aligned: one block each
    # a masked tail: lanes below the cut have all eight elements, the lane at it some, the rest none; plus noise
    cut = rng.randrange(0, 33)
    guards = [[ln * 8 + k < cut * 8 + rng.randrange(0, 8) for k in range(8)] for ln in range(32)]
    if seed % 2:
        guards = [[rng.random() < 0.6 for _ in range(8)] for _ in range(32)]
    R = warp_run(out, base, guards)
    assert R[0]["%__hb_ipa"] is True                                   # the vote passed: these counts are booked
    offs, widths = [2 * k for k in range(8)], [2] * 8
    assert totals(R) == expected(base, guards, [tuple(range(8))], offs, widths)
    for ln, r in enumerate(R):                                         # every member's future: its own lanes
        for k in range(8):
            assert r[f"%__hb_f{k}"] == (NOW + DELAY if guards[ln][k] else 0)
    # the same warp without merging: one request per site (the counts of before)
    off, _ = run_pass(scalar_loads(), merge=False)
    R0 = warp_run(off, base, guards)
    assert R0[0]["%__hb_ipa"] is True
    assert totals(R0) == expected(base, guards, [(k,) for k in range(8)], offs, widths)
    if any(any(g) for g in guards):
        assert totals(R)[0] == 1 and totals(R0)[0] == sum(1 for k in range(8) if any(g[k] for g in guards))
        assert totals(R)[2] == totals(R0)[2]                            # program bytes: the same, exact


def test_a_lane_with_every_member_off_is_not_an_accessing_lane():
    out, _ = run_pass(scalar_loads())
    base = (lambda ln: BASE + 16 * ln)
    guards = [[ln not in (0, 5) for _ in range(8)] for ln in range(32)]     # lanes 0 and 5: nothing
    R = warp_run(out, base, guards)
    assert R[0]["%__hb_gc"] == 0 and R[1]["%__hb_gc"] == 1                 # lane 1 leads
    assert totals(R) == (1, 8, 30 * 16)                                    # 30 lanes x 16 B, 8 granules of 64 B


def test_a_span_leaving_its_granule_fails_the_vote():
    """A base 8 bytes off a 16-byte boundary: a lane whose 16 bytes start at 56 mod 64 touches two granules: the
    group's vote fails and each site runs alone (its own request, exactly as without merging)."""
    out, _ = run_pass(scalar_loads())
    guards = [[True] * 8 for _ in range(32)]
    R = warp_run(out, lambda ln: BASE + 8 + 16 * ln, guards)
    assert R[0]["%__hb_ipa"] is False
    R = warp_run(out, lambda ln: BASE + 16 * ln, guards)              # aligned: passes
    assert R[0]["%__hb_ipa"] is True
    g = [[ln % 4 != 3 for _ in range(8)] for ln in range(32)]          # the straddling lanes access nothing: passes
    R = warp_run(out, lambda ln: BASE + 8 + 16 * ln, g)
    assert R[0]["%__hb_ipa"] is True and totals(R) == expected(lambda ln: BASE + 8 + 16 * ln, g, [tuple(range(8))],
                                                                [2 * k for k in range(8)], [2] * 8)


def mad_tail() -> str:
    """Triton's shape for a masked tail's later chunks: each scalar's address its own ``mad.wide.s32 %rd, %r, 2,
    %base`` of an index ``%r = %r71 | c`` (c = 7168 .. 7175): register + constant only where %r71 has no bit of c,
    so the merge is a candidate, checked per lane. The index computations after the barrier: the issues copy them."""
    body = []
    for k in range(8):
        body += [f"    or.b32 %r{30 + k}, %r71, {7168 + k};",
                 f"    setp.lt.s32 %p{k + 1}, %r{30 + k}, %r1;",
                 f"    mad.wide.s32 %rd{10 + k}, %r{30 + k}, 2, %rd1;",
                 f"    mov.b16 %rs{k + 1}, 0;",
                 f"    @%p{k + 1} ld.global.b16 %rs{k + 1}, [%rd{10 + k}];"]
    uses = [f"    cvt.u32.u16 %r{40 + k}, %rs{k + 1};\n    add.s32 %r8, %r8, %r{40 + k};" for k in range(8)]
    return entry(["    shl.b32 %r71, %r2, 3;"], body + uses)


def test_candidate_addresses_are_checked_per_lane():
    out, rep = run_pass(mad_tail())
    assert rep["merged_requests"] == 1 and rep["merged_sites"] == 8
    fp = out[out.index("vote.sync.any.pred"):out.index("vote.sync.all.pred")]
    for k in range(1, 8):                # each member but the span's start: its address == the start's + 2k
        assert f"setp.eq.u64 \t%__hb_ipb, %__hb_ix, {2 * k};" in fp
    n = 32 * 8 + 7168 - 37

    def lanes(r71):
        out_ = []
        for ln in range(32):
            x = r71(ln)
            out_.append([((x | (7168 + k)) < n) for k in range(8)])
        return out_

    def run(r71):
        rr = []
        for ln in range(32):
            d = {"%rd1": BASE - 2 * 7168, "%r71": r71(ln), "%r1": n, "%__hb_lo": LO, "%__hb_span": BASE + (1 << 20) - LO,
                 "%__hb_gz": BASE - LO, "%__hb_cdb": True, "%__hb_lmlt": (1 << ln) - 1, "%__hb_iur": NOW + 10 ** 9,
                 "%globaltimer": NOW}
            d.update({f"%__hb_f{k}": 0 for k in range(8)})
            rr.append(d)
        return run_warp(warp_block(out), rr, cmem())
    # r71 = 8 * lane: x | c == x + c, every check holds: one request, its granules, every byte
    R = run(lambda ln: 8 * ln)
    g = lanes(lambda ln: 8 * ln)
    assert R[0]["%__hb_ipa"] is True
    assert totals(R) == expected(lambda ln: BASE + 16 * ln, g, [tuple(range(8))], [2 * k for k in range(8)], [2] * 8)
    # r71 = 8 * lane + 1: x | 7169 == x | 7168 for every lane: not the start + 2, the vote fails (each site alone)
    R = run(lambda ln: 8 * ln + 1)
    assert R[0]["%__hb_ipa"] is False


# ---- the real Triton masked tail ------------------------------------------------------------------------------

def test_the_triton_masked_tail_merges_into_eight_byte_spans():
    """64 scalar ld.global.b16 per thread (8 x 16 bytes: Triton could not vectorize) become 8 requests of 8, what
    the vectorized build books: 7 proven (each 16-byte chunk [%rd1 + 2048 i + 0..14]), the last checked per lane
    (addresses each from its own mad.wide of an `or`-ed index: mad_tail). Every issue follows the previous load's to
    one point: 8 groups instead of 39 (a run of 29 hoisted issues and 35 lone ones without merging)."""
    out, rep = run_pass(TAIL)
    assert rep["merged_requests"] == 8 and rep["merged_sites"] == 64
    assert rep["issue_groups"] == 8 and rep["grouped_issues"] == 64 and rep["moved_loads"] == 64
    inst = out[:out.index("$__hb_native:")]
    assert inst.count("vote.sync.ballot.b32") == 8                      # fast paths: one per request
    _, rep0 = run_pass(TAIL, merge=False)
    assert rep0["merged_sites"] == 0 and rep0["issue_groups"] == 39
    # the vectorized build of the same kernel: 8 loads of 16 bytes 2 KiB apart, nothing to merge, one group
    _, repv = run_pass(VEC)
    assert repv["merged_sites"] == 0 and repv["issue_groups"] == 1 and repv["grouped_issues"] == 8


# ---- the quick matrix's own tail kernel on a realistic launch (wt/merge13b) -----------------------------------

DM = (HERE / "merge_fixtures" / "reduce_f16_tail_dm.ptx").read_text()
DM_N = 1024 * 8192 - 37                       # devpath_matrix's tri("reduce", "float16", 8192, 8192, 4, 1024, tail=37)


def group_blocks(out: str) -> list[list[str]]:
    """Every issue group's code, first setup line to its warp vote (included), in program order."""
    lines = [ln.strip() for ln in out.split("\n")]
    setup = ("%__hb_ga", "%__hb_b,", "%__hb_gp", "%__hb_gany", "%__hb_gin", "%__hb_ipb, %__hb_b", "activemask",
             "%__hb_il, %__hb_lmlt", "%__hb_im, %__hb_im", "%__hb_x_", "%__hb_it, %globaltimer")
    blocks = []
    for v, ln in enumerate(lines):
        if not (ln.startswith("vote.sync.any.pred") and "%__hb_gany" in ln):
            continue
        s = v
        while s > 0 and any(x in lines[s - 1] for x in setup):
            s -= 1
        e = vote_end(lines, v)
        # the program's own loads moved after the previous group (their values play no part here): left out
        blocks.append([x for x in lines[s:e + 1] if x and not x.startswith("//") and "ld.global." not in x])
    return blocks


def band_block(out: str) -> list[str]:
    """The entry's R_CDB computation (from its load of r0's base to the band's end check), then a vote that
    ends run_warp there."""
    lines = [ln.strip() for ln in out.split("\n")]
    s = lines.index(f"ld.const.u64 \t%__hb_ix, [__hb_cdesc+{abi.CDESC_R0_BASE_OFF}];")
    e = next(i for i in range(s, len(lines)) if lines[i].startswith("setp.eq.and.u64 \t%__hb_cdb, %__hb_ix, "
                                                                        "%__hb_span"))
    return lines[s:e + 1] + ["vote.sync.all.pred \t%__hb_cdbv, %__hb_cdb, %__hb_im;"]


def dm_index_code() -> list[str]:
    """The kernel's own index, mask and address code (its first lines, before the loads; the parameters come
    from the lanes), then a vote that ends run_warp there."""
    lines = [ln.strip() for ln in DM.split("\n")]
    s = lines.index("mov.u32 \t%r7, %ctaid.x;")
    e = max(i for i, ln in enumerate(lines) if ln.startswith("mad.wide.s32"))
    keep = [ln for ln in lines[s:e + 1] if ln and not ln.startswith((".", "//", "$", "ld.param"))]
    return keep + ["vote.sync.all.pred \t%__hb_cdbv, %p1, %__hb_im;"]


def dm_launch(out: str, pid: int, warp: int, x: int, nbytes: int) -> tuple[list[dict], list[tuple]]:
    """One warp of the matrix case (program ``pid``, warp ``warp`` of 4) through the entry's band check and then
    every issue group in order, on the descriptor the runtime writes for it (tests/runtime/test_group_layout.py
    ``layout``: devstate.fill_ranges / cdesc_for, the FIXED source, 64-byte read granules): one range, the tensor
    x as registered (``nbytes`` from ``x``), the band from the guard zone below it. Returns the lanes and, per
    group, (vote passed, requests, granules, bytes)."""
    sys.path.insert(0, str(HERE.parent / "runtime"))
    from test_group_layout import layout
    st, cd = layout(x, nbytes)
    assert cd[abi.CDESC_READ_GSHIFT_OFF] == GSHIFT
    cm = bytearray(cd)
    lo = int(st.lo)
    lanes = []
    for ln in range(32):
        r = {"%ctaid.x": pid, "%tid.x": 32 * warp + ln, "%r9": DM_N, "%rd66": x,
             "%__hb_lo": lo, "%__hb_span": int(st.span), "%__hb_lmlt": (1 << ln) - 1, "%__hb_iur": NOW + 10 ** 9,
             "%globaltimer": NOW}
        r.update({f"%__hb_f{k}": 0 for k in range(64)})
        lanes.append(r)
    R = run_warp(dm_index_code(), lanes, bytes(cm))
    R = run_warp(band_block(out), R, bytes(cm))
    res = []
    for b in group_blocks(out):
        for r in R:
            r.update({"%__hb_gc": 0, "%__hb_gg": 0, "%__hb_gbn": 0})
        R = run_warp(b, R, bytes(cm))
        res.append((R[0]["%__hb_ipa"], *totals(R)))
    return R, res


@pytest.mark.parametrize("pid,warp", [(0, 0), (517, 2), (1023, 3)])
def test_the_matrix_tail_is_served_merged_on_its_real_launch(pid, warp):
    """The card (H100, stop50_merge.sh): the quick matrix's masked tail booked 262,144 requests with the merge on,
    as with it off. Its range is the tensor as registered: n * 2 = 16,777,142 bytes, not a multiple of 32, and
    the groups' band check (R_CDB) wanted both ends of the range 32-byte aligned, so every group's vote failed on
    every launch and each site ran alone (merged or not). It now wants the length a multiple of the widest group
    access (2 here): every group passes, one request per 16-byte span; the last warp of the last program (its
    last 37 elements missing) too, with its bytes exact. A range whose length is odd still fails (b16 loads could
    end past it)."""
    out, rep = run_pass(DM)
    assert rep["merged_requests"] == 8 and rep["merged_sites"] == 64 and rep["issue_groups"] == 8
    x = BASE
    R, res = dm_launch(out, pid, warp, x, DM_N * 2)
    assert R[0]["%__hb_cdb"] is True
    assert all(r[0] is True for r in res), res
    base = 2 * ((pid << 13) + 8 * 32 * warp)                   # this warp's first element's byte offset
    for i, (ok, nreq, ngr, nby) in enumerate(res):
        n_in = [sum(1 for k in range(8) if (base // 2 + 1024 * i + 8 * ln + k) < DM_N) for ln in range(32)]
        assert nreq == (1 if any(n_in) else 0)
        assert ngr == len({(x + base + 2048 * i + 16 * ln) >> GSHIFT for ln in range(32) if n_in[ln]})
        assert nby == 2 * sum(n_in)
    if (pid, warp) == (1023, 3):
        assert sum(r[3] for r in res) == 2 * (8192 // 4 - 37) and res[-1][1] == 1
        assert sum(r[2] for r in res) == 63                      # lanes 28..31 of the last chunk: no element
        # the merge off: the same launch passes its 39 groups' votes too; 64 requests, the same bytes
        off, _ = run_pass(DM, merge=False)
        _, res0 = dm_launch(off, pid, warp, x, DM_N * 2)
        assert len(res0) == 39 and all(r[0] is True for r in res0)
        assert sum(r[1] for r in res0) == 64 and sum(r[3] for r in res0) == sum(r[3] for r in res)
    # the runtime's descriptor for a 2-byte-aligned length passes; an odd length does not (an access could end
    # past the range: each site alone then, with its own end check)
    _, res = dm_launch(out, pid, warp, x, DM_N * 2 - 1)
    assert not any(r[0] for r in res)


def _ptxas_v(text: str, kernel: str) -> dict:
    return parse_ptxas_v(U.assemble(text).stderr).get(kernel).to_dict()


def test_the_merged_tail_assembles_and_spills_no_more_than_before(monkeypatch):
    hp = U.real_helper_ptx()
    if hp is None:
        pytest.skip("no helper PTX")
    res = {}
    for m in ("0", "1"):
        monkeypatch.setenv("HBFCC_MERGE_LOADS", m)
        r = rewrite_text(TAIL, helper=H.load_helper(hp))
        f = r.meta["timing"]["functions"][0]
        assert f["merged_sites"] == (64 if m == "1" else 0) and r.meta["timing"]["merge_loads"] is (m == "1")
        res[m] = _ptxas_v(r.text, "reduce_tail")
    # measured (ptxas 13.0, sm_90a): 255 registers both, spill stores 212 B -> 188 B
    assert res["1"]["spill_store_bytes"] <= res["0"]["spill_store_bytes"], res
    assert res["1"]["registers"] <= 255


def test_the_knob_reaches_the_build_identity(monkeypatch):
    """HBFCC_MERGE_LOADS=0 builds differently: hbfcc-ptxas's --version line (Triton's cache key) says so."""
    from hbfcc import cli
    monkeypatch.setenv("HBFCC_MERGE_LOADS", "0")
    assert "merge-loads off" in cli.marker_line()
    monkeypatch.setenv("HBFCC_MERGE_LOADS", "1")
    assert "merge-loads" not in cli.marker_line()


# ---- HBFCC_MERGE_LOADS=0: main's pass, byte for byte ---------------------------------------------------------------

def _main_timing():
    git = shutil.which("git")
    if git is None:
        pytest.skip("no git")
    cp = subprocess.run([git, "-C", str(U.REPO), "show", "main:hbfcc/passes/timing.py"], capture_output=True, text=True)
    if cp.returncode != 0:
        pytest.skip("no main branch here")
    if "merge_loads" in cp.stdout:
        pytest.skip("main already has the merge")
    spec = importlib.util.spec_from_loader("hbfcc.passes._timing_main", loader=None)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # its dataclasses look their module up
    exec(compile(cp.stdout, "main:hbfcc/passes/timing.py", "exec"), mod.__dict__)
    return mod


CORPUS = [HERE / "merge_fixtures" / "reduce_f16_tail.ptx", HERE / "merge_fixtures" / "reduce_f16_vec.ptx"] + \
    sorted((U.REPO / "tests" / "fixtures" / "triton").glob("*.ptx"))[:12]


def test_knob_off_is_mains_pass_byte_for_byte():
    main = _main_timing()
    for p in CORPUS:
        text = p.read_text()
        for extra in ({}, {"hoist_loads": False}, {"fast_groups": False}):
            m0 = dict(meta(False), **extra)
            mm = dict(meta(False), **extra)
            mm.pop("merge_loads")
            a = print_module(T.timing_pass(parse_module(text), m0))
            b = print_module(main.timing_pass(parse_module(text), mm))
            assert a == b, (p.name, extra)
    for src in (scalar_loads(), scalar_loads(between="st.global.u32 [%rd1+8192], %r2;")):
        mm = meta(False)
        mm.pop("merge_loads")
        assert print_module(T.timing_pass(parse_module(src), meta(False))) == \
            print_module(main.timing_pass(parse_module(src), mm))


def test_the_artifact_counts_the_merge(monkeypatch):
    """The pass's report feeds the artifact's kernel records: merged_requests / merged_sites, and the knob in the
    timing meta."""
    from hbfcc import artifact
    monkeypatch.setenv("HBFCC_MERGE_LOADS", "1")
    r = rewrite_text(TAIL, link=False)
    k = artifact.build(path="reduce_f16_tail.ptx", result=r, ptxas=None, before=None, after=None)["kernels"][0]
    assert k["name"] == "reduce_tail" and k["merged_requests"] == 8 and k["merged_sites"] == 64
    assert r.meta["timing"]["merge_loads"] is True
    monkeypatch.setenv("HBFCC_MERGE_LOADS", "0")
    r = rewrite_text(TAIL, link=False)
    k = artifact.build(path="reduce_f16_tail.ptx", result=r, ptxas=None, before=None, after=None)["kernels"][0]
    assert k["merged_requests"] == 0 and k["merged_sites"] == 0 and r.meta["timing"]["merge_loads"] is False
