"""HBFCC_PREFETCH_GROUP (stop 56, issue 13; off by default until a GPU has measured it; hbfcc/passes/timing.py
``_group_prefetches``): an issue group first prefetches into L2 what its loads will read, before its timing code.
Pinned on the stream reduce loop of bench/devpath_cost.py (two vector loads per thread under their own guards) and on
a Triton masked tail (8 scalar loads under 8 guards, one merged request): where the prefetches go, their guards and
addresses, one per request, nothing else changed, the knob and the marker, and that ptxas assembles it."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_merge_loads import run_pass, scalar_loads  # noqa: E402
from test_prefetch_next import LOOP, PF, _pf, rewrite_and_assemble  # noqa: E402

from hbfcc import knobs  # noqa: E402

def _lines(out: str) -> list[str]:
    return [" ".join(ln.split()) for ln in out.splitlines()]


def test_each_load_of_the_group_is_prefetched_on_its_guard_before_the_group_code():
    out, f = run_pass(LOOP, prefetch_next=0, prefetch_group=True)
    assert _pf(out) == [("@%__hb_x_pred_0", "%rd15"), ("@%__hb_x_pred_1", "%__hb_x_b64_3")]
    assert f["group_prefetches"] == 2 and f["next_prefetches"] == 0
    ls = _lines(out)
    k = next(i for i, ln in enumerate(ls) if "prefetch" in ln)
    # after the group's address copies, before its first band check; the loads themselves come after the group code
    assert ls[k - 1] == "add.s64 %__hb_x_b64_3, %rd15, 2048;"
    assert ls[k + 2].startswith("sub.u64 %__hb_b, %rd15,")
    ld = [i for i, ln in enumerate(ls) if re.search(r"\bld\.global\.v4\.b32\b", ln)]
    assert ld and min(ld) > k + 2
    # the instrumented version only: the native copy has none
    native = out.index("$__hb_native:")
    assert all(out.index(m.group(0)) < native for m in PF.finditer(out))


def test_off_by_default_and_on_changes_nothing_else():
    off, f = run_pass(LOOP, prefetch_next=0)
    assert _pf(off) == [] and f["group_prefetches"] == 0
    on, _ = run_pass(LOOP, prefetch_next=0, prefetch_group=True)
    assert [ln for ln in on.splitlines() if "prefetch" not in ln] == off.splitlines()


def test_with_the_next_iteration_prefetch_both_are_emitted():
    out, f = run_pass(LOOP, prefetch_next=1, prefetch_group=True)
    assert f["group_prefetches"] == 2 and f["next_prefetches"] == 2
    assert _pf(out)[2:] == [("@%p3", "%rd15"), ("@%p3", "%rd15+2048")]


def test_a_merged_request_gets_one_prefetch_and_no_guard_when_its_members_differ():
    # 8 scalar loads of 2 bytes under 8 guards: one merged request of 16 bytes, one prefetch of its lead's address;
    # the members' guards differ, so it is unguarded (a prefetch never faults: bench/probes/prefetch_probe.cu)
    out, f = run_pass(scalar_loads(), prefetch_group=True)
    assert f["merged_requests"] == 1
    assert _pf(out) == [("", "%rd4")] and f["group_prefetches"] == 1
    # one guard for all: the prefetch keeps it
    t = re.sub(r"@%p\d+ ld", "@%p1 ld", scalar_loads())
    out, _ = run_pass(t, prefetch_group=True)
    assert _pf(out) == [("@%p1", "%rd4")]
    # merging off: each site its own request and prefetch, on its own guard
    out, f = run_pass(scalar_loads(), merge=False, prefetch_group=True)
    assert _pf(out) == [(f"@%p{k + 1}", "%rd4" if k == 0 else f"%__hb_ga{k}") for k in range(8)]


def test_not_with_loads_first():
    out, f = run_pass(LOOP, prefetch_next=0, prefetch_group=True, loads_first="all")
    assert f["loads_first"] > 0 and f["group_prefetches"] == 0 and _pf(out) == []


def test_the_knob_and_the_marker(monkeypatch):
    from hbfcc.cli import marker_line
    monkeypatch.delenv("HBFCC_PREFETCH_GROUP", raising=False)
    assert knobs.load().prefetch_group == "0" and "prefetch-group" not in marker_line()
    monkeypatch.setenv("HBFCC_PREFETCH_GROUP", "1")
    assert knobs.load().prefetch_group == "1" and "prefetch-group 1" in marker_line()
    monkeypatch.setenv("HBFCC_PREFETCH_GROUP", "auto")
    assert knobs.load().prefetch_group == "auto" and "prefetch-group auto" in marker_line()
    monkeypatch.setenv("HBFCC_PREFETCH_GROUP", "maybe")
    from hbfcommon.errors import ConfigError
    with pytest.raises(ConfigError, match="HBFCC_PREFETCH_GROUP"):
        knobs.load()


def test_ptxas_assembles_it_with_the_real_helpers(tmp_path, monkeypatch):
    text = rewrite_and_assemble(tmp_path, monkeypatch, {"HBFCC_PREFETCH_GROUP": "1"})
    assert text.count("prefetch.global.L2") == 4        # 2 in the group, 2 for the next iteration
