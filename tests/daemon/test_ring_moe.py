"""The reference ring driven as moe_gate_up_hbf drives it (issue 13; bench/ring_moe.py, bench/ring_driver/moe_driver.c):
warps that hold PER tickets each across a CTA barrier, far more than the ring's 4,096 slots in all, must end against
a real hbfd -- every issue past the ring's size steals -- and each of their completions is taken exactly once."""
from __future__ import annotations

import shutil

import pytest

from hbfd_harness import ROOT


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler")
def test_moe_pattern_ends_with_every_completion_taken_once(tmp_path):
    import sys
    sys.path.insert(0, str(ROOT / "bench"))
    import ring_moe
    exe = ring_moe.build_driver(tmp_path)
    # 48 CTAs x 4 warps x 32 tickets = 6,144 held across the barrier (> 4,096 slots), 2 k-steps x 2 tiles
    r = ring_moe.run_one(exe, tmp_path / "w", "fixed", "nominal", (96, 48, 4, 32, 2), 20.0, 120.0, "realtime")
    assert r["rc"] == 0 and r["result"] == "ended", r
    assert r["requests"] == 96 * 4 * 32 * 2 * 2 and r["not_ready"] == 0
    assert r["steals"] > 0 and r["overflow_takes"] == r["steals"]
    svc = r["hbfd"]["ring_service"]
    assert svc["requests"] == r["requests"] and r["hbfd"]["foreign_requests"] == 0
