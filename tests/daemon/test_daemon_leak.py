"""Memory leak and heartbeat check of a live hbfd under stores, refresh and thermal (issue 19.6): the
soak machinery of bench/daemon_soak.py, bounded to ~25 s (the 1-hour soak is a bench, not CI).

Bounds are generous for a loaded 2-core CI host, and still fail on what issue 19 found: RSS growing
~2.5 MB/s under 10 % stores would be ~40 MB (> 30 %) over the 16 s after warm-up; a heartbeat that
stops (hbfd hung: it stops after 1 s without progress) or a lost/failed request fails too. The slow
growth the 1-hour soak found (the FTL kept a page map per block ever opened, ~8 B per page programmed)
is below what 16 s can show: tests/media/test_media_ftl.py pins it where it lived."""
from __future__ import annotations

import shutil
import sys

import pytest

from hbfd_harness import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import daemon_soak  # noqa: E402

RSS_BOUND_PCT = 15.0          # after warm-up; the bench's goal is 10 % over an hour
HEARTBEAT_MAX_BOUND_NS = 500_000_000   # half of the 1 s stale limit: the heartbeat never stopped


def test_rss_report_flags_growth_after_warmup_only():
    """The verdict arithmetic: growth during warm-up does not count, growth after it does."""
    flat = [{"t_s": t, "rss_kb": 100_000 + (50_000 if t < 10 else 0) + t} for t in range(0, 60, 5)]
    r = daemon_soak.rss_report(flat, warmup_s=10)
    assert r["met"] and r["growth_pct"] < 0.1 and r["samples_after_warmup"] == 10
    leak = [{"t_s": t, "rss_kb": 100_000 + 2_500 * t} for t in range(0, 60, 5)]
    r = daemon_soak.rss_report(leak, warmup_s=10)
    assert not r["met"] and r["growth_pct"] > 50 and "NOT met" in r["verdict"]
    assert r["slope_kb_per_h"] == pytest.approx(2_500 * 3600, rel=1e-6)
    assert "too short" in daemon_soak.rss_report(leak[:3], warmup_s=10)["verdict"]


def test_gap_stats_percentiles():
    import numpy as np
    g = np.full(10_000, 2_000_000, dtype=np.int64)
    g[-5:] = 50_000_000                      # 0.05 %: above p99.9, counted, the max
    s = daemon_soak.gap_stats(g)
    assert s["p50_ns"] == s["p999_ns"] == 2_000_000 and s["max_ns"] == 50_000_000 and s["over_10ms"] == 5
    g[-20:] = 50_000_000                     # 0.2 %: p99.9 is over the goal
    assert daemon_soak.gap_stats(g)["p999_ns"] == 50_000_000


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler")
def test_short_soak_rss_flat_heartbeat_alive_requests_served(tmp_path):
    opt = daemon_soak.SoakOptions(duration_s=24.0, sample_s=2.0, warmup_s=8.0, rate=50_000.0, outstanding=512)
    out = tmp_path / "soak.json"
    doc = daemon_soak.run_soak(opt, out, workdir=tmp_path)
    assert out.exists() and doc["completed"]
    # hbfd ran every model and ended cleanly, nothing rejected
    s = doc["summary"]
    assert s["engine"] == "media" and s["services"] == {"thermal": "package-rom", "refresh": "retention-refresh"}, s
    assert s["terminal_status"] == "clean" and not s["rejected_requests"] and doc["hbfd_returncode"] == 0
    # requests served, none failed (a paced load: at least a fifth of what was offered, even on a loaded box)
    q = doc["requests"]
    assert q["errors"] == 0 and q["driver_failures"] == 0, q
    assert q["requests"] >= 0.2 * opt.rate * opt.duration_s, q
    # the heartbeat kept beating through every sample, no gap near the stale limit
    hb = doc["heartbeat"]
    counts = [x["heartbeat_gaps_total"] for x in doc["samples"]]
    assert all(b > a for a, b in zip(counts, counts[1:])), counts
    assert hb["n"] >= opt.duration_s * 50, hb            # on average a beat per 20 ms at least (period 2 ms)
    assert hb["max_ns"] < HEARTBEAT_MAX_BOUND_NS, hb
    assert doc["heartbeat_age_at_end_ns"] < HEARTBEAT_MAX_BOUND_NS
    # RSS after warm-up: flat within the generous bound
    r = doc["rss"]
    assert r["samples_after_warmup"] >= 6, r
    assert r["growth_pct"] <= RSS_BOUND_PCT, (r, doc["rss_series_kb"])
