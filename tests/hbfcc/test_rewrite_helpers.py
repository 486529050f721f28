"""Helper ABI constants and textual helper linking."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcommon.errors import ConfigError, RewriteError  # noqa: E402
from hbfcc import helpers as H  # noqa: E402
from hbfcc.passes.timing import prototypes  # noqa: E402
from hbfcc.ptx.printer import print_function  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

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


def test_flag_bits_match_hbf_abi_h():
    d = H.abi_defines()
    assert d["HBF_F_ACTIVE"] == H.F_ACTIVE and d["HBF_F_GENERIC"] == H.F_GENERIC
    assert d["HBF_F_WAIT_NOW"] == H.F_WAIT_NOW and d["HBF_F_NC"] == H.F_NC
    assert d["HBF_F_RELEASE"] == H.F_RELEASE and d["HBF_F_OP_MASK"] == 3
    ctl = (H.abi_header_path().parent / "hbf_ctl.h").read_text()
    for name, v in (("LOAD", H.F_OP_LOAD), ("STORE", H.F_OP_STORE), ("ATOMIC", H.F_OP_ATOMIC),
                    ("CPASYNC", H.F_OP_CPASYNC)):
        assert re.search(rf"#define HBF_OP_{name} {v}u\b", ctl), name
    assert H.abi_version() == d["HBF_HELPER_ABI_VERSION"]


def test_prototypes_follow_the_abi_header():
    header = H.abi_header_path().read_text()
    for f in prototypes():
        rets, params = H.ABI_SIGNATURES[f.name]
        assert tuple(int(p.type[2:]) for p in f.returns) == rets
        assert tuple(int(p.type[2:]) for p in f.params) == params
        assert f.linkage == (".weak",) and f.body is None
        assert f.name in header
        # the printed prototype declares the same widths as the documented one in helpers.PROTOTYPES
        widths = lambda txt: re.findall(r"\.b(\d+)", txt)  # noqa: E731
        assert widths(print_function(f)) == widths(H.PROTOTYPES[f.name])


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
    for name in H.ABI_SIGNATURES:
        assert re.search(rf"\.weak \.func\s*(\([^)]*\)\s*)?{name}\s*\(", t), name
    assert re.search(r"\.weak \.global \.align 8 \.u64 __hb_state;", t)
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


def test_split_top_level_items():
    items = H.split_top_level(Path(U.fixture_helper_ptx()).read_text())
    kinds = {(i.kind, i.name) for i in items}
    assert ("func", "__hb_issue") in kinds and ("var", "__hb_state") in kinds
    assert ("funcdecl", "vprintf") in kinds and ("var", "$str") in kinds


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
