"""bench/capacity_gpu.py (issue 16's H200 proofs, not run on a GPU yet): its plan is checked before anything
starts -- unknown parts, ranges over the profile's capacity, pools under one warp's pages, capacity regions over
the host-memory budget are refused naming the argument; sizes under the issue's proof are warned about."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from hbfcommon.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import capacity_gpu as C  # noqa: E402


def plan(**kw):
    d = dict(parts=",".join(C.PARTS), profile="ocp-sg1", paper_gib=110, paper_frames_gib=2.0, gen_gib=200,
             gen_frames_gib=8.0, rw_gib=32, rw_frames_gib=4.0, chunk_gib=8.0, rw_passes=2, moe_gap_ns=4000,
             stress_warps=4096, max_host_gib=100.0)
    d.update(kw)
    return types.SimpleNamespace(**d)


def test_the_issues_plan_passes_without_warnings():
    assert C.check_args(plan()) == []


@pytest.mark.parametrize("kw,field", [({"parts": "paper110,foo"}, "parts"), ({"gen_gib": 300}, "gen_gib"),
                                      ({"rw_frames_gib": 0.0001}, "rw_frames_gib"),
                                      ({"max_host_gib": 1.0}, "max_host_gib"), ({"rw_passes": 0}, "args")])
def test_impossible_plans_are_refused(kw, field):
    with pytest.raises(ConfigError) as ei:
        C.check_args(plan(**kw))
    assert ei.value.fields.get("field") == field


def test_smaller_runs_are_warned_not_the_proof():
    w = C.check_args(plan(gen_gib=16, rw_gib=4))
    assert len(w) == 2 and "not the issue's proof" in w[0]
