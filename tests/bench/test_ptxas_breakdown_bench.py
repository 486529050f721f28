"""CPU tests of bench/hbfcc_ptxas_breakdown.py's module surgery: the do-nothing helper bodies (every
helper function replaced, the kernel untouched, ptxas accepts it and the helpers' code is gone), one
helper stubbed at a time, the helper library alone behind one entry, the debug strip. ptxas needed."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

import ptx_corpus  # noqa: E402

hbfcc_ptxas_breakdown = pytest.importorskip("hbfcc_ptxas_breakdown")   # needs triton (the buildcost kernels)
from hbfcc import helpers as H  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

B = hbfcc_ptxas_breakdown
FIXTURE = ROOT / "tests" / "fixtures" / "triton" / "vector_add_f32.ptx"


@pytest.fixture(scope="module")
def hb() -> str:
    if not H.default_helper_path().is_file():
        pytest.skip("helper build missing (make helpers-ptx)")
    return rewrite_text(FIXTURE.read_text(), filename="vector_add_f32.ptx").text


def _assemble(tmp_path: Path, text: str, name: str) -> str:
    ptxas = ptx_corpus.ptxas_path()
    if not ptxas:
        pytest.skip("no ptxas")
    src = tmp_path / f"{name}.ptx"
    src.write_text(text)
    cp = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", str(src), "-o", str(tmp_path / f"{name}.cubin")],
                        capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr[-2000:]
    return cp.stderr


def test_stubbed_replaces_every_helper_body_only(hb, tmp_path):
    funcs = B.helper_functions(hb)
    assert "__hb_issue" in funcs and "__hb_wait" in funcs
    for opaque in (True, False):
        st = B.stubbed(hb, None, opaque=opaque)
        after = B.helper_functions(st)
        assert set(after) == set(funcs)
        assert all(m.group("body").count("\n") <= 12 for m in after.values())
        # the kernel's text is untouched
        entry = re.compile(r"^\.visible \.entry.*?^\}\n", re.M | re.S)
        assert entry.search(st).group(0) == entry.search(hb).group(0)
        log = _assemble(tmp_path, st, f"stub{int(opaque)}")
        assert "Compiling entry function" in log
    assert "ld.volatile.global.u64" in B.stubbed(hb, None, opaque=True)


def test_one_helper_stubbed(hb):
    st = B.stubbed(hb, {"__hb_issue"})
    a, b = B.helper_functions(hb), B.helper_functions(st)
    assert b["__hb_issue"].group("body").count("\n") < 12 < a["__hb_issue"].group("body").count("\n")
    assert all(a[n].group(0) == b[n].group(0) for n in a if n != "__hb_issue")


def test_library_alone_calls_every_exported_helper(hb, tmp_path):
    lib = B.library_alone(hb)
    assert ".entry __hb_lib_all" in lib and ".entry add_kernel" not in lib
    exported = [n for n in B.helper_functions(hb) if n in B.abi.HELPERS]
    for n in exported:
        assert re.search(rf"call\.uni (\([^)]*\), )?{n}, ", lib), n
    _assemble(tmp_path, lib, "lib")
    one = B.library_alone(hb, only="__hb_wait")
    entry = re.search(r"^\.visible \.entry __hb_lib_all.*?^\}\n", one, re.M | re.S).group(0)
    assert re.findall(r"call\.uni (?:\([^)]*\), )?(\w+),", entry) == ["__hb_wait"]
    _assemble(tmp_path, one, "one")


def test_strip_debug(hb):
    assert ".loc" in hb and ".section .debug_info" in hb
    s = B.strip_debug(hb)
    assert not re.search(r"^\s*\.(loc|file)\b", s, re.M) and ".debug_info" not in s
    assert B.helper_functions(s).keys() == B.helper_functions(hb).keys()
