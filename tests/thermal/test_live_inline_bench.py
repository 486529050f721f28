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


def test_a_tail_after_the_bulk_does_not_move_the_checks_past_the_exit():
    """The H100's 2 us run (stop 45): the bulk's threads exit at ~half the busy time, a tail of slow threads runs on."""
    off = record(lambda f: 0.0 if f < 0.5 else 0.99 + 0.01 * f)      # flat, the exit flush at 0.5, then the tail
    on = record(lambda f: min(f / 0.5, 1.0) * 0.99 + 0.01 * f)       # grows until 0.5, then the tail
    assert LI.evaluate("off", off)["live"]["ok"] and LI.evaluate("on", on)["live"]["ok"]
    assert not LI.evaluate("on", off)["live"]["ok"] and not LI.evaluate("off", on)["live"]["ok"]


def test_requests_not_served_inline_fail_the_run():
    assert not LI.evaluate("on", record(lambda f: f, inline=100))["inline_served"]["ok"]
    assert not LI.evaluate("on", {"counters": {"load_requests": 5, "load_bytes": 0, "inline_requests": 5},
                                  "trace": [{"t_s": 0, "busy": False, "live_load_requests": 0}]})["live"]["ok"]


def test_cpu_check_builds_both_and_only_the_live_build_calls_the_live_ask(tmp_path):
    assert LI.main(["--cpu-check", "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w")]) == 0
