"""bench/live_inline.py's checks (issue 17 item 2, the inline path), from records alone, and its CPU build check:
the GPU run itself needs a card (bench/gpu_calls/stop45_liveinl.sh)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import live_inline as LI  # noqa: E402


def record(growth, final=10_000, inline=10_000, n=100):
    """A run of n samples over a busy kernel whose live load requests are growth(fraction of the run) x final."""
    trace = [{"t_s": i / 10, "busy": i < n - 1, "live_load_requests": int(growth(i / (n - 1)) * final)} for i in range(n)]
    return {"counters": {"load_requests": final, "load_bytes": final * 128, "inline_requests": inline}, "trace": trace}


def test_on_passes_when_the_live_activity_grows_during_the_kernel():
    c = LI.evaluate("on", record(lambda f: f))
    assert c["live"]["ok"] and c["inline_served"]["ok"]
    assert not LI.evaluate("on", record(lambda f: 0.0))["live"]["ok"]          # flat until exit: the gap


def test_off_shows_the_gap_and_fails_if_it_is_not_there():
    assert LI.evaluate("off", record(lambda f: 0.0))["live"]["ok"]
    assert not LI.evaluate("off", record(lambda f: f))["live"]["ok"]


def test_requests_not_served_inline_fail_the_run():
    assert not LI.evaluate("on", record(lambda f: f, inline=100))["inline_served"]["ok"]
    assert not LI.evaluate("on", {"counters": {"load_requests": 5, "load_bytes": 0, "inline_requests": 5},
                                  "trace": [{"t_s": 0, "busy": False, "live_load_requests": 0}]})["live"]["ok"]


def test_cpu_check_builds_both_and_only_the_live_build_calls_the_live_ask(tmp_path):
    assert LI.main(["--cpu-check", "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w")]) == 0
