"""Per-launch selection with CUDA graphs (runtime_cuda.session.state_word, Session._select, _set_module_words): a
graph replays a captured launch later without the launch path, reading the module's __hb_state as it finds it. The
device is stood in by a model (no GPU): the words per module (__hb_state and, in a module built with it, the attach
switch in its constant bank, __hb_detached), a capturing stream whose writes and launches become the graph's nodes,
and the body a kernel runs (switch nonzero: native; word 0: native; attached: instrumented iff any range is
registered, the prologue's span check). Every launch and every replay is checked: one that may reach a registered
range never runs the native body, and the two words always agree once the writes of a step have landed. Every
scenario runs for both module forms (with the switch, and built before it: __hb_state only)."""
from __future__ import annotations


import ctypes

import pytest

from hbfcommon import abi
from runtime_cuda import devstate as D
from runtime_cuda.session import KernelInfo, ModuleBinding, Session, module_words, state_word

STATE = 0x7000_0000
WORD = 0x6000_0000          # the module's __hb_state
DET = 0x6100_0000           # its __hb_detached (the constant bank; a module built before it has none)
R = D.DevRange(0x10000, 0x1000, 0, 1, 1, 7, 4096)
REACH, ELSEWHERE = [(0x10800, 4)], [(0x20000, 256)]
PARAMS = KernelInfo("k", 0, 0, True, [], "params")
MEMORY = KernelInfo("g", 0, 0, True, [], "memory")


@pytest.mark.parametrize("native,captured,capturing,want", [
    (None, False, False, False),      # nothing registered: detached (one load at entry)
    (None, True, False, False),       # a captured module too: a registration attaches it again
    (None, False, True, None),        # capture: never a detach
    (False, False, False, True),
    (False, True, True, True),
    (True, False, False, False),      # reaches no range: detached
    (True, True, False, True),        # a captured module is never detached while a range is registered
    (True, False, True, True),        # capture with a range registered: attached
])
def test_state_word_rules(native, captured, capturing, want):
    assert state_word(native, captured=captured, capturing=capturing)[0] is want


class Device:
    """The driver calls _select and _set_module_words make, on a model of the device: host writes land at once,
    a write or launch on a capturing stream becomes a node of the graph being captured."""

    def __init__(self, switch: bool = True):
        self.word = {WORD: STATE, DET: 0} if switch else {WORD: STATE}
        self.capturing: set[int] = set()
        self.graph: list[tuple] = []
        self.stream_syncs = 0

    def stream_capturing(self, stream):
        return int(stream) in self.capturing

    def memset_u64_async(self, addr, value, stream):
        if int(stream) in self.capturing:
            self.graph.append(("write", addr, int(value)))
        else:
            self.word[addr] = int(value)

    def htod(self, addr, src, nbytes):
        assert nbytes == 8
        self.word[addr] = int(src.value)

    def stream_synchronize(self, stream):
        self.stream_syncs += 1

    def copy_function_attributes(self, src, dst):
        """cudrv.copy_function_attributes: recorded (src, dst) -- the launch path readies a native entry with it."""
        self.__dict__.setdefault("copied", []).append((int(src), int(dst)))
        return {}


def _session(dev: Device) -> tuple[Session, ModuleBinding]:
    s = object.__new__(Session)     # only what _select and _set_module_words read
    s.use_cuda, s.native_select, s.ranges, s._cu, s.state_dptr, s._epoch = True, True, [], dev, STATE, 0
    s.launch_selection = {}
    b = ModuleBinding(0x1234, True, 0, {"k": PARAMS, "g": MEMORY}, state_addr=WORD,
                      detached_addr=DET if DET in dev.word else 0)
    s.bindings = {b.module: b}
    return s, b


def _body(s: Session, dev: Device) -> str:
    """What the kernel's prologue picks now: the switch nonzero -> native (one constant-bank read); word 0 -> native;
    attached -> the band's span decides."""
    if dev.word.get(DET, 0) != 0:
        return "native"
    return "native" if dev.word[WORD] == 0 or not s.ranges else "instrumented"


def _agree(dev: Device) -> None:
    """The two words after a step: the switch says detached exactly when the word is 0."""
    if DET in dev.word:
        assert dev.word[DET] == (1 if dev.word[WORD] == 0 else 0), dev.word


@pytest.fixture(name="dev", params=["switch", "old"])
def _dev(request) -> Device:
    """The device of a module with the attach switch, and of one built before it."""
    return Device(switch=request.param == "switch")


def _must_model(s: Session, info: KernelInfo, spans) -> bool:
    return bool(s.ranges) and (info.address_source != "params"
                               or any(r.base < a + n and a < r.end for a, n in spans for r in s.ranges))


def launch(s, b, dev, info, spans, stream=7) -> str:
    s._select(b, info, spans, stream, "storage")
    if stream in dev.capturing:
        dev.graph.append(("kernel", info, spans))
        return "captured"
    body = _body(s, dev)
    assert not (_must_model(s, info, spans) and body == "native"), "a launch that may reach a range ran native"
    _agree(dev)
    return body


def replay(s, dev, graph) -> list[str]:
    out = []
    for node in graph:
        if node[0] == "write":
            dev.word[node[1]] = node[2]
        else:
            body = _body(s, dev)
            assert not (_must_model(s, node[1], node[2]) and body == "native"), \
                "a replayed launch that may reach a range ran native"
            out.append(body)
    _agree(dev)
    return out


def capture(s, b, dev, launches, stream=9) -> list[tuple]:
    dev.capturing.add(stream)
    dev.graph = []
    for info, spans in launches:
        launch(s, b, dev, info, spans, stream)
    dev.capturing.discard(stream)
    return dev.graph


def table(s, ranges):
    """A registration or unregistration: the table changes with the context idle, then every module's word."""
    s.ranges = list(ranges)
    s._set_module_words()
    _agree(s._cu)


def test_nothing_registered_detaches_and_a_registration_attaches_every_replay(dev):
    s, b = _session(dev)
    assert launch(s, b, dev, PARAMS, REACH) == "native" and dev.word[WORD] == 0      # one load at entry
    g = capture(s, b, dev, [(PARAMS, REACH), (MEMORY, ELSEWHERE)])
    assert [n[0] for n in g] == ["kernel", "kernel"]              # nothing written into the graph
    assert replay(s, dev, g) == ["native", "native"]
    table(s, [R])                                                  # a range the captured arguments reach
    assert dev.word[WORD] == STATE and b.attached
    assert replay(s, dev, g) == ["instrumented", "instrumented"]
    table(s, [])
    assert dev.word[WORD] == 0 and replay(s, dev, g) == ["native", "native"]
    sel = s.launch_selection["k"]
    assert sel["captured"] == 1 and sel["native"] == 2
    assert sel["word"] == {"nothing registered: detached": 1,
                           "capture, nothing registered: left as is (a registration attaches it)": 1}


def test_a_capture_attaches_a_detached_module_in_the_graph_and_pins_it(dev):
    s, b = _session(dev)
    table(s, [R])
    assert launch(s, b, dev, PARAMS, ELSEWHERE) == "native" and dev.word[WORD] == 0    # per-launch selection
    g = capture(s, b, dev, [(PARAMS, REACH)])
    # the replay attaches first: both words where the module has the switch
    assert g[:-1] == [("write", a, v) for a, v in module_words(WORD, b.detached_addr, STATE, True)]
    assert g[-1][0] == "kernel" and len(g) == (3 if b.detached_addr else 2)
    assert dev.word[WORD] == 0 and not b.attached and b.captured    # captured, not run: the word is unchanged
    # a host launch that reaches no range would detach an unpinned module; this one stays attached
    assert launch(s, b, dev, PARAMS, ELSEWHERE) == "instrumented" and dev.word[WORD] == STATE
    assert replay(s, dev, g) == ["instrumented"]
    assert s.launch_selection["k"]["word"]["captured module, a range registered: attached"] == 1


def test_the_old_rule_would_replay_native_where_a_range_is_reached():
    """Without the pin, a host launch that reaches no range after the capture detaches the module, and the graph
    (captured attached, no write of its own) replays its reaching launch native: what the rules prevent."""
    dev = Device()
    s, b = _session(dev)
    table(s, [R])
    g = capture(s, b, dev, [(PARAMS, REACH)])
    assert [n[0] for n in g] == ["kernel"]                          # attached already: nothing to write
    b.captured = False                                              # the old session knew nothing of the capture
    launch(s, b, dev, PARAMS, ELSEWHERE)
    assert dev.word[WORD] == 0
    with pytest.raises(AssertionError, match="replayed launch"):
        replay(s, dev, g)


def test_capture_with_a_range_registered_never_writes_a_detach(dev):
    s, b = _session(dev)
    table(s, [R])
    g = capture(s, b, dev, [(PARAMS, ELSEWHERE), (MEMORY, ELSEWHERE), (PARAMS, REACH)])
    assert all(n[0] == "kernel" for n in g)                         # attached all along: no write at all
    assert replay(s, dev, g) == ["instrumented"] * 3
    table(s, [])                                                    # nothing registered: the same graph runs native
    assert replay(s, dev, g) == ["native"] * 3
    table(s, [R])
    assert replay(s, dev, g) == ["instrumented"] * 3


def test_selection_off_keeps_the_session_state(dev):
    s, b = _session(dev)
    s.native_select = False
    table(s, [])
    assert dev.word[WORD] == STATE
    assert launch(s, b, dev, PARAMS, ELSEWHERE) == "native"         # nothing registered: the span check
    assert dev.word[WORD] == STATE and s.launch_selection == {}


def test_cuda_stream_capturing_error_counts_as_capturing(monkeypatch):
    """cudrv.stream_capturing: an error (the legacy stream during another thread's global capture) is capturing.
    cudrv.stream_capture_active (HBF_GRAPH_NATIVE's condition to capture a native entry): only an answered ACTIVE
    capture; none, invalidated and an error are not."""
    from runtime_cuda import cudrv

    class Res:
        CUDA_SUCCESS = 0

    class Status:
        CU_STREAM_CAPTURE_STATUS_NONE = 0
        CU_STREAM_CAPTURE_STATUS_ACTIVE = 1

    class Drv:
        CUresult, CUstreamCaptureStatus = Res, Status

        def __init__(self, answer):
            self.answer = answer

        def CUstream(self, s):  # noqa: N802 - the driver's name
            return s

        def cuStreamIsCapturing(self, s):  # noqa: N802
            return self.answer

    for answer, want, active in (((0, 0), False, False), ((0, 1), True, True), ((0, 2), True, False),
                                 ((900, 0), True, False)):
        monkeypatch.setattr(cudrv, "drv", lambda a=answer: Drv(a))
        assert cudrv.stream_capturing(0) is want and cudrv.stream_capture_active(0) is active


def test_module_words_order_and_values():
    assert module_words(WORD, DET, STATE, True) == [(WORD, STATE), (DET, 0)]
    assert module_words(WORD, DET, STATE, False) == [(WORD, 0), (DET, 1)]
    assert module_words(WORD, 0, STATE, False) == [(WORD, 0)]          # a module built before the switch


class BindDevice(Device):
    """bind_module's driver calls: the module's globals by name (cuModuleGetGlobal), host writes of any width."""

    def __init__(self, names):
        super().__init__(switch=False)
        self.word = {}
        self.globals = {abi.STATE_GLOBAL: (WORD, 8), abi.KSLOT_BASE_GLOBAL: (0x6200_0000, 4),
                        abi.DETACHED_GLOBAL: (DET, 8)}
        self.globals = {n: v for n, v in self.globals.items() if n in names}

    def module_global(self, module, name):
        return self.globals.get(name)

    def htod(self, addr, src, nbytes):
        self.word[addr] = int(src.value)


def _bind_session(dev, ranges=(), const_switch=True) -> Session:
    import threading
    s = object.__new__(Session)     # only what bind_module reads
    s.use_cuda, s.native_select, s.ranges, s._cu, s.state_dptr, s._epoch = True, True, list(ranges), dev, STATE, 0
    s.const_switch = const_switch
    s.l2, s.cap_table_dptr, s._next_kslot, s.bindings, s._lock = None, 0, 0, {}, threading.Lock()
    s._ensure_open = lambda: None
    s._fit_stack = lambda module, names: None
    s._write_cdesc = lambda b, clear=False: None
    return s


@pytest.mark.parametrize("ranges", [(), (R,)])
def test_bind_writes_the_switch_where_the_module_has_it(ranges):
    """A module built with the switch gets both words at bind (detached: 0 and 1; attached: the state and 0); one
    built before it (no __hb_detached) only __hb_state, as before, and nothing is written elsewhere."""
    attach = bool(ranges)
    new = BindDevice({abi.STATE_GLOBAL, abi.KSLOT_BASE_GLOBAL, abi.DETACHED_GLOBAL})
    b = _bind_session(new, ranges).bind_module(0x1234, kernels=["k"])
    assert b.instrumented and b.detached_addr == DET and b.attached is attach
    assert new.word[WORD] == (STATE if attach else 0) and new.word[DET] == (0 if attach else 1)
    old = BindDevice({abi.STATE_GLOBAL, abi.KSLOT_BASE_GLOBAL})
    b = _bind_session(old, ranges).bind_module(0x1234, kernels=["k"])
    assert b.instrumented and b.detached_addr == 0 and DET not in old.word
    assert old.word[WORD] == (STATE if attach else 0)
    # HBF_CONST_SWITCH=0 (the fallback; the card confirmed the in-stream .const writes in stop 48): a module WITH the switch
    # is bound as one without it, the switch is never written (stays 0: every launch reads __hb_state)
    off = BindDevice({abi.STATE_GLOBAL, abi.KSLOT_BASE_GLOBAL, abi.DETACHED_GLOBAL})
    b = _bind_session(off, ranges, const_switch=False).bind_module(0x1234, kernels=["k"])
    assert b.instrumented and b.detached_addr == 0 and DET not in off.word
    assert off.word[WORD] == (STATE if attach else 0)


def test_const_switch_knob(monkeypatch):
    from runtime_cuda import knobs
    monkeypatch.delenv("HBF_CONST_SWITCH", raising=False)
    assert knobs.const_switch() is True
    monkeypatch.setenv("HBF_CONST_SWITCH", "0")
    assert knobs.const_switch() is False
