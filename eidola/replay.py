"""Eidola host launcher: Write Tracking Table in device memory, replay engines, monitor log,
flag accounting, and the fused GEMV+AllReduce runner.

The device code is eidola/src/hbf_eidola.cuh (primitives), eidola/src/eidola_kernels.cu
(eidolon kernel, probe, setup kernel, co-runner, C API) and workloads/gemv_allreduce/gemv_allreduce.cu
(the workload). ``build_library()`` compiles them with nvcc into one shared library that this module
loads with ctypes (no torch needed).

Typical use::

    rt = EidolaRuntime.create()                      # builds/loads the library, device 0
    ev = rt.new_replay(flag_base, flag_bytes, ...)   # state + monitor log + counters
    ev.register_write(addr, value, 4, wakeup_ns)     # from Python, any order
    ev.register_from_device(addrs, values, sizes, wakeups)   # through the setup kernel
    ev.install(engine="virtual")                     # freeze the WTT, upload both indexes
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from hbfcommon import resources
from hbfcommon.errors import ConfigError, CudaError, HbfError, ToolchainError
from hbfcommon.fsutil import atomic_output
from eidola.accounting import COUNTERS, MAX_CLASSES, summarize
from eidola.trace import Trace
from eidola.wtt import FrozenWtt, WriteTrackingTable

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent     # only for the default build output (ROOT/build/eidola)
# the device sources: package data of eidola, workloads and runtime_cuda (hbfcommon.resources)
SOURCES = (resources.data_path("eidola", "src", "eidola_kernels.cu"),
           resources.data_path("workloads", "gemv_allreduce", "gemv_allreduce.cu"))
HEADERS = (resources.data_path("eidola", "src", "hbf_eidola.cuh"),)
INCLUDE_DIRS = (resources.data_path("runtime_cuda", "include"), resources.data_path("runtime_cuda", "src"),
                resources.data_path("eidola", "src"))
ARCH = "sm_90a"

ENGINE_REAL, ENGINE_VIRT = 0, 1
ENGINES = {"real": ENGINE_REAL, "eidolon": ENGINE_REAL, "virtual": ENGINE_VIRT, "virtual_paced": ENGINE_VIRT,
           "native": ENGINE_REAL}   # native: flags already in memory before launch, no replay at all
MON_MODES = {"off": 0, "spin": 0, "mesa": 1, "hoare": 2}
WAIT_MODES = {"spin": 0, "mesa": 1, "hoare": 2}
# engine (a) eidolon: the enactment store's kind and the kernel layout (eidola_kernels.cu)
STORE_KINDS = {"relaxed.sys": 0, "relaxed.gpu": 1, "release.gpu": 2, "release.sys": 3, "volatile": 4}
EIDOLON_LAYOUTS = {"lane": 0, "warp": 1, "lane_late": 2, "warp_burst": 3}
# timing-lab probe loads (hbf_eidola_tprobe)
PROBE_LOADS = {"acquire.sys": 0, "relaxed.gpu": 1, "volatile": 2, "acquire.gpu": 3}
FAIL_NAMES = {1: "TIMEOUT", 2: "MONITOR_LOG_FULL", 3: "NEVER_WAKES", 4: "STAGING_FULL", 5: "BAD_SIZE"}
LAYOUT_VERSION = 1


class EidolaDeviceFailure(HbfError):
    """A device-side eidola failure (timeout, monitor log full, a wait that can never wake)."""


def build_library(out_dir: str | os.PathLike | None = None, *, nvcc: str | None = None,
                  arch: str = ARCH) -> Path:
    """Compile the eidola sources into ``libhbfeidola.so`` (cached by source hash)."""
    nvcc = nvcc or shutil.which("nvcc")
    if not nvcc:
        raise ToolchainError("nvcc not found: cannot build the eidola library", argv=["nvcc"])
    h = hashlib.sha256(arch.encode())
    for p in SOURCES + HEADERS:
        h.update(p.read_bytes())
    out = Path(out_dir) if out_dir else ROOT / "build" / "eidola"
    out.mkdir(parents=True, exist_ok=True)
    lib = out / f"libhbfeidola-{h.hexdigest()[:12]}.so"
    if lib.exists():
        return lib
    with atomic_output(lib) as tmp:
        argv = [nvcc, "-std=c++17", "-O3", f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC",
                *(f"-I{d}" for d in INCLUDE_DIRS),
                "-o", str(tmp), *map(str, SOURCES)]
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            raise ToolchainError("nvcc failed building the eidola library", argv=argv,
                                 returncode=r.returncode, stderr=r.stderr)
    return lib


class _FlagRange(ctypes.Structure):
    _fields_ = [("base", ctypes.c_uint64), ("length", ctypes.c_uint64), ("klass", ctypes.c_uint32),
                ("reserved0", ctypes.c_uint32), ("reserved1", ctypes.c_uint64)]


_U64 = ctypes.c_uint64


class StateMirror(ctypes.Structure):
    """Mirror of hbf_eidola_state (checked against the library's hbe_layout())."""

    _fields_ = ([("t0", _U64), ("failure", _U64), ("eidolon_done", _U64), ("vd_base", _U64),
                 ("engine", ctypes.c_uint32), ("mon_mode", ctypes.c_uint32),
                 ("vload_paced", ctypes.c_uint32), ("n_flag_ranges", ctypes.c_uint32),
                 ("lag_ns", ctypes.c_int64), ("timeout_ns", _U64),
                 ("sleep_ns", ctypes.c_uint32), ("reserved1", ctypes.c_uint32),
                 ("flag_ranges", _FlagRange * 8)]
                + [(n, _U64) for n in ("n_entries", "t_addr", "t_value", "t_size", "t_wakeup",
                                       "t_enacted", "n_vaddr", "v_addr", "v_begin", "v_time",
                                       "v_value", "v_init", "mon_base", "mon_slots", "mon", "wake",
                                       "n_wake", "s_addr", "s_value", "s_size", "s_wakeup",
                                       "s_count", "s_cap", "ctr", "arm", "n_arm", "vd_n", "vd_idx")])


class GarParams(ctypes.Structure):
    """Mirror of gar_params (workloads/gemv_allreduce/gemv_allreduce.cu)."""

    _fields_ = ([(n, _U64) for n in ("A", "x", "y", "recv", "flags", "peer_recv", "peer_flags",
                                     "sink_data", "sink_flags", "marks", "seen", "polls", "release",
                                     "st")]
                + [(n, ctypes.c_int32) for n in ("rank", "n_gpus", "M", "Kl", "tiles", "tile_rows")]
                + [("seq", ctypes.c_uint32)]
                + [(n, ctypes.c_int32) for n in ("eidola", "wait_mode", "reserved")])


class Lib:
    """ctypes binding of libhbfeidola.so."""

    def __init__(self, path: Path) -> None:
        # The eidolon kernel and the target run concurrently and wait on each other. With CUDA's
        # lazy module loading (the default since 12.x) the first launch of a kernel may wait for
        # running kernels to finish (measured on the H200: the first eidolon + probe pair hung
        # until the 2 s device timeout), so load every kernel at context creation.
        os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
        self.path = Path(path)
        self.so = ctypes.CDLL(str(path))
        so = self.so
        so.hbe_last_error.restype = ctypes.c_char_p
        vp, u64, i32, u32 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint32
        sig = {
            "hbe_layout": [ctypes.POINTER(u64), i32],
            "hbe_device_count": [ctypes.POINTER(i32)], "hbe_set_device": [i32],
            "hbe_sm_count": [i32, ctypes.POINTER(i32)],
            "hbe_malloc": [ctypes.POINTER(vp), ctypes.c_size_t], "hbe_free": [vp],
            "hbe_h2d": [vp, vp, ctypes.c_size_t], "hbe_d2h": [vp, vp, ctypes.c_size_t],
            "hbe_d2d": [vp, vp, ctypes.c_size_t], "hbe_memset": [vp, i32, ctypes.c_size_t],
            "hbe_sync": [], "hbe_peer_enable": [i32, i32],
            "hbe_stream_create": [ctypes.POINTER(vp)], "hbe_stream_sync": [vp], "hbe_stream_destroy": [vp],
            "hbe_launch_eidolon": [vp, i32, i32, i32, vp],
            "hbe_launch_eidolon_cfg": [vp, i32, i32, i32, i32, i32, vp],
            "hbe_eidolon_defaults": [ctypes.POINTER(i32), ctypes.POINTER(i32)],
            "hbe_launch_timer_probe": [vp, u32, u64, vp, vp],
            "hbe_launch_tprobe": [vp, vp, vp, vp, u64, ctypes.c_int64, u32, vp, vp, vp, i32, i32, i32, vp],
            "hbe_launch_probe": [vp, vp, vp, u64, vp, vp, u32, vp],
            "hbe_launch_setup": [vp, vp, vp, vp, vp, u64, vp],
            "hbe_launch_probe_min": [vp, vp, vp, u64, vp, u32, vp],
            "hbe_launch_corunner": [vp, u64, vp, i32, i32, vp],
            "gar_params_size": [], "gar_launch": [ctypes.POINTER(GarParams), i32, vp],
            "gar_fill": [vp, u64, u64, vp],
            "gar_partials": [vp, vp, vp, i32, i32, i32, i32, i32, i32, vp],
        }
        for name, args in sig.items():
            f = getattr(so, name)
            f.argtypes = args
            f.restype = ctypes.c_int
        self._check_layout()

    def _check_layout(self) -> None:
        out = (ctypes.c_uint64 * 16)()
        self.so.hbe_layout(out, 16)
        got = list(out)[:12]
        want = [ctypes.sizeof(StateMirror), LAYOUT_VERSION, StateMirror.t0.offset, StateMirror.engine.offset,
                StateMirror.lag_ns.offset, StateMirror.flag_ranges.offset, StateMirror.n_entries.offset,
                StateMirror.n_vaddr.offset, StateMirror.mon_base.offset, StateMirror.s_addr.offset,
                StateMirror.ctr.offset, 64]
        if got != want:
            raise CudaError("hbf_eidola_state layout mismatch between library and Python mirror",
                            library=got, mirror=want)
        if self.so.gar_params_size() != ctypes.sizeof(GarParams):
            raise CudaError("gar_params layout mismatch", library=self.so.gar_params_size(),
                            mirror=ctypes.sizeof(GarParams))

    def eidolon_defaults(self) -> dict[str, str]:
        """The eidolon store kind and layout compiled in as defaults (chosen by E0)."""
        sk, lay = ctypes.c_int(), ctypes.c_int()
        self.so.hbe_eidolon_defaults(ctypes.byref(sk), ctypes.byref(lay))
        return {"store": {v: k for k, v in STORE_KINDS.items()}[sk.value],
                "layout": {v: k for k, v in EIDOLON_LAYOUTS.items()}[lay.value]}

    def call(self, name: str, *args) -> None:
        rc = getattr(self.so, name)(*args)
        if rc != 0:
            msg = self.so.hbe_last_error().decode(errors="replace")
            raise CudaError(f"{name} failed: {msg or rc}", rc=rc)


class DeviceBuffer:
    def __init__(self, lib: Lib, nbytes: int, *, zero: bool = True) -> None:
        self.lib = lib
        self.nbytes = max(int(nbytes), 8)
        p = ctypes.c_void_p()
        lib.call("hbe_malloc", ctypes.byref(p), self.nbytes)
        self.ptr = int(p.value)
        if zero:
            self.fill(0)

    def fill(self, byte: int) -> None:
        self.lib.call("hbe_memset", ctypes.c_void_p(self.ptr), byte, self.nbytes)

    def upload(self, arr: np.ndarray, offset: int = 0) -> None:
        a = np.ascontiguousarray(arr)
        if a.nbytes + offset > self.nbytes:
            raise ConfigError("upload larger than the buffer", nbytes=a.nbytes, capacity=self.nbytes)
        if a.nbytes:
            self.lib.call("hbe_h2d", ctypes.c_void_p(self.ptr + offset), a.ctypes.data_as(ctypes.c_void_p), a.nbytes)

    def download(self, dtype, count: int | None = None, offset: int = 0) -> np.ndarray:
        dt = np.dtype(dtype)
        n = (self.nbytes - offset) // dt.itemsize if count is None else int(count)
        out = np.empty(n, dt)
        if out.nbytes:
            self.lib.call("hbe_d2h", out.ctypes.data_as(ctypes.c_void_p), ctypes.c_void_p(self.ptr + offset), out.nbytes)
        return out

    def free(self) -> None:
        if self.ptr:
            self.lib.call("hbe_free", ctypes.c_void_p(self.ptr))
            self.ptr = 0


class EidolaRuntime:
    def __init__(self, lib: Lib, device: int = 0) -> None:
        self.lib = lib
        self.device = device
        lib.call("hbe_set_device", device)
        n = ctypes.c_int()
        lib.call("hbe_sm_count", device, ctypes.byref(n))
        self.sm_count = int(n.value)
        self._bufs: list[DeviceBuffer] = []
        self.streams = [self.stream() for _ in range(2)]

    @classmethod
    def create(cls, device: int = 0, lib_path: str | os.PathLike | None = None) -> "EidolaRuntime":
        return cls(Lib(Path(lib_path) if lib_path else build_library()), device)

    def alloc(self, nbytes: int, zero: bool = True) -> DeviceBuffer:
        b = DeviceBuffer(self.lib, nbytes, zero=zero)
        self._bufs.append(b)
        return b

    def array(self, arr: np.ndarray) -> DeviceBuffer:
        a = np.ascontiguousarray(arr)
        b = self.alloc(a.nbytes, zero=False)
        b.upload(a)
        return b

    def stream(self) -> int:
        s = ctypes.c_void_p()
        self.lib.call("hbe_stream_create", ctypes.byref(s))
        return int(s.value)

    def sync(self) -> None:
        self.lib.call("hbe_sync")

    def close(self) -> None:
        for b in self._bufs:
            b.free()
        self._bufs.clear()


@dataclass(frozen=True)
class FlagRegion:
    base: int
    nbytes: int
    klass: int = 1
    name: str = "flags"


EIDOLA_STATE_GLOBAL = "__hb_eidola_state"    # hbfcc.passes.flags.STATE_GLOBAL (the eidola helper PTX)


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


class Replay:
    """One target's eidola state: WTT (both indexes), monitor log, wake words, counters."""

    def bind_module(self, module: Any) -> bool:
        """Bind a module built with hbfcc's flags pass to this replay (see :func:`bind_module_state`)."""
        return bind_module_state(module, self)

    def __init__(self, rt: EidolaRuntime, flags: Sequence[FlagRegion], *, monitor: FlagRegion | None = None,
                 n_wake: int = 1 << 14, staging: int = 1 << 16, timeout_ns: int = 2_000_000_000,
                 arm_slots: int = 0) -> None:
        if len(flags) > 8:
            raise ConfigError("at most 8 flag ranges", got=len(flags))
        for f in flags:
            if f.base % 128:
                raise ConfigError("flag ranges must be 128-byte aligned", base=hex(f.base))
            if not 1 <= f.klass < MAX_CLASSES:
                raise ConfigError("flag class out of range", klass=f.klass)
        self.rt, self.lib = rt, rt.lib
        self.flags = tuple(flags)
        self.host = StateMirror()
        self.dev = rt.alloc(ctypes.sizeof(StateMirror))
        self.ctr = rt.alloc(MAX_CLASSES * len(COUNTERS) * 8)
        self.wtt = WriteTrackingTable()
        self.frozen: FrozenWtt | None = None
        h = self.host
        h.t0 = (1 << 64) - 1
        h.timeout_ns = timeout_ns
        h.sleep_ns = 64
        h.n_flag_ranges = len(flags)
        for i, f in enumerate(flags):
            h.flag_ranges[i].base, h.flag_ranges[i].length, h.flag_ranges[i].klass = f.base, f.nbytes, f.klass
        mon = monitor or (flags[0] if flags else None)
        if mon is not None:
            slots = mon.nbytes // 4
            self.mon = rt.alloc(slots * 64)
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
        self.push()

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
        self.lib.call("hbe_launch_setup", ctypes.c_void_p(self.dev.ptr), *(ctypes.c_void_p(b.ptr) for b in bufs),
                      n, ctypes.c_void_p(self.rt.streams[0]))
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
        if getattr(self, "mon", None) is not None:
            self.mon.fill(0)
        self.rt.sync()   # memsets are asynchronous; the next launches run on non-blocking streams

    def launch_eidolon(self, *, blocks: int = 2, threads: int = 1024, smem_bytes: int = -1,
                       stream: int | None = None, store: str | None = None, layout: str | None = None) -> None:
        """Engine (a): the persistent eidolon kernel. Each block asks the opt-in maximum of shared
        memory (smem_bytes=-1), so no target block fits beside it: its SM is reserved.
        ``store`` (STORE_KINDS) and ``layout`` (EIDOLON_LAYOUTS) default to the configuration
        E0 chose (the library's hbe_eidolon_defaults)."""
        if store is not None and store not in STORE_KINDS:
            raise ConfigError("unknown eidolon store kind", value=store, known=sorted(STORE_KINDS))
        if layout is not None and layout not in EIDOLON_LAYOUTS:
            raise ConfigError("unknown eidolon layout", value=layout, known=sorted(EIDOLON_LAYOUTS))
        if threads < 32 or threads % 32 or blocks < 1:
            raise ConfigError("eidolon launch needs blocks >= 1 and a multiple of 32 threads",
                              blocks=blocks, threads=threads)
        self.lib.call("hbe_launch_eidolon_cfg", ctypes.c_void_p(self.dev.ptr), blocks, threads, smem_bytes,
                      -1 if store is None else STORE_KINDS[store], -1 if layout is None else EIDOLON_LAYOUTS[layout],
                      ctypes.c_void_p(self.rt.streams[0] if stream is None else stream))

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
        names = {0: "nonflag"}
        names.update({f.klass: f.name for f in self.flags})
        return summarize(self.counters(), names)

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


# ================================================================================================
# The fused GEMV+AllReduce workload
# ================================================================================================
@dataclass(frozen=True)
class GarShape:
    n_gpus: int
    M: int
    Kl: int            # per-rank K slice
    tiles: int
    threads: int = 256

    def __post_init__(self) -> None:
        if self.n_gpus < 2 or self.M < 1 or self.tiles < 1 or self.M % self.tiles:
            raise ConfigError("bad GEMV+AllReduce shape: need n_gpus >= 2 and tiles | M", shape=vars(self))
        if self.Kl % 4:
            raise ConfigError("Kl must be a multiple of 4 (float4 loads)", Kl=self.Kl)
        if self.M // self.tiles > self.threads:
            raise ConfigError("tile_rows = M / tiles must not exceed threads per block", M=self.M,
                              tiles=self.tiles, threads=self.threads)

    @property
    def tile_rows(self) -> int:
        return self.M // self.tiles


class GemvAllReduce:
    """Single-GPU target (rank ``rank``) with n_gpus-1 eidolons; or, with ``run_real``, n ranks
    with peer pointers (on several GPUs, or co-resident on one)."""

    def __init__(self, rt: EidolaRuntime, shape: GarShape, *, rank: int = 0, seed: int = 0) -> None:
        self.rt, self.lib, self.shape, self.rank, self.seed = rt, rt.lib, shape, rank, seed
        s = shape
        self.A = rt.alloc(s.M * s.Kl * 4, zero=False)
        self.x = rt.alloc(s.Kl * 4, zero=False)
        self.y = rt.alloc(s.M * 4)
        self.recv = rt.alloc(s.n_gpus * s.M * 4)
        self.flag_bytes = max(128, -(-(s.tiles * s.n_gpus * 4) // 128) * 128)
        self.flags = rt.alloc(self.flag_bytes)
        self.sink_data = rt.alloc(s.M * 4)
        self.sink_flags = rt.alloc(self.flag_bytes)
        self.marks = rt.alloc(s.tiles * 6 * 8)
        self.seen = rt.alloc(s.tiles * s.n_gpus * 8)
        self.polls = rt.alloc(s.tiles * s.n_gpus * 4)
        self.release = rt.alloc(s.tiles * 8)
        st = rt.streams[1]
        # this rank's operands, and the peers' partial tiles pre-staged in recv (shadow buffer)
        self.lib.call("gar_fill", ctypes.c_void_p(self.x.ptr), s.Kl, self._seed(rank, 1), ctypes.c_void_p(st))
        tmpA = rt.alloc(s.M * s.Kl * 4, zero=False)
        tmpx = rt.alloc(s.Kl * 4, zero=False)
        for q in range(s.n_gpus):
            A, x = (self.A, self.x) if q == rank else (tmpA, tmpx)
            self.lib.call("gar_fill", ctypes.c_void_p(A.ptr), s.M * s.Kl, self._seed(q, 0), ctypes.c_void_p(st))
            self.lib.call("gar_fill", ctypes.c_void_p(x.ptr), s.Kl, self._seed(q, 1), ctypes.c_void_p(st))
            if q != rank:
                self.lib.call("gar_partials", ctypes.c_void_p(A.ptr), ctypes.c_void_p(x.ptr),
                              ctypes.c_void_p(self.recv.ptr), q, s.M, s.Kl, s.tiles, s.tile_rows,
                              s.threads, ctypes.c_void_p(st))
        rt.sync()
        tmpA.free()
        tmpx.free()

    def _seed(self, q: int, which: int) -> int:
        return (self.seed * 1_000_003 + q) * 2 + which

    def flag_region(self, klass: int = 1) -> FlagRegion:
        return FlagRegion(self.flags.ptr, self.flag_bytes, klass, "tile_flags")

    def bases(self) -> dict[str, int]:
        return {"flags": self.flags.ptr, "recv": self.recv.ptr}

    def params(self, replay: Replay, *, seq: int, wait: str, eidola: bool = True) -> GarParams:
        s = self.shape
        p = GarParams()
        p.A, p.x, p.y, p.recv, p.flags = self.A.ptr, self.x.ptr, self.y.ptr, self.recv.ptr, self.flags.ptr
        p.sink_data, p.sink_flags = self.sink_data.ptr, self.sink_flags.ptr
        p.marks, p.seen, p.polls, p.release = self.marks.ptr, self.seen.ptr, self.polls.ptr, self.release.ptr
        p.st = replay.dev.ptr
        p.rank, p.n_gpus, p.M, p.Kl, p.tiles, p.tile_rows = self.rank, s.n_gpus, s.M, s.Kl, s.tiles, s.tile_rows
        p.seq, p.eidola, p.wait_mode = seq, int(eidola), WAIT_MODES[wait]
        return p

    def run_replay(self, replay: Replay, *, wait: str = "spin", engine: str = "virtual", seq: int = 1,
                   eidolon_blocks: int | None = None, corunner: dict | None = None, session: Any = None,
                   eidolon: dict | None = None) -> dict:
        """One launch of the target with the eidolons replaying ``replay``'s table. With a
        runtime_cuda Session attached, the accounting summary also goes to hbfd (Report RPC).
        ``eidolon``: engine (a) launch options (store, layout, threads; Replay.launch_eidolon)."""
        if wait not in WAIT_MODES:
            raise ConfigError("unknown wait mode", value=wait, known=sorted(WAIT_MODES))
        if engine == "native":   # control: every peer flag already set, nothing replayed
            pre = np.zeros(self.flag_bytes // 4, np.uint32)
            pre[: self.shape.tiles * self.shape.n_gpus] = seq
            self.flags.upload(pre)
        else:
            self.flags.fill(0)
        replay.reset_launch()   # synchronizes
        p = self.params(replay, seq=seq, wait=wait)
        if engine == "eidolon":
            if eidolon_blocks is None:   # 2 reserved SMs, more for big tables (<= 4)
                eidolon_blocks = max(2, min(4, -(-int(replay.host.n_entries) // 4096)))
            opts = {k: v for k, v in (eidolon or {}).items() if k in ("store", "layout", "threads")}
            replay.launch_eidolon(blocks=eidolon_blocks, **opts)
        cr = None
        if corunner:
            cr = self._launch_corunner(**corunner)
        self.lib.call("gar_launch", ctypes.byref(p), self.shape.threads, ctypes.c_void_p(self.rt.streams[1]))
        self.rt.sync()
        replay.check("gemv_allreduce")
        out = self.collect(replay)
        if session is not None:
            report_accounting({"workload": "gemv_allreduce", "engine": engine, "wait": wait,
                               "n_gpus": self.shape.n_gpus, "kernel_ns": out["kernel_ns"], **out["accounting"]},
                              session)
        if cr is not None:
            out["corunner"] = self._corunner_result(cr)
        return out

    def _launch_corunner(self, *, blocks: int, threads: int = 256, iters: int = 20000) -> dict:
        out = self.rt.alloc(blocks * threads * 4)
        span = self.rt.alloc(blocks * 16)
        s3 = self.rt.stream()
        self.lib.call("hbe_launch_corunner", ctypes.c_void_p(out.ptr), iters, ctypes.c_void_p(span.ptr),
                      blocks, threads, ctypes.c_void_p(s3))
        return {"out": out, "span": span, "blocks": blocks, "threads": threads, "iters": iters}

    def _corunner_result(self, cr: dict) -> dict:
        span = cr["span"].download(np.uint64, 2 * cr["blocks"]).reshape(-1, 2).astype(np.int64)
        cr["out"].free()
        cr["span"].free()
        dur = span[:, 1] - span[:, 0]
        return {"block_ns_median": float(np.median(dur)), "block_ns_p90": float(np.percentile(dur, 90)),
                "span_ns": int(span[:, 1].max() - span[:, 0].min()), "start_abs": int(span[:, 0].min()),
                "end_abs": int(span[:, 1].max())}

    def collect(self, replay: Replay) -> dict:
        s = self.shape
        marks = self.marks.download(np.uint64, s.tiles * 6).reshape(s.tiles, 6).astype(np.int64)
        t0 = int(replay.host.t0)
        seen = self.seen.download(np.uint64, s.tiles * s.n_gpus).reshape(s.tiles, s.n_gpus)
        polls = self.polls.download(np.uint32, s.tiles * s.n_gpus).reshape(s.tiles, s.n_gpus)
        return {"t0": t0, "kernel_ns": int(marks[:, 5].max() - t0), "marks": marks,
                "seen_rel": seen, "polls": polls, "y": self.y.download(np.float32, s.M),
                "accounting": replay.accounting()}

    def reference_y(self) -> np.ndarray:
        """y computed on the host from the device partials in the kernel's fixed rank order."""
        s = self.shape
        recv = self.recv.download(np.float32, s.n_gpus * s.M).reshape(s.n_gpus, s.tiles, s.tile_rows)
        own = self._own_partial()
        acc = np.zeros(s.M, np.float32)
        for q in range(s.n_gpus):
            acc = (acc + (own if q == self.rank else recv[q].reshape(-1))).astype(np.float32)
        return acc

    def _own_partial(self) -> np.ndarray:
        s = self.shape
        tmp = self.rt.alloc(s.n_gpus * s.M * 4)
        self.lib.call("gar_partials", ctypes.c_void_p(self.A.ptr), ctypes.c_void_p(self.x.ptr),
                      ctypes.c_void_p(tmp.ptr), self.rank, s.M, s.Kl, s.tiles, s.tile_rows, s.threads,
                      ctypes.c_void_p(self.rt.streams[1]))
        self.rt.sync()
        own = tmp.download(np.float32, s.n_gpus * s.M).reshape(s.n_gpus, s.M)[self.rank]
        tmp.free()
        return own


def run_real(rt: EidolaRuntime, shape: GarShape, *, seed: int = 0, seq: int = 1, devices: Sequence[int] | None = None,
             wait: str = "spin") -> list[dict]:
    """Mode (i): n ranks with peer pointers. ``devices[r]`` is rank r's GPU (default: all on
    rt.device, which is valid when all ranks' blocks are co-resident). Returns per-rank results."""
    s = shape
    if wait != "spin":
        raise ConfigError("real peers support wait='spin' only: monitor/mwait needs an eidolon "
                          "(or the table) to play the monitor hardware", wait=wait)
    devs = list(devices) if devices is not None else [rt.device] * s.n_gpus
    if len(devs) != s.n_gpus:
        raise ConfigError("need one device per rank", devices=devs, n_gpus=s.n_gpus)
    for a in set(devs):
        for b in set(devs):
            if a != b:
                rt.lib.call("hbe_peer_enable", a, b)
    ranks = []
    for r in range(s.n_gpus):
        rt.lib.call("hbe_set_device", devs[r])
        sub = EidolaRuntime(rt.lib, devs[r]) if devs[r] != rt.device else rt
        g = GemvAllReduce(sub, shape, rank=r, seed=seed)
        rep = Replay(sub, [g.flag_region()])
        rep.install(engine="real", mon_mode="off")
        ranks.append((sub, g, rep))
    peer_recv = np.array([g.recv.ptr for _, g, _ in ranks], np.uint64)
    peer_flags = np.array([g.flags.ptr for _, g, _ in ranks], np.uint64)
    params = []
    for sub, g, rep in ranks:
        rt.lib.call("hbe_set_device", sub.device)
        g.flags.fill(0)
        g.recv.fill(0)          # real pushes must arrive: nothing pre-staged
        rep.reset_launch()
        pr, pf = sub.array(peer_recv), sub.array(peer_flags)
        p = g.params(rep, seq=seq, wait=wait, eidola=False)
        p.peer_recv, p.peer_flags = pr.ptr, pf.ptr
        params.append(p)
    for (sub, g, rep), p in zip(ranks, params):   # launch all ranks before waiting on any
        rt.lib.call("hbe_set_device", sub.device)
        rt.lib.call("gar_launch", ctypes.byref(p), s.threads, ctypes.c_void_p(sub.stream()))
    out = []
    for sub, g, rep in ranks:
        rt.lib.call("hbe_set_device", sub.device)
        sub.sync()
        rep.check(f"gemv_allreduce rank {g.rank}")
        res = g.collect(rep)
        res["rank"] = g.rank
        res["release_rel"] = g.release.download(np.uint64, s.tiles)
        out.append(res)
    rt.lib.call("hbe_set_device", rt.device)
    return out
