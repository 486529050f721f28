"""The launch gate's fast paths (wt/gate13, issues 13 and 15) against the original logic: the per-launch path of
runtime_cuda/session.py as it was before them (commit ae6f282, read from git; skipped where the history is not there)
and this tree's, driven side by side through the same randomized sequences of registrations, unregistrations,
launches (a Triton launch through the native-entry wrapper, one of a kernel without a native entry through the enter
hook, Session.launch with ctypes arguments) and CUDA graph captures, each on its own stand-in driver (the module
words, a capturing stream's nodes, allocations as 1 MiB blocks). After every step both give the same decision (the
function launched, or the same refusal), the same launch_selection counters, module words, captured nodes, binding
state and refused/unmodeled events. Only the number of allocation lookups may differ (fewer: the fast paths' point),
and one decision on purpose: the original dropped a 1-byte tensor's span (one int8 element) from the selection, so a
launch whose only reach was such a tensor ran native (test_a_one_byte_tensor_reaching_a_range_runs_instrumented)."""
from __future__ import annotations

import ctypes
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import gate_overhead as GO  # noqa: E402

from hbfcommon import ctl as C  # noqa: E402
from runtime_cuda import devstate as D  # noqa: E402
from runtime_cuda import session as NEW  # noqa: E402

ORIGINAL = "ae6f2824abc1c263f5b5f71f461379615123320c"    # main before the fast paths
ALLOC = 1 << 20
FLOOR = GO.DEVICE_FLOOR


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    try:
        src = subprocess.run(["git", "-C", str(ROOT), "show", f"{ORIGINAL}:runtime_cuda/session.py"],
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the original runtime_cuda/session.py is not in this checkout's history")
    p = tmp_path_factory.mktemp("gate_ref") / "session_ref.py"
    p.write_bytes(src)
    return GO.load_session_module(str(p))


class Driver(GO.StandInDriver):
    """The stand-in driver with the module words and a graph per capturing stream (test_graph_selection's model)."""

    def __init__(self) -> None:
        super().__init__()
        self.word = {GO.WORD: 0, GO.DET: 1}
        self.nodes: list[tuple] = []
        self.launched: list[int] = []

    def memset_u64_async(self, addr, value, stream):
        super().memset_u64_async(addr, value, stream)
        if int(stream) in self.capturing:
            self.nodes.append(("write", int(stream), addr, int(value)))
        else:
            self.word[addr] = int(value)

    def htod(self, addr, src, nbytes):
        super().htod(addr, src, nbytes)
        self.word[addr] = int(src.value)

    def launch(self, function, grid, block, args, shared, stream):
        super().launch(function, grid, block, args, shared, stream)
        self.launched.append(int(function))


KINDS = {   # kernel name -> (admitted, address_source, native entry, capacity_admitted)
    "k": (True, "params", True, False),
    "h": (True, "params", False, False),      # no native entry: the enter hook's path
    "g": (True, "memory", True, False),
    "n": (False, "params", True, False),      # not admitted
    "c": (True, "params", True, True),        # rewritten for capacity ranges
}
FNS = {name: 0xF000 + i for i, name in enumerate(KINDS)}
NATIVES = {name: 0xB000 + i for i, name in enumerate(KINDS)}


class World:
    """One implementation's session, driver, kernels and launchers."""

    def __init__(self, S, allow_unmodeled: bool) -> None:
        from triton.knobs import HookChain
        self.S, self.dev = S, Driver()
        s, b = GO.make_session(S, self.dev)
        s.graph_native = "off"     # captures keep the instrumented entry (the original's only behaviour)
        infos = {n: S.KernelInfo(n, i, i, adm, [] if adm else ["not admitted: test"], src,
                                 native_entry=f"{n}__hbnat" if nat else None, capacity_admitted=cap)
                 for i, (n, (adm, src, nat, cap)) in enumerate(KINDS.items())}
        b.kernels = infos
        b.native_fns = {n: NATIVES[n] for n, (_, _, nat, _) in KINDS.items() if nat}
        b.native_ready = set(b.native_fns)
        s.functions = {FNS[n]: (b, infos[n]) for n in KINDS}
        s.allow_unmodeled = allow_unmodeled
        s._report = lambda kind, event: None
        self.s, self.b = s, b
        self.hook = HookChain()
        self.hook.add(s._triton_launch)
        self.runs = {}
        for n in KINDS:
            k = type("K", (), {})()
            k._run = self._launcher(n)
            s._wrap_native_run(k, b, n, FNS[n])
            self.runs[n] = k._run

    def _launcher(self, name):
        dev = self.dev

        def launcher(gridX, gridY, gridZ, stream, function, *args):  # noqa: N803 - CudaLauncher.__call__
            md, enter = args[1], args[2]
            if enter is not None:
                enter(md)
            if int(stream) in dev.capturing:
                dev.nodes.append(("kernel", int(stream), int(function)))
            dev.launched.append(int(function))
        return launcher

    def step(self, op):
        """One step; returns what it decided (or the refusal)."""
        from triton.compiler.compiler import LazyDict
        kind = op[0]
        try:
            if kind == "table":
                GO.set_ranges(self.s, op[1])
                return None
            if kind == "capture":
                (self.dev.capturing.add if op[2] else self.dev.capturing.discard)(op[1])
                return None
            if kind == "triton":
                _, name, args, stream = op
                md = LazyDict({"name": name, "function": FNS[name], "stream": stream})
                self.runs[name](1, 1, 1, stream, FNS[name], (), md, self.hook, None, *args)
                return self.dev.launched[-1]
            if kind == "launch":
                _, name, ptrs, stream = op
                cargs = [ctypes.c_uint64(p) for p in ptrs] + [ctypes.c_int32(7)]
                self.s.launch(FNS[name], (1, 1, 1), (128, 1, 1), cargs, kernel=name, stream=stream)
                return self.dev.launched[-1]
        except Exception as e:  # noqa: BLE001 - the refusal is part of the decision
            return ("raised", type(e).__name__, str(e))
        raise AssertionError(op)

    def state(self):
        s, b = self.s, self.b
        # HBF_GRAPH_NATIVE (wt/gnat15) is off here, as the original had no such knob: its count stays 0 and is compared
        # without it (the original's dict has no such key)
        # nor HBF_NATIVE_MODULE (wt/natmod15, default "entry"): every native launch counted on the native entry
        ls = {k: {f: x for f, x in v.items() if f not in ("captured_native", "native_module")}
              for k, v in s.launch_selection.items()}
        assert all(v.get("captured_native", 0) == 0 for v in s.launch_selection.values())
        assert all(v.get("native_module", "the original") in ("the original", {"entry": v["native_entry"], "plain": 0})
                   for v in s.launch_selection.values())
        return {"launch_selection": ls, "word": dict(self.dev.word), "nodes": list(self.dev.nodes),
                "attached": b.attached, "captured": b.captured, "last_stream": b.last_stream,
                "refused": s.refused_launches, "unmodeled": s.unmodeled_launches,
                "native_fns": dict(b.native_fns), "failures": dict(b.native_failures),
                "memsets": self.dev.calls["cuMemsetD32Async"], "syncs": self.dev.calls["cuStreamSynchronize"]}


class Tensor(GO.FakeDeviceTensor):
    pass


def _addr(rng: random.Random) -> int:
    return FLOOR + rng.randrange(8) * ALLOC + rng.randrange(ALLOC)


def _args(rng: random.Random, ranges) -> list:
    out = []
    for _ in range(rng.randrange(1, 12)):
        r = rng.random()
        if r < 0.3:
            p = _addr(rng) if rng.random() < 0.7 or not ranges else rng.choice(ranges).base + rng.randrange(64)
            out.append(Tensor(p, rng.randrange(2, 4096), rng.choice((1, 2, 4))))    # >= 2 bytes: see the 1-byte test
        elif r < 0.55:
            out.append(rng.choice((0, 1, 16, 64, 128, 4096, 65536, -3)))
        elif r < 0.65:
            out.append(_addr(rng))                                          # a raw pointer as an int
        elif r < 0.75:
            out.append(rng.choice((0.5, 1.0, True, False, None)))
        else:
            out.append(rng.choice((1, 128, 512)))
    return out


def _ranges(rng: random.Random) -> list:
    out = []
    for i in range(rng.choice((0, 0, 1, 1, 2, 3))):
        # 1 in 12 over memory the driver does not know (below the stand-in's floor): Session._hot_allocations cannot
        # name its allocations, so every launch asks the driver again, as the original did
        base = (_addr(rng) if rng.random() < 11 / 12 else FLOOR - 64 * ALLOC) & ~0xFFF
        length = rng.choice((64, 4096, ALLOC, 3 * ALLOC))                  # some cross allocations
        mode = C.HBF_MODE_CAPACITY if rng.random() < 0.1 else C.HBF_MODE_TIMING
        out.append(D.DevRange(base, length, 0, i + 1, mode, 7, 4096))
    return out


def _script(seed: int, n: int = 400) -> list:
    rng = random.Random(seed)
    ranges: list = []
    ops = []
    for _ in range(n):
        r = rng.random()
        if r < 0.08:
            ranges = _ranges(rng)
            ops.append(("table", ranges))
        elif r < 0.14:
            ops.append(("capture", rng.choice((7, 9)), rng.random() < 0.5))
        elif r < 0.8:
            ops.append(("triton", rng.choice(list(KINDS)), _args(rng, ranges), rng.choice((0, 7, 9))))
        else:
            ptrs = [rng.choice((0, _addr(rng), ranges[0].base if ranges else 0)) for _ in range(rng.randrange(4))]
            ops.append(("launch", rng.choice(list(KINDS)), ptrs, rng.choice((0, 7, 9))))
    return ops


@pytest.mark.parametrize("allow_unmodeled", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_fast_paths_decide_and_count_as_the_original(ref, seed, allow_unmodeled):
    pytest.importorskip("triton")
    new, old = World(NEW, allow_unmodeled), World(ref, allow_unmodeled)
    lookups = [0, 0]
    for i, op in enumerate(_script(seed)):
        a, b = new.step(op), old.step(op)
        assert a == b, (i, op[0], a, b)
        assert new.state() == old.state(), (i, op)
    lookups = new.dev.calls["cuMemGetAddressRange"], old.dev.calls["cuMemGetAddressRange"]
    assert lookups[0] <= lookups[1]
    assert new.dev.calls["cuStreamIsCapturing"] == old.dev.calls["cuStreamIsCapturing"]


def test_nothing_registered_walks_no_argument(ref):
    """The common case: nothing registered, an admitted kernel: one capture check, no allocation lookup, and no
    argument read at all (a tensor whose methods raise is never touched)."""
    pytest.importorskip("triton")

    class Untouchable:
        def data_ptr(self):
            raise AssertionError("an argument was read with nothing registered")

    w = World(NEW, False)
    assert w.step(("triton", "k", [Untouchable(), 4096, 1.0], 7)) == NATIVES["k"]
    assert w.step(("triton", "h", [Untouchable(), 4096, 1.0], 7)) == FNS["h"]
    assert w.step(("launch", "k", [FLOOR + 5], 7)) == NATIVES["k"]
    assert w.dev.calls["cuMemGetAddressRange"] == 0 and w.dev.calls["cuStreamIsCapturing"] == 3
    assert w.s.launch_selection["k"]["rules"] == {"nothing registered": 2}


def test_exact_tensor_spans_match_the_general_path():
    """triton_arg_spans' shortcut for an exact torch.Tensor gives what its general path (any object with data_ptr,
    here a Tensor subclass) gives, for views, strided and expanded tensors, empty ones and scalars around them."""
    torch = pytest.importorskip("torch")

    class Sub(torch.Tensor):
        pass

    base = torch.empty(100)
    for t in (base, base[10:20], base[::3], torch.empty(1).expand(1000), torch.empty(0), base.view(10, 10).t(),
              torch.empty(5, dtype=torch.float16)[1:]):
        args = [3, t, 0.5, None, True, -1]
        assert NEW.triton_arg_spans(args) == NEW.triton_arg_spans([3, t.as_subclass(Sub), 0.5, None, True, -1])


def test_a_one_byte_tensor_reaching_a_range_runs_instrumented(ref):
    """A tensor of one byte inside a registered range: its storage span is (address, 1), which the original took for an
    int's and dropped (the selection then said "reaches no range" and the launch ran native); it is kept now."""
    pytest.importorskip("triton")
    r = D.DevRange(FLOOR + 0x1000, 0x1000, 0, 1, C.HBF_MODE_TIMING, 7, 4096)
    one = Tensor(FLOOR + 0x1800, 1, 1)
    new, old = World(NEW, False), World(ref, False)
    for w in (new, old):
        w.step(("table", [r]))
    assert new.step(("triton", "k", [one, 4096], 7)) == FNS["k"]                 # instrumented: it reaches r
    assert new.s.launch_selection["k"]["rules"] == {"reaches a range (storage)": 1}
    assert old.step(("triton", "k", [one, 4096], 7)) == NATIVES["k"]             # the original's miss
    # an int argument of the same value: its allocation is asked and holds the address: instrumented as well
    assert new.step(("triton", "k", [one, FLOOR + 0x1800], 7)) == FNS["k"]


def _hot_world(ranges):
    w = World(NEW, False)
    w.step(("table", ranges))
    return w


def test_a_range_elsewhere_asks_the_driver_once_per_table_not_per_launch():
    """Session._hot_allocations: the allocations that hold a registered range are asked once per range table (a range
    over 3 MiB from the middle of an allocation: 4 allocations); a launch whose int arguments lie elsewhere then asks
    nothing and runs native, one whose int lies in such an allocation (outside the range itself) runs instrumented,
    as the per-launch lookups decided."""
    pytest.importorskip("triton")
    base = FLOOR + 2 * ALLOC + ALLOC // 2
    w = _hot_world([D.DevRange(base, 3 * ALLOC, 0, 1, C.HBF_MODE_TIMING, 7, 4096)])
    elsewhere = FLOOR + 7 * ALLOC + 64
    assert w.step(("triton", "k", [elsewhere, 16, 1.0], 7)) == NATIVES["k"]
    walked = w.dev.calls["cuMemGetAddressRange"]
    assert walked == 4
    assert w.s._hot_allocations() == [(FLOOR + i * ALLOC, ALLOC) for i in (2, 3, 4, 5)]
    for _ in range(5):
        assert w.step(("triton", "k", [elsewhere, 16, 1.0], 7)) == NATIVES["k"]
        assert w.step(("launch", "k", [elsewhere], 7)) == NATIVES["k"]
    assert w.dev.calls["cuMemGetAddressRange"] == walked
    # the same allocation as the range's first bytes, below the range: reaches it through its allocation
    assert w.step(("triton", "k", [FLOOR + 2 * ALLOC + 8, 16], 7)) == FNS["k"]
    assert w.step(("launch", "k", [FLOOR + 5 * ALLOC + ALLOC - 8], 7)) == FNS["k"]
    assert w.dev.calls["cuMemGetAddressRange"] == walked
    # a new table: walked again (one allocation)
    w.step(("table", [D.DevRange(FLOOR + 7 * ALLOC, 64, 0, 2, C.HBF_MODE_TIMING, 7, 4096)]))
    assert w.step(("triton", "k", [elsewhere, 16], 7)) == FNS["k"]
    assert w.dev.calls["cuMemGetAddressRange"] == walked + 1


def test_a_range_over_unknown_memory_keeps_the_per_launch_lookups():
    """A registered range whose allocation the driver cannot name: no cached answer, every launch asks the driver for
    its int arguments (the original's decision and cost)."""
    pytest.importorskip("triton")
    w = _hot_world([D.DevRange(FLOOR - 64 * ALLOC, 4096, 0, 1, C.HBF_MODE_TIMING, 7, 4096)])
    assert w.s._hot_allocations() is None
    n0 = w.dev.calls["cuMemGetAddressRange"]
    for i in range(3):
        assert w.step(("triton", "k", [FLOOR + 64, 16], 7)) == NATIVES["k"]
    assert w.dev.calls["cuMemGetAddressRange"] - n0 == 3 * 2      # per launch: the int 16 is asked too (not a pointer)


def test_graph_native_records_keep_the_exact_extents():
    """With HBF_GRAPH_NATIVE on, a selection's extents may become a capture's record, which outlives the launch: the
    per-launch lookups stay (the allocation of every int asked), whatever the cached allocations say."""
    pytest.importorskip("triton")
    w = _hot_world([D.DevRange(FLOOR + ALLOC, 64, 0, 1, C.HBF_MODE_TIMING, 7, 4096)])
    w.s.graph_native = "bounded"
    n0 = w.dev.calls["cuMemGetAddressRange"]
    w.step(("launch", "k", [FLOOR + 5 * ALLOC + 3], 7))
    assert w.dev.calls["cuMemGetAddressRange"] - n0 == 1
