"""Admission: per-module reports and the cross-module resolution at link time."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import artifact  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

HDR = ".version 9.0\n.target sm_90a\n.address_size 64\n"


def module(body: str) -> dict:
    res = rewrite_text(HDR + body, link=False)
    return artifact.build(path="m.ptx", result=res, ptxas=None, before=None, after=None)


CALLER = "\n.extern .func (.param .b32 rv) ext_a(.param .b64 p);\n" + U.call_entry("k", "ext_a")

CALLEE_OK = """
.extern .func (.param .b32 rv) ext_b(.param .b64 p);
.visible .func (.param .b32 rv) ext_a(.param .b64 p)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    ld.global.u32 %r1, [%rd1];
""" + U.call_block("ext_b", result=None) + """    st.param.b32 [rv], %r1;
    ret;
}
"""

CALLEE_B_REC = """
.extern .func (.param .b32 rv) ext_a(.param .b64 p);
.visible .func (.param .b32 rv) ext_b(.param .b64 p)
{
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
""" + U.call_block("ext_a", result=None) + """    ret;
}
"""

# a refused form (TMA im2col: hbfcc/passes/tma.py refuses it with a reason)
CALLEE_B_TMA = """
.visible .func (.param .b32 rv) ext_b(.param .b64 p)
{
    .reg .b32 %r<4>;
    .reg .b16 %rs<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    cp.async.bulk.tensor.3d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r2, %r2}], [%r3], {%rs1};
    ret;
}
"""


def test_module_level_external_call_not_admitted():
    d = module(CALLER)
    k = d["kernels"][0]
    assert not k["admitted"] and k["external_calls"] == ["ext_a"]
    assert "ext_a" in k["not_admitted_reasons"][0]


def test_link_resolves_mutual_recursion_across_modules():
    link = artifact.resolve_link([module(CALLER), module(CALLEE_OK), module(CALLEE_B_REC)], output="app", argv=[])
    assert link["kernels"] == [{"name": "k", "admitted": True, "reason": ""}]


def test_link_missing_callee_not_admitted():
    link = artifact.resolve_link([module(CALLER), module(CALLEE_OK)], output="app", argv=[])
    assert link["kernels"][0]["admitted"] is False
    link = artifact.resolve_link([module(CALLER)], output="app", argv=[])
    assert "ext_a, defined in no module" in link["kernels"][0]["reason"]


def test_link_refused_callee_propagates():
    link = artifact.resolve_link([module(CALLER), module(CALLEE_OK), module(CALLEE_B_TMA)], output="app", argv=[])
    k = link["kernels"][0]
    assert k["admitted"] is False and "ext_a" in k["reason"]
    assert link["admitted"] is False


def test_artifact_validates_against_schema():
    d = module(CALLEE_B_TMA)
    artifact.validate(d)
    f = d["functions"][0]
    assert f["refused"][0]["class"] == "tma.load.tensor.3d" and "im2col" in f["refused"][0]["reason"]
    assert d["schema"] == "hbfcc.admission" and d["schema_version"] == artifact.SCHEMA_VERSION


def test_the_one_fixpoint():
    """hbfcc.admission.admit: greatest fixpoint (a recursive pair stays admitted), the first failing
    callee in call order names the reason, system calls pass, the caller's rule judges the rest."""
    from hbfcc.admission import INDIRECT, admit, not_seen_by_rewrite
    base = {"k": True, "a": True, "b": True, "bad": False, "c": True, "d": True}
    calls = {"k": ["vprintf", "a"], "a": ["b"], "b": ["a"], "c": ["a", "bad", "zz"], "d": [INDIRECT]}
    assert admit(base, calls) == {"c": "calls bad, which is not admitted", "d": "indirect call (callee not seen)"}
    calls["a"] = ["zz", "b"]
    why = admit(base, calls)
    assert why["a"] == not_seen_by_rewrite("zz") and why["b"] == why["k"] == "calls a, which is not admitted"
    assert admit(base, calls, lambda c: None) == {"c": "calls bad, which is not admitted",
                                                  "d": "indirect call (callee not seen)"}


def test_link_reason_is_the_first_failing_callee_in_call_order():
    """resolve_link keeps the callees in call order (it used a set: the reason depended on hashing)."""
    k = module(CALLER.replace("call (pr), ext_a, (pa);", "call (pr), ext_a, (pa);\n    call (pr), ext_z, (pa);")
               .replace(".extern .func (.param .b32 rv) ext_a(.param .b64 p);",
                        ".extern .func (.param .b32 rv) ext_a(.param .b64 p);\n"
                        ".extern .func (.param .b32 rv) ext_z(.param .b64 p);"))
    assert k["kernels"][0]["calls"] == ["ext_a", "ext_z"]
    link = artifact.resolve_link([k], output="a.out", argv=[])
    assert link["kernels"] == [{"name": "k", "admitted": False, "reason": "calls ext_a, defined in no module of this link"}]
