"""Eidola host launcher: Write Tracking Table in device memory, replay engines, monitor log,
flag ranges and flag accounting.

The device code is eidola/src/hbf_eidola.cuh (primitives) and eidola/src/eidola_kernels.cu
(eidolon kernel, probes, setup kernel, co-runner). ``build_module()`` compiles the kernels with
nvcc into a cubin; everything on the GPU goes through runtime_cuda's CUDA layer
(runtime_cuda/cudrv.py: the driver API on the device's primary context). A workload (e.g.
workloads/gemv_allreduce/fused.py) builds its own kernels with :func:`compile_cubin` (eidola's
include paths), loads them with :meth:`EidolaRuntime.load_module` and hands each launch the
device state of a :class:`Replay` (``replay.dev.ptr``); eidola itself knows no workload.

Typical use::

    rt = EidolaRuntime.create()                      # builds/loads the module, device 0
    rep = Replay(rt, [FlagRange(flag_base, flag_bytes, 1, "flags")])   # state + monitor log + counters
    rep.register_write(addr, value, 4, wakeup_ns)    # from Python, any order
    rep.register_from_device(addrs, values, sizes, wakeups)   # through the setup kernel
    rep.install(engine="virtual")                    # freeze the WTT, upload both indexes

Flag ranges live here, in the Replay's device state (``flag_ranges``: what the device classifies
flag loads against). ``Replay.attach(session)`` makes runtime_cuda's ``Session.register_flag_range``
add to this table (and record the range in hbfd's range table for the run summary).
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from hbfcommon import abi, resources
from hbfcommon.errors import ConfigError, CudaError, ErrorCode, HbfError, RangeError, ToolchainError
from hbfcommon.fsutil import atomic_output
from eidola.accounting import COUNTERS, MAX_CLASSES, FlagClassifier, FlagRange, summarize
from eidola.trace import Trace
from eidola.wtt import FrozenWtt, WriteTrackingTable

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent     # only for the default build output (ROOT/build/eidola)
# the device sources are package data of eidola and runtime_cuda (hbfcommon.resources)
SRC_DIR = resources.data_path("eidola", "src")
SOURCE = SRC_DIR / "eidola_kernels.cu"
# what an eidola-aware kernel includes: hbf_eidola.cuh (eidola/src), hbf_ptx.cuh (runtime_cuda/src),
# the ABI headers (runtime_cuda/include)
INCLUDE_DIRS = (resources.data_path("runtime_cuda", "include"), resources.data_path("runtime_cuda", "src"), SRC_DIR)
HEADERS = (SRC_DIR / "hbf_eidola.cuh", resources.data_path("runtime_cuda", "src", "hbf_ptx.cuh"))
ARCH = "sm_90a"
BUILD_DIR = ROOT / "build" / "eidola"

ENGINE_REAL, ENGINE_VIRT = 0, 1
ENGINES = {"real": ENGINE_REAL, "eidolon": ENGINE_REAL, "virtual": ENGINE_VIRT, "virtual_paced": ENGINE_VIRT,
           "native": ENGINE_REAL}   # native: flags already in memory before launch, no replay at all
MON_MODES = {"off": 0, "spin": 0, "mesa": 1, "hoare": 2}
# engine (a) eidolon: the enactment store's kind and the kernel layout (eidola_kernels.cu)
STORE_KINDS = {"relaxed.sys": 0, "relaxed.gpu": 1, "release.gpu": 2, "release.sys": 3, "volatile": 4}
EIDOLON_LAYOUTS = {"lane": 0, "warp": 1, "lane_late": 2, "warp_burst": 3}
# timing-lab probe loads (hbf_eidola_tprobe_*)
PROBE_LOADS = {"acquire.sys": 0, "relaxed.gpu": 1, "volatile": 2, "acquire.gpu": 3}
FAIL_NAMES = {1: "TIMEOUT", 2: "MONITOR_LOG_FULL", 3: "NEVER_WAKES", 4: "STAGING_FULL", 5: "BAD_SIZE"}
LAYOUT_VERSION = 1
MAX_FLAG_RANGES = 8          # HBF_EIDOLA_MAX_FLAG_RANGES: the device state's table
FlagRegion = FlagRange       # the one flag-range record (eidola.accounting); the old name stays


def eidolon_kernel(store: int, layout: int) -> str:
    """Name of the engine-(a) kernel for a store kind / layout index (eidola_kernels.cu)."""
    return f"hbf_eidolon_s{int(store)}_l{int(layout)}"


def tprobe_kernel(load: int, pipelined: bool) -> str:
    return f"hbf_eidola_tprobe_k{int(load)}_p{int(bool(pipelined))}"


KERNELS = (("hbf_eidola_timer_probe", "hbf_eidola_probe", "hbf_eidola_probe_min", "hbf_eidola_setup",
            "hbf_eidola_corunner")
           + tuple(eidolon_kernel(s, lay) for s in STORE_KINDS.values() for lay in EIDOLON_LAYOUTS.values())
           + tuple(tprobe_kernel(k, p) for k in PROBE_LOADS.values() for p in (0, 1)))
LAYOUT_GLOBAL = "hbf_eidola_layout"           # HBF_EIDOLA_LAYOUT_VALUES
DEFAULTS_GLOBAL = "hbf_eidolon_defaults"      # {store kind, layout}
EIDOLA_STATE_GLOBAL = abi.EIDOLA_STATE_GLOBAL   # the eidola helper PTX's module global (hbfcommon.abi)


class EidolaDeviceFailure(HbfError):
    """A device-side eidola failure (timeout, monitor log full, a wait that can never wake)."""


# ================================================================================================
# Building (nvcc -cubin, cached by content)
# ================================================================================================
def compile_cubin(source: str | os.PathLike, *, name: str, depends: Iterable[str | os.PathLike] = (),
                  out_dir: str | os.PathLike | None = None, arch: str = ARCH, defines: Sequence[str] = (),
                  include_dirs: Sequence[str | os.PathLike] = (), nvcc: str | None = None) -> Path:
    """Compile one CUDA source into a cubin with eidola's include paths (:data:`INCLUDE_DIRS`, after
    ``include_dirs``), cached by the content of the source, ``depends`` and eidola's headers and by
    the command line. Used for eidola's own kernels and by workloads for theirs."""
    nvcc = nvcc or shutil.which("nvcc")
    if not nvcc:
        raise ToolchainError("nvcc not found: cannot build an eidola module", argv=["nvcc"], source=str(source))
    src = Path(source)
    incs = [Path(d) for d in include_dirs] + list(INCLUDE_DIRS)
    flags = ["-std=c++17", "-O3", f"-arch={arch}", "-cubin", *(f"-D{d}" for d in defines),
             *(f"-I{d}" for d in incs)]
    h = hashlib.sha256("\0".join(flags).encode())
    for p in (src, *map(Path, depends), *HEADERS):
        try:
            h.update(p.read_bytes())
        except OSError as e:
            raise ConfigError("cannot read a source of the module", path=str(p), error=str(e)) from e
    out = Path(out_dir) if out_dir else BUILD_DIR
    cubin = out / f"{name}-{arch}-{h.hexdigest()[:12]}.cubin"
    if cubin.exists():
        return cubin
    with atomic_output(cubin) as tmp:
        argv = [nvcc, *flags, "-o", str(tmp), str(src)]
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            raise ToolchainError(f"nvcc failed building {name}", argv=argv, returncode=r.returncode,
                                 stderr=r.stderr)
    return cubin


def build_module(out_dir: str | os.PathLike | None = None, *, nvcc: str | None = None, arch: str = ARCH) -> Path:
    """eidola's kernels (eidola/src/eidola_kernels.cu) as a cubin."""
    return compile_cubin(SOURCE, name="hbfeidola", out_dir=out_dir, arch=arch, nvcc=nvcc)


# ================================================================================================
# Host mirrors
# ================================================================================================
class _FlagRangeC(ctypes.Structure):
    _fields_ = [("base", ctypes.c_uint64), ("length", ctypes.c_uint64), ("klass", ctypes.c_uint32),
                ("reserved0", ctypes.c_uint32), ("reserved1", ctypes.c_uint64)]


_U64 = ctypes.c_uint64


class StateMirror(ctypes.Structure):
    """Mirror of hbf_eidola_state (checked against HBF_EIDOLA_LAYOUT_VALUES)."""

    _fields_ = ([("t0", _U64), ("failure", _U64), ("eidolon_done", _U64), ("vd_base", _U64),
                 ("engine", ctypes.c_uint32), ("mon_mode", ctypes.c_uint32),
                 ("vload_paced", ctypes.c_uint32), ("n_flag_ranges", ctypes.c_uint32),
                 ("lag_ns", ctypes.c_int64), ("timeout_ns", _U64),
                 ("sleep_ns", ctypes.c_uint32), ("reserved1", ctypes.c_uint32),
                 ("flag_ranges", _FlagRangeC * MAX_FLAG_RANGES)]
                + [(n, _U64) for n in ("n_entries", "t_addr", "t_value", "t_size", "t_wakeup",
                                       "t_enacted", "n_vaddr", "v_addr", "v_begin", "v_time",
                                       "v_value", "v_init", "mon_base", "mon_slots", "mon", "wake",
                                       "n_wake", "s_addr", "s_value", "s_size", "s_wakeup",
                                       "s_count", "s_cap", "ctr", "arm", "n_arm", "vd_n", "vd_idx")])


MON_ENTRY_BYTES = 64


def layout_mirror() -> list[int]:
    """The values HBF_EIDOLA_LAYOUT_VALUES must have, from the Python mirror."""
    return [ctypes.sizeof(StateMirror), LAYOUT_VERSION, StateMirror.t0.offset, StateMirror.engine.offset,
            StateMirror.lag_ns.offset, StateMirror.flag_ranges.offset, StateMirror.n_entries.offset,
            StateMirror.n_vaddr.offset, StateMirror.mon_base.offset, StateMirror.s_addr.offset,
            StateMirror.ctr.offset, MON_ENTRY_BYTES]


def check_layout(device_values: Sequence[int], what: str) -> None:
    got, want = [int(v) for v in device_values], layout_mirror()
    if got != want:
        raise CudaError(f"hbf_eidola_state layout mismatch between {what} and the Python mirror",
                        device=got, mirror=want)


def read_module_u64s(module: Any, name: str, n: int) -> list[int]:
    """``n`` u64 of a module global (cuModuleGetGlobal + a copy); CudaError when it is missing."""
    from runtime_cuda import cudrv
    g = cudrv.module_global(module, name)
    if g is None or g[1] < 8 * n:
        raise CudaError(f"module has no {name}[{n}] global", name=name, found=None if g is None else g[1])
    out = (ctypes.c_uint64 * n)()
    cudrv.dtoh(out, g[0], 8 * n)
    return list(out)


# ================================================================================================
# Device runtime: context, modules, buffers, streams (all through runtime_cuda.cudrv)
# ================================================================================================
class LoadedModule:
    """A cubin loaded into a runtime's context, its kernels loaded eagerly."""

    def __init__(self, rt: "EidolaRuntime", path: Path, kernels: Sequence[str]) -> None:
        from runtime_cuda import cudrv
        self.rt, self.path = rt, Path(path)
        rt.activate()
        try:
            image = self.path.read_bytes()
        except OSError as e:
            raise ConfigError("cannot read the module", path=str(path), error=str(e)) from e
        self.handle = cudrv.module_load_data(image)
        self.functions = cudrv.module_functions(self.handle, kernels)

    def function(self, name: str):
        try:
            return self.functions[name]
        except KeyError:
            raise ConfigError("kernel not loaded from this module", kernel=name, module=str(self.path),
                              loaded=sorted(self.functions)) from None

    def launch(self, name: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Any], *,
               shared: int = 0, stream: int = 0) -> None:
        """Launch kernel ``name`` (args: ctypes values of its parameter types). Dynamic shared
        memory above 48 KiB is allowed for the kernel first."""
        from runtime_cuda import cudrv
        fn = self.function(name)
        self.rt.activate()
        if shared > 48 * 1024:
            cudrv.func_set_max_dynamic_shared(fn, shared)
        cudrv.launch(fn, grid, block, args, shared=shared, stream=stream)

    def u64s(self, name: str, n: int) -> list[int]:
        self.rt.activate()
        return read_module_u64s(self.handle, name, n)


_P = ctypes.c_uint64   # a device pointer parameter


class EidolaKernels:
    """eidola's device module in one runtime's context, with a launcher per kernel."""

    def __init__(self, module: LoadedModule) -> None:
        self.module = module
        check_layout(module.u64s(LAYOUT_GLOBAL, len(layout_mirror())), f"the module {module.path.name}")
        d = module.u64s(DEFAULTS_GLOBAL, 1)[0]   # two u32: store kind (low), layout (high)
        sk, lay = d & 0xFFFFFFFF, d >> 32
        self._defaults = {"store": {v: k for k, v in STORE_KINDS.items()}[sk],
                          "layout": {v: k for k, v in EIDOLON_LAYOUTS.items()}[lay]}

    def eidolon_defaults(self) -> dict[str, str]:
        """The eidolon store kind and layout compiled in as defaults (chosen by E0)."""
        return dict(self._defaults)

    def eidolon(self, st: int, *, blocks: int, threads: int, smem_bytes: int = -1, store: str | None = None,
                layout: str | None = None, stream: int = 0) -> None:
        """Engine (a). smem_bytes < 0: the opt-in maximum, so that no other block (which needs at
        least the 1 KB the system reserves per block) fits beside an eidolon block: its SM is reserved."""
        sk, lay = eidolon_config(store, layout, self._defaults)
        if threads < 32 or threads % 32 or blocks < 1:
            raise ConfigError("eidolon launch needs blocks >= 1 and a multiple of 32 threads",
                              blocks=blocks, threads=threads)
        smem = self.module.rt.smem_optin if smem_bytes < 0 else int(smem_bytes)
        self.module.launch(eidolon_kernel(sk, lay), (blocks,), (threads,), [_P(st)], shared=smem, stream=stream)

    def timer_probe(self, changes: int, max_changes: int, iters: int, summary: int, *, stream: int = 0) -> None:
        self.module.launch("hbf_eidola_timer_probe", (1,), (32,),
                           [_P(changes), ctypes.c_uint32(max_changes), ctypes.c_uint64(iters), _P(summary)],
                           stream=stream)

    def tprobe(self, st: int, addrs: int, expect: int, wake: int, n: int, *, pre_ns: int, stagger: bool,
               scratch: int, rec: int, meta: int, pollers: int, load: str, pipelined: bool,
               stream: int = 0) -> None:
        """Timing-lab probe: ``pollers`` blocks (one polling thread each), load kind ``load``."""
        self.module.launch(tprobe_config(load, pollers, pipelined), (pollers,), (32,),
                           [_P(st), _P(addrs), _P(expect), _P(wake), ctypes.c_uint64(n), ctypes.c_int64(pre_ns),
                            ctypes.c_uint32(int(bool(stagger))), _P(scratch), _P(rec), _P(meta)], stream=stream)

    def probe(self, st: int, addrs: int, expect: int, n: int, seen: int, polls: int, streams: int, *,
              stream: int = 0) -> None:
        if streams < 1:
            raise ConfigError("probe needs streams >= 1", streams=streams)
        threads = min(streams, 128)
        self.module.launch("hbf_eidola_probe", (-(-streams // threads),), (threads,),
                           [_P(st), _P(addrs), _P(expect), ctypes.c_uint64(n), _P(seen), _P(polls),
                            ctypes.c_uint32(streams)], stream=stream)

    def probe_min(self, st: int, addrs: int, expect: int, n: int, seen: int, replicas: int, *,
                  stream: int = 0) -> None:
        self.module.launch("hbf_eidola_probe_min", (replicas,), (32,),
                           [_P(st), _P(addrs), _P(expect), ctypes.c_uint64(n), _P(seen)], stream=stream)

    def setup(self, st: int, addr: int, value: int, size: int, wakeup: int, n: int, *, stream: int = 0) -> None:
        self.module.launch("hbf_eidola_setup", (64,), (128,),
                           [_P(st), _P(addr), _P(value), _P(size), _P(wakeup), ctypes.c_uint64(n)], stream=stream)

    def corunner(self, out: int, iters: int, span: int, *, blocks: int, threads: int, stream: int = 0) -> None:
        self.module.launch("hbf_eidola_corunner", (blocks,), (threads,),
                           [_P(out), ctypes.c_uint64(iters), _P(span)], stream=stream)


def eidolon_config(store: str | None, layout: str | None, defaults: dict[str, str]) -> tuple[int, int]:
    """(store kind, layout) indexes of an eidolon launch; None takes the module's default."""
    store = defaults["store"] if store is None else store
    layout = defaults["layout"] if layout is None else layout
    if store not in STORE_KINDS:
        raise ConfigError("unknown eidolon store kind", value=store, known=sorted(STORE_KINDS))
    if layout not in EIDOLON_LAYOUTS:
        raise ConfigError("unknown eidolon layout", value=layout, known=sorted(EIDOLON_LAYOUTS))
    return STORE_KINDS[store], EIDOLON_LAYOUTS[layout]


def tprobe_config(load: str, pollers: int, pipelined: bool) -> str:
    """The timing-lab probe kernel for a load kind (PROBE_LOADS) and dependent/pipelined polling."""
    if load not in PROBE_LOADS:
        raise ConfigError("tprobe: unknown load kind", load=load, known=sorted(PROBE_LOADS))
    if pollers < 1:
        raise ConfigError("tprobe: pollers must be >= 1", pollers=pollers)
    return tprobe_kernel(PROBE_LOADS[load], pipelined)


class DeviceBuffer:
    def __init__(self, rt: "EidolaRuntime", nbytes: int, *, zero: bool = True) -> None:
        from runtime_cuda import cudrv
        self.rt, self._cu = rt, cudrv
        self.nbytes = max(int(nbytes), 8)
        rt.activate()
        self.ptr = cudrv.mem_alloc(self.nbytes)
        if zero:
            self.fill(0)

    def fill(self, byte: int) -> None:
        self.rt.activate()
        self._cu.memset_d8(self.ptr, byte, self.nbytes)

    def upload(self, arr: np.ndarray, offset: int = 0) -> None:
        a = np.ascontiguousarray(arr)
        if a.nbytes + offset > self.nbytes:
            raise ConfigError("upload larger than the buffer", nbytes=a.nbytes, capacity=self.nbytes)
        if a.nbytes:
            self.rt.activate()
            self._cu.htod(self.ptr + offset, a.ctypes.data, a.nbytes)

    def download(self, dtype, count: int | None = None, offset: int = 0) -> np.ndarray:
        dt = np.dtype(dtype)
        n = (self.nbytes - offset) // dt.itemsize if count is None else int(count)
        out = np.empty(n, dt)
        if out.nbytes:
            self.rt.activate()
            self._cu.dtoh(out.ctypes.data, self.ptr + offset, out.nbytes)
        return out

    def free(self) -> None:
        if self.ptr:
            self.rt.activate()
            self._cu.mem_free(self.ptr)
            self.ptr = 0


class EidolaRuntime:
    """One device's primary context: eidola's kernels, buffers, streams (runtime_cuda.cudrv)."""

    def __init__(self, device: int = 0, module: str | os.PathLike | None = None) -> None:
        # The eidolon kernel and the target run concurrently and wait on each other. With CUDA's
        # lazy module loading (the default since 12.x) the first launch of a kernel may wait for
        # running kernels to finish (measured on the H200: the first eidolon + probe pair hung
        # until the 2 s device timeout): load every kernel when its module loads (eager loading
        # for a process that starts CUDA here, cuFuncLoad per kernel in any case).
        os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
        from runtime_cuda import cudrv
        self._cu = cudrv
        self.device = int(device)
        self.dev, self.context = cudrv.init_context(self.device)
        self.sm_count = cudrv.device_attr(self.dev, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
        self.smem_optin = cudrv.device_attr(self.dev, "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
        self._modules: dict[tuple[str, tuple[str, ...]], LoadedModule] = {}
        self._bufs: list[DeviceBuffer] = []
        self.module_path = Path(module) if module else build_module()
        self.kernels = EidolaKernels(self.load_module(self.module_path, KERNELS))
        self.streams = [self.stream() for _ in range(2)]

    @classmethod
    def create(cls, device: int = 0, module: str | os.PathLike | None = None) -> "EidolaRuntime":
        return cls(device, module)

    def activate(self) -> None:
        """Make this runtime's context current (every call below does it first)."""
        self._cu.ctx_set_current(self.context)

    def load_module(self, path: str | os.PathLike, kernels: Sequence[str]) -> LoadedModule:
        """A cubin loaded into this context (once per path and kernel list)."""
        key = (str(Path(path).resolve()), tuple(kernels))
        m = self._modules.get(key)
        if m is None:
            m = self._modules[key] = LoadedModule(self, Path(path), kernels)
        return m

    def alloc(self, nbytes: int, zero: bool = True) -> DeviceBuffer:
        b = DeviceBuffer(self, nbytes, zero=zero)
        self._bufs.append(b)
        return b

    def array(self, arr: np.ndarray) -> DeviceBuffer:
        a = np.ascontiguousarray(arr)
        b = self.alloc(a.nbytes, zero=False)
        b.upload(a)
        return b

    def stream(self) -> int:
        """A non-blocking stream (its handle)."""
        self.activate()
        return self._cu.stream_create(non_blocking=True)

    def sync(self) -> None:
        self.activate()
        self._cu.ctx_synchronize()

    def enable_peer(self, peer: "EidolaRuntime") -> None:
        """Let kernels of this runtime's device access ``peer``'s memory."""
        self.activate()
        self._cu.enable_peer_access(self.dev, peer.dev, peer.context)

    def close(self) -> None:
        for b in self._bufs:
            b.free()
        self._bufs.clear()


# ================================================================================================
# Replay: one target's state
# ================================================================================================
def bind_module_state(module: Any, replay: "Replay | None") -> bool:
    """Point a flags-pass module's ``__hb_eidola_state`` at ``replay``'s device state (``None``:
    detach: flag loads read memory, nothing counted), the way Session.bind_module points
    ``__hb_state`` at the session: cuModuleGetGlobal + an 8-byte copy. False when the module has no
    such global (not built with ``HBFCC_PASSES=timing,flags``)."""
    from runtime_cuda import cudrv
    g = cudrv.module_global(module, EIDOLA_STATE_GLOBAL)
    if g is None:
        return False
    cudrv.htod(g[0], ctypes.c_uint64(0 if replay is None else int(replay.dev.ptr)), 8)
    return True


def check_flag_ranges(ranges: Sequence[FlagRange]) -> tuple[FlagRange, ...]:
    """The device table's rules: at most MAX_FLAG_RANGES; FlagClassifier's (128-byte aligned, class
    in [1, MAX_CLASSES), nonzero, no overlap). Returns them sorted by base."""
    if len(ranges) > MAX_FLAG_RANGES:
        raise RangeError(f"at most {MAX_FLAG_RANGES} flag ranges", code=ErrorCode.RANGE_TABLE_FULL,
                         got=len(ranges))
    return FlagClassifier(ranges).ranges


class FlagTable:
    """The flag ranges of one eidola state (``hbf_eidola_state.flag_ranges``, what the device
    classifies flag loads against): THE flag-range registry. A :class:`Replay` owns one (filled from
    its ``flags``); runtime_cuda's ``Session.register_flag_range`` adds to it once it is attached
    (``Replay.attach(session)``). Every change is written into the host mirror ``host`` and handed
    to ``on_change`` (the Replay uploads the state)."""

    def __init__(self, host: StateMirror, ranges: Sequence[FlagRange] = (), on_change: Any = None) -> None:
        self.host = host
        self.on_change = on_change      # called after every change (the Replay uploads its state)
        self._ranges = check_flag_ranges(list(ranges))
        self._write()

    def flag_ranges(self) -> tuple[FlagRange, ...]:
        return self._ranges

    def add_flag_range(self, base: int, length: int, klass: int = 1, name: str = "") -> FlagRange:
        """Add a range (checked: :func:`check_flag_ranges`; nothing changes when it is refused)."""
        f = FlagRange(int(base), int(length), int(klass), name)
        self._ranges = check_flag_ranges([*self._ranges, f])
        self._write()
        return f

    def remove_flag_range(self, base: int) -> None:
        keep = [f for f in self._ranges if f.base != int(base)]
        if len(keep) == len(self._ranges):
            raise RangeError("no flag range at this base", code=ErrorCode.RANGE_NOT_FOUND, base=hex(int(base)))
        self._ranges = tuple(keep)
        self._write()

    def class_names(self) -> dict[int, str]:
        return FlagClassifier(self._ranges).class_names()

    def _write(self) -> None:
        h = self.host
        for i in range(MAX_FLAG_RANGES):
            h.flag_ranges[i].base = h.flag_ranges[i].length = h.flag_ranges[i].klass = 0
        for i, f in enumerate(self._ranges):
            h.flag_ranges[i].base, h.flag_ranges[i].length, h.flag_ranges[i].klass = f.base, f.length, f.klass
        h.n_flag_ranges = len(self._ranges)
        if self.on_change is not None:
            self.on_change()


class Replay:
    """One target's eidola state: WTT (both indexes), monitor log, wake words, counters, and the
    flag-range table the device classifies flag loads against."""

    def __init__(self, rt: EidolaRuntime, flags: Sequence[FlagRange] = (), *, monitor: FlagRange | None = None,
                 n_wake: int = 1 << 14, staging: int = 1 << 16, timeout_ns: int = 2_000_000_000,
                 arm_slots: int = 0) -> None:
        self.rt = rt
        self.host = StateMirror()
        self.flag_table = FlagTable(self.host, flags)   # pushed with the whole state below
        self.dev = rt.alloc(ctypes.sizeof(StateMirror))
        self.ctr = rt.alloc(MAX_CLASSES * len(COUNTERS) * 8)
        self.wtt = WriteTrackingTable()
        self.frozen: FrozenWtt | None = None
        self.session: Any = None
        h = self.host
        h.t0 = (1 << 64) - 1
        h.timeout_ns = timeout_ns
        h.sleep_ns = 64
        mon = monitor or (flags[0] if flags else None)
        self.mon = None
        if mon is not None:
            slots = mon.length // 4
            self.mon = rt.alloc(slots * MON_ENTRY_BYTES)
            h.mon_base, h.mon_slots, h.mon = mon.base, slots, self.mon.ptr
        self.wake = rt.alloc(n_wake * 4)
        h.wake, h.n_wake = self.wake.ptr, n_wake
        self.s = {k: rt.alloc(staging * w) for k, w in (("addr", 8), ("value", 8), ("size", 4), ("wakeup", 8))}
        self.s_count = rt.alloc(8)
        h.s_addr, h.s_value, h.s_size, h.s_wakeup = (self.s[k].ptr for k in ("addr", "value", "size", "wakeup"))
        h.s_count, h.s_cap = self.s_count.ptr, staging
        h.ctr = self.ctr.ptr
        if arm_slots:   # extern API (__hb_eidola_monitor/mwait): one 48-B record per thread slot
            self.arm = rt.alloc(arm_slots * 48)
            h.arm, h.n_arm = self.arm.ptr, arm_slots
        self._tables: list[DeviceBuffer] = []
        self.flag_table.on_change = self.push
        self.push()

    # -- flag ranges ------------------------------------------------------------------------------
    @property
    def flags(self) -> tuple[FlagRange, ...]:
        return self.flag_table.flag_ranges()

    def add_flag_range(self, base: int, length: int, klass: int = 1, name: str = "") -> FlagRange:
        return self.flag_table.add_flag_range(base, length, klass, name)

    def remove_flag_range(self, base: int) -> None:
        self.flag_table.remove_flag_range(base)

    def attach(self, session: Any) -> "Replay":
        """Make this Replay the flag table of a runtime_cuda Session: ``session.register_flag_range``
        then adds to it (and hbfd's range table records each range for the summary)."""
        session.attach_flag_table(self.flag_table)
        self.session = session
        return self

    def bind_module(self, module: Any) -> bool:
        """Bind a module built with hbfcc's flags pass to this replay (see :func:`bind_module_state`)."""
        return bind_module_state(module, self)

    # -- registration ---------------------------------------------------------------------------
    def register_write(self, addr: int, value: int, size: int, wakeup_ns: int, *, src: int = -1) -> None:
        self.wtt.register_write(addr, value, size, wakeup_ns, src=src)
        self.frozen = None

    def register_trace(self, trace: Trace, bases: dict[str, int]) -> None:
        for e in WriteTrackingTable.from_trace(trace, bases)._entries:
            self.register_write(e.addr, e.value, e.size, e.wakeup_ns, src=e.src)

    def use_table(self, frozen: FrozenWtt) -> None:
        """Install a table frozen elsewhere (shared by several Replays); registrations made
        through this Replay before are discarded."""
        self.wtt = WriteTrackingTable()
        self.frozen = frozen

    def register_from_device(self, addrs, values, sizes, wakeups) -> int:
        """Register through the device setup kernel (hbf_eidola_register_write), then pull the
        staging area into the table. Returns how many entries the device registered."""
        n = len(addrs)
        bufs = [self.rt.array(np.asarray(a, dt)) for a, dt in
                ((addrs, np.uint64), (values, np.uint64), (sizes, np.uint32), (wakeups, np.uint64))]
        self.s_count.fill(0)
        self.push()
        self.rt.sync()
        self.rt.kernels.setup(self.dev.ptr, *(b.ptr for b in bufs), n, stream=self.rt.streams[0])
        self.rt.sync()
        self.pull()
        self._raise_failure("setup kernel")
        cnt = int(self.s_count.download(np.uint32, 1)[0])
        a, v = self.s["addr"].download(np.uint64, cnt), self.s["value"].download(np.uint64, cnt)
        s, w = self.s["size"].download(np.uint32, cnt), self.s["wakeup"].download(np.uint64, cnt)
        for i in range(cnt):
            self.register_write(int(a[i]), int(v[i]), int(s[i]), int(w[i]))
        for b in bufs:
            b.free()
        return cnt

    # -- install ---------------------------------------------------------------------------------
    def install(self, *, engine: str = "virtual", mon_mode: str = "off", lag_ns: int = 0,
                vload_paced: bool = False, initial: dict[int, int] | None = None) -> FrozenWtt:
        if engine not in ENGINES:
            raise ConfigError("unknown engine", value=engine, known=sorted(ENGINES))
        if mon_mode not in MON_MODES:
            raise ConfigError("unknown monitor mode", value=mon_mode, known=sorted(MON_MODES))
        if self.frozen is None:
            self.frozen = self.wtt.freeze()
        for b in self._tables:
            b.free()
        self._tables = []
        d = self.frozen.device_arrays()
        init = np.zeros(len(d["v_addr"]), np.uint64)
        if initial:
            for i, a in enumerate(d["v_addr"]):
                init[i] = initial.get(int(a), 0)
        d["v_init"] = init
        h = self.host
        ptr = {}
        for k in ("t_addr", "t_value", "t_size", "t_wakeup", "v_addr", "v_begin", "v_time", "v_value", "v_init"):
            buf = self.rt.array(d[k]) if len(d[k]) else self.rt.alloc(8)
            self._tables.append(buf)
            ptr[k] = buf.ptr
        enacted = self.rt.alloc(max(1, len(d["t_addr"])) * 8)
        self._tables.append(enacted)
        self.enacted = enacted
        h.n_entries, h.n_vaddr = len(d["t_addr"]), len(d["v_addr"])
        h.vd_base = h.vd_n = h.vd_idx = 0
        va = d["v_addr"].astype(np.int64) if len(d["v_addr"]) else None
        if va is not None and (va % 4 == 0).all() and (va[-1] - va[0]) // 4 + 1 <= (1 << 24):
            # dense direct map: O(1) address lookup however many peers (engine b)
            idx = np.full(int((va[-1] - va[0]) // 4 + 1), 0xFFFFFFFF, np.uint32)
            idx[(va - va[0]) // 4] = np.arange(len(va), dtype=np.uint32)
            buf = self.rt.array(idx)
            self._tables.append(buf)
            h.vd_base, h.vd_n, h.vd_idx = int(va[0]), len(idx), buf.ptr
        for k, v in ptr.items():
            setattr(h, k, v)
        h.t_enacted = enacted.ptr
        h.engine = ENGINES[engine]
        h.mon_mode = MON_MODES[mon_mode]
        h.lag_ns = int(lag_ns)
        h.vload_paced = int(bool(vload_paced) or engine == "virtual_paced")
        self.engine_name = engine
        self.push()
        return self.frozen

    def set(self, **fields: Any) -> None:
        for k, v in fields.items():
            if k == "engine":
                v = ENGINES[v]
            elif k == "mon_mode":
                v = MON_MODES[v]
            setattr(self.host, k, v)
        self.push()

    # -- per launch -------------------------------------------------------------------------------
    def reset_launch(self, *, counters: bool = True) -> None:
        self.host.t0 = (1 << 64) - 1
        self.host.failure = 0
        self.host.eidolon_done = 0
        self.push()
        if counters:
            self.ctr.fill(0)
        self.wake.fill(0)
        if self.mon is not None:
            self.mon.fill(0)
        self.rt.sync()   # memsets are asynchronous; the next launches run on non-blocking streams

    def launch_eidolon(self, *, blocks: int = 2, threads: int = 1024, smem_bytes: int = -1,
                       stream: int | None = None, store: str | None = None, layout: str | None = None) -> None:
        """Engine (a): the persistent eidolon kernel. Each block asks the opt-in maximum of shared
        memory (smem_bytes=-1), so no target block fits beside it: its SM is reserved.
        ``store`` (STORE_KINDS) and ``layout`` (EIDOLON_LAYOUTS) default to the configuration
        E0 chose (the module's hbf_eidolon_defaults)."""
        self.rt.kernels.eidolon(self.dev.ptr, blocks=blocks, threads=threads, smem_bytes=smem_bytes,
                                store=store, layout=layout,
                                stream=self.rt.streams[0] if stream is None else stream)

    def push(self) -> None:
        self.dev.upload(np.frombuffer(bytes(self.host), np.uint8))

    def pull(self) -> None:
        raw = self.dev.download(np.uint8, ctypes.sizeof(StateMirror))
        fresh = StateMirror.from_buffer_copy(raw.tobytes())
        self.host.t0, self.host.failure, self.host.eidolon_done = fresh.t0, fresh.failure, fresh.eidolon_done

    def _raise_failure(self, where: str) -> None:
        f = int(self.host.failure)
        if f:
            code, detail = f >> 32, f & 0xFFFFFFFF
            raise EidolaDeviceFailure(f"eidola device failure in {where}: {FAIL_NAMES.get(code, code)}",
                                      code_name=FAIL_NAMES.get(code, str(code)), detail=hex(detail))

    def check(self, where: str = "kernel") -> None:
        self.pull()
        self._raise_failure(where)

    def counters(self) -> np.ndarray:
        return self.ctr.download(np.uint64, MAX_CLASSES * len(COUNTERS)).reshape(MAX_CLASSES, len(COUNTERS))

    def accounting(self) -> dict:
        return summarize(self.counters(), self.flag_table.class_names())

    def enacted_rel(self) -> np.ndarray:
        """Engine (a): per WTT entry (wakeup order), the %globaltimer - t0 at which the eidolon
        issued its store (the timer read that passed the wakeup test)."""
        return self.enacted.download(np.uint64, max(1, int(self.host.n_entries)))[: int(self.host.n_entries)]


def report_accounting(summary: dict, session: Any = None, *, kind: str = "eidola_accounting") -> bool:
    """Send the accounting summary to hbfd (Report RPC) when a runtime_cuda Session is attached."""
    if session is None:
        return False
    session._report(kind, summary)
    return True
