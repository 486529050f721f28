"""The media engine computes exactly what it computed when the golden digests were recorded
(tests/media/engine_golden.json, from the engine before the speed work of issue 14 item 5): every
collect's completions (id, modeled_ns, status) and the final stats, bit for bit, on 90 varied cases
(reads, writes, mixed, bursts, tiny batches, six profiles, small geometries with GC, queue-depth
binding, 1-3 page buffers, out-of-order and bad requests). See tests/media/engine_cases.py."""
from __future__ import annotations

import json

import pytest

import engine_cases as ec
from hbfd.media.engine import MediaEngine

GOLD = json.loads(ec.GOLDEN.read_text())
CASES = ec.cases()


def test_golden_covers_every_case():
    assert sorted(GOLD) == sorted(c["name"] for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_engine_matches_golden(case, accel_mode):
    """With the compiled twins off and on (conftest.accel_mode)."""
    assert ec.digest(MediaEngine, case) == GOLD[case["name"]]


def test_digest_sees_a_one_ns_change():
    """The digest is sensitive: the same case with t_cmd one ns longer gives another digest."""
    case = next(c for c in CASES if c["name"] == "small/mixed-sub")
    g = ec.geometry(case["geometry"])
    import dataclasses
    g2 = dataclasses.replace(g, t_cmd_ns=g.t_cmd_ns + 1)
    assert ec.digest(MediaEngine, case, g2)["sha256"] != GOLD[case["name"]]["sha256"]
