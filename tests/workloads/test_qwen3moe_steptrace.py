"""workloads/qwen3moe/steptrace.py: one decode step as a trace-event JSON (passes hbfd's format check,
exact µs values), the per-layer split, record validation, and the PNG. CPU only."""
from __future__ import annotations

import json

import pytest

from hbfcommon.errors import ConfigError
from hbfd.runreport.trace import check_trace
from workloads.qwen3moe import steptrace as st


def _rec(name, layer, native, wall, modeled, wait=0, over=0, nbytes=0, req=0, **extra):
    return {"name": name, "layer": layer, "native_ns": native, "wall_ns": wall, "modeled_ns": modeled,
            "exposed_wait_ns": wait, "overhead_ns": over, "hbf_bytes": nbytes, "requests": req, **extra}


def records():
    """embedding, 2 layers x (attn, router, experts), lm_head."""
    out = [_rec("embed", -1, 1000, 1500, 0)]
    for layer in range(2):
        out += [_rec("attn", layer, 2000 + layer, 2500, 1200, 300, 50, 4096, 2),
                _rec("router", layer, 500, 700, 0, 0, 10),
                _rec("experts", layer, 8000, 12345, 9000, 3000, 200, 1 << 20, 16, grid="4x1", blob=[4, 1])]
    out.append(_rec("lm_head", -1, 3000, 3001, 2000, 1, 1, 8192, 1))
    return out


def _x(doc, pid, tid):
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == pid and e["tid"] == tid]


def test_trace_layout_and_exact_times(tmp_path):
    meta = {"model": "qwen3moe-tiny", "batch": 8}
    doc = st.build_step_trace(records(), meta)
    assert check_trace(doc) == [] and doc["displayTimeUnit"] == "ns" and doc["otherData"] == meta
    k = _x(doc, 1, 1)
    assert [e["name"] for e in k] == ["embed", "attn", "router", "experts"] * 1 + ["attn", "router", "experts",
                                                                                   "lm_head"]
    assert [e["ts"] for e in k] == [0.0, 1.5, 4.0, 4.7, 17.045, 19.545, 20.245, 32.59]
    assert [e["dur"] for e in k] == [1.5, 2.5, 0.7, 12.345, 2.5, 0.7, 12.345, 3.001]
    assert k[3]["args"]["hbf_bytes"] == 1 << 20 and k[3]["args"]["grid"] == "4x1" \
        and k[3]["args"]["layer"] == 0 and "blob" not in k[3]["args"]     # extra JSON scalars only
    layers = _x(doc, 1, 0)
    assert [(e["name"], e["ts"], e["dur"]) for e in layers] == [("layer 0", 1.5, 15.545), ("layer 1", 17.045, 15.545)]
    modeled = _x(doc, 1, 2)
    assert [(e["ts"], e["dur"]) for e in modeled] == [(0.0, 0.0), (1.5, 1.2), (4.0, 0.0), (4.7, 9.0), (17.045, 1.2),
                                                      (19.545, 0.0), (20.245, 9.0), (32.59, 2.0)]
    assert not _x(doc, 1, 3)                       # modeled never outlasts its launch here: one lane
    native = _x(doc, 2, 1)
    assert [e["ts"] for e in native] == [0.0, 1.0, 3.0, 3.5, 11.5, 13.501, 14.001, 22.001]
    assert native[-1]["dur"] == 3.0
    assert [(e["ts"], e["dur"]) for e in _x(doc, 2, 0)] == [(1.0, 10.5), (11.5, 10.501)]
    names = {(e["pid"], e["tid"], e["args"]["name"]) for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")}
    assert (1, 0, "instrumented (wall)") in names and (2, 0, "native (wall)") in names
    assert (1, 2, "modeled HBF time") in names
    p = tmp_path / "step.perfetto.json"
    st.write_step_trace(records(), p, meta)
    assert json.loads(p.read_text()) == doc


def test_modeled_overlap_goes_to_another_lane():
    recs = [_rec("a", 0, 10, 1000, 2500), _rec("b", 0, 10, 1000, 500), _rec("c", 0, 10, 1000, 100),
            _rec("d", 1, 10, 1000, 10)]
    doc = st.build_step_trace(recs, {})
    lane0, lane1 = _x(doc, 1, 2), _x(doc, 1, 3)
    assert [e["name"] for e in lane0] == ["a", "d"] and [e["name"] for e in lane1] == ["b", "c"]
    for lane in (lane0, lane1):                     # slices of one thread never overlap
        for a, b in zip(lane, lane[1:]):
            assert a["ts"] + a["dur"] <= b["ts"]


def test_per_layer_split_sums():
    recs = records()
    split = st.per_layer_split(recs)
    assert [s["layer"] for s in split] == [0, 1, -1]
    l0, l1, outer = split
    assert l0 == {"layer": 0, "native_ns": 10500, "wall_ns": 15545, "modeled_ns": 10200, "exposed_wait_ns": 3300,
                  "overhead_ns": 260, "hbf_bytes": 4096 + (1 << 20), "requests": 18, "launches": 3}
    assert l1["native_ns"] == 10501 and l1["launches"] == 3
    assert outer["wall_ns"] == 4501 and outer["launches"] == 2 and outer["hbf_bytes"] == 8192
    for f in st.SUM_FIELDS:
        assert sum(s[f] for s in split) == sum(r[f] for r in recs)


@pytest.mark.parametrize("mutate, needle", [
    (lambda r: r[3].pop("wall_ns"), "step record 3 (experts): missing 'wall_ns'"),
    (lambda r: r[2].__setitem__("modeled_ns", -5), "step record 2 (router): modeled_ns = -5 is negative"),
    (lambda r: r[1].__setitem__("layer", -2), "step record 1 (attn): layer = -2 is negative"),
    (lambda r: r[4].__setitem__("hbf_bytes", 1.5), "step record 4 (attn): hbf_bytes must be an integer, not float"),
    (lambda r: r[5].__setitem__("requests", True), "step record 5 (router): requests must be an integer, not bool"),
    (lambda r: r[0].__setitem__("name", ""), "step record 0: name must be a non-empty string"),
    (lambda r: r.__setitem__(7, "x"), "step record 7 is str, not an object"),
])
def test_bad_records(mutate, needle):
    recs = records()
    mutate(recs)
    with pytest.raises(ConfigError) as ei:
        st.build_step_trace(recs, {})
    assert needle in str(ei.value)
    with pytest.raises(ConfigError):
        st.per_layer_split(recs)


def test_empty_records():
    with pytest.raises(ConfigError, match="non-empty list"):
        st.build_step_trace([], {})


def test_png(tmp_path):
    pytest.importorskip("matplotlib")
    p = tmp_path / "out" / "split.png"
    st.plot_layer_split(st.per_layer_split(records()), p, "tiny step")
    data = p.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    with pytest.raises(ConfigError, match="empty"):
        st.plot_layer_split([], tmp_path / "x.png", "")
