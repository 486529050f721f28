"""HBFCC_PREFETCH_NEXT (stop 55, issue 13; on by default; hbfcc/passes/timing.py ``_next_iteration_prefetches``): before a loop's
back-edge, an L2 prefetch of each address its timed loads read in the next iteration, on the back-edge's predicate.
Pinned on the stream reduce of bench/devpath_cost.py (Triton 3.6, fp16, 2048 elements a block, 4 warps: two
16-byte vector loads per thread at [%rd15] and [%rd10] = [%rd15 + 2048], %rd15 += 4096 each iteration): the two
prefetches, where they go (the instrumented loop only, never the native copy), which loops and addresses are left
alone, the knob and the marker, the report's count, and that ptxas assembles it with the real helpers."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402
from test_merge_loads import run_pass  # noqa: E402

from hbfcc import knobs  # noqa: E402

LOOP = (Path(__file__).resolve().parent / "merge_fixtures" / "stream_reduce_loop.ptx").read_text()
PF = re.compile(r"^\s*(@%\w+\s+)?prefetch(\.global)?\.L2\s+\[([^\]]+)\];", re.M)


def _pf(out: str) -> list[tuple[str, str]]:
    return [(m.group(1).strip() if m.group(1) else "", m.group(3).replace(" ", "")) for m in PF.finditer(out)]


def test_the_next_iterations_two_loads_are_prefetched_on_the_back_edge():
    out, f = run_pass(LOOP, prefetch_next=1)
    assert _pf(out) == [("@%p3", "%rd15"), ("@%p3", "%rd15+2048")]
    assert f["next_prefetches"] == 2
    lines = [" ".join(ln.split()) for ln in out.splitlines()]
    k = next(i for i, ln in enumerate(lines) if ln.startswith("@%p3 prefetch"))
    # right before the back-edge, after the induction updates and the predicate
    assert lines[k - 3:k] == ["add.s64 %rd16, %rd16, 2048;", "add.s64 %rd15, %rd15, 4096;",
                              "setp.lt.u64 %p3, %rd16, 14336;"]
    assert lines[k + 2] == "@%p3 bra $L__BB0_1;"
    # the instrumented loop only: the native copy (after $__hb_native) has none
    native = out.index("$__hb_native:")
    assert all(out.index(m.group(0)) < native for m in PF.finditer(out))


def test_on_by_default_and_off_changes_nothing_else():
    on, f = run_pass(LOOP)
    assert len(_pf(on)) == 2 and f["next_prefetches"] == 2
    off, f = run_pass(LOOP, prefetch_next=0)
    assert _pf(off) == [] and f["next_prefetches"] == 0
    assert [ln for ln in on.splitlines() if "prefetch" not in ln] == off.splitlines()


def test_addresses_that_are_not_an_induction_register_plus_constants_are_left_alone():
    # the step from a register (not an immediate): no induction register, no prefetch
    t = LOOP.replace("add.s64 \t%rd15, %rd15, 4096;", "add.s64 \t%rd15, %rd15, %rd1;")
    assert t != LOOP
    out, f = run_pass(t, prefetch_next=1)
    assert _pf(out) == [] and f["next_prefetches"] == 0
    # the induction register written twice in the loop: none
    t = LOOP.replace("add.s64 \t%rd15, %rd15, 4096;", "add.s64 \t%rd15, %rd15, 2048;\n\tadd.s64 \t%rd15, %rd15, 2048;")
    out, _ = run_pass(t, prefetch_next=1)
    assert _pf(out) == []
    # a loop with a label inside (not one straight run): none
    t = LOOP.replace("add.s64 \t%rd16, %rd16, 2048;", "$L__inner:\n\tadd.s64 \t%rd16, %rd16, 2048;")
    out, _ = run_pass(t, prefetch_next=1)
    assert _pf(out) == []


def test_a_load_after_its_induction_update_prefetches_one_step_further():
    # move the first load's update before it: its next address is then %rd15 + 4096 at the back-edge
    t = LOOP.replace("add.s64 \t%rd15, %rd15, 4096;\n", "")
    t = t.replace("\tadd.s64 \t%rd10, %rd15, 2048;", "\tadd.s64 \t%rd15, %rd15, 4096;\n\tadd.s64 \t%rd10, %rd15, 2048;")
    assert t.count("add.s64 \t%rd15, %rd15, 4096;") == 1
    out, _ = run_pass(t, prefetch_next=1)
    # [%rd15] is read after the update: next iteration reads %rd15 + 4096; %rd10 = %rd15 + 2048 after it too
    assert _pf(out) == [("@%p3", "%rd15+4096"), ("@%p3", "%rd15+6144")]


def test_the_knob_and_the_marker(monkeypatch):
    from hbfcc.cli import marker_line
    monkeypatch.delenv("HBFCC_PREFETCH_NEXT", raising=False)
    assert knobs.load().prefetch_next == 1 and "prefetch-next" not in marker_line()     # the default (stop 55)
    monkeypatch.setenv("HBFCC_PREFETCH_NEXT", "0")
    assert knobs.load().prefetch_next == 0 and "prefetch-next 0" in marker_line()
    monkeypatch.setenv("HBFCC_PREFETCH_NEXT", "2")
    assert knobs.load().prefetch_next == 2 and "prefetch-next 2" in marker_line()
    monkeypatch.setenv("HBFCC_PREFETCH_NEXT", "9")
    from hbfcommon.errors import ConfigError
    with pytest.raises(ConfigError, match="HBFCC_PREFETCH_NEXT"):
        knobs.load()


def test_n_iterations_ahead():
    out, f = run_pass(LOOP, prefetch_next=2)
    assert _pf(out) == [("@%p3", "%rd15"), ("@%p3", "%rd15+4096"), ("@%p3", "%rd15+2048"), ("@%p3", "%rd15+6144")]
    assert f["next_prefetches"] == 4


def rewrite_and_assemble(tmp_path, monkeypatch, env: dict) -> str:
    """LOOP rewritten with the real helpers under ``env`` and assembled by ptxas (sm_90a): the rewritten text."""
    U.tool("ptxas")
    if U.real_helper_ptx() is None:
        pytest.skip("the real helper PTX (make helpers-ptx) is not built")
    from hbfcc.rewrite import rewrite_text
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("HBFCC_HELPER_PTX", str(U.real_helper_ptx()))
    from hbfcc import helpers as H
    res = rewrite_text(LOOP, filename="stream_reduce_loop.ptx", helper=H.load_helper(module_text=LOOP))
    p = tmp_path / "k.ptx"
    p.write_text(res.text)
    cp = subprocess.run([U.tool("ptxas"), "--gpu-name=sm_90a", str(p), "-o", str(tmp_path / "k.cubin")],
                        capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr[-2000:]
    return res.text


def test_ptxas_assembles_it_with_the_real_helpers(tmp_path, monkeypatch):
    text = rewrite_and_assemble(tmp_path, monkeypatch, {"HBFCC_PREFETCH_NEXT": "1"})
    assert text.count("prefetch.global.L2") == 2
