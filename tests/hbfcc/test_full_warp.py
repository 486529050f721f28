"""HBFCC_FULL_WARP (default 1 since stop 53; issue 13): an inline issue path's and an issue group's warp votes and
shuffles take the group's own mask (R_IM: activemask | the lane's own bit), which ptxas cannot prove warp-uniform, so
it checks every lane's mask before each collective (REDUX.OR, R2UR, BRA.DIV, MATCH.ANY: ~3-5 SASS on the path's
dependent chain; docs/design.md §3.8 "The group's mask" says why the check is needed). With the knob the collectives
are emitted twice: where R_IM is the whole warp, with the constant full mask (no check), else as before. H100, stop
53: the latency probe's consume +160 -> +128 ns; the stream copy (8-site groups, with `all`) x1.36 -> x1.29, but the
unrolled reduce's 8-site groups 168 -> 214 registers (x1.75 -> x2.06), hence the default's scope (single sites and
groups of at most 4 sites)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import hbfcc_testutil as U  # noqa: E402
from test_merge_loads import VEC, run_pass  # noqa: E402

from hbfcc import helpers as H  # noqa: E402
from hbfcc.passes import timing as T  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

TRITON = U.REPO / "tests" / "fixtures" / "triton"
COLLECTIVE = re.compile(r"\t(?:vote\.sync\.(?:all|any)\.pred|vote\.sync\.ballot\.b32|shfl\.sync\.idx\.b32) \t[^;]*, "
                        r"(%__hb_im|0xffffffff);")


def masks(out: str) -> list[str]:
    return COLLECTIVE.findall(out)


def copies(out: str) -> list[tuple[str, str]]:
    """Each path's two copies: (checked, full), from the branch on R_IFW to the copy's closing vote branch."""
    res = []
    for m in re.finditer(r"@%__hb_ifw bra \t(\$\w+);\n", out):
        lfull = m.group(1)
        checked = out[m.end():out.index("\tbra.uni", m.end())]
        start = out.index(f"{lfull}:\n", m.end()) + len(lfull) + 2
        full = out[start:out.index("\n", out.index("@!%__hb_ipa bra", start)) + 1]
        res.append((checked, full))
    return res


def add() -> str:
    return (TRITON / "vector_add_f32.ptx").read_text()


def test_off_nothing_changes():
    out, f = run_pass(add(), full_warp="0")
    assert f["full_warp_paths"] == 0 and "%__hb_ifw" not in out and "0xffffffff" not in "".join(masks(out))
    assert set(masks(out)) == {"%__hb_im"}


def test_on_each_path_has_a_full_mask_copy_with_the_same_statements():
    out, f = run_pass(add(), full_warp="1")
    cs = copies(out)
    assert f["full_warp_paths"] == len(cs) > 0
    for checked, full in cs:
        # the same statements but for the mask: the same values, counts and futures
        assert checked.replace("%__hb_im;", "0xffffffff;").strip() == full.strip()
        assert masks(checked) and set(masks(checked)) == {"%__hb_im"} and set(masks(full)) == {"0xffffffff"}
        assert len(masks(checked)) == len(masks(full))
    # the decision: the group's mask is the whole warp
    assert out.count("setp.eq.b32 \t%__hb_ifw, %__hb_im, 0xffffffff;") == len(cs)
    # the first vote of a group (before its until ask) stays checked: one ask call site per group
    off, _ = run_pass(add(), full_warp="0")
    assert out.count("call.uni") == off.count("call.uni") and out.count("call ") == off.count("call ")


def test_the_default_scope_leaves_large_groups_checked():
    # one group of 8 sites; the single-site paths (its 8 sites' own, where the group's vote fails, and the store)
    # always have the copy
    out, f = run_pass(VEC, full_warp="1")
    assert f["issue_groups"] == 1 and f["grouped_issues"] == 8 and f["full_warp_paths"] == f["sites"]
    out2, f2 = run_pass(VEC, full_warp="all")
    assert f2["full_warp_paths"] == f["sites"] + 1 == len(copies(out2))


def test_the_default_build_has_it(monkeypatch):
    monkeypatch.delenv("HBFCC_FULL_WARP", raising=False)
    res = rewrite_text(add(), filename="a.ptx", link=False)
    assert res.meta["timing"]["full_warp"] == T.SMALL_GROUP_SITES
    assert res.meta["timing"]["functions"][0]["full_warp_paths"] > 0


@pytest.mark.parametrize("name", ("vector_add_f32", "softmax_row", "layernorm_fwd", "flash_attn_fwd_d64",
                                  "embedding_gather", "cross_entropy"))
def test_triton_fixtures_assemble_with_registers_unchanged(name, monkeypatch):
    """Assembled by ptxas with the real helpers, the default scope leaves each kernel's register count as it was
    without the knob (the copies are exclusive paths; stop 53 measured this on the devpath kernels too)."""
    helper = H.load_helper(U.real_helper_ptx() or U.fixture_helper_ptx())
    text = (TRITON / f"{name}.ptx").read_text()
    regs = {}
    for v in ("0", "1"):
        monkeypatch.setenv("HBFCC_FULL_WARP", v)
        cp = U.assemble(rewrite_text(text, filename=f"{name}.ptx", helper=helper).text)
        regs[v] = [int(x) for x in re.findall(r"Used (\d+) registers", cp.stderr)]
    assert regs["1"] == regs["0"], regs
