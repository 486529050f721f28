"""The calibrated cumulative-burst curve."""
from __future__ import annotations
from hbfcommon.profile import PROFILE_DIR

import json
from pathlib import Path

import numpy as np
import pytest

from hbfcommon.errors import ConfigError
from hbfd.media.curve import (CD8P_P50_POINTS, CD8P_PROGRAM_P50_NS, BurstCurve, CurveEngine,
                              burst_lengths)
from test_media_timing import batch

ROOT = Path(__file__).resolve().parents[2]


def test_interpolation_at_and_between_points():
    c = BurstCurve(CD8P_P50_POINTS, CD8P_PROGRAM_P50_NS)
    for p, ns in CD8P_P50_POINTS:
        assert c.cum(p) == ns
    assert c.cum(0) == 0
    # second page of a burst: ceil((41495 - 11133) / 3) = 10121 (the reference charged 11133)
    assert c.service(2) == 10_121
    assert c.service(1) == 11_133
    assert c.cum(10) == 41_495 + -(-(6 * (168_606 - 41_495)) // 12)


def test_extrapolates_the_last_segment():
    c = BurstCurve(CD8P_P50_POINTS)
    slope = (20_254_374 - 10_767_793) / 256
    assert c.cum(1024) == 20_254_374 + int(np.ceil(512 * slope))
    assert c.service(600) == c.service(513)


def test_held_out_reported_separately():
    fit = tuple(p for p in CD8P_P50_POINTS if p[0] != 64)
    c = BurstCurve(fit, held_out=((64, 2_824_351),))
    r = c.fit_report()
    assert r["fitted"]["n"] == 5 and r["fitted"]["max_abs_rel_error"] == 0.0
    h = r["held_out"]
    assert h["n"] == 1
    pred = c.cum(64)
    assert h["points"][0]["model_ns"] == pred and h["points"][0]["error_ns"] == pred - 2_824_351
    assert h["max_abs_rel_error"] > 0.1          # the 16..256 chord misses the measured 64-page point


def test_bad_curves_are_rejected():
    with pytest.raises(ConfigError):
        BurstCurve(((1, 10),))
    with pytest.raises(ConfigError):
        BurstCurve(((1, 10), (1, 20)))
    with pytest.raises(ConfigError):
        BurstCurve(((1, 10), (2, 5)))


def test_bursts_extend_only_on_sequential_same_op():
    pages = np.array([10, 11, 12, 12, 11, 20, 21, 22])
    ops = np.array([0, 0, 0, 0, 0, 0, 1, 1])
    assert burst_lengths(pages, ops).tolist() == [1, 2, 3, 1, 1, 1, 1, 2]


def test_curve_engine_serial_and_carries_bursts_across_batches():
    c = BurstCurve(CD8P_P50_POINTS, CD8P_PROGRAM_P50_NS)
    e = CurveEngine(c)
    e.submit(batch([(0, 0, 4096), (0, 4096, 4096)]))
    e.submit(batch([(10**9, 8192, 4096)]))
    m = e.collect()["modeled_ns"].tolist()
    assert m == [11_133, 11_133 + 10_121, c.service(3)]
    # 16 x 256 B stores charge one page program in total, not 16
    e2 = CurveEngine(c)
    e2.submit(batch([(i * 10**7, i * 256, 256, 1) for i in range(16)]))
    assert sum(e2.collect()["modeled_ns"].tolist()) == 16 * -(-CD8P_PROGRAM_P50_NS * 256 // 4096)


def test_make_engine_picks_curve_or_media_from_the_profile():
    from hbfd.media import MediaEngine, make_engine
    from hbfcommon.profile import profile_from_dict
    d = json.loads((PROFILE_DIR / "nominal.json").read_text())
    assert isinstance(make_engine(profile_from_dict(d)), MediaEngine)
    d["timing_model"]["timing_source"] = "curve"
    src = "Dell CD8P vmem P50 (shared/notes/reference-implementation.md 4)"
    w = lambda v: {"value": v, "provenance": "measured", "source": src}  # noqa: E731
    d["timing_model"]["curve"] = {"points": w([list(p) for p in CD8P_P50_POINTS if p[0] != 64]),
                                  "held_out": w([[64, 2_824_351]]), "write_ns": w(CD8P_PROGRAM_P50_NS)}
    try:
        p = profile_from_dict(d)
    except ConfigError as err:   # schema spells the curve differently: show how
        pytest.fail(f"curve profile rejected: {err}")
    eng = make_engine(p)
    assert isinstance(eng, CurveEngine)
    assert eng.stats()["fit"]["held_out"]["n"] == 1


def test_request_charge_per_op():
    """One request starting a burst: loads/cp.async read cum(pages), stores write time pro-rated per
    4 KiB, atomics read + write (what the device's curve source charges, test_curve_agreement)."""
    from hbfcommon import ctl
    c = BurstCurve(CD8P_P50_POINTS, CD8P_PROGRAM_P50_NS)
    w256 = -(-CD8P_PROGRAM_P50_NS * 256 // 4096)
    assert c.write_ns_for(256) == w256 and c.write_ns_for(4096) == CD8P_PROGRAM_P50_NS
    assert c.request_ns(ctl.HBF_OP_LOAD, 256) == c.request_ns(ctl.HBF_OP_CPASYNC, 256) == 11_133
    assert c.request_ns(ctl.HBF_OP_LOAD, 3 * 4096) == c.cum(3)
    assert c.request_ns(ctl.HBF_OP_STORE, 256) == w256
    assert c.request_ns(ctl.HBF_OP_ATOMIC, 256) == 11_133 + w256
    with pytest.raises(ConfigError):
        c.request_ns(ctl.HBF_N_OPS, 4)
