"""CPU checks of bench/hbf_bandwidth.py's pure parts: the derived grade profiles and the expected bounds."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import hbf_bandwidth as HB  # noqa: E402


@pytest.mark.parametrize("grade,tr,chan,sense", [
    ("ocp-sg1", 4000, 384.0, 8 * 256 * 4096 / 4000),
    ("ocp-sg2", 8000, 1536.0, 16 * 256 * 4096 / 8000),
    ("ocp-sg3", 8000, 3072.0, 16 * 256 * 4096 / 8000),
])
def test_grade_profile_bounds(tmp_path, grade, tr, chan, sense):
    p = HB.grade_profile(tmp_path, grade, tr)
    ex = HB.expectations(p)
    assert ex["t_read_ns"] == tr and ex["channel_bound_GBps"] == chan
    assert ex["sense_bound_GBps"] == pytest.approx(sense)
    assert ex["bound_GBps"] == pytest.approx(min(chan, sense))
    assert ex["miss_128B_ns"] == ex["t_cmd_ns"] + tr + -(-128 * 10**9 // ex["channel_bytes_per_s"])


def test_stream_record_says_when_the_run_is_off_the_model():
    ex = {"bound_GBps": 384.0, "t_cmd_ns": 300, "t_read_ns": 4000}
    hbf = {"median": 5.6}                      # ms for 1 GiB: ~192 GB/s, half the bound
    cs = {"ops_total": {"requests": 3 * 2**21, "bytes": 3 * 2**30, "overhead_ns": 3 * 2**21 * 2000}}
    r = HB._stream_rec("k", 2**30, {"median": 0.25}, hbf, cs, ex, reps=3)
    assert not r["within_5pct"] and r["measured_over_expected"] > 1.9
    assert r["helper_ns_per_request"] == 2000 and r["bytes_per_request"] == 512


def test_counters_explain_the_wall_from_helper_and_wait_time():
    ex = {"bound_GBps": 384.0, "t_cmd_ns": 300, "t_read_ns": 4000}
    cs = {"ops_total": {"requests": 3000, "bytes": 3000 * 512, "overhead_ns": 3000 * 2000}, "wait_wall_ns": 3000 * 1000}
    r = HB._stream_rec("k", 1 << 20, {"median": 0.001}, {"median": 0.2}, cs, ex, reps=3, resident_warps=50)
    e = r["explained"]
    assert e["explained_ns"] == (3000 * 2000 + 3000 * 1000) / (3 * 50) + 1000      # + the plain kernel's time
    assert e["helper_share"] == 2 / 3 and abs(e["explained_over_measured"] - 61000 / 200000) < 1e-12


def test_the_inline_path_time_is_explained_with_the_helper_time():
    """Helper ABI 8 (HBFCC_INLINE_TIME=1): inline_ns joins the helper time and the exposed waits, its share apart."""
    ex = {"bound_GBps": 384.0, "t_cmd_ns": 300, "t_read_ns": 4000}
    cs = {"ops_total": {"requests": 3000, "bytes": 3000 * 512, "overhead_ns": 1000 * 2000},
          "wait_wall_ns": 3000 * 1000, "inline_requests": 2000, "inline_ns": 2000 * 500}
    r = HB._stream_rec("k", 1 << 20, {"median": 0.001}, {"median": 0.2}, cs, ex, reps=3, resident_warps=50)
    e = r["explained"]
    assert e["explained_ns"] == (1000 * 2000 + 2000 * 500 + 3000 * 1000) / (3 * 50) + 1000
    assert e["inline_ns_total"] == 1_000_000 and e["inline_share"] == pytest.approx(1 / 6)
    assert e["helper_share"] == pytest.approx(2 / 6) and e["wait_share"] == pytest.approx(3 / 6)
    assert r["counters"]["inline_ns"] == 1_000_000 and r["counters"]["inline_requests"] == 2000
