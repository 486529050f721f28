"""The HB_DEBUG_ASKS helper build (issue 13, stop 53's open question: why the stream reduce's threads ask
__hb_inline_until 2.2 times in ~10 us lives): `HBF_HELPER_NVCC_FLAGS=-DHB_DEBUG_ASKS python setup.py helper-ptx direct
OUT` builds it (bench/gpu_calls/stop54_asks.sh does on the card); it must keep building, linking into a rewritten
Triton module (vprintf is a system call) and assembling, and the package's own build must not change with the macro's
code (the default PTX has no printf)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "hbfcc"))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import helpers as H  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402


def _build(tmp_path: Path, flags: str) -> Path:
    U.tool("nvcc")                                                  # skips without it
    out = tmp_path / "hbf_helpers.ptx"
    env = dict(os.environ, HBF_HELPER_NVCC_FLAGS=flags)
    cp = subprocess.run([sys.executable, "setup.py", "helper-ptx", "direct", str(out)], cwd=REPO, env=env,
                        capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    return out


def test_the_debug_build_prints_links_and_assembles(tmp_path):
    dbg = _build(tmp_path, "-DHB_DEBUG_ASKS")
    text = dbg.read_text()
    assert "vprintf" in text and "hb-ask sm=" not in text          # the format string is a byte array
    assert ".visible .func" not in text                             # exported helpers .weak, as the package's
    fixture = (REPO / "tests" / "fixtures" / "triton" / "vector_add_f32.ptx").read_text()
    res = rewrite_text(fixture, filename="a.ptx", helper=H.load_helper(str(dbg)))
    assert "vprintf" in res.text and all(f["admitted"] for f in res.meta["timing"]["functions"])
    U.assemble(res.text)


def test_the_until_forever_build_links_and_assembles(tmp_path):
    """-DHB_DEBUG_UNTIL_FOREVER (stop54_asks.sh: what the re-asks cost) answers a second where the package's build
    answers its own until: a different body, the same ABI, and it still links and assembles."""
    dbg = _build(tmp_path, "-DHB_DEBUG_UNTIL_FOREVER")
    text = dbg.read_text()
    assert "vprintf" not in text and text != _build(tmp_path / "p", "").read_text()
    fixture = (REPO / "tests" / "fixtures" / "triton" / "vector_add_f32.ptx").read_text()
    res = rewrite_text(fixture, filename="a.ptx", helper=H.load_helper(str(dbg)))
    assert all(f["admitted"] for f in res.meta["timing"]["functions"])
    U.assemble(res.text)


def test_the_package_build_has_no_printf(tmp_path):
    plain = _build(tmp_path, "")
    assert "vprintf" not in plain.read_text()


def test_a_malformed_flag_value_is_a_clear_error(tmp_path):
    U.tool("nvcc")
    cp = subprocess.run([sys.executable, "setup.py", "helper-ptx", "direct", str(tmp_path / "h.ptx")], cwd=REPO,
                        env=dict(os.environ, HBF_HELPER_NVCC_FLAGS='-DX="unclosed'), capture_output=True, text=True)
    assert cp.returncode == 1 and "HBF_HELPER_NVCC_FLAGS" in cp.stderr and "Traceback" not in cp.stderr
    assert not (tmp_path / "h.ptx").exists()
