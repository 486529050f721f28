"""Native entries in CUDA graphs (HBF_GRAPH_NATIVE, wt/gnat15; docs/design.md "Native entries in graphs"): a launch on a
capturing stream decided native captures the kernel's native entry and the session records what its replays can reach
(the argument extents; everything for HBF_GRAPH_NATIVE=all's unbounded record); a later registration over a record is
refused with RANGE_ADMITTED before hbfd (or eidola's flag table) hears of it, until Session.release_graph_captures().
The device is the model of test_graph_selection.py (the module words, the graph's nodes, the body a launch or a replay
runs), with the function each node launches, allocations as 1 MiB blocks (cuMemGetAddressRange), and a stand-in hbfd
that records what it was asked. The invariant, over random scripts: no replay that may reach a registered range runs
untouched (a native-entry node never, an instrumented node by the words), and a registration is refused exactly when
it overlaps a capture's record."""
from __future__ import annotations

import ctypes
import random
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_graph_selection as G  # noqa: E402
import test_native_entry_launch as N  # noqa: E402

from hbfcommon import ctl as C  # noqa: E402
from hbfcommon.errors import ConfigError, ErrorCode, RangeError  # noqa: E402
from runtime_cuda import devstate as D  # noqa: E402
from runtime_cuda import knobs  # noqa: E402
from runtime_cuda.session import GraphCaptures, KernelInfo, Session, graph_native_reach  # noqa: E402

ALLOC = 1 << 20
FLOOR = 0x7F00_0000_0000          # allocations live above this (a value below is a scalar: no allocation)
FN_G = N.FN + 1                   # the instrumented entry of "g" (addresses from memory)


class Dev(N.LaunchDevice):
    """The model device with allocations (1 MiB blocks above FLOOR), the function each launch ran (a node of the graph
    being captured on a capturing stream), a stream whose capture status is an error, and a VA reservation."""

    def __init__(self, switch: bool = True):
        G.Device.__init__(self, switch)
        self.launched: list[int] = []
        self.erroring: set[int] = set()      # cuStreamIsCapturing fails there (counts as capturing)
        self.freed: list[tuple[int, int]] = []
        self.reserve_at = FLOOR + 40 * ALLOC

    def stream_capturing(self, stream):
        return int(stream) in self.capturing or int(stream) in self.erroring

    def stream_capture_active(self, stream):
        return int(stream) in self.capturing and int(stream) not in self.erroring

    def address_range(self, p):
        return (p & ~(ALLOC - 1), ALLOC) if p >= FLOOR else None

    def launch(self, function, grid, block, args, shared, stream):
        self.launched.append(int(function))

    def address_reserve(self, nbytes):
        return self.reserve_at, nbytes

    def address_free(self, base, nbytes):
        self.freed.append((base, nbytes))


class Hbfd:
    """A stand-in hbfd: its range table (refusing overlaps, as hbfd does) and every call it got."""

    def __init__(self):
        from hbfproto import hbf_pb2
        self.pb = hbf_pb2
        self.table: dict[int, D.DevRange] = {}
        self.calls: list[str] = []
        self.next_id, self.gen = 1, 0
        self.timeout_s = 10.0

    def call(self, method, req=None, timeout_s=None):
        self.calls.append(method)
        if method == "RegisterRange":
            r = req.range
            for x in self.table.values():
                if x.base < r.base + r.length and r.base < x.end:
                    raise RangeError("overlap", code=ErrorCode.RANGE_OVERLAP)
            rid, self.next_id = self.next_id, self.next_id + 1
            self.table[rid] = D.DevRange(r.base, r.length, 0, rid, int(r.mode), r.perms, 4096)
        elif method == "UnregisterRange":
            del self.table[req.range_id]
            rid = req.range_id
        elif method == "Report":
            return None
        self.gen += 1
        return SimpleNamespace(range=SimpleNamespace(range_id=rid), snapshot_generation=self.gen, capacity_path="")


def _session(mode: str = "bounded", switch: bool = True) -> tuple[Session, object, Dev, Hbfd]:
    dev = Dev(switch)
    s, b = N._launch_session(dev)
    s.functions = {N.FN: (b, N.PARAMS), FN_G: (b, N.MEMORY)}
    s.graph_native, s._gn, s._lock = mode, GraphCaptures(), threading.RLock()
    s.client = hbfd = Hbfd()
    s._range_allocs, s._flag_ids, s._flag_table, s.capacity = {}, {}, None, {}
    reports: list[tuple[str, dict]] = []
    s._report = lambda kind, event: reports.append((kind, event))
    s.reports = reports

    def refresh(want_generation: int = 0) -> None:      # Session._refresh_ranges without the control region
        with s._lock:
            new = list(hbfd.table.values())
            s._outside_registrations(s.ranges, new)
            s.ranges = sorted(new, key=lambda r: r.base)
            s._set_module_words()
    s._refresh_ranges = refresh
    return s, b, dev, hbfd


def _launch(s, dev, fn, ptrs, stream=9) -> int:
    s.launch(fn, (1, 1, 1), (128, 1, 1), [ctypes.c_uint64(p) for p in ptrs] + [ctypes.c_int32(7)],
             kernel="k" if fn == N.FN else "g", stream=stream)
    return dev.launched[-1]


A0, A1, A2 = FLOOR, FLOOR + ALLOC, FLOOR + 2 * ALLOC       # three allocations


def test_a_capture_decided_native_launches_the_native_entry_and_records_its_extents():
    s, b, dev, hbfd = _session()
    words = dict(dev.word)
    dev.capturing.add(9)
    assert _launch(s, dev, N.FN, [A0 + 64, A1 + 8, 4096]) == N.NATIVE_FN      # 4096: a scalar, no allocation
    assert dev.graph == [] and dev.word == words and not b.captured          # no word written, the module not pinned
    assert s._gn.extents == {(A0, ALLOC): {"k": 1}, (A1, ALLOC): {"k": 1}}
    sel = s.launch_selection["k"]
    assert sel["captured_native"] == sel["captured"] == sel["native_entry"] == sel["native"] == 1
    assert sel["word"] == {"captured native entry: not written": 1}
    c = s._gn.summary(s.graph_native)
    assert c["extents"] == 2 and c["kernels"] == {"k": 1} and not c["unbounded"]


def test_a_registration_over_a_capture_is_refused_before_hbfd_hears_of_it():
    s, b, dev, hbfd = _session()
    dev.capturing.add(9)
    _launch(s, dev, N.FN, [A0 + 64])
    dev.capturing.clear()
    with pytest.raises(RangeError) as ei:
        s.register_timing_range(A0 + 4096, 256)
    e = ei.value
    assert e.code == ErrorCode.RANGE_ADMITTED
    for part in ("k (1 capture)", f"[{A0:#x}, {A0 + ALLOC:#x})", "release_graph_captures", "HBF_GRAPH_NATIVE=0",
                 "re-capture"):
        assert part in str(e), part
    assert "RegisterRange" not in hbfd.calls and hbfd.table == {} and s.ranges == []    # nothing half-registered
    assert [k for k, _ in s.reports] == ["registration_refused"]
    r = s.register_timing_range(A2, 4096)                    # elsewhere: accepted
    assert [x.base for x in s.ranges] == [A2] and int(r.range_id) in hbfd.table
    out = s.release_graph_captures()
    assert out == {"extents": 1, "unbounded": False, "kernels": {"k": 1}} and s._gn.extents == {}
    s.register_timing_range(A0 + 4096, 256)                  # released: accepted
    assert s._gn.summary("bounded")["released"] == 1 and s._gn.summary("bounded")["refused_registrations"] == 1


@pytest.mark.parametrize("switch", [True, False])
def test_a_capture_that_reaches_a_range_stays_instrumented_with_the_old_rules(switch):
    s, b, dev, hbfd = _session(switch=switch)
    s.register_timing_range(A0, 4096)
    _launch(s, dev, N.FN, [A2], stream=7)                    # host, reaches nothing: native entry, words untouched
    dev.capturing.add(9)
    assert _launch(s, dev, N.FN, [A0 + 8]) == N.FN           # reaches the range: instrumented
    assert b.captured and s._gn.extents == {}
    assert _launch(s, dev, N.FN, [A2 + 8]) == N.NATIVE_FN     # reaches none: native, recorded
    assert s._gn.extents == {(A2, ALLOC): {"k": 1}}


def test_addresses_from_memory_never_capture_native_when_bounded_and_unbounded_with_all():
    s, b, dev, hbfd = _session("bounded")
    dev.capturing.add(9)
    assert _launch(s, dev, FN_G, [A0]) == FN_G and s._gn.extents == {}
    s, b, dev, hbfd = _session("all")
    dev.capturing.add(9)
    assert _launch(s, dev, FN_G, [A0]) == N.NATIVE_FN + 1
    assert s._gn.extents == {None: {"g": 1}} and s._gn.summary("all")["unbounded"]
    dev.capturing.clear()
    with pytest.raises(RangeError) as ei:                    # the unbounded record: every registration
        s.register_timing_range(FLOOR + 99 * ALLOC, 64)
    assert ei.value.code == ErrorCode.RANGE_ADMITTED and "everything" in str(ei.value) and hbfd.table == {}
    assert s.release_graph_captures()["unbounded"]
    s.register_timing_range(FLOOR + 99 * ALLOC, 64)
    dev.capturing.add(9)                                     # a range registered: "all" does not capture it native
    assert _launch(s, dev, FN_G, [A0]) == FN_G and s._gn.extents == {}
    assert _launch(s, dev, N.FN, [A0]) == N.NATIVE_FN and s._gn.extents == {(A0, ALLOC): {"k": 1}}


def test_reach_rules():
    P, M = N.PARAMS, N.MEMORY
    ext = lambda: [(A0, ALLOC)]  # noqa: E731
    assert graph_native_reach("off", None, P, None, ext)[0] is False
    assert graph_native_reach("bounded", False, P, [(A0, 8)], ext)[0] is False         # reaches a range
    assert graph_native_reach("bounded", True, P, [(A1, 8), (A2, 0)], None)[:2] == (True, [(A1, 8)])
    assert graph_native_reach("bounded", None, P, None, ext)[:2] == (True, [(A0, ALLOC)])
    assert graph_native_reach("bounded", None, P, None, None)[0] is False             # extents unknown
    assert graph_native_reach("all", None, P, None, None)[:2] == (True, None)         # ... unbounded with all
    assert graph_native_reach("all", None, P, None, lambda: None)[:2] == (True, None)
    assert graph_native_reach("bounded", None, M, None, ext)[0] is False
    assert graph_native_reach("all", None, M, None, ext)[:2] == (True, None)
    assert graph_native_reach("all", True, P, [(A1, 8)], None)[:2] == (True, [(A1, 8)])


def test_a_capture_status_error_keeps_the_instrumented_entry():
    """cuStreamIsCapturing failing counts as capturing (the old capture rules) and never captures native."""
    s, b, dev, hbfd = _session("all")
    dev.erroring.add(9)
    assert _launch(s, dev, N.FN, [A0]) == N.FN and _launch(s, dev, FN_G, [A0]) == FN_G
    assert s._gn.extents == {} and b.captured and s.launch_selection["k"]["captured_native"] == 0


def test_a_range_landing_during_the_decision_is_seen_under_the_lock():
    """The locked re-check: a registration that landed between the selection and the record (another thread) makes
    the capture instrumented, never a record over a registered range."""
    s, b, dev, hbfd = _session()
    landed = D.DevRange(A0 + 128, 64, 0, 77, C.HBF_MODE_TIMING, 7, 4096)

    def extents():
        s.ranges = [landed]          # what _refresh_ranges of the other thread did meanwhile
        return [(A0, ALLOC)]
    dev.capturing.add(9)
    assert s._select(b, N.PARAMS, None, 9, "allocation", switch=True, extents=extents) is None
    assert s._gn.extents == {}


def test_knob_off_is_the_old_behaviour():
    s, b, dev, hbfd = _session("off")
    dev.capturing.add(9)
    assert _launch(s, dev, N.FN, [A0]) == N.FN and _launch(s, dev, FN_G, [A0]) == FN_G
    assert s._gn.extents == {} and b.captured
    dev.capturing.clear()
    s.register_timing_range(A0, 4096)                      # accepted: rule 3 attaches the module for the replays
    assert dev.word[G.WORD] == G.STATE and "captured_native" in s.launch_selection["k"]


def test_knob_values(monkeypatch):
    for v, want in (("", "off"), ("0", "off"), ("off", "off"), ("1", "bounded"), ("bounded", "bounded"),
                    ("on", "bounded"), ("ALL", "all")):
        monkeypatch.setenv("HBF_GRAPH_NATIVE", v)
        assert knobs.graph_native() == want
    monkeypatch.delenv("HBF_GRAPH_NATIVE")
    assert knobs.graph_native() == "off"
    monkeypatch.setenv("HBF_GRAPH_NATIVE", "sometimes")
    with pytest.raises(ConfigError):
        knobs.graph_native()


def test_flag_and_capacity_registrations_are_refused_first(monkeypatch):
    s, b, dev, hbfd = _session()
    dev.capturing.add(9)
    _launch(s, dev, N.FN, [A0 + 8])
    dev.capturing.clear()

    class Table:
        def __init__(self, ranges=()):
            self.added, self.ranges = [], list(ranges)

        def flag_ranges(self):
            return self.ranges

        def add_flag_range(self, base, length, klass, name):
            self.added.append(base)

        def remove_flag_range(self, base):
            pass
    s._ensure_open = lambda: None
    t = Table()
    s._flag_table = t
    with pytest.raises(RangeError) as ei:
        s.register_flag_range(A0 + 128, 128)
    assert ei.value.code == ErrorCode.RANGE_ADMITTED and t.added == [] and hbfd.table == {}
    s._flag_table = None
    pre = Table([SimpleNamespace(base=A2, length=128, klass=1, name="ok"),
                 SimpleNamespace(base=A0 + 256, length=128, klass=1, name="over")])
    with pytest.raises(RangeError):
        s.attach_flag_table(pre)
    assert s._flag_table is None and hbfd.table == {}          # none of its ranges recorded
    monkeypatch.setenv("HBF_CAPACITY_DEVICE", "1")
    dev.reserve_at = A0 + 4096                                # a reservation over the record (a freed allocation)
    with pytest.raises(RangeError) as ei:
        s.register_capacity_range(None, 8192)
    assert ei.value.code == ErrorCode.RANGE_ADMITTED and hbfd.table == {} and "RegisterRange" not in hbfd.calls
    assert dev.freed == [(A0 + 4096, 8192)]                   # the reservation given back


def test_a_range_registered_past_the_session_over_a_capture_is_loud(caplog):
    s, b, dev, hbfd = _session()
    dev.capturing.add(9)
    _launch(s, dev, N.FN, [A0 + 8])
    hbfd.table[50] = D.DevRange(A0, 64, 0, 50, C.HBF_MODE_TIMING, 7, 4096)   # another client of hbfd
    with caplog.at_level("ERROR"):
        s.register_timing_range(A2, 64)                        # this session's refresh sees it
    out = s._gn.summary("bounded")["outside_registrations"]
    assert [e["range_id"] for e in out] == [50] and "another client" in caplog.text
    assert ("graph_native_overlap" in [k for k, _ in s.reports])


def test_triton_capture_passes_the_native_handle_and_records_the_storage():
    pytest.importorskip("triton")
    s, b, dev, hbfd = _session()
    k = N.FakeKernel(N.FN)
    s._wrap_native_run(k, b, "k", N.FN)
    dev.capturing.add(7)
    k.launch(7, N.FakeTensor(A0 + 64, 16), A1 + 5, 512, hook=s._triton_launch)       # a tensor, a raw pointer, a size
    assert k.calls == [N.NATIVE_FN]
    assert s._gn.extents == {(A0 + 64, 64): {"k": 1}, (A1, ALLOC): {"k": 1}}
    with pytest.raises(RangeError):
        s.register_timing_range(A1 + 4096, 64)
    s.register_timing_range(A0 + 4096, 64)                   # the same allocation, past the tensor's storage
    k.launch(7, N.FakeTensor(A0 + 4096, 16), 0, 512, hook=s._triton_launch)           # reaches it: instrumented
    assert k.calls == [N.NATIVE_FN, N.FN]
    assert s.launch_selection["k"]["captured_native"] == 1 and s.launch_selection["k"]["captured"] == 2


# ------------------------------------------------------------------------------------------ the property
SLOTS = [(FLOOR + i * ALLOC + off, n) for i in range(4) for off, n in ((0, 4096), (ALLOC // 2, 256))] \
    + [(FLOOR + 5 * ALLOC, 2 * ALLOC)]          # candidate ranges (one spans two allocations)


def _blocks(ptrs) -> list[tuple[int, int]]:
    return sorted({(p & ~(ALLOC - 1), ALLOC) for p in ptrs if p >= FLOOR})


def _reaches(ranges, info, ptrs) -> bool:
    """What a launch may reach (its pointers' allocations; a kernel taking addresses from memory: anything)."""
    if info.address_source != "params":
        return bool(ranges)
    return any(r.base < a + n and a < r.end for a, n in _blocks(ptrs) for r in ranges)


def _run_script(seed: int, mode: str, switch: bool) -> dict:
    rng = random.Random(seed)
    s, b, dev, hbfd = _session(mode, switch)
    graphs: list[list[tuple]] = []            # live graphs: nodes ("write", addr, v) | ("kernel", fn, info, ptrs)
    records: list = []                         # the model's own records: per native capture, its reach (None: all)
    seen = {"native_nodes": 0, "refused": 0, "replays": 0, "instrumented_nodes": 0}
    capturing = None
    for _ in range(300):
        r = rng.random()
        if r < 0.12:                           # a registration: refused exactly when it overlaps a record
            base, n = rng.choice(SLOTS)
            if any(x.base == base for x in hbfd.table.values()) or \
                    any(x.base < base + n and base < x.end for x in hbfd.table.values()):
                continue
            over = any(rec is None or any(a < base + n and base < a + m for a, m in rec) for rec in records)
            before = dict(hbfd.table)
            try:
                s.register_timing_range(base, n)
                assert not over, "a registration over a native capture was accepted"
            except RangeError as e:
                assert over and e.code == ErrorCode.RANGE_ADMITTED
                assert hbfd.table == before
                seen["refused"] += 1
        elif r < 0.18 and hbfd.table:
            s.unregister(rng.choice(list(hbfd.table)))
        elif r < 0.26:                         # begin or end a capture (ending keeps the graph alive)
            if capturing is None:
                capturing = []
                dev.capturing.add(9)
                dev.graph = capturing
            else:
                dev.capturing.discard(9)
                graphs.append(capturing)
                capturing = None
        elif r < 0.30 and graphs and capturing is None:    # destroy every graph, then release (the API's contract:
            # a capture in progress holds its nodes too)
            graphs.clear()
            s.release_graph_captures()
            records.clear()
        elif r < 0.45 and graphs:              # a replay
            g = rng.choice(graphs)
            for node in g:
                if node[0] == "write":
                    dev.word[node[1]] = node[2]
                    continue
                _, fn, info, ptrs = node
                if fn in (N.NATIVE_FN, N.NATIVE_FN + 1):
                    assert not _reaches(s.ranges, info, ptrs), "a native-entry replay reached a registered range"
                    seen["native_nodes"] += 1
                else:
                    body = G._body(s, dev)
                    assert not (_reaches(s.ranges, info, ptrs) and body == "native"), \
                        "an instrumented replay that reaches a range ran native"
                    seen["instrumented_nodes"] += 1
            G._agree(dev)
            seen["replays"] += 1
        else:                                   # a launch: host or captured
            fn, info = rng.choice(((N.FN, N.PARAMS), (FN_G, N.MEMORY)))
            ptrs = [rng.choice((A0, A1, A2, FLOOR + 3 * ALLOC, FLOOR + 5 * ALLOC, FLOOR + 6 * ALLOC, 0, 4096))
                    + rng.randrange(64) for _ in range(rng.randrange(1, 4))]
            stream = 9 if capturing is not None and rng.random() < 0.8 else 7
            n0 = s._gn.kernels.get(info.name, 0)
            ran = _launch(s, dev, fn, ptrs, stream)
            if stream == 9 and capturing is not None:
                if ran in (N.NATIVE_FN, N.NATIVE_FN + 1):
                    assert s._gn.kernels.get(info.name, 0) == n0 + 1
                    records.append(_blocks(ptrs) if info.address_source == "params" else None)
                    assert mode != "off"
                capturing.append(("kernel", ran, info, ptrs))
            elif ran == N.FN or ran == FN_G:
                assert not (_reaches(s.ranges, info, ptrs) and G._body(s, dev) == "native")
            else:
                assert not _reaches(s.ranges, info, ptrs), "a host launch on the native entry reached a range"
    return seen


@pytest.mark.parametrize("switch", [True, False])
@pytest.mark.parametrize("mode", ["off", "bounded", "all"])
@pytest.mark.parametrize("seed", range(8))
def test_no_replay_reaches_a_registered_range_untouched(seed, mode, switch):
    seen = _run_script(seed, mode, switch)
    assert seen["replays"] > 0
    if mode == "off":
        assert seen["native_nodes"] == 0 and seen["refused"] == 0


def test_the_scripts_exercise_native_nodes_and_refusals():
    tot = {"native_nodes": 0, "refused": 0}
    for seed in range(8):
        for mode in ("bounded", "all"):
            seen = _run_script(seed, mode, True)
            tot = {k: tot[k] + seen[k] for k in tot}
    assert tot["native_nodes"] > 20 and tot["refused"] > 5, tot


def test_the_property_fails_without_the_refusal(monkeypatch):
    """The check that makes it hold: without it, a registration lands over a native capture and a replay reaches it."""
    monkeypatch.setattr(Session, "_refuse_over_captures", lambda self, *a: None)
    with pytest.raises(AssertionError, match="accepted|reached a registered range"):
        for seed in range(8):
            _run_script(seed, "bounded", True)



def test_the_real_hbfd_never_holds_a_refused_range(tmp_path):
    """End to end with the real daemon (a session without CUDA; the record as a native capture leaves it): the refused
    registration never reaches hbfd's table, the refusal is in its summary, and a range elsewhere registers."""
    import json

    import runtime_cuda
    from hbfd.runner import start_daemon
    root = Path(__file__).resolve().parents[2]
    with start_daemon("nominal", workdir=tmp_path, env={"HBFD_THERMAL": "none", "HBFD_ENGINE": "fixed"},
                      pythonpath=[root], timeout_s=90.0) as d:
        s = runtime_cuda.attach(socket=str(d.socket), cuda=False)
        try:
            s._captures().record("k", [(A0, ALLOC)])
            assert s.counters(publish=False)["graph_native"]["extents"] == 1
            with pytest.raises(RangeError) as ei:
                s.register_timing_range(A0 + ALLOC - 8, 64)
            assert ei.value.code == ErrorCode.RANGE_ADMITTED
            assert list(s.client.call("ListRanges", s.client.pb.ListRangesRequest()).ranges) == []
            r = s.register_timing_range(A1 + 64, 64)
            assert [int(x.range_id) for x in s.client.call("ListRanges", s.client.pb.ListRangesRequest()).ranges] \
                == [int(r.range_id)]
            summ = json.loads(s.client.call("GetSummary").summary_json)
            assert [x["data"]["base"] for x in summ["reports"] if x["kind"] == "registration_refused"] \
                == [hex(A0 + ALLOC - 8)]
            assert s.counters(publish=False)["graph_native"]["refused_registrations"] == 1
        finally:
            s.close()
