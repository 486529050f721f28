"""Linking only the helper functions a module reaches (hbfcc.link.closure) changes no kernel's code.

For a few fixtures, the rewrite linked with the pruned helper and with the whole helper library
(``prune=False``, the link before issue 18) are assembled by ptxas, whole-program (Triton, nvcc
without -rdc) and relocatable (``-c``: -rdc builds), and compared function by function
(hbfcc.cubin.function_code: machine code bytes, relocations by symbol name, registers / stack frame
/ barriers): every function of the pruned build is identical in the full build, and what only the
full build has is helper functions the module does not reach. bench/hbfcc_buildcost.py runs the same
check over the whole corpus (docs/RESULTS.md, issue 18).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
import hbfcc_testutil as U  # noqa: E402
import ptx_corpus  # noqa: E402

from hbfcommon import abi  # noqa: E402
from hbfcc import cubin  # noqa: E402
from hbfcc import helpers as H  # noqa: E402
from hbfcc import link as L  # noqa: E402
from hbfcc.ptx import print_module  # noqa: E402
from hbfcc.ptx.parser import parse_module  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402


@pytest.fixture(scope="module")
def helper():
    p = U.real_helper_ptx()
    if p is None:
        pytest.skip("real helper PTX not built (make helpers-ptx)")
    return H.load_helper(p)


def _build(text: str, d: Path, tag: str, extra: tuple[str, ...]) -> Path:
    p, o = d / f"{tag}.ptx", d / f"{tag}.o"
    p.write_text(text)
    cp = subprocess.run([U.tool("ptxas"), "-arch=sm_90a", *extra, str(p), "-o", str(o)], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr[-3000:]
    return o


def _compare(text: str, helper, extra: tuple[str, ...]) -> tuple[dict, dict, set[str]]:
    pruned = rewrite_text(text, helper=helper)
    full = rewrite_text(text, helper=helper, prune=False)
    with tempfile.TemporaryDirectory() as d:
        a = cubin.function_code(_build(pruned.text, Path(d), "pruned", extra))
        b = cubin.function_code(_build(full.text, Path(d), "full", extra))
    assert cubin.code_differences(a, b, set(a)) == []
    only_full = set(b) - set(a)
    # only helper functions are left out, and ptxas's own routines (__cuda_sm20_div_u64, ...) that
    # only those called
    assert {n for n in only_full if not n.startswith("__cuda_")} <= {f.name for f in helper.functions}
    assert not only_full & set(pruned.meta["link"]["linked"])    # and none the module reaches
    return a, b, only_full


# (name, source): a Triton kernel with no issue groups (the group functions go), a TMA kernel with no
# access sites (only the kernel hooks are linked) and an nvcc module with function-scope .shared
# variables (ptxas's local symbol counters differ between the two builds)
CASES = [("triton", "inductor_00_triton_poi_fused_zeros_0"), ("triton", "tma_host_desc_copy"), ("cuda", "atomics")]


def _text(kind: str, name: str, tmp_path_factory) -> str:
    if kind == "triton":
        return ptx_corpus.triton_corpus()[name].read_text()
    if not ptx_corpus.nvcc_path():
        pytest.skip("nvcc not installed")
    return ptx_corpus.compile_cuda(ptx_corpus.cuda_sources()[name], tmp_path_factory.mktemp("cuda"),
                                   ptx_corpus.nvcc_path(), "").read_text()


@pytest.mark.parametrize("kind,name", CASES)
def test_pruned_link_builds_identical_code(kind, name, helper, tmp_path_factory):
    text = _text(kind, name, tmp_path_factory)
    a, _, _ = _compare(text, helper, ("-lineinfo",))       # whole program: helpers compiled into each kernel
    entries = {f.name for f in parse_module(text).functions() if f.is_entry and f.body is not None}
    assert entries <= set(a)
    _, _, only_full = _compare(text, helper, ("-c",))     # relocatable: every .weak function is compiled
    assert only_full, "the fixture no longer leaves a helper function out: pick one that does"


def test_closure_follows_calls_and_keeps_the_runtime_globals(helper):
    """A module whose code names only __hb_kernel_enter gets that function, what it calls, and every
    exported global the runtime binds by name; nothing else."""
    m = parse_module(".version 9.0\n.target sm_90a\n.address_size 64\n"
                     ".weak .func __hb_kernel_enter(.param .b32 k);\n"
                     ".visible .entry e()\n{\n\t{ .param .b32 p0; st.param.b32 [p0], 0;\n"
                     "\tcall.uni __hb_kernel_enter, (p0); }\n\tret;\n}\n")
    need = L.closure(m, helper)
    assert "__hb_kernel_enter" in need and "__hb_issue" not in need and "__hb_issue_group" not in need
    assert {abi.STATE_GLOBAL, abi.KSLOT_BASE_GLOBAL, abi.CDESC_GLOBAL} <= need
    refs = helper.ref_map
    assert all(refs.get(n, frozenset()) <= need for n in need)    # closed under references
    linked = L.link(m, helper)
    names = {f.name for f in linked.functions()}
    assert "__hb_issue" not in names                             # no prototype left without its definition
    assert L.link(linked, helper) is linked                      # linked before: left as it is
    U.assemble(print_module(linked))


def test_rdc_link_of_modules_with_different_helper_subsets(helper, tmp_path):
    """-rdc: nvlink links relocatable modules that each carry the (weak) helper functions they reach,
    different subsets (one calls __hb_issue_group, the other __hb_future_join): one copy of each,
    both kernels there, and no stack-size warning (the direct helper build has no indirect call; the
    flood of issue 18 came from the lean build's opaque calls, docs/hbfcc.md)."""
    tri = ptx_corpus.triton_corpus()
    objs, linked = [], []
    for name in ("inductor_00_triton_poi_fused_zeros_0", "tl_histogram"):
        r = rewrite_text(tri[name].read_text(), helper=helper)
        linked.append(set(r.meta["link"]["linked"]))
        objs.append(_build(r.text, tmp_path, name, ("-c",)))
    assert linked[0] != linked[1] and "__hb_issue_group" in linked[1] - linked[0]
    nvlink = U.tool("nvlink")
    out = tmp_path / "linked.cubin"
    cp = subprocess.run([nvlink, "-arch=sm_90a", *map(str, objs), "-o", str(out)], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    assert "warning" not in (cp.stderr + cp.stdout).lower(), cp.stderr
    code = cubin.function_code(out)
    assert {"triton_poi_fused_zeros_0", "histogram_tl", "__hb_issue", "__hb_issue_group"} <= set(code)


def test_artifact_records_the_linked_helper_functions(helper):
    from hbfcc import artifact
    from hbfcommon import artifact as contract
    r = rewrite_text(ptx_corpus.triton_corpus()["tma_host_desc_copy"].read_text(), helper=helper)
    doc = artifact.build(path="m.ptx", result=r, ptxas=None, before=None, after=None)
    contract.validate(doc)
    assert doc["helper"]["linked"] == r.meta["link"]["linked"]
    assert "__hb_kernel_enter" in doc["helper"]["linked"] and "__hb_issue" not in doc["helper"]["linked"]


# --------------------------------------------------------------------------------------------
# Soundness: what the closure must keep, and proof that the checks catch a needed definition pruned
# --------------------------------------------------------------------------------------------

def _build_helper(build: str) -> "L.HelperModule":
    from hbfcommon import resources
    p = resources.helper_ptx_path(build)
    if not p.is_file():
        pytest.skip(f"{build} helper PTX not built (make helpers-ptx)")
    return H.load_eidola_helper(str(p)) if build == "eidola" else H.load_helper(str(p))


def _assembles(text: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.ptx"
        p.write_text(text)
        return subprocess.run([U.tool("ptxas"), "-arch=sm_90a", *extra, str(p), "-o", str(Path(d) / "m.o")],
                              capture_output=True, text=True)


_BARE = ".version 9.0\n.target sm_90a\n.address_size 64\n.visible .entry e()\n{\n\tret;\n}\n"


@pytest.mark.parametrize("build", ["direct", "lean", "l2", "eidola"])
def test_every_global_the_runtime_binds_by_name_is_linked(build, tmp_path):
    """Every module global the runtime looks up with cuModuleGetGlobal (runtime_cuda/session.py,
    calibrate.py, eidola/replay.py) that a helper build defines is linked into a module whose code
    names none of them, and is in the assembled cubin's symbol table (what cuModuleGetGlobal finds)."""
    from hbfcommon import capacity
    runtime = {abi.STATE_GLOBAL, abi.KSLOT_BASE_GLOBAL, abi.CDESC_GLOBAL, abi.L2_HOOKS_GLOBAL,
               abi.EIDOLA_STATE_GLOBAL, capacity.CAP_TABLE_GLOBAL, capacity.CAP_COUNTERS_GLOBAL}
    helper = _build_helper(build)
    defined = runtime & helper.defined
    expect = {"direct": 5, "lean": 5, "l2": 6, "eidola": 1}[build]
    assert len(defined) == expect, sorted(defined)    # a build that stopped defining one: look at this list
    linked = L.link(parse_module(_BARE), helper)
    names = {d.name for it in linked.items if type(it).__name__ == "VarDecl" for d in it.decls}
    assert defined <= names, sorted(defined - names)
    p, o = tmp_path / "m.ptx", tmp_path / "m.cubin"
    p.write_text(print_module(linked))
    cp = subprocess.run([U.tool("ptxas"), "-arch=sm_90a", str(p), "-o", str(o)], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr[-3000:]
    with cubin._elf(o) as (_, symbols):
        syms = set(symbols)
    assert defined <= syms, sorted(defined - syms)


def _module_text(name: str = "tl_histogram") -> str:
    return ptx_corpus.triton_corpus()[name].read_text()


def test_transitive_step_is_needed_and_ptxas_says_so(helper):
    """Without the transitive step (a helper whose reference map is empty: only what the module names
    itself is linked), definitions the linked helper functions use are missing and ptxas refuses the
    module, whole-program and -c: the corpus assembly tests would catch a closure that lost an edge."""
    text = _module_text()
    shallow = replace(helper, refs=())
    good = rewrite_text(text, helper=helper)
    bad = rewrite_text(text, helper=shallow)
    g, b = parse_module(good.text), parse_module(bad.text)
    defs = lambda m: {f.name for f in m.functions() if f.body is not None} | {   # noqa: E731
        d.name for it in m.items if type(it).__name__ == "VarDecl" and ".extern" not in it.linkage for d in it.decls}
    lost = defs(g) - defs(b)
    assert lost and lost <= helper.defined, sorted(lost)
    for extra in ((), ("-c",)):
        assert _assembles(good.text, extra).returncode == 0
        cp = _assembles(bad.text, extra)
        assert cp.returncode != 0, f"ptxas accepted a module without {sorted(lost)[:5]}"


def _address_taken(helper) -> dict[str, set[str]]:
    """Per helper function: the helper functions whose address it takes (``mov.u64 %rd, f``), the
    targets of its indirect calls (``call %rd, ..., prototype``)."""
    fnames = {f.name for f in helper.functions}
    out: dict[str, set[str]] = {}
    for f in helper.functions:
        for i in f.instructions():
            if i.opcode == "mov":
                for o in i.operands:
                    if type(o).__name__ == "Symbol" and o.name in fnames:
                        out.setdefault(f.name, set()).add(o.name)
    return out


def test_lean_build_keeps_what_it_calls_through_function_pointers():
    """The lean build reaches its heavy paths through indirect calls: the callee's address is taken
    with ``mov`` and the call goes through the register. The closure follows the ``mov`` operand;
    a closure that followed only direct call targets would drop the callees and ptxas refuses it."""
    lean = _build_helper("lean")
    taken = _address_taken(lean)
    assert taken, "the lean build takes no function address any more: pick another case"
    text = _module_text()
    good = rewrite_text(text, helper=lean)
    kept = set(good.meta["link"]["linked"]) | {f.name for f in parse_module(good.text).functions() if f.body is not None}
    reached = {t for f, ts in taken.items() if f in kept for t in ts}
    assert reached and reached <= kept
    calls_only = replace(lean, refs=tuple((n, r - taken.get(n, set())) for n, r in lean.refs))
    bad = rewrite_text(text, helper=calls_only)
    bad_defs = {f.name for f in parse_module(bad.text).functions() if f.body is not None}
    assert reached - bad_defs, "the address-taken callees are reached some other way too: pick another case"
    assert _assembles(good.text).returncode == 0
    assert _assembles(bad.text).returncode != 0


def test_a_reference_the_parser_keeps_opaque_links_everything(helper, caplog):
    """A name the closure cannot follow (one in a .section's raw body) makes the link keep the whole
    helper, logged: never a module that lacks what it might use."""
    text = (".version 9.0\n.target sm_90a\n.address_size 64\n.visible .entry e()\n{\n\tret;\n}\n"
            ".section .nv_hb_table\n{\n.b64 __hb_issue_group\n}\n")
    m = parse_module(text)
    with caplog.at_level("WARNING", logger="hbfcc.link"):
        need = L.closure(m, helper)
    assert need == helper.defined
    assert "__hb_issue_group" in caplog.text and "whole" in caplog.text
    assert L.closure(parse_module(_BARE), helper) != helper.defined   # without it: pruned


def test_link_prune_knob_links_the_whole_library(helper, monkeypatch):
    """HBFCC_LINK_PRUNE=0 (the comparison builds of bench/hbfcc_buildcost.py) links every helper
    function; the default links the closure; the stage records which."""
    text = ptx_corpus.triton_corpus()["tma_host_desc_copy"].read_text()
    every = sorted(f.name for f in helper.functions)
    pruned = rewrite_text(text, helper=helper)
    assert pruned.meta["link"]["pruned"] is True and pruned.meta["link"]["linked"] != every
    monkeypatch.setenv("HBFCC_LINK_PRUNE", "0")
    full = rewrite_text(text, helper=helper)
    assert full.meta["link"]["pruned"] is False and full.meta["link"]["linked"] == every
