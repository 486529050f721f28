import random

import numpy as np
import pytest

from hbfcommon.errors import TraceError
from eidola.generator import GemvArLayout, uniform_delay
from eidola.wtt import WriteTrackingTable

BASE = 0x7F0000000000


def _table(order_seed=None):
    ws = [(BASE + 0, 1, 4, 500), (BASE + 0, 2, 4, 1500), (BASE + 4, 7, 4, 100),
          (BASE + 8, 9, 8, 800), (BASE + 0, 3, 4, 3000), (BASE + 256, 5, 4, 50)]
    if order_seed is not None:
        random.Random(order_seed).shuffle(ws)
    t = WriteTrackingTable()
    for a, v, s, w in ws:
        t.register_write(a, v, s, w)
    return t.freeze()


def test_sorted_by_wakeup_regardless_of_registration_order():
    ref = [(e.addr, e.value, e.wakeup_ns) for e in _table().by_time]
    assert [w for _, _, w in ref] == sorted(w for _, _, w in ref)
    for seed in range(5):
        f = _table(seed)
        assert [(e.addr, e.value, e.wakeup_ns) for e in f.by_time] == ref


@pytest.mark.parametrize("t,expect", [(0, 0), (499, 0), (500, 1), (1499, 1), (1500, 2), (2999, 2),
                                      (3000, 3), (10**9, 3)])
def test_value_visible_at_time(t, expect):
    f = _table(3)
    assert f.value_at(BASE, t) == expect
    assert f.value_at(BASE + 4, 99) == 0 and f.value_at(BASE + 4, 100) == 7
    assert f.value_at(BASE + 12, 10**6, initial=42) == 42     # never written: initial


def test_next_match_and_line_wake():
    f = _table()
    assert f.next_match(BASE, 0, 2) == 1500
    assert f.next_match(BASE, 1600, 2) == 1600                 # already visible
    assert f.next_match(BASE, 0, 99) is None
    assert f.next_match(BASE, 0, 0x2, mask=0x2) == 1500       # masked compare: 2 & 2
    assert f.next_write_to_line(BASE + 4, 0) == 100           # any write to the 128-B line
    assert f.next_write_to_line(BASE + 4, 100) == 500
    assert f.next_write_to_line(BASE + 256, 50) is None


def test_device_arrays_match_lookup():
    f = _table(1)
    d = f.device_arrays()
    assert list(d["v_addr"]) == sorted(set(int(a) for a in d["t_addr"]))
    assert d["v_begin"][-1] == len(d["v_time"]) == len(f)
    # emulate the device's two binary searches
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = int(rng.choice(d["v_addr"]))
        t = int(rng.integers(0, 4000))
        i = int(np.searchsorted(d["v_addr"], a))
        lo, hi = d["v_begin"][i], d["v_begin"][i + 1]
        j = int(np.searchsorted(d["v_time"][lo:hi], t, side="right"))
        got = 0 if j == 0 else int(d["v_value"][lo + j - 1])
        assert got == f.value_at(a, t)


@pytest.mark.parametrize("args,field", [((BASE + 2, 1, 4, 0), "addr"), ((BASE, 1, 3, 0), "size"),
                                        ((BASE, 1 << 32, 4, 0), "value"), ((BASE, 1, 4, -5), "wakeup_ns")])
def test_register_write_validation(args, field):
    with pytest.raises(TraceError) as ei:
        WriteTrackingTable().register_write(*args)
    assert ei.value.fields["field"] == field


def test_conflicts_are_errors():
    t = WriteTrackingTable()
    t.register_write(BASE, 1, 4, 10)
    t.register_write(BASE, 2, 4, 10)
    with pytest.raises(TraceError, match="same wakeup_ns"):
        t.freeze()
    t = WriteTrackingTable()
    t.register_write(BASE, 1, 8, 10)
    t.register_write(BASE + 4, 1, 4, 20)
    with pytest.raises(TraceError, match="overlapping"):
        t.freeze()


def test_from_trace_places_flags_at_buffer_base():
    tr = uniform_delay(n_gpus=4, tiles=3, tile_rows=8, delay_ns=2000)
    lay = GemvArLayout(4, 3, 8)
    f = WriteTrackingTable.from_trace(tr, {"flags": BASE}).freeze()
    assert len(f) == 3 * 3
    for b in range(3):
        for p in (1, 2, 3):
            a = BASE + lay.flag_offset(b, p)
            assert f.value_at(a, 1999) == 0 and f.value_at(a, 2000) == 1
    with pytest.raises(TraceError, match="no device base"):
        WriteTrackingTable.from_trace(tr, {})
