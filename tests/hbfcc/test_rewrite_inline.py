"""The inline issue path of the timing pass (hbf_abi.h "Inline issue"): what an entry's load and store
sites, waits and exits become, where it is NOT emitted, and that every form assembles with the real
helpers. The GPU side (counters, bit-identity, cost) is bench/devpath_cost.py and bench/devpath_matrix.py."""
from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcommon import abi  # noqa: E402
from hbfcc import helpers as H  # noqa: E402
from hbfcc.passes.timing import timing_pass  # noqa: E402
from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.ptx.printer import print_module  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

HDR = """.version 9.0
.target sm_90a
.address_size 64
"""

STREAM = (Path(__file__).resolve().parents[1] / "fixtures" / "ptx" / "stream_v4.ptx").read_text()

FUNC = HDR + """
.func f(.param .u64 f_p)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [f_p];
    ld.global.u32 %r1, [%rd1];
    add.s32 %r2, %r1, 1;
    st.global.u32 [%rd1], %r2;
    ret;
}
"""


# the code shapes these tests pin are the checked collectives' (HBFCC_FULL_WARP=0) with each group's loads after
# its timing code (HBFCC_LOADS_FIRST=0) and its clock read after its setup (HBFCC_EARLY_CLOCK=0); test_full_warp.py,
# test_loads_first.py and test_early_clock.py pin what the three change
PLAIN = {"full_warp": "0", "loads_first": "0", "early_clock": False}


def rewrite(text: str, inline: bool = True, group: bool = False, meta: dict | None = None) -> str:
    """The timing pass; issue groups off unless asked (the per-site form is pinned first, groups below)."""
    m = {"inline_issues": inline, "group_issues": group, **PLAIN} if meta is None else meta
    return print_module(timing_pass(parse_module(text), m))


def test_entry_sites_are_served_inline_with_the_helpers_as_fallback():
    out = rewrite(STREAM)
    # the until check, the descriptor's range, the warp vote, the deadline from the descriptor
    assert out.count("%globaltimer") >= 3                      # load issue, store issue, the wait
    assert "setp.lt.s64 \t%__hb_ipa, %__hb_it, %__hb_iur;" in out
    assert "setp.lt.s64 \t%__hb_ipa, %__hb_it, %__hb_iuw;" in out
    assert f"[__hb_cdesc+{abi.CDESC_R0_LEN_OFF}]" in out and f"[__hb_cdesc+{abi.CDESC_R0_BASE_OFF}]" in out
    assert f"[__hb_cdesc+{abi.CDESC_INL_READ_DELAY_OFF}]" in out and f"[__hb_cdesc+{abi.CDESC_INL_WRITE_DELAY_OFF}]" in out
    assert out.count("vote.sync.all.pred") == 4                # r0, then (on a failed vote) every range
    # the general path stays reachable from both sites, and an expired until asks the helper again
    assert out.count("__hb_issue, (") == 2 and out.count("__hb_inline_until_live, (") == 2
    # the guarded lanes that do not access skip the site (future 0, as the helper gives them)
    assert "@!%p1 bra" in out
    # the thread's counters go to the kernel at its exit, before the exit's bookkeeping
    assert out.index("__hb_kernel_flush, (") < out.rindex("__hb_kernel_exit, (")
    # the descriptor is declared for the linker (it becomes the helper's definition)
    assert f".extern .const .align 8 .b8 \t{abi.CDESC_GLOBAL}[{abi.CDESC_BYTES}];" in out


def _site(out: str, n: int = 0) -> str:
    """The n-th inline site's code: from its until check to its __hb_issue call."""
    i = -1
    for _ in range(n + 1):
        i = out.index("mov.u64 \t%__hb_it, %globaltimer;", i + 1)
    return out[i:out.index("__hb_issue, (", i)]


def _r0_first_pass(site: str) -> str:
    return site[:site.index("vote.sync.all.pred")]


def _table_loop(multi: str, nchecks: int) -> None:
    """The re-check walks the table in a uniform loop through a pointer (R_IR), never at fixed offsets: ptxas
    hoists fixed constant loads out of the kernel's loops into registers live across every helper call (wt/regs,
    stop 45: the unrolled form cost the stream kernel 104 -> 128 registers); the entries past inl_nranges are not
    read (min(inl_nranges, INL_MAX_RANGES) iterations)."""
    for k in range(abi.INL_MAX_RANGES):
        assert f"[__hb_cdesc+{abi.CDESC_INL_BASE_OFF + 8 * k}]" not in multi
        assert f"[__hb_cdesc+{abi.CDESC_INL_LEN_OFF + 8 * k}]" not in multi
    assert f"min.u32 \t%__hb_ih, %__hb_ih, {abi.INL_MAX_RANGES};\n\tmov.u64 \t%__hb_rp, __hb_cdesc;\n" in multi
    m = re.search(r"mov\.u64 \t%__hb_rp, __hb_cdesc;\n(\$__hb_L\d+):\n", multi)
    assert m
    body = multi[m.end():multi.index(f"@%__hb_o bra.uni \t{m.group(1)};")]
    assert body.count(f"ld.const.u64 \t%__hb_iy, [%__hb_rp+{abi.CDESC_INL_BASE_OFF}];") == nchecks
    assert body.count(f"ld.const.u64 \t%__hb_iy, [%__hb_rp+{abi.CDESC_INL_LEN_OFF}];") == nchecks
    assert body.count("sub.u64 \t%__hb_ix, ") == nchecks
    assert body.rstrip().endswith("add.u64 \t%__hb_rp, %__hb_rp, 8;\n\tsub.u32 \t%__hb_ih, %__hb_ih, 1;\n"
                                  "\tsetp.ne.u32 \t%__hb_o, %__hb_ih, 0;")


def test_a_site_checks_every_range_after_r0_in_a_table_loop():
    """ABI 6 (the multi-range inline path): a site checks r0 first, exactly as before; only when the warp's
    vote fails does it read inl_nranges (0: the helper at once) and check the table's entries in a uniform loop
    (one sub and one compare per entry), then vote again and serve the access with the first pass's counts, or
    call the helper. What the loop decides, lane by lane: tests/hbfcc/test_inline_multi_walk.py."""
    out = rewrite(STREAM)
    for n, (until, delay) in enumerate((("%__hb_iur", abi.CDESC_INL_READ_DELAY_OFF),
                                        ("%__hb_iuw", abi.CDESC_INL_WRITE_DELAY_OFF))):
        site = _site(out, n)
        first = _r0_first_pass(site)
        # the first pass reads r0 only: nothing of the table
        assert f"[__hb_cdesc+{abi.CDESC_R0_BASE_OFF}]" in first and "%__hb_rp" not in first
        m = re.search(r"vote\.sync\.all\.pred \t%__hb_ipa, %__hb_ipa, %__hb_im;\n\t@!%__hb_ipa bra \t(\$__hb_L\d+);\n"
                      r"(\$__hb_L\d+):\n", site)
        assert m, site
        Lmulti, Lserve = m.group(1), m.group(2)
        assert site.index(f"[__hb_cdesc+{delay}]") > m.end()                     # the serve block follows
        multi = site[site.index(Lmulti + ":"):]
        multi = multi[:multi.index(f"bra.uni \t{Lserve};") + len(f"bra.uni \t{Lserve};")]
        assert multi.startswith(f"{Lmulti}:\n\tld.const.u32 \t%__hb_ih, [__hb_cdesc+{abi.CDESC_INL_NRANGES_OFF}];")
        assert "setp.eq.u32 \t%__hb_ipa, %__hb_ih, 0;" in multi
        assert f"setp.lt.and.s64 \t%__hb_ipa, %__hb_it, {until}, %__hb_ipb;" in multi   # the until, the order
        _table_loop(multi, 1)
        assert multi.count("setp.lt.or.u64 \t%__hb_ipb, %__hb_ix, %__hb_iy, %__hb_ipb;") == 1
        assert multi.count("vote.sync.all.pred") == 1 and multi.rstrip().endswith(f"bra.uni \t{Lserve};")
    rep = timing_meta(STREAM)["functions"][0]
    assert rep["multi_checks"] == 2


def test_inline_multi_off_emits_the_one_range_code(monkeypatch):
    """HBFCC_INLINE_MULTI=0: no re-check (the failed r0 vote calls the helper at once), the code of before ABI 6
    but for the group's order predicate kept apart (two predicate instructions per group); it assembles."""
    for text, group in ((STREAM, False), (loads(4), True)):
        meta = dict(group_meta(), group_issues=group, inline_multi=False)
        out = print_module(timing_pass(parse_module(text), meta))
        assert meta["timing"]["inline_multi"] is False
        assert meta["timing"]["functions"][0]["multi_checks"] == 0
        assert f"[__hb_cdesc+{abi.CDESC_INL_NRANGES_OFF}]" not in out and f"[__hb_cdesc+{abi.CDESC_INL_BASE_OFF}]" not in out
        assert out.count("vote.sync.all.pred") == (2 if not group else 1 + 4 + 1)
    monkeypatch.setenv("HBFCC_INLINE_MULTI", "0")
    res = rewrite_text(loads(4), helper=H.load_helper(U.helper_paths()[0]))
    assert res.meta["timing"]["inline_multi"] is False and f"[__hb_cdesc+{abi.CDESC_INL_BASE_OFF}]" not in res.text
    U.assemble(res.text)


def timing_meta(text: str, meta: dict | None = None) -> dict:
    m = {"inline_issues": True, "group_issues": False, **PLAIN} if meta is None else meta
    timing_pass(parse_module(text), m)
    return m["timing"]


def test_a_ready_wait_is_counted_inline_and_a_pending_one_calls_the_helper():
    out = rewrite(STREAM)
    i = out.index("setp.lt.u64 \t%__hb_ipa, %__hb_it, %__hb_f0;")     # due? (a ticket, bit 63, never is)
    seg = out[i:out.index("__hb_wait, (", i) + 20]
    assert "add.u32 \t%__hb_irw, %__hb_irw, 1;" in seg and "add.u64 \t%__hb_isl, %__hb_isl, %__hb_ix;" in seg
    assert "__hb_wait, (" in seg


def test_not_inline_in_functions_or_when_off():
    out = rewrite(FUNC)                                           # no exit flushes the counters of a .func
    assert "%__hb_iur" not in out and "__hb_inline_until" not in out.split("// hbfcc: helper prototypes")[1].split(".func f")[1]
    assert "__hb_cdesc" not in out
    off = rewrite(STREAM, inline=False)                           # HBFCC_INLINE_ISSUE=0
    assert "%__hb_iur" not in off and "vote.sync.all" not in off and "__hb_kernel_flush, (" not in off


def test_loads_that_wait_at_once_use_the_helpers():
    vol = STREAM.replace("@%p1 ld.global.v4.b32", "@%p1 ld.volatile.global.v4.b32")
    out = rewrite(vol)
    assert out.count("vote.sync.all.pred") == 2                   # the store only (r0, the re-check); the load calls


def test_inline_forms_assemble_with_every_helper_build():
    for hp in U.helper_paths():
        for src in (STREAM, FUNC):
            res = rewrite_text(src, helper=H.load_helper(hp))
            U.assemble(res.text)



# ---- issue groups (HBFCC_GROUP_ISSUES, default on) ---------------------------------------------------

def loads(n: int, offset: bool = False, guard: bool = True) -> str:
    """An entry with n independent 16-byte loads of one pointer, then their uses (the hoisting walk
    puts every issue before the first use: one run of n inline issues)."""
    body = []
    for i in range(n):
        addr = f"[%rd4+{16 * i}]" if offset else f"[%rd{10 + i}]"
        if not offset:
            body.append(f"    add.s64 %rd{10 + i}, %rd4, {16 * i};")
        g = "@%p1 " if guard else ""
        body.append(f"    {g}ld.global.v4.b32 {{%r{20 + 4 * i}, %r{21 + 4 * i}, %r{22 + 4 * i}, %r{23 + 4 * i}}}, {addr};")
    uses = [f"    add.s32 %r8, %r8, %r{20 + 4 * i};" for i in range(n)]
    return HDR + f"""
.visible .entry k(.param .u64 k_p, .param .u32 k_n)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<{24 + 4 * n}>;
    .reg .b64 %rd<{12 + n}>;
    ld.param.u64 %rd1, [k_p];
    ld.param.u32 %r1, [k_n];
    mov.u32 %r2, %tid.x;
    setp.lt.u32 %p1, %r2, %r1;
    mul.wide.u32 %rd3, %r2, 16;
    add.s64 %rd4, %rd1, %rd3;
    mov.u32 %r8, 0;
""" + "\n".join(body + uses) + """
    st.global.u32 [%rd1], %r8;
    ret;
}
"""


def group_meta() -> dict:
    return {"inline_issues": True, "group_issues": True, "hoist_issues": True, **PLAIN}


def fast_path(out: str) -> str:
    """The first group's code up to its warp vote."""
    i = out.index("vote.sync.any.pred")
    return out[out.index("sub.u64 \t%__hb_b"):out.index("vote.sync.all.pred", i)]


def test_adjacent_inline_loads_are_served_as_one_group():
    meta = group_meta()
    out = print_module(timing_pass(parse_module(loads(4)), meta))
    rep = meta["timing"]["functions"][0]
    assert rep["issue_groups"] == 1 and rep["grouped_issues"] == 4 and rep["sites"] == 5   # + the store
    fp = fast_path(out)
    # once per group: the any-lane vote, the clock read, the until check, the warp vote
    assert out.count("vote.sync.any.pred") == 1 and fp.count("%globaltimer") == 1
    assert fp.count("setp.lt.s64 \t%__hb_ipa, %__hb_it, %__hb_iur;") == 2      # the check, and again after an ask
    assert fp.count("__hb_inline_until_live, (") == 1 and "__hb_inline_until, (" not in fp
    # per site: its lanes (guard and band), their predecessor (a ballot) and granule key (a shfl), its future
    for j in range(4):
        assert f"setp.lt.and.u64 \t%__hb_gp{j}, %__hb_b, %__hb_span, %p1;" in fp \
            or f"setp.lt.and.u64 \t%__hb_gp{j}, %__hb_b, %__hb_span, %__hb_x_pred" in fp
        assert f"vote.sync.ballot.b32 \t%__hb_ip, %__hb_gp{j}, %__hb_im;" in fp
        assert f"selp.b64 \t%__hb_f{j}, %__hb_it, 0, %__hb_gp{j};" in fp
    assert fp.count("shfl.sync.idx.b32") == 4 and "__hb_issue" not in fp and "bra.uni" not in fp
    # the group's counts go to the thread's counters only when the vote passes; else each site alone
    i = out.index("vote.sync.all.pred")
    tail = out[i:]
    assert tail.index("add.u32 \t%__hb_icr, %__hb_icr, %__hb_gc;") < tail.index("__hb_issue, (")
    assert tail.count("__hb_issue, (") >= 4             # the per-site fallback of every site
    # the band == the descriptor's one range (its start 32-byte aligned, its length a multiple of the widest
    # group access): computed once at entry
    assert out.count("setp.eq.u64 \t%__hb_cdb, %__hb_gz, 0;") == 1 and "setp.ge.or.u64 \t%__hb_gin, %__hb_b, %__hb_gz, !%__hb_gp0;" in out


def test_a_group_checks_every_range_after_r0():
    """ABI 6: the group's first pass is r0's (R_GIN: until, band == r0, lanes in it; R_GOK: the order, kept
    apart); a failed vote with inl_nranges != 0 checks every site of the group against the table's entries in
    one uniform loop, and a second vote goes to the first pass's counts; else the group call / each site alone."""
    meta = group_meta()
    out = print_module(timing_pass(parse_module(loads(4)), meta))
    assert meta["timing"]["functions"][0]["multi_checks"] == 1 + 4 + 1      # the group, its sites alone, the store
    fp = fast_path(out)
    assert f"[__hb_cdesc+{abi.CDESC_INL_BASE_OFF}]" not in fp                 # the first pass: r0 only
    i = out.index("vote.sync.any.pred")
    j = out.index("vote.sync.all.pred", i)
    m = re.search(r"and\.pred \t%__hb_ipa, %__hb_gok, %__hb_gin;\n\tvote\.sync\.all\.pred \t%__hb_ipa, %__hb_ipa, "
                  r"%__hb_im;\n\t@!%__hb_ipa bra \t(\$__hb_L\d+);\n(\$__hb_L\d+):\n\tadd\.u32 \t%__hb_icr, %__hb_icr, %__hb_gc;",
                  out[j - 200:])
    assert m, out[j - 200:j + 400]
    Lmulti, Lcount = m.group(1), m.group(2)
    k = out.index(Lmulti + ":\n", j)
    multi = out[k:out.index("__hb_issue_group, (", k)]
    assert f"ld.const.u32 \t%__hb_ih, [__hb_cdesc+{abi.CDESC_INL_NRANGES_OFF}];" in multi
    assert f"ld.const.u64 \t%__hb_iy, [__hb_cdesc+{abi.CDESC_INL_READ_DELAY_OFF}];" in multi   # clock = deadline - delay
    assert "and.pred \t%__hb_ipa, %__hb_ipa, %__hb_gok;" in multi
    for s in range(4):          # the sites this lane accesses (a bit each), against those found in an entry
        assert f"@%__hb_gp{s} or.b32 \t%__hb_iq, %__hb_iq, {1 << s};" in multi
        assert f"@%__hb_ipb or.b32 \t%__hb_ik, %__hb_ik, {1 << s};" in multi
    _table_loop(multi, 4)                                                    # one loop for the group's 4 sites
    assert "and.b32 \t%__hb_ik, %__hb_ik, %__hb_iq;\n\tsetp.eq.u32 \t%__hb_ipb, %__hb_ik, %__hb_iq;" in multi
    assert multi.count("vote.sync.all.pred") == 1 and f"bra.uni \t{Lcount};" in multi


def test_groups_off_keep_each_site_alone():
    meta = dict(group_meta(), group_issues=False)
    out = print_module(timing_pass(parse_module(loads(4)), meta))
    rep = meta["timing"]["functions"][0]
    assert rep["issue_groups"] == 0 and "%__hb_gany" not in out and "%__hb_cdb" not in out
    assert meta["timing"]["group_issues"] is False


def test_group_size_is_bounded_and_computed_addresses_get_their_own_register():
    meta = group_meta()
    out = print_module(timing_pass(parse_module(loads(11, offset=True)), meta))
    rep = meta["timing"]["functions"][0]
    assert rep["grouped_issues"] == 11 and rep["issue_groups"] == 2          # GROUP_MAX = 8
    assert re.search(r"add\.s64 \t%__hb_ga7, %[\w]+, 112;", out) and ".reg .b64 \t%__hb_ga<8>, %__hb_gz;" in out


def test_an_unguarded_group_and_a_lone_site():
    meta = group_meta()
    out = print_module(timing_pass(parse_module(loads(1, guard=False)), meta))
    assert "setp.lt.u64 \t%__hb_gp0, %__hb_b, %__hb_span;" in out
    assert "selp.b64 \t%__hb_f0, %__hb_it, 0, %__hb_gp0;" in out
    assert meta["timing"]["functions"][0]["issue_groups"] == 1


def test_a_group_not_served_inline_calls_the_group_helper_once():
    """HBFCC_FAST_GROUPS: where the group vote fails, a group of two or more sites first tries one
    __hb_issue_group call (the descriptor's HBF_CDI_GROUP, a whole warp), its addresses in the local array,
    pmask bit j where the lane accesses at site j, byte j of nbpack its size; each accessing lane takes
    site j's future from lane j; HB_GROUP_SLOW or no HBF_CDI_GROUP: each site alone."""
    meta = group_meta()
    out = print_module(timing_pass(parse_module(loads(4)), meta))
    rep = meta["timing"]["functions"][0]
    assert rep["group_calls"] == 1 and meta["timing"]["fast_groups"] is True
    tail = out[out.index("vote.sync.all.pred"):]
    call = tail.index("__hb_issue_group, (")
    alone = tail.index("__hb_issue, (")
    assert call < alone                                   # tried before the sites run alone
    pre = tail[:call]
    assert f"ld.const.u32 \t%__hb_ik, [__hb_cdesc+{abi.CDESC_INL_FLAGS_OFF}];" in pre
    assert f"and.b32 \t%__hb_ik, %__hb_ik, {abi.HBF_CDI_GROUP};" in pre
    assert "setp.ne.b32 \t%__hb_ipb, %__hb_im, -1;" in pre          # a partial warp: each site alone
    for j in range(4):
        assert f"@%__hb_gp{j} or.b32 \t%__hb_gc, %__hb_gc, {1 << j};" in pre
        assert f"@%__hb_gp{j} st.local.u64 \t[__hb_gal{'+' + str(8 * j) if j else ''}]," in pre
    assert f"st.param.b64 \t[__hb_p2], {16 | 16 << 8 | 16 << 16 | 16 << 24};" in pre   # four 16-byte sites
    post = tail[call:alone]
    assert "setp.eq.s64 \t%__hb_ipb, %__hb_ix, -1;" in post                 # HB_GROUP_SLOW
    for j in range(4):
        assert f"shfl.sync.idx.b32 \t%__hb_ih, %__hb_ik, {j}, 31, -1;" in post
        assert f"shl.b32 \t%__hb_il, %__hb_gc, {31 - j};" in post
        assert re.search(rf"mov\.b64 \t%__hb_f{j}, \{{%__hb_ih, %__hb_ip\}};", post)
    assert ".local .align 8 .b8 \t__hb_gal[64];" in out


def test_no_group_call_for_a_lone_site_or_when_off():
    meta = group_meta()
    out = print_module(timing_pass(parse_module(loads(1)), meta))
    assert meta["timing"]["functions"][0]["group_calls"] == 0 and "__hb_issue_group, (" not in out
    assert "__hb_gal" not in out
    meta = dict(group_meta(), fast_groups=False)
    out = print_module(timing_pass(parse_module(loads(4)), meta))
    assert meta["timing"]["functions"][0]["group_calls"] == 0 and "__hb_issue_group, (" not in out
    assert meta["timing"]["fast_groups"] is False


def test_groups_assemble_with_every_helper_build():
    for hp in U.helper_paths():
        for src in (loads(4), loads(11, offset=True), loads(2, guard=False)):
            res = rewrite_text(src, helper=H.load_helper(hp))
            assert res.meta["timing"]["functions"][0]["issue_groups"] >= 1
            U.assemble(res.text)


# ---- loads moved with their issue (HBFCC_HOIST_LOADS, default on) ----------------------------------

def test_loads_move_with_their_hoisted_issue_and_their_default_values():
    src = loads(3).replace("    @%p1 ld.global.v4.b32 {%r24", "    mov.u32 %r24, 0;\n    @%p1 ld.global.v4.b32 {%r24")
    meta = dict(group_meta(), hoist_loads=True)
    out = print_module(timing_pass(parse_module(src), meta))
    rep = meta["timing"]["functions"][0]
    assert rep["moved_loads"] == 3 and meta["timing"]["hoist_loads"] is True
    inst = out[:out.index("$__hb_native:")]
    first_wait = inst.index("setp.eq.u64 \t%__hb_z, %__hb_f")
    lds = [m.start() for m in re.finditer(r"ld\.global\.v4\.b32", inst)]
    assert len(lds) == 3 and all(p < first_wait for p in lds)          # every load in flight before a wait
    assert inst.index("mov.u32 \t%r24, 0;") < lds[1]                    # its default value moved with it
    # HBFCC_HOIST_LOADS=0: the loads stay where the program put them
    meta = dict(group_meta(), hoist_loads=False)
    out = print_module(timing_pass(parse_module(src), meta))
    assert meta["timing"]["functions"][0]["moved_loads"] == 0


def test_a_store_between_keeps_the_load_in_place():
    src = loads(2).replace("    add.s64 %rd11, %rd4, 16;", "    st.global.u32 [%rd1+4], %r2;\n    add.s64 %rd11, %rd4, 16;")
    meta = dict(group_meta(), hoist_loads=True)
    print_module(timing_pass(parse_module(src), meta))
    assert meta["timing"]["functions"][0]["moved_loads"] < 2


def test_every_collective_of_the_inline_path_takes_the_group_mask_checked_per_lane():
    """wt/grp13 (runtime_cuda/src/hbf_ptx.cuh HBF_GROUP_SYNC, docs/design.md §3.8 "The group's mask"): the inline
    path's shuffles and votes, per site and in a group, all take %__hb_im, and every definition of %__hb_im is the
    active mask OR-ed with this lane's own bit (%lanemask_lt + 1): a mask ptxas cannot prove warp-uniform, so it checks
    every lane's mask at each collective instead of one lane's (the form that counted and read across two groups of
    one warp on the H100, stop 48)."""
    outs = [rewrite(STREAM), print_module(timing_pass(parse_module(loads(4)), group_meta()))]
    for out in outs:
        colls = re.findall(r"^\s*(?:@\S+\s+)?(?:shfl|vote|match|redux|bar\.warp)\.sync\S*\s+([^;]*);", out, re.M)
        # -1: the group call's whole warp (after its partial-warp check), which the hardware checks exactly
        # (HBFCC_FULL_WARP's copies for a whole warp: test_full_warp.py)
        assert colls and all(c.split(",")[-1].strip() in ("%__hb_im", "-1") for c in colls), colls
        n = len(re.findall(r"\bactivemask\.b32\s+%__hb_im;", out))
        opaque = re.findall(r"activemask\.b32\s+%__hb_im;\s*\n\s*add\.u32\s+%__hb_il, %__hb_lmlt, 1;\s*\n"
                            r"\s*or\.b32\s+%__hb_im, %__hb_im, %__hb_il;", out)
        assert n >= 1 and len(opaque) == n
        assert not re.search(r"\bmov\.\w+\s+%__hb_im,", out)    # nothing else defines it
