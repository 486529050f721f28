import json

import numpy as np
import pytest

from hbfcommon.errors import RangeError, TelemetryError
from eidola.accounting import (COUNTERS, MAX_CLASSES, FlagClassifier, FlagRange, linear_fit,
                                    predicted_spin_reads, summarize)
from eidola.timeline import (KINDS, Segment, chrome_trace, plot_timeline, segments_from_marks,
                                  validate_chrome_trace, write_chrome_trace)


def test_classifier():
    c = FlagClassifier([FlagRange(0x1000, 256, 1, "tile_flags"), FlagRange(0x2000, 128, 2)])
    assert c.classify(0x1000) == 1 and c.classify(0x10FC) == 1
    assert c.classify(0x1100) == 0 and c.classify(0x0) == 0 and c.classify(0x2040, 8) == 2
    with pytest.raises(RangeError):
        c.classify(0x10FE, 4)          # straddles end
    with pytest.raises(RangeError):
        c.classify(0x0FFE, 4)          # straddles start
    with pytest.raises(RangeError):
        FlagClassifier([FlagRange(0x1000, 256, 1), FlagRange(0x1080, 128, 2)])
    with pytest.raises(RangeError):
        FlagClassifier([FlagRange(0x1004, 256, 1)])
    assert c.class_names() == {0: "nonflag", 1: "tile_flags", 2: "flag2"}


def _ctr():
    a = np.zeros((MAX_CLASSES, len(COUNTERS)), np.uint64)
    a[0, 0], a[0, 1] = 1000, 32000
    a[1, 0], a[1, 1], a[1, 5] = 50, 150, 150
    a[2, 0], a[2, 1] = 10, 10
    return a


def test_summarize_and_invariants():
    s = summarize(_ctr(), {0: "nonflag", 1: "tile_flags", 2: "bcast"})
    assert s["flag_reads_warp"] == 60 and s["flag_reads_thread"] == 160
    assert s["nonflag_reads_warp"] == 1000 and s["nonflag_reads_thread"] == 32000
    assert s["classes"]["tile_flags"]["virtual_loads"] == 150
    json.dumps(s)
    bad = _ctr(); bad[1, 1] = 10          # fewer thread reads than warp instructions
    with pytest.raises(TelemetryError):
        summarize(bad, {0: "nonflag", 1: "a", 2: "b"})
    with pytest.raises(TelemetryError, match="unregistered"):
        summarize(_ctr(), {0: "nonflag", 1: "a"})
    with pytest.raises(TelemetryError, match="shape"):
        summarize(np.zeros((2, 2)))


def test_fit_and_prediction():
    x = [0, 10, 20, 30, 40]
    f = linear_fit(x, [5 + 6.65 * v for v in x])
    assert f["r2"] == pytest.approx(1.0) and f["slope"] == pytest.approx(6.65)
    assert predicted_spin_reads([0, 1500], 150.0) == 1 + 11


def test_timeline_json_and_png(tmp_path):
    marks = [[100 + b, 200, 300, 310, 900, 1000] for b in range(4)]
    segs = segments_from_marks(marks, gpu=0)
    assert len(segs) == 4 * len(KINDS) and segs[0].start_ns == 0
    obj = chrome_trace(segs)
    validate_chrome_trace(obj)
    p = write_chrome_trace(tmp_path / "t.json", segs)
    validate_chrome_trace(json.loads(p.read_text()))
    png = plot_timeline(tmp_path / "t.png", segs, title="x")
    assert png.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(TelemetryError):
        Segment(0, 0, "spin", 10, 5)
    with pytest.raises(TelemetryError):
        validate_chrome_trace({"traceEvents": [{"ph": "X", "name": "spin", "pid": 0, "tid": 0, "ts": 0, "dur": -1}]})
    with pytest.raises(TelemetryError):
        segments_from_marks([[1, 2]])
