"""hbfd.timeline: bounded per-tick rows (thinning keeps the span and the last tick) and the latency quantiles."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hbfd.contracts import ThermalState
from hbfd.timeline import CDF_QUANTILES, COLUMNS, MEANING, RunTimeline


def _rec(tl: RunTimeline, i: int, **kw) -> None:
    st = ThermalState(mode=kw.get("mode", 0), q_ppm=1_000_000, admission_open=True,
                      hbf_max_c=kw.get("hbf", 40.0 + i), hbm_c=math.nan, gpu_c=50.0)
    tl.record(i * 10_000_000, st, refresh_debt_bytes=i * 4096, refresh_drained_bytes=0, ref_requests=i,
              ref_bytes=i * 100, dev_requests=0, dev_bytes=0)


def test_rows_are_columns_of_equal_length_and_strict_json():
    tl = RunTimeline(tick_ns=10_000_000)
    for i in range(5):
        _rec(tl, i)
    s = tl.section()
    assert set(s["columns"]) == set(COLUMNS) == set(MEANING)
    assert {len(v) for v in s["columns"].values()} == {5}
    assert s["columns"]["t_ns"] == [i * 10_000_000 for i in range(5)]
    assert s["columns"]["hbm_c"] == [None] * 5           # NaN (no model) is null: strict JSON
    json.dumps(s, allow_nan=False)


@pytest.mark.parametrize("n", [9, 10, 17, 100, 1001])
def test_thinning_is_bounded_keeps_the_span_and_the_last_tick(n):
    tl = RunTimeline(tick_ns=10_000_000, max_points=8)
    for i in range(n):
        _rec(tl, i)
    s = tl.section()
    t = s["columns"]["t_ns"]
    assert len(t) <= 8 + 1                                # max_points, plus the last tick when not on the stride
    assert t[0] == 0 and t[-1] == (n - 1) * 10_000_000   # the whole span
    assert t == sorted(set(t))
    kept = t[:-1] if (n - 1) % s["stride_ticks"] else t
    assert all((x // 10_000_000) % s["stride_ticks"] == 0 for x in kept)   # every stride-th tick
    # a cumulative counter stays exact at each kept row
    assert s["columns"]["ref_bytes"] == [x // 10_000_000 * 100 for x in t]
    assert s["ticks"] == n


def test_latency_quantiles():
    tl = RunTimeline(tick_ns=1)
    assert tl.section()["latency"]["modeled_ns"] is None     # nothing completed: said as null, not zeros
    v = np.arange(1, 10_001, dtype=np.int64) * 1000
    tl.completed(v, v // 2)
    lat = tl.section()["latency"]
    assert lat["n"] == 10_000 and lat["q"] == list(CDF_QUANTILES)
    q = dict(zip(lat["q"], lat["modeled_ns"]))
    assert abs(q[0.5] - 5_000_000) <= 5_000_000 * 0.02 and q[1.0] == 10_000_000
    assert lat["modeled_ns"] == sorted(lat["modeled_ns"])
    assert dict(zip(lat["q"], lat["service_ns"]))[1.0] == 5_000_000
