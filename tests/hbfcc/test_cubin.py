"""hbfcc.cubin: register / stack / barrier facts read from the cubin's .nv.info equal what ptxas -v
prints, for whole-program cubins and relocatable objects; hbfcc.toolchain.build_stats keeps the
spill bytes (not in the ELF) from -v."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcommon.errors import ToolchainError  # noqa: E402
from hbfcc import cubin  # noqa: E402
from hbfcc import helpers as H  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402
from hbfcc.toolchain import build_stats, parse_ptxas_v  # noqa: E402

FIX = U.REPO / "tests" / "fixtures" / "triton"


def _build(tmp_path: Path, text: str, *extra: str) -> tuple[Path, str]:
    src = tmp_path / "m.ptx"
    src.write_text(text)
    out = tmp_path / ("m.o" if "-c" in extra else "m.cubin")
    cp = subprocess.run([U.tool("ptxas"), "-arch=sm_90a", "-v", *extra, str(src), "-o", str(out)],
                        capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    return out, cp.stdout + cp.stderr


@pytest.mark.parametrize("mode", ["whole-program", "relocatable"])
def test_elf_facts_equal_ptxas_v(tmp_path, mode):
    """An instrumented Triton matmul (helpers linked: calls, a stack frame, spills in -c mode)."""
    helper = H.load_helper(U.real_helper_ptx() or U.fixture_helper_ptx())
    text = rewrite_text((FIX / "matmul_f16_s3.ptx").read_text(), helper=helper).text
    out, log = _build(tmp_path, text, *(["-c"] if mode == "relocatable" else []))
    v = parse_ptxas_v(log)
    elf = cubin.function_facts(out)
    assert v.functions["matmul_kernel"].registers is not None
    checked = 0
    for name, s in v.functions.items():
        f = elf.get(name)
        if s.registers is not None:
            assert f is not None and f.registers == s.registers, name
            checked += 1
        if s.stack_bytes is not None and f is not None and f.frame_bytes is not None:
            assert f.frame_bytes == s.stack_bytes, name
        if s.barriers and f is not None:
            assert f.barriers == s.barriers, name
    assert checked >= 1
    assert elf["matmul_kernel"].frame_bytes == v.functions["matmul_kernel"].stack_bytes
    if mode == "relocatable":   # -v prints no register count for the helper functions; the ELF has them
        assert v.functions["__hb_issue"].registers is None and elf["__hb_issue"].registers > 0
    st = build_stats(log, str(out))
    for name, s in v.functions.items():
        assert st.functions[name].spill_stores == s.spill_stores and st.functions[name].spill_loads == s.spill_loads
    assert st.functions["matmul_kernel"].registers == elf["matmul_kernel"].registers


def test_no_elf_keeps_the_v_output_and_a_bad_elf_is_a_toolchain_error(tmp_path):
    out, log = _build(tmp_path, (FIX / "vector_add_f32.ptx").read_text())
    assert build_stats(log, None).functions == parse_ptxas_v(log).functions
    bad = tmp_path / "bad.cubin"
    bad.write_bytes(b"\x7fELF" + b"\0" * 12)
    with pytest.raises(ToolchainError):
        cubin.function_facts(bad)


def test_attribute_entries():
    data = bytes([0x04, 0x2F, 8, 0]) + (3).to_bytes(4, "little") + (40).to_bytes(4, "little") + \
        bytes([0x03, 0x4C, 2, 0]) + bytes([0x01, 0x36, 0, 0])
    assert list(cubin.attributes(data)) == [(4, 0x2F, (3).to_bytes(4, "little") + (40).to_bytes(4, "little")),
                                            (3, 0x4C, 2), (1, 0x36, 0)]


def test_a_malformed_elf_is_a_toolchain_error_naming_it(tmp_path):
    bad = tmp_path / "bad.cubin"
    bad.write_bytes(b"\x7fELF" + b"garbage" * 8)
    for f in (cubin.function_facts, cubin.function_code):
        with pytest.raises(ToolchainError, match="cannot read the ELF .*bad.cubin"):
            f(bad)
