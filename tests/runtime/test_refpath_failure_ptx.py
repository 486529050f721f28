"""The failure policy of the device helpers, in the PTX both builds produce (direct and lean,
HBF_OOL_OPAQUE=1): terminal failures end the warp with `exit`, never `trap` (the context survives and the
runtime raises the recorded failure); HBF_FAIL_TRAP=1 still builds the old trap policy. The request
publication of the default build keeps the release store on seq and issues no fence-free publication."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "runtime_cuda" / "src" / "hbf_helpers.cu"


def _ptx(nvcc: str, tmp_path: Path, *macros: str) -> str:
    out = tmp_path / ("h" + "".join(m.replace("-D", "_").replace("=", "") for m in macros) + ".ptx")
    subprocess.run([nvcc, "-std=c++17", "-O3", "-arch=compute_90a", "-rdc=true", "-ptx",
                    f"-I{ROOT / 'runtime_cuda' / 'include'}", *macros, str(SRC), "-o", str(out)],
                   check=True, capture_output=True)
    return out.read_text()


def _body(text: str, name: str) -> str:
    m = re.search(r"\.func[^\n]*\b" + re.escape(name) + r"\(.*?\n\}", text, re.S)
    assert m, name
    return m.group(0)


@pytest.mark.parametrize("build", [(), ("-DHBF_OOL_OPAQUE=1",)], ids=["direct", "lean"])
def test_terminal_failures_exit_instead_of_trap(nvcc, tmp_path, build):
    text = _ptx(nvcc, tmp_path, *build)
    assert "trap;" not in text
    assert "exit;" in text
    # the exported issue and wait paths can end the warp (fail-closed: before returning to the access)
    for fn in ("__hb_issue", "__hb_wait") if not build else ():
        assert "exit;" in _body(text, fn), fn
    # publication: payload stores, then the release store of seq (no fence-free variant in this build)
    assert "st.release.sys.global.u64" in text
    assert "st.volatile.global.v2.u64" in text


def test_trap_policy_still_builds(nvcc, tmp_path):
    text = _ptx(nvcc, tmp_path, "-DHBF_FAIL_TRAP=1")
    assert "trap;" in text and "exit;" not in text


def test_tagged_publication_has_no_release_on_seq(nvcc, tmp_path):
    text = _ptx(nvcc, tmp_path, "-DHBF_REF_TAGGED=1")
    assert "st.release.sys" not in text
