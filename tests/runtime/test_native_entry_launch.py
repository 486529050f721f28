"""The native entry at launch (hbfcc's HBFCC_NATIVE_ENTRY, the runtime's HBF_NATIVE_ENTRY; Session._select with
``switch``): a HOST launch decided native (nothing registered, or its arguments reach no registered range) of a
kernel with a native entry launches that entry's CUfunction and writes no module word; a launch on a capturing
stream keeps the instrumented entry and the capture rules of docs/design.md §3.2; a kernel without a native entry,
and the enter-hook path (which cannot change the handle), are unaffected. The device is the model of
test_graph_selection.py (the words, the graph's nodes, the body a launch or replay runs), plus which function ran."""
from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_graph_selection as G  # noqa: E402

from hbfcommon import abi  # noqa: E402
from runtime_cuda.session import KernelInfo, ModuleBinding, Session, _TritonNativeRun  # noqa: E402

NATIVE_FN = 0xBEEF
FN = 0xF00D
PARAMS = KernelInfo("k", 0, 0, True, [], "params", native_entry="k__hbnat")
MEMORY = KernelInfo("g", 1, 1, True, [], "memory", native_entry="g__hbnat")
PLAIN = KernelInfo("p", 2, 2, True, [], "params")          # built without a native entry


def _session(dev: G.Device, *, switch_fns=True) -> tuple[Session, ModuleBinding]:
    s, _ = G._session(dev)
    b = ModuleBinding(0x1234, True, 0, {"k": PARAMS, "g": MEMORY, "p": PLAIN}, state_addr=G.WORD,
                      detached_addr=G.DET if G.DET in dev.word else 0)
    if switch_fns:
        b.native_fns = {"k": NATIVE_FN, "g": NATIVE_FN + 1}
    s.bindings = {b.module: b}
    s.functions = {FN: (b, PARAMS), FN + 1: (b, MEMORY)}
    return s, b


def launch(s, b, dev, info, spans, stream=7, switch=True) -> str:
    """One launch: the function the caller launches (the native entry when _select returns it) and the body."""
    before = dict(dev.word)
    nfn = s._select(b, info, spans, stream, "storage", switch=switch)
    if nfn is not None:
        assert stream not in dev.capturing, "a capture launched the native entry"
        assert dev.word == before, "a native-entry launch wrote a module word"
        assert not G._must_model(s, info, spans), "a launch that may reach a range ran the native entry"
        return "native_entry"
    if stream in dev.capturing:
        dev.graph.append(("kernel", info, spans))
        return "captured"
    body = G._body(s, dev)
    assert not (G._must_model(s, info, spans) and body == "native")
    G._agree(dev)
    return body


def capture(s, b, dev, launches, stream=9) -> list[tuple]:
    dev.capturing.add(stream)
    dev.graph = []
    for info, spans in launches:
        assert launch(s, b, dev, info, spans, stream) == "captured"
    dev.capturing.discard(stream)
    return dev.graph


def test_nothing_registered_host_launch_runs_the_native_entry(dev):
    s, b = _session(dev)
    G.table(s, [])
    words = dict(dev.word)
    assert launch(s, b, dev, PARAMS, G.REACH) == "native_entry"
    assert launch(s, b, dev, MEMORY, G.REACH) == "native_entry"      # nothing registered: any provenance
    assert dev.word == words and b.last_stream is None            # no write, and no stream the words wait for
    sel = s.launch_selection["k"]
    assert sel["native_entry"] == sel["native"] == 1 and sel["instrumented"] == 0
    assert sel["word"] == {"native entry: not written": 1} and sel["rules"] == {"nothing registered": 1}


def test_captures_keep_the_instrumented_entry_and_the_rules(dev):
    s, b = _session(dev)
    G.table(s, [])
    g = capture(s, b, dev, [(PARAMS, G.REACH)])
    assert [n[0] for n in g] == ["kernel"]
    assert G.replay(s, dev, g) == ["native"]                       # nothing registered: the prologue's test
    G.table(s, [G.R])
    assert G.replay(s, dev, g) == ["instrumented"]                 # a later registration: the replay models
    assert s.launch_selection["k"]["captured"] == 1 and s.launch_selection["k"]["native_entry"] == 0


def test_reaching_no_range_runs_the_native_entry_and_leaves_the_module_attached(dev):
    s, b = _session(dev)
    G.table(s, [G.R])
    assert launch(s, b, dev, PARAMS, G.ELSEWHERE) == "native_entry"
    assert dev.word[G.WORD] == G.STATE and b.attached               # not detached: nothing to undo later
    assert launch(s, b, dev, PARAMS, G.REACH) == "instrumented"
    assert launch(s, b, dev, MEMORY, G.ELSEWHERE) == "instrumented"  # addresses from memory: never native
    g = capture(s, b, dev, [(PARAMS, G.REACH)])
    assert [n[0] for n in g] == ["kernel"]                         # attached all along: the graph writes nothing
    assert G.replay(s, dev, g) == ["instrumented"]


def test_a_captured_module_still_runs_host_launches_native_on_its_entry(dev):
    """Rule 2 pins a captured module attached (its replays read the words); a native-entry host launch does not
    touch them, so the pin costs its host launches nothing any more, and every replay stays instrumented."""
    s, b = _session(dev)
    G.table(s, [G.R])
    g = capture(s, b, dev, [(PARAMS, G.REACH)])
    assert b.captured
    assert launch(s, b, dev, PARAMS, G.ELSEWHERE) == "native_entry"
    assert dev.word[G.WORD] == G.STATE
    assert G.replay(s, dev, g) == ["instrumented"]


def test_without_a_native_entry_or_the_switch_nothing_changes(dev):
    s, b = _session(dev)
    G.table(s, [G.R])
    assert launch(s, b, dev, PLAIN, G.ELSEWHERE) == "native" and dev.word[G.WORD] == 0    # the word, as before
    G.table(s, [G.R])
    assert launch(s, b, dev, PARAMS, G.ELSEWHERE, switch=False) == "native"      # the enter hook's path
    assert s.launch_selection["k"]["native_entry"] == 0
    s2, b2 = _session(G.Device(), switch_fns=False)                  # HBF_NATIVE_ENTRY=0: no function looked up
    G.table(s2, [])
    assert launch(s2, b2, s2._cu, PARAMS, G.REACH) == "native"


class BindDevice(G.BindDevice):
    def __init__(self, names, functions):
        super().__init__(names)
        self.functions = functions
        self.looked_up: list[str] = []

    def module_functions(self, module, names):
        from hbfcommon.errors import ErrorCode, HbfError
        out = {}
        for n in names:
            self.looked_up.append(n)
            if n not in self.functions:
                raise HbfError(f"cuModuleGetFunction({n}) failed", code=ErrorCode.INTERNAL)
            out[n] = self.functions[n]
        return out


ART = {"kernels": [{"name": "k", "kernel_index": 0, "admitted": True, "not_admitted_reasons": [], "refused": [],
                    "address_source": "params", "native_entry": "k__hbnat"},
                   {"name": "g", "kernel_index": 1, "admitted": True, "not_admitted_reasons": [], "refused": [],
                    "address_source": "memory", "native_entry": "g__hbnat"},
                   {"name": "p", "kernel_index": 2, "admitted": True, "not_admitted_reasons": [], "refused": [],
                    "address_source": "params", "native_entry": None, "native_entry_reason": "no native version"}]}


@pytest.mark.parametrize("knob", [True, False])
def test_bind_looks_the_native_entries_up_once(knob, caplog):
    dev = BindDevice({abi.STATE_GLOBAL, abi.KSLOT_BASE_GLOBAL, abi.DETACHED_GLOBAL}, {"k__hbnat": NATIVE_FN})
    s = G._bind_session(dev)
    s.native_entry = knob
    b = s.bind_module(0x1234, artifact=ART)
    assert [k.native_entry for k in b.kernels.values()] == ["k__hbnat", "g__hbnat", None]
    assert [k.kslot for k in b.kernels.values()] == [0, 1, 2]          # the slots follow the instrumented entries
    if knob:
        assert b.native_fns == {"k": NATIVE_FN} and dev.looked_up == ["k__hbnat", "g__hbnat"]
        assert "g__hbnat is not in the module" in caplog.text          # missing: logged, launches stay instrumented
    else:
        assert b.native_fns == {} and dev.looked_up == []


class LaunchDevice(G.Device):
    def __init__(self):
        super().__init__()
        self.launched: list[int] = []

    def launch(self, function, grid, block, args, shared, stream):
        self.launched.append(int(function))

    def address_range(self, p):
        return (p, 4096)


def _launch_session(dev) -> tuple[Session, ModuleBinding]:
    s, b = _session(dev)
    s._ensure_open = lambda: None
    s.gate = lambda *a, **k: None
    s.functions = {FN: (b, PARAMS)}
    s.capacity = {}
    s.stall = type("NoWatch", (), {"warn_s": 0})()
    s.closed, s._triton_installed, s._tl, s._triton_runs = False, [("hook",)], threading.local(), []
    return s, b


def test_session_launch_passes_the_native_entry():
    import ctypes
    dev = LaunchDevice()
    s, b = _launch_session(dev)
    G.table(s, [])
    s.launch(FN, (1, 1, 1), (128, 1, 1), [ctypes.c_uint64(0x10800)], kernel="k")
    G.table(s, [G.R])
    s.launch(FN, (1, 1, 1), (128, 1, 1), [ctypes.c_uint64(0x10800)], kernel="k")          # reaches R
    s.launch(FN, (1, 1, 1), (128, 1, 1), [ctypes.c_uint64(0x40000)], kernel="k")          # reaches nothing
    dev.capturing.add(0)
    s.launch(FN, (1, 1, 1), (128, 1, 1), [ctypes.c_uint64(0x40000)], kernel="k")          # a capture
    assert dev.launched == [NATIVE_FN, FN, NATIVE_FN, FN]


class FakeTensor:
    def __init__(self, ptr, n):
        self.ptr, self.n = ptr, n

    def data_ptr(self):
        return self.ptr

    def numel(self):
        return self.n

    def element_size(self):
        return 4


class FakeKernel:
    """A Triton 3.6 CompiledKernel's launch path: ``run`` (its ``_run``) called with the handle read before."""

    def __init__(self, function):
        self.function = function
        self.calls: list[int] = []
        self.hooked: list[object] = []

        def launcher(gridX, gridY, gridZ, stream, function, packed, md, enter, exit_, *args):  # noqa: N803
            if enter is not None:
                enter(md)       # the C launcher: the enter hook after it parsed the handle
            self.calls.append(int(function))
        self._run = launcher

    def launch(self, stream, *args, hook):
        from triton.compiler.compiler import LazyDict
        md = LazyDict({"name": "k", "function": self.function, "stream": stream})
        self._run(1, 1, 1, stream, self.function, (), md, hook, None, *args)


def test_triton_launcher_wrapper_substitutes_the_handle_before_the_launcher():
    pytest.importorskip("triton")
    dev = LaunchDevice()
    s, b = _launch_session(dev)
    hooked = []
    real_hook = s._triton_launch
    s._triton_launch = lambda md: (hooked.append(md), real_hook(md))
    k = FakeKernel(FN)
    s._wrap_native_run(k, b, "k", FN)
    assert isinstance(k._run, _TritonNativeRun) and len(s._triton_runs) == 1
    x = FakeTensor(0x10800, 4)
    G.table(s, [])
    k.launch(7, x, 4, hook=s._triton_launch)
    G.table(s, [G.R])
    k.launch(7, x, 4, hook=s._triton_launch)                         # reaches R: instrumented
    k.launch(7, FakeTensor(0x40000, 4), 4, hook=s._triton_launch)     # reaches nothing: native entry
    dev.capturing.add(7)
    k.launch(7, FakeTensor(0x40000, 4), 4, hook=s._triton_launch)     # a capture: instrumented
    assert k.calls == [NATIVE_FN, FN, NATIVE_FN, FN]
    sel = s.launch_selection["k"]
    assert sel["native_entry"] == 2 and sel["instrumented"] == 2 and sel["captured"] == 1
    assert sum(sel["rules"].values()) == 4                           # each launch decided once (the hook skipped)
    assert len(hooked) == 4
    s.uninstall_triton_hooks = Session.uninstall_triton_hooks.__get__(s)
    s._triton_installed = []
    s.uninstall_triton_hooks()
    assert not isinstance(k._run, _TritonNativeRun)                    # the launcher restored


@pytest.fixture(name="dev", params=["switch", "old"])
def _dev(request) -> G.Device:
    return G.Device(switch=request.param == "switch")


class AttrDevice(LaunchDevice):
    """A stand-in driver whose functions carry attributes: the instrumented entry's were set by Triton's loader
    (dynamic shared memory above 48 KiB), the native entry has none until copied; a launch of a function without
    them is refused as Triton's launcher does (RuntimeError "Triton Error [CUDA]: invalid argument")."""

    def __init__(self, copy_ok=True):
        super().__init__()
        self.attrs = {FN: {"MAX_DYNAMIC_SHARED_SIZE_BYTES": 200 * 1024}, NATIVE_FN: {}}
        self.events: list[tuple] = []
        self.copy_ok = copy_ok

    def copy_function_attributes(self, src, dst):
        self.events.append(("copy", int(src), int(dst)))
        if self.copy_ok:
            self.attrs[int(dst)] = dict(self.attrs[int(src)])
        return dict(self.attrs[int(src)])


def _refusing_kernel(dev: "AttrDevice") -> "FakeKernel":
    """A kernel whose launcher records each launch and refuses a function without attributes, as Triton's does
    ("invalid argument": the dynamic shared memory above 48 KiB not allowed on that function)."""
    k = FakeKernel(FN)
    inner = k._run

    def launcher(gridX, gridY, gridZ, stream, function, *rest):  # noqa: N803
        dev.events.append(("launch", int(function)))
        if not dev.attrs[int(function)]:
            raise RuntimeError("Triton Error [CUDA]: invalid argument")
        return inner(gridX, gridY, gridZ, stream, function, *rest)
    k._run = launcher
    return k


def test_native_entry_gets_the_instrumented_attributes_before_its_first_launch():
    pytest.importorskip("triton")
    dev = AttrDevice()
    s, b = _launch_session(dev)
    k = _refusing_kernel(dev)
    s._wrap_native_run(k, b, "k", FN)
    G.table(s, [])
    k.launch(7, FakeTensor(0x10800, 4), 4, hook=s._triton_launch)
    k.launch(7, FakeTensor(0x10800, 4), 4, hook=s._triton_launch)
    assert dev.events == [("copy", FN, NATIVE_FN), ("launch", NATIVE_FN), ("launch", NATIVE_FN)]
    assert k.calls == [NATIVE_FN, NATIVE_FN] and b.native_ready == {"k"} and not b.native_failures


def test_a_failed_native_launch_falls_back_to_the_instrumented_entry(caplog):
    pytest.importorskip("triton")
    dev = AttrDevice(copy_ok=False)
    s, b = _launch_session(dev)
    k = _refusing_kernel(dev)
    s._wrap_native_run(k, b, "k", FN)
    G.table(s, [])
    with caplog.at_level("WARNING"):
        k.launch(7, FakeTensor(0x10800, 4), 4, hook=s._triton_launch)
        k.launch(7, FakeTensor(0x10800, 4), 4, hook=s._triton_launch)
    assert k.calls == [FN, FN]                       # the instrumented entry instead, and from then on
    assert b.native_failures == {"k": 1} and "k" not in b.native_fns
    assert any("kernel k" in r.getMessage() and "invalid argument" in r.getMessage() for r in caplog.records)
