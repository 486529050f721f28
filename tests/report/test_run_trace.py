"""hbfctl trace: the trace-event JSON that ui.perfetto.dev / chrome://tracing open, checked field by field."""
from __future__ import annotations

import json

import pytest
from report_inputs import GLOBALTIMER_BASE, old_summary

from hbfd import ctl_cli
from hbfd.runreport import load_run
from hbfd.runreport.trace import build_trace, check_trace, us


def _trace(tmp_path, summary, counters=None) -> dict:
    out = tmp_path / "run.perfetto.json"
    argv = ["trace", str(summary), "-o", str(out)] + (["--counters", str(counters)] if counters else [])
    assert ctl_cli.main(argv) == 0
    return json.loads(out.read_text())


def test_ns_to_us():
    assert us(0) == 0.0 and us(1) == 0.001 and us(1_500) == 1.5 and us(999) == 0.999
    assert us(123_456_789_012) == 123_456_789.012          # exact to the ns for a run of ~2 minutes
    assert us(86_400_000_000_001 * 10) == 864_000_000_000.01   # ten days, still to the 10 ns
    assert isinstance(us(1000), float)


def test_trace_of_the_demo_run(tmp_path, demo_path, demo_doc):
    doc = _trace(tmp_path, demo_path)
    assert check_trace(doc) == []
    ev = doc["traceEvents"]
    for e in ev:      # the schema, restated: the fields every viewer needs
        assert {"ph", "name", "pid", "tid", "ts"} <= set(e), e
        assert isinstance(e["ts"], float) or e["ts"] == 0
    assert doc["displayTimeUnit"] == "ns"
    tl = demo_doc["hbfd_summary"]["timeline"]["columns"]
    temps = [e for e in ev if e["ph"] == "C" and e["name"] == "temperature (C)"]
    assert len(temps) == len(tl["t_ns"])
    assert [e["ts"] for e in temps] == [t / 1000 for t in tl["t_ns"]]          # integer ns -> float us
    assert [e["args"]["hbf_max"] for e in temps] == tl["hbf_max_c"]
    # bandwidth: bytes of each interval / its length (bytes per ns = GB/s), at the interval's start
    bw = [e for e in ev if e["ph"] == "C" and e["name"].startswith("bandwidth")]
    total = sum(b["args"]["reference"] * (tl["t_ns"][i + 1] - tl["t_ns"][i]) for i, b in enumerate(bw))
    assert total == pytest.approx(tl["ref_bytes"][-1] - tl["ref_bytes"][0], rel=1e-9)
    assert {"q", "mode", "open", "debt"} <= {k for e in ev if e["ph"] == "C" for k in e["args"]}
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")}
    assert {"thermal", "refresh", "events"} <= names
    att = [e for e in ev if e["ph"] == "i" and e["name"].startswith("attach")]
    assert [e["ts"] for e in att] == [a["at_ns"] / 1000 for a in demo_doc["hbfd_summary"]["attaches"]]
    end = [e for e in ev if e["name"].startswith("end of run")]
    assert end and end[0]["ts"] == demo_doc["hbfd_summary"]["daemon"]["uptime_ns"] / 1000
    assert not any(e["pid"] == 2 for e in ev)          # no kernel counters given: no GPU process


def test_kernel_tracks_from_the_runtime_counters(tmp_path, demo_path, counters_path):
    doc = _trace(tmp_path, demo_path, counters_path)
    assert check_trace(doc) == []
    ks = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in ks] == ["gemv_instr", "rate_instr"]
    # rebased on the earliest kstart_ns: a %globaltimer value would lose its ns as a float of us
    assert ks[0]["ts"] == 0.0 and ks[1]["ts"] == 3_000.001
    assert ks[0]["dur"] == 1_234.567 and ks[1]["dur"] == 1_234.568
    assert ks[0]["tid"] != ks[1]["tid"] and {e["pid"] for e in ks} == {2}
    a = ks[1]["args"]
    assert a["launches"] == 3 and a["requests"] == 20480 + 16 and a["modeled_ns"] == 20480 * 20_000
    assert a["wait_wall_ns"] == 9_000_001 and a["helper_ns"] == 20480 * 300 and a["program_bytes"] == 65536
    c = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["pid"] == 2]
    assert {e["tid"] for e in c} == {ks[0]["tid"], ks[1]["tid"]}
    assert GLOBALTIMER_BASE > 2 ** 53


def test_old_summary_has_no_timeline_and_says_so(tmp_path, demo_doc):
    p = tmp_path / "old.json"
    p.write_text(json.dumps(old_summary(demo_doc)))
    doc = _trace(tmp_path, p)
    assert check_trace(doc) == []
    # only the thermal service's own samples remain (every sample_period_ns), on the thermal clock
    samples = demo_doc["hbfd_summary"]["services"]["thermal"]["samples"]
    c = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert len(samples) >= 1 and len(c) == len(samples) and {e["name"] for e in c} == {"temperature (C)"}
    assert [e["ts"] for e in c] == [s["t_ns"] / 1000 for s in samples]
    assert "no counter tracks" in doc["otherData"]["timeline"]


def test_hbfd_summary_alone(tmp_path, demo_doc):
    p = tmp_path / "hbfd-summary.json"
    p.write_text(json.dumps(demo_doc["hbfd_summary"]))
    run = load_run(p)
    assert run.demo is None and run.schema == "hbfsim.summary/1"
    assert check_trace(build_trace(run)) == []


@pytest.mark.parametrize("event, problem", [
    ({"ph": "Q", "name": "x", "pid": 1, "tid": 1, "ts": 0.0}, "ph 'Q'"),
    ({"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 0.0}, "dur"),
    ({"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 0.0, "dur": -1}, "dur"),
    ({"ph": "C", "name": "x", "pid": 1, "tid": 1, "ts": 0.0, "args": {"v": "hot"}}, "finite numbers"),
    ({"ph": "i", "name": "x", "pid": 1, "tid": 1, "ts": 0.0, "s": "q"}, "scope"),
    ({"ph": "X", "name": "x", "pid": "1", "tid": 1, "ts": 0.0, "dur": 1}, "pid"),
    ({"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": float("nan"), "dur": 1}, "ts"),
    ({"ph": "X", "name": "", "pid": 1, "tid": 1, "ts": 1, "dur": 1}, "no name"),
    ({"ph": "M", "name": "colour", "pid": 1, "tid": 1, "ts": 0, "args": {}}, "metadata name"),
])
def test_check_trace_finds_each_broken_rule(event, problem):
    bad = check_trace({"traceEvents": [event]})
    assert len(bad) >= 1 and problem in bad[0], bad
    assert check_trace([event]) == ["not a JSON object with a 'traceEvents' list"]
