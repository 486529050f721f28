import gzip
import json

import pytest

from hbfcommon.errors import ErrorCode, TraceError
from eidola.trace import (BufferSpec, Trace, TraceHeader, TraceWrite, loads, make_trace,
                               read_trace, write_trace)


def _trace(**kw):
    hdr = TraceHeader(n_gpus=4, target=0, source="synthetic",
                      buffers=(BufferSpec("flags", "flag", 4096), BufferSpec("partials", "data", 1 << 20)))
    writes = [TraceWrite(src=s, dst=0, buffer="flags", offset=128 * s, size=4, value=1,
                         wakeup_ns=1000 * s, seen_ns=1000 * s + 32, seq=1, polls=3) for s in (1, 2, 3)]
    writes += [TraceWrite(src=s, dst=0, buffer="partials", offset=4096 * s, size=4096,
                          wakeup_ns=900 * s) for s in (1, 2, 3)]
    return Trace(hdr, tuple(writes))


def _lines(t):
    return [json.loads(x) for x in t.dumps().splitlines()]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_round_trip(tmp_path, suffix):
    t = _trace()
    p = write_trace(tmp_path / ("t" + suffix), t)
    if suffix.endswith(".gz"):
        assert gzip.decompress(p.read_bytes()).startswith(b"{")
    u = read_trace(p)
    assert u == t
    assert u.dumps() == t.dumps()
    assert len(u.flag_writes()) == 3 and len(u.data_writes()) == 3


def test_make_trace_from_dicts_matches():
    t = _trace()
    objs = _lines(t)
    u = make_trace(n_gpus=4, target=0, source="synthetic", buffers=objs[0]["buffers"], writes=objs[1:])
    assert u == t


def _mutate(line_index, **changes):
    objs = _lines(_trace())
    for k, v in changes.items():
        if v is KeyError:
            objs[line_index].pop(k)
        else:
            objs[line_index][k] = v
    return "\n".join(json.dumps(o) for o in objs)


@pytest.mark.parametrize("idx,changes,field", [
    (0, {"format": "nope"}, "format"),
    (0, {"version": 2}, "version"),
    (0, {"target": 4}, "target"),
    (0, {"n_gpus": 1}, "n_gpus"),
    (0, {"source": "guess"}, "source"),
    (1, {"src": 0}, "src"),                 # src == dst
    (1, {"dst": 9}, "dst"),
    (1, {"wakeup_ns": -1}, "wakeup_ns"),
    (1, {"offset": 4094}, "offset"),        # past end
    (1, {"offset": 2}, "offset"),           # misaligned flag
    (1, {"size": 3}, "size"),
    (1, {"value": 1 << 32}, "value"),
    (1, {"value": None}, "value"),          # flag needs a value
    (1, {"buffer": "nosuch"}, "buffer"),
    (4, {"value": 5}, "value"),             # data write > 8 bytes with a value
    (1, {"seen_ns": 1.5}, "seen_ns"),
])
def test_validation_names_field_and_line(idx, changes, field):
    with pytest.raises(TraceError) as ei:
        loads(_mutate(idx, **changes))
    e = ei.value
    assert e.code == ErrorCode.TRACE_INVALID
    assert e.fields.get("field") == field, e
    assert e.fields.get("line") == idx + 1


def test_unknown_and_missing_keys():
    with pytest.raises(TraceError, match="unknown write keys"):
        loads(_mutate(2, bogus=1))
    with pytest.raises(TraceError, match="missing"):
        loads(_mutate(2, wakeup_ns=KeyError))
    with pytest.raises(TraceError, match="unknown header keys"):
        loads(_mutate(0, extra=1))


def test_conflicting_same_instant_flag_writes():
    t = _trace()
    w = t.writes[0]
    bad = TraceWrite(src=2, dst=0, buffer="flags", offset=w.offset, size=4, value=2, wakeup_ns=w.wakeup_ns)
    with pytest.raises(TraceError, match="same wakeup_ns"):
        Trace(t.header, t.writes + (bad,))


def test_bad_json_and_empty(tmp_path):
    with pytest.raises(TraceError, match="not valid JSON"):
        loads('{"format":')
    with pytest.raises(TraceError, match="empty trace"):
        loads("\n\n")
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "missing.jsonl")


def test_for_target_and_shift():
    t = _trace()
    hdr = TraceHeader(n_gpus=4, target=0, source="recorded", buffers=t.header.buffers)
    extra = TraceWrite(src=0, dst=1, buffer="flags", offset=0, size=4, value=1, wakeup_ns=5)
    u = Trace(hdr, t.writes + (extra,))
    assert len(u.for_target(0).writes) == 6
    assert u.for_target(1).writes == (extra,)
    s = t.shifted(-950)
    assert min(w.wakeup_ns for w in s.writes) == 0
    assert t.shifted(100).span_ns() == t.span_ns() + 100
