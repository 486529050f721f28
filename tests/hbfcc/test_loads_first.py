"""HBFCC_LOADS_FIRST (default 0, issue 13): an issue group's loads -- moved with their hoisted issues
(HBFCC_HOIST_LOADS) -- placed BEFORE the group's timing code instead of after it, so they are in flight while that
code runs (stop 52's ncu: ~190 dependent instructions a group on the stream reduce, the loads waiting behind them).
The same program: the timing code touches no program memory and reads only hbfcc's own copies of the addresses
and guards; each value's modeled time is still enforced at its use (the wait). Off until a card has measured it (its
loads' registers then live across the group's helper calls: some kernels need more, docs/RESULTS.md "Stop 52")."""
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
    off, f_off = run_pass(VEC)
    on, f_on = run_pass(VEC, loads_first=True)
    assert f_off["loads_first"] == 0 and f_on["loads_first"] == f_on["grouped_issues"] > 0
    a, b = _order(off)
    assert a > b                                    # today: the group's timing code, then its loads
    a, b = _order(on)
    assert a < b                                    # the loads, then the timing code
    # the same statements, only in another order
    assert sorted(off.splitlines()) == sorted(on.splitlines())


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
    monkeypatch.setenv("HBFCC_LOADS_FIRST", "1")
    res = rewrite_text(VEC, filename="v.ptx", helper=H.load_helper(U.real_helper_ptx() or U.fixture_helper_ptx()))
    assert res.meta["timing"]["loads_first"] is True and res.meta["timing"]["functions"][0]["loads_first"] > 0
    U.assemble(res.text)
    monkeypatch.delenv("HBFCC_LOADS_FIRST")
    res = rewrite_text(VEC, filename="v.ptx", link=False)
    assert res.meta["timing"]["loads_first"] is False and res.meta["timing"]["functions"][0]["loads_first"] == 0


FIXTURES = ("vector_add_f32", "softmax_row", "layernorm_fwd", "flash_attn_fwd_d64", "embedding_gather",
            "cross_entropy", "gelu_swiglu_evict", "dropout_philox")


@pytest.mark.parametrize("name", FIXTURES)
def test_triton_fixtures_rewrite_and_assemble_with_loads_first(name, monkeypatch):
    """The knob on over Triton's kernels: the rewrite assembles (all 58 fixtures did on 2026-12-07, 43 of them with
    loads placed first; these eight here)."""
    path = U.REPO / "tests" / "fixtures" / "triton" / f"{name}.ptx"
    if not path.is_file():
        pytest.skip(f"no fixture {name}")
    monkeypatch.setenv("HBFCC_LOADS_FIRST", "1")
    res = rewrite_text(path.read_text(), filename=path.name,
                       helper=H.load_helper(U.real_helper_ptx() or U.fixture_helper_ptx()))
    U.assemble(res.text)
