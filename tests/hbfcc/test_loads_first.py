"""HBFCC_LOADS_FIRST (default 0; 1: groups of at most 4 sites; all: every group; issue 13): an issue group's loads -- moved with their hoisted issues
(HBFCC_HOIST_LOADS) -- placed BEFORE the group's timing code instead of after it, so they are in flight while that
code runs (stop 52's ncu: ~190 dependent instructions a group on the stream reduce, the loads waiting behind them).
The same program: the timing code touches no program memory and reads only hbfcc's own copies of the addresses
and guards; each value's modeled time is still enforced at its use (the wait). In larger groups the loads'
registers, live across the group's helper calls, cost occupancy (H100, stop 53: the stream reduce x1.84 -> x1.60 with
its 2-site groups, the unrolled reduce's 8-site groups 168 -> 234 registers, x1.75 -> x2.26), so the default acts
on groups of at most T.SMALL_GROUP_SITES sites and `all` on every group. Off by default: in the consume probe (a
load, 20 us of independent work, then the use) the instrumented build's work grew by ~0.7 us with it -- the load's
latency exposed at the group, even where nothing is registered (docs/RESULTS.md "Stop 53"). Since stop 54 the loads
go after the group's band check, clock read and until check (its rare ask: a call, which waits for every load in
flight, bench/sass_ctrl.py) and before the rest."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import hbfcc_testutil as U  # noqa: E402
from test_merge_loads import VEC, run_pass  # noqa: E402

from hbfcc import helpers as H  # noqa: E402
from hbfcc.passes import timing as T  # noqa: E402
from hbfcc.ptx.model import Instruction  # noqa: E402
from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402


def _loop(out: str) -> str:
    return out[out.index(".visible .entry"):]


def _order(out: str) -> tuple[int, int]:
    """(position of the first program load -- the fixture's vector loads, not the prologue's loads of hbfcc's own
    words --, of the first %globaltimer read after the prologue) in the entry."""
    body = _loop(out)
    first_load = body.index("ld.global.v4.b32")
    start = body.index("$L__BB0_") if "$L__BB0_" in body else 0
    return first_load, body.index("%globaltimer", start)


def test_the_group_loads_go_first_and_nothing_else_changes():
    off, f_off = run_pass(VEC, loads_first="0")
    on, f_on = run_pass(VEC, loads_first="all")
    assert f_off["loads_first"] == 0 and f_on["loads_first"] == f_on["grouped_issues"] > 0
    a, b = _order(off)
    assert a > b                                    # today: the group's timing code, then its loads
    body = _loop(on)
    start = body.index("$L__BB0_") if "$L__BB0_" in body else 0
    first_load, clock = body.index("ld.global.v4.b32"), body.index("%globaltimer", start)
    ask = body.index("__hb_inline_until", start)
    rest = body.index("[__hb_cdesc+104]", start)                     # the read delay: the group's deadline
    # the band check, the clock and the until check with its ask, then the loads, then the rest of the timing code:
    # an ask (a call: it waits for every load in flight) never waits for the group's own loads (stop 54)
    assert clock < ask < first_load < rest
    # the same statements, only in another order -- but for the any-vote carried across the loads (R_GW)
    gw = [ln for ln in on.splitlines() if T.R_GW in ln or "$__hb_L" in ln]
    assert gw and all(T.R_GW not in ln for ln in off.splitlines())
    strip = lambda text: sorted(ln for ln in text.splitlines() if T.R_GW not in ln and "$__hb_L" not in ln)  # noqa: E731
    assert strip(off) == strip(on)


def test_only_when_every_site_moved_its_load_and_no_load_writes_hbfcc_registers():
    ok = T._FunctionRewriter._loads_first_ok
    ld = parse_module(""".version 8.7
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<4>;
    .reg .b64 %__hb_x_b64_<2>;
    .reg .b32 %__hb_ih;
    ld.global.u32 %r1, [%__hb_x_b64_0];
    ld.global.u32 %__hb_ih, [%__hb_x_b64_0];
    ret;
}
""")
    fn = [it for it in ld.items if getattr(it, "is_entry", False)][0]
    body = [st for st in fn.body if type(st) is Instruction and st.opcode == "ld"]
    assert ok([body[0]], ["site"]) is True
    assert ok([body[0]], ["site", "site"]) is False          # a site whose load was not moved: keep the order
    assert ok([body[1]], ["site"]) is False                  # a load writing an hbfcc register: keep the order
    assert ok([], ["site"]) is False


def test_the_knob_reaches_the_pass_and_the_build_assembles(monkeypatch):
    monkeypatch.setenv("HBFCC_LOADS_FIRST", "all")
    res = rewrite_text(VEC, filename="v.ptx", helper=H.load_helper(U.real_helper_ptx() or U.fixture_helper_ptx()))
    assert res.meta["timing"]["loads_first"] == T.GROUP_MAX and res.meta["timing"]["functions"][0]["loads_first"] > 0
    U.assemble(res.text)
    monkeypatch.setenv("HBFCC_LOADS_FIRST", "0")
    res = rewrite_text(VEC, filename="v.ptx", link=False)
    assert res.meta["timing"]["loads_first"] == 0 and res.meta["timing"]["functions"][0]["loads_first"] == 0
    monkeypatch.setenv("HBFCC_LOADS_FIRST", "1")     # groups of at most SMALL_GROUP_SITES sites
    res = rewrite_text(VEC, filename="v.ptx", link=False)
    assert res.meta["timing"]["loads_first"] == T.SMALL_GROUP_SITES
    monkeypatch.delenv("HBFCC_LOADS_FIRST")         # the default: off (the consume probe's latency, RESULTS stop 53)
    res = rewrite_text(VEC, filename="v.ptx", link=False)
    assert res.meta["timing"]["loads_first"] == 0


def test_scope_1_is_groups_of_at_most_four_sites():
    _, f = run_pass(VEC, loads_first="1")            # one group of 8 sites: too large for the default
    assert (f["issue_groups"], f["grouped_issues"], f["loads_first"]) == (1, 8, 0)
    _, f = run_pass(VEC, loads_first="all")
    assert f["loads_first"] == 8
    add = (U.REPO / "tests" / "fixtures" / "triton" / "vector_add_f32.ptx").read_text()   # a group of 4: moved
    _, f = run_pass(add, loads_first="1")
    assert (f["issue_groups"], f["grouped_issues"], f["loads_first"]) == (1, 4, 4)


def test_a_bad_scope_is_an_error():
    with pytest.raises(Exception, match="0, 1 or all"):
        T.group_scope("2")


FIXTURES = ("vector_add_f32", "softmax_row", "layernorm_fwd", "flash_attn_fwd_d64", "embedding_gather",
            "cross_entropy", "gelu_swiglu_evict", "dropout_philox")


@pytest.mark.parametrize("name", FIXTURES)
def test_triton_fixtures_rewrite_and_assemble_with_loads_first(name, monkeypatch):
    """The knob on every group (and HBFCC_FULL_WARP too) over Triton's kernels: the rewrite assembles (all 58 fixtures did on 2026-12-07, 43 of them with
    loads placed first; these eight here)."""
    path = U.REPO / "tests" / "fixtures" / "triton" / f"{name}.ptx"
    if not path.is_file():
        pytest.skip(f"no fixture {name}")
    monkeypatch.setenv("HBFCC_LOADS_FIRST", "all")
    monkeypatch.setenv("HBFCC_FULL_WARP", "all")
    res = rewrite_text(path.read_text(), filename=path.name,
                       helper=H.load_helper(U.real_helper_ptx() or U.fixture_helper_ptx()))
    U.assemble(res.text)


@pytest.mark.parametrize("seed", range(4))
def test_the_loads_first_group_counts_what_the_group_counts(seed):
    """The group with its loads inside (after the band check, the clock and the until check) run for a whole warp on
    test_merge_loads' host interpreter (the program's loads, which write no hbfcc register, left out): the same
    counts and futures as the group without them; every program load sits between the any-vote's copy into R_GW
    and the branch on it."""
    import random

    from test_merge_loads import BASE, scalar_loads, totals, warp_run
    rng = random.Random(seed)
    src = scalar_loads()
    off, _ = run_pass(src, loads_first="0")
    on, f = run_pass(src, loads_first="all")
    assert f["loads_first"] == 8
    lines = [" ".join(ln.split()) for ln in _loop(on).splitlines()]
    mov = next(i for i, ln in enumerate(lines) if ln.startswith(f"mov.pred {T.R_GW}"))
    br = next(i for i, ln in enumerate(lines) if ln.startswith(f"@!{T.R_GW} bra"))
    loads = [i for i, ln in enumerate(lines[:br + 1]) if ln.startswith("@%p") and "ld.global" in ln]
    assert len(loads) == 8 and all(mov < i < br for i in loads)        # (the native entry's copies come after)
    no_loads = "\n".join(ln for ln in on.splitlines() if "ld.global.b16" not in ln)
    base = (lambda ln: BASE + 4096 + 16 * ln)
    guards = [[rng.random() < 0.7 for _ in range(8)] for _ in range(32)]
    guards[rng.randrange(32)][0] = True                               # a lane accesses: the group's path runs
    R0, R1 = warp_run(off, base, guards), warp_run(no_loads, base, guards)
    assert R0[0]["%__hb_ipa"] is True and R1[0]["%__hb_ipa"] is True
    assert totals(R1) == totals(R0)
    for r0, r1 in zip(R0, R1):
        assert all(r1[f"%__hb_f{k}"] == r0[f"%__hb_f{k}"] for k in range(8))
