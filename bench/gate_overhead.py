#!/usr/bin/env python3
"""The launch gate's HOST cost per launch on the CPU (issues 13 and 15): the real per-launch path of runtime_cuda.session
-- a Triton launch through its launcher wrapper (_TritonNativeRun, the native entry) and the enter hook, a Triton launch
of a kernel without a native entry (the enter hook alone: it finds the arguments in the launcher's frame), and
Session.launch with ctypes arguments -- driven over realistic Triton argument lists (torch CPU tensors, ints, floats,
None; 4 to 20 arguments) with a stand-in driver whose calls cost next to nothing (each counted: on a card every one
is a real driver call, the count per launch is the number to carry over). Cases: nothing registered; a range
registered that the arguments do not reach; a range the arguments reach. The plain cost (Triton's launcher with an
empty hook chain, or the stand-in cuLaunchKernel) is measured in the same rounds and subtracted: ``added_us``.

``--baseline PATH`` also loads another runtime_cuda/session.py (e.g. ``git show main:runtime_cuda/session.py >
/tmp/session_main.py``) as a second implementation, measured interleaved with this tree's, round by round.

    PYTHONPATH=$PWD python bench/gate_overhead.py --out /tmp/gate_overhead.json [--baseline /tmp/session_main.py]
    PYTHONPATH=$PWD python bench/gate_overhead.py --profile none/triton_native/matmul   # cProfile of one cell
    PYTHONPATH=$PWD python bench/gate_overhead.py --driver-cost --out /tmp/g.json       # on a card: + real call costs
"""
from __future__ import annotations

import argparse
import cProfile
import ctypes
import importlib.util
import io
import json
import logging
import pstats
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from runtime_cuda import devstate as D  # noqa: E402

log = logging.getLogger("gate_overhead")

FN, NATIVE_FN, PLAIN_FN = 0xF00D, 0xBEEF, 0xF11D
STATE, WORD, DET = 0x7000_0000, 0x6000_0000, 0x6100_0000
DEVICE_FLOOR = 1 << 32        # the stand-in driver: values from here up are device addresses (in 1 MiB allocations;
                              # torch's CPU tensors stand in for device tensors: their heap is far above)
CASES = ("none", "elsewhere", "reach")
PATHS = ("triton_native", "triton_hook", "session_launch")


class StandInDriver:
    """The few cudrv calls the per-launch path makes, each costing next to nothing, counted by name."""

    def __init__(self) -> None:
        self.calls: Counter = Counter()
        self.capturing: set[int] = set()

    def stream_capturing(self, stream):
        self.calls["cuStreamIsCapturing"] += 1
        return int(stream) in self.capturing

    def address_range(self, p):
        self.calls["cuMemGetAddressRange"] += 1
        p = int(p)
        return (p & ~0xFFFFF, 1 << 20) if p >= DEVICE_FLOOR else None

    def memset_u64_async(self, addr, value, stream):
        self.calls["cuMemsetD32Async"] += 1

    def htod(self, addr, src, nbytes):
        self.calls["cuMemcpyHtoD"] += 1

    def stream_synchronize(self, stream):
        self.calls["cuStreamSynchronize"] += 1

    def copy_function_attributes(self, src, dst):
        self.calls["cuFuncSetAttribute"] += 1
        return {}

    def launch(self, function, grid, block, args, shared, stream):
        self.calls["cuLaunchKernel"] += 1


def load_session_module(path: str | None):
    """This tree's runtime_cuda.session, or the file ``path`` loaded as a module of the runtime_cuda package."""
    if path is None:
        from runtime_cuda import session  # noqa: PLC0415
        return session
    spec = importlib.util.spec_from_file_location("runtime_cuda._gate_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def make_session(S, dev: StandInDriver, *, native_entry: bool = True):
    """A Session of module ``S`` with only what the per-launch path reads (no hbfd, no CUDA): one instrumented module
    whose kernel "k" (admitted, addresses from its parameters) has a native entry when ``native_entry``."""
    s = object.__new__(S.Session)
    info = S.KernelInfo("k", 0, 0, True, [], "params", native_entry="k__hbnat" if native_entry else None)
    b = S.ModuleBinding(0x1234, True, 0, {"k": info}, state_addr=WORD, detached_addr=DET)
    if native_entry:
        b.native_fns, b.native_ready = {"k": NATIVE_FN}, {"k"}
    s.use_cuda, s.native_select, s.native_entry, s._cu, s.state_dptr, s._epoch = True, True, True, dev, STATE, 0
    s.ranges, s.generation, s.capacity, s.bindings, s.functions = [], 0, {}, {b.module: b}, {FN: (b, info)}
    s.launch_selection, s.unmodeled_launches, s.refused_launches = {}, [], []
    s.allow_unmodeled, s.closed, s._lock = False, False, threading.RLock()
    s._triton_installed, s._triton_runs, s._tl = [("hook",)], [], threading.local()
    s.stall = S.StallWatch(0)
    s.ctl = SimpleNamespace(ctl=SimpleNamespace(header=SimpleNamespace(device_failure=0)))
    return s, b


def set_ranges(s, ranges) -> None:
    """A registration or unregistration as the session makes it (_refresh_ranges: a new sorted list, a new
    generation, then every module's words)."""
    s.ranges = sorted(ranges, key=lambda r: r.base)
    s.generation += 1
    s._set_module_words()


def arg_lists() -> dict[str, list]:
    """Realistic Triton argument lists (what the launcher receives after the launch metadata)."""
    t = lambda n: torch.empty(n, dtype=torch.float16)  # noqa: E731
    a, b, c = t(1 << 16), t(1 << 16), t(1 << 16)
    q, k, v, o = t(1 << 14), t(1 << 14), t(1 << 14), t(1 << 14)
    return {
        "elementwise": [a, b, c, 65536],                                               # 4: x, y, out, n
        "matmul": [a, b, c, 512, 512, 128, 128, 1, 128, 1, 512, 1, 1.0, None],        # 14
        "attention": [q, k, v, 0.125, o, 1 << 16, 4096, 64, 1, 1 << 16, 4096, 64, 1, 1 << 16, 4096, 64, 1,
                      2, 16, 1024],                                                       # 20
    }


class FakeDeviceTensor:
    """A tensor at a chosen address: data_ptr, numel, element_size, untyped_storage (what the gate reads)."""
    __slots__ = ("ptr", "n", "es", "_st")

    def __init__(self, ptr, n, es):
        self.ptr, self.n, self.es = ptr, n, es
        self._st = SimpleNamespace(data_ptr=lambda: ptr, nbytes=lambda: n * es)

    def data_ptr(self):
        return self.ptr

    def numel(self):
        return self.n

    def element_size(self):
        return self.es

    def untyped_storage(self):
        return self._st


def case_ranges(case: str, args: list) -> list:
    if case == "none":
        return []
    if case == "elsewhere":
        return [D.DevRange(DEVICE_FLOOR * 4, 1 << 20, 0, 1, 1, 7, 4096)]     # below torch's heap, above the ints
    t = next(x for x in args if callable(getattr(x, "data_ptr", None)))        # the first tensor's storage
    return [D.DevRange(int(t.data_ptr()), 4096, 0, 1, 1, 7, 4096)]


def make_launcher(dev: StandInDriver):
    """Triton 3.6's launcher (CudaLauncher.__call__, whose ``args`` tuple the enter hook's frame walk finds), as far
    as the gate sees it: it runs the enter hook after it parsed the handle."""
    def launcher(gridX, gridY, gridZ, stream, function, *args):  # noqa: N803
        md, enter = args[1], args[2]
        if enter is not None:
            enter(md)
        dev.calls["launch"] += 1
    return launcher


class Cell:
    """One (case, path, argument list) of one implementation: ``once()`` is one launch."""

    def __init__(self, S, case: str, path: str, name: str, args: list, plain: bool = False) -> None:
        from triton.compiler.compiler import LazyDict  # noqa: PLC0415
        from triton.knobs import HookChain  # noqa: PLC0415
        self.dev = dev = StandInDriver()
        self.s, self.b = make_session(S, dev, native_entry=path != "triton_hook")
        set_ranges(self.s, case_ranges(case, args))
        hook = HookChain()
        if not plain:
            hook.add(self.s._triton_launch)
        launcher = make_launcher(dev)
        if path == "triton_native" and not plain:
            kernel = SimpleNamespace(_run=launcher)
            self.s._wrap_native_run(kernel, self.b, "k", FN)
            launcher = kernel._run
        stream = 7
        if path == "session_launch":
            cargs = [ctypes.c_uint64(int(x.data_ptr())) if hasattr(x, "data_ptr") else
                     ctypes.c_float(x) if isinstance(x, float) else ctypes.c_int32(x) for x in args if x is not None]
            s, cu = self.s, dev
            if plain:
                self.once = lambda: cu.launch(FN, (1, 1, 1), (128, 1, 1), cargs, 0, stream)
            else:
                self.once = lambda: s.launch(FN, (1, 1, 1), (128, 1, 1), cargs, kernel="k", stream=stream)
            return

        def once():
            md = LazyDict({"name": "k", "function": FN, "stream": stream})   # Triton builds it with or without us
            launcher(1, 1, 1, stream, FN, (), md, hook, None, *args)
        self.once = once

    def time(self, n: int) -> float:
        """Microseconds per launch over n launches."""
        once = self.once
        t0 = time.perf_counter_ns()
        for _ in range(n):
            once()
        return (time.perf_counter_ns() - t0) / n / 1e3

    def driver_calls(self, n: int = 100) -> dict[str, float]:
        self.dev.calls.clear()
        for _ in range(n):
            self.once()
        return {k: v / n for k, v in sorted(self.dev.calls.items()) if k != "launch"}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def measure(impls: dict, names: list[str], cases, paths, *, rounds: int, n: int, warm: int) -> list[dict]:
    lists = arg_lists()
    rows = []
    for case in cases:
        for path in paths:
            for name in names:
                cells = {"plain": Cell(impls[next(iter(impls))], case, path, name, lists[name], plain=True)}
                cells.update({k: Cell(S, case, path, name, lists[name]) for k, S in impls.items()})
                for c in cells.values():
                    c.time(warm)
                samples = {k: [] for k in cells}
                for _ in range(rounds):                          # interleaved, round by round
                    for k, c in cells.items():
                        samples[k].append(c.time(n))
                row = {"case": case, "path": path, "args": name, "n_args": len(lists[name]),
                       "plain_us": round(statistics.median(samples["plain"]), 3)}
                for k in impls:
                    added = [x - p for x, p in zip(samples[k], samples["plain"])]
                    row[k] = {"us": round(statistics.median(samples[k]), 3),
                              "added_us": round(statistics.median(added), 3),
                              "added_p10": round(pct(added, 0.1), 3), "added_p90": round(pct(added, 0.9), 3),
                              "driver_calls": cells[k].driver_calls(),
                              "launch_selection": cells[k].s.launch_selection.get("k")}
                rows.append(row)
                log.info("%-9s %-14s %-11s plain %.2f us; %s", case, path, name, row["plain_us"],
                         "; ".join(f"{k} +{row[k]['added_us']:.2f} us [{row[k]['added_p10']:.2f}, "
                                   f"{row[k]['added_p90']:.2f}] calls {row[k]['driver_calls']}" for k in impls))
    return rows


def profile(impl, cell: str, n: int) -> str:
    case, path, name = cell.split("/")
    c = Cell(impl, case, path, name, arg_lists()[name])
    c.time(1000)
    pr = cProfile.Profile()
    pr.enable()
    c.time(n)
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(25)
    return out.getvalue()


def driver_cost(n: int) -> dict:
    """On a machine with a GPU: the real cudrv calls the gate makes per launch (microseconds each, median of 11
    rounds of n): cuStreamIsCapturing on a stream, cuMemGetAddressRange of a scalar (no allocation) and of a device
    pointer -- what a card adds to this bench's stand-in numbers per call counted in ``driver_calls``."""
    from runtime_cuda import cudrv  # noqa: PLC0415
    cudrv.init_context(0)
    st, dptr = cudrv.stream_create(), cudrv.mem_alloc(1 << 20)
    calls = {"cuStreamIsCapturing": lambda: cudrv.stream_capturing(st),
             "cuMemGetAddressRange_scalar": lambda: cudrv.address_range(4096),
             "cuMemGetAddressRange_pointer": lambda: cudrv.address_range(dptr + 64)}
    out = {}
    for k, f in calls.items():
        for _ in range(n):
            f()
        xs = []
        for _ in range(11):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                f()
            xs.append((time.perf_counter_ns() - t0) / n / 1e3)
        out[k] = round(statistics.median(xs), 3)
    cudrv.mem_free(dptr)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="JSON output (default: none; never bench/results)")
    ap.add_argument("--baseline", help="another runtime_cuda/session.py to measure interleaved (e.g. main's)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--args", default="elementwise,matmul,attention")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--n", type=int, default=2000, help="launches per round")
    ap.add_argument("--warm", type=int, default=2000)
    ap.add_argument("--profile", metavar="CASE/PATH/ARGS", help="cProfile one cell of this tree (or --baseline)")
    ap.add_argument("--driver-cost", action="store_true", help="also time the real driver calls (needs a GPU)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("runtime_cuda").setLevel(logging.WARNING)
    impls = {"tree": load_session_module(None)}
    if a.baseline:
        impls = {"baseline": load_session_module(a.baseline), **impls}
    if a.profile:
        log.info("%s", profile(impls["baseline" if a.baseline else "tree"], a.profile, a.n * 10))
        return 0
    rows = measure(impls, a.args.split(","), a.cases.split(","), a.paths.split(","), rounds=a.rounds, n=a.n,
                   warm=a.warm)
    doc = {"bench": "gate_overhead", "python": sys.version.split()[0], "torch": torch.__version__,
           "rounds": a.rounds, "n": a.n, "impls": list(impls), "rows": rows}
    if a.driver_cost:
        doc["driver_us"] = driver_cost(a.n)
        log.info("real driver calls, us each: %s", doc["driver_us"])
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1))
        log.info("wrote %s", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
