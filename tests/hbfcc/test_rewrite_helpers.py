"""Helper ABI facts (hbfcommon.abi against hbf_abi.h) and helper linking (hbfcc.link)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcommon import abi  # noqa: E402
from hbfcommon.errors import ConfigError, RewriteError  # noqa: E402
from hbfcc import helpers as H  # noqa: E402
from hbfcc import link as L  # noqa: E402
from hbfcc.passes.timing import prototypes  # noqa: E402
from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.ptx.model import Function, VarDecl  # noqa: E402
from hbfcc.ptx.printer import print_function  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

ABI_H = U.REPO / "runtime_cuda" / "include" / "hbf_abi.h"
CTL_H = ABI_H.with_name("hbf_ctl.h")


def _defines(path: Path) -> dict[str, int]:
    """``#define NAME value`` integer constants of a C header."""
    out: dict[str, int] = {}
    for m in re.finditer(r"^#define\s+(HBF_\w+)\s+\(?\s*(0x[0-9a-fA-F]+|\d+)u?(?:ll|ull)?\s*(?:<<\s*(\d+))?\)?"
                         r"\s*(?:/[*/]|$)", path.read_text(), re.M):
        out[m.group(1)] = int(m.group(2), 0) << int(m.group(3) or 0)
    return out


def _header_prototypes() -> dict[str, tuple[list[tuple[int, str]], list[tuple[int, str]]]]:
    """The prototypes hbf_abi.h documents: name -> ([(width, name)] returns, [(width, name)] params)."""
    text = re.sub(r"\n\s*\*\s*", " ", ABI_H.read_text())
    out = {}
    for m in re.finditer(r"\.weak \.func\s*(?:\((.*?)\))?\s*(__hb_\w+)\((.*?)\);", text):
        ps = lambda t: [(int(w), n) for w, n in re.findall(r"\.param \.b(\d+) (\w+)", t or "")]  # noqa: E731
        out[m.group(2)] = (ps(m.group(1)), ps(m.group(3)))
    return out

KERNEL = """.version 9.0
.target sm_90a
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);
.global .align 1 .b8 $str[3] = {104, 105, 0};
.visible .entry k(.param .u64 k_p)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [k_p];
    ld.global.u32 %r1, [%rd1];
    st.global.u32 [%rd1+4], %r1;
    ret;
}
"""


def test_abi_facts_match_hbf_abi_h():
    d = _defines(ABI_H)
    assert d["HBF_HELPER_ABI_VERSION"] == abi.HBF_HELPER_ABI_VERSION
    for name in ("HBF_F_OP_MASK", "HBF_F_ACTIVE", "HBF_F_GENERIC", "HBF_F_WAIT_NOW", "HBF_F_NC", "HBF_F_RELEASE",
                 "HBF_FUTURE_TICKET_BIT"):
        assert d[name] == getattr(abi, name), name
    c = _defines(CTL_H)
    for name in ("HBF_OP_LOAD", "HBF_OP_STORE", "HBF_OP_ATOMIC", "HBF_OP_CPASYNC"):
        assert c[name] == getattr(abi, name) and c[name] & ~abi.HBF_F_OP_MASK == 0, name
    header = ABI_H.read_text()
    for g in (abi.STATE_GLOBAL, abi.KSLOT_BASE_GLOBAL):
        assert re.search(rf"\.visible \.global \.align \d+ \.u\d+ {g};", header), g


def test_prototypes_follow_the_abi_header():
    documented = _header_prototypes()
    assert list(documented) == list(abi.HELPERS)
    for f in prototypes():
        sig = abi.HELPERS[f.name]
        assert (list(sig.returns), list(sig.params)) == documented[f.name]
        assert tuple(int(p.type[2:]) for p in f.returns) == sig.widths[0]
        assert tuple(int(p.type[2:]) for p in f.params) == sig.widths[1]
        assert tuple(p.name for p in f.params) == tuple(n for _, n in sig.params)
        assert f.linkage == (".weak",) and f.body is None
        assert L.signature_widths(parse_module(".version 8.0\n.target sm_90a\n.address_size 64\n"
                                               + print_function(f)).function(f.name)) == sig.widths


@pytest.mark.parametrize("which", ["fixture", "real"])
def test_link_renames_private_symbols_and_assembles(which):
    path = U.fixture_helper_ptx() if which == "fixture" else U.real_helper_ptx()
    if path is None:
        pytest.skip("real helper PTX not built")
    helper = H.load_helper(path)
    res = rewrite_text(KERNEL, helper=helper)
    t = res.text
    # the module's own $str is untouched; the helper's $str (fixture: printf) became private
    assert len(re.findall(r"\$str\[3\]\s*=\s*\{\s*104,\s*105,\s*0\s*\}", t)) == 1
    assert not re.search(r"\.visible\s+\.(func|global)\s+(\(.*\)\s*)?__hb_", t)
    m = parse_module(t)
    # the helper functions the module reaches (hbfcc.link.closure), each defined once and weak; the
    # ABI functions it does not reach are neither defined nor declared (ptxas refuses a weak prototype
    # without its definition)
    reached = L.closure(parse_module(rewrite_text(KERNEL, helper=helper, link=False).text), helper)
    assert {"__hb_issue", "__hb_wait", "__hb_kernel_enter", "__hb_kernel_exit"} <= reached
    for name in abi.HELPERS:
        defs = [f for f in m.functions() if f.name == name and f.body is not None]
        if name in reached:
            assert len(defs) == 1 and defs[0].linkage == (".weak",), name
        else:
            assert not [f for f in m.functions() if f.name == name], name
    assert sorted(reached & {f.name for f in helper.functions}) == res.meta["link"]["linked"]
    state = [g for g in m.globals() if any(d.name == abi.STATE_GLOBAL for d in g.decls)]
    assert [(g.linkage, g.attrs, g.type) for g in state] == [((".weak",), (".align 8",), ".u64")]
    # the module declares vprintf already: the helper's declaration is not repeated
    assert len(re.findall(r"\.extern\s+\.func\s*\(\s*\.param\s+\.b32\s+func_retval0\s*\)\s*vprintf", t)) == 1
    if which == "fixture":
        assert "__hb_l_str" in t and "__hb_l__ZN" in t
    assert not re.search(r"^\s*\.(loc|file)\b", t.split("---- hbfcc: helper module")[1], re.M)
    U.assemble(t)


def _refused_function(tmp_path, text: str) -> str:
    """Load ``text`` as the helper module: it must be refused; the function the error names."""
    p = tmp_path / "bad.ptx"
    p.write_text(text)
    with pytest.raises(RewriteError) as e:
        H.load_helper(str(p))
    return e.value.fields["function"]


def test_signature_mismatch_refused(tmp_path):
    bad = Path(U.fixture_helper_ptx()).read_text().replace(
        ".visible .func __hb_wait(\n\t.param .b64 __hb_wait_param_0,\n\t.param .b32 __hb_wait_param_1",
        ".visible .func __hb_wait(\n\t.param .b32 __hb_wait_param_0,\n\t.param .b32 __hb_wait_param_1")
    assert "param .b32 __hb_wait_param_0" in bad
    assert _refused_function(tmp_path, bad) == "__hb_wait"


def test_missing_function_refused(tmp_path):
    text = Path(U.fixture_helper_ptx()).read_text()
    cut = re.sub(r"\.visible \.func __hb_kernel_exit\(.*?\n\}\n", "", text, flags=re.S)
    assert "__hb_kernel_exit(" not in cut
    assert _refused_function(tmp_path, cut) == "__hb_kernel_exit"


def test_missing_helper_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError):
        H.load_helper(str(tmp_path / "none.ptx"))


def test_prepared_helper_items():
    h = H.load_helper(U.fixture_helper_ptx())
    assert {f.name for f in h.functions} >= set(abi.HELPERS)
    assert {d.name for g in h.globals for d in g.decls} >= {abi.STATE_GLOBAL, "__hb_l_str"}
    assert [e.name for e in h.externs if type(e) is Function] == ["vprintf"]
    assert all(type(g) is VarDecl and ".visible" not in g.linkage for g in h.globals)
    assert h.defined == {f.name for f in h.functions} | {d.name for g in h.globals for d in g.decls}
    assert all(n.startswith(abi.HELPER_PREFIX) for n in h.defined)     # the rest was renamed __hb_l_*


def test_link_refuses_a_module_with_some_helpers_and_keeps_a_linked_one():
    h = H.load_helper(U.fixture_helper_ptx())
    linked = parse_module(rewrite_text(KERNEL, helper=h).text)
    assert L.link(linked, h) is linked                      # everything there: linked before
    part = linked.__class__(linked.version, linked.target, linked.address_size,
                            tuple(it for it in linked.items if not (type(it) is Function and it.name == "__hb_wait"
                                                                    and it.body is not None)))
    with pytest.raises(RewriteError) as e:
        L.link(part, h)
    assert "__hb_issue" in e.value.fields["names"]


def test_helper_debug_lines_dropped(tmp_path):
    """A helper built with -lineinfo carries .file/.loc whose file indices belong to its own
    compilation; linking drops them (and the result assembles)."""
    import subprocess
    out = tmp_path / "h_lineinfo.ptx"
    subprocess.run([U.tool("nvcc"), "-arch=compute_90a", "-rdc=true", "-ptx", "-lineinfo",
                    str(U.HERE / "helper_fixture.cu"), "-o", str(out)], check=True, capture_output=True)
    assert re.search(r"^\s*\.loc\b", out.read_text(), re.M)
    t = rewrite_text(KERNEL, helper=H.load_helper(str(out))).text
    assert not re.search(r"^\s*\.(loc|file)\b", t, re.M)
    U.assemble(t)
