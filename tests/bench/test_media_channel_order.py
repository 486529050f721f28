"""bench/media_channel_order.py: the overlap measure on hand-made intervals, and what it shows on a small
high-load random stream (the documented difference of docs/design.md §3.9: the device model's channel
may carry overlapping transfers, the engine's never does)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import media_channel_order as MCO  # noqa: E402


def test_overlap_measure():
    r = MCO.overlap(np.array([0, 0, 1, 1]), np.array([0, 5, 0, 10]), np.array([10, 15, 10, 20]))
    assert r == {"overlap_share": pytest.approx(5 / 40), "max_in_flight": 2, "transfer_ns": 40, "busy_ns": 35}
    # back to back (an end at the next start) is no overlap
    r = MCO.overlap(np.array([0, 0, 0]), np.array([0, 10, 30]), np.array([10, 20, 40]))
    assert r["overlap_share"] == 0.0 and r["max_in_flight"] == 1 and r["busy_ns"] == 30


def test_twin_overlaps_engine_never():
    g, _ = MCO.geometries()["ocp-sg1/tR8us"]
    r = MCO._case(("ocp-sg1/tR8us", g, "random", 1.0, "poisson", 4000, 1, ("arrival", "calendar")))
    assert r["engine"]["overlap_share"] == 0.0 and r["engine"]["max_in_flight"] == 1
    assert r["twin"]["overlap_share"] > 0.05 and r["twin"]["max_in_flight"] >= 3
    # the channel calendar (docs/design.md §3.9) never overlaps either
    assert r["twin_calendar"]["overlap_share"] == 0.0 and r["twin_calendar"]["max_in_flight"] == 1
    assert r["twin_calendar"]["transfer_ns"] == r["twin"]["transfer_ns"]      # the same transfers
