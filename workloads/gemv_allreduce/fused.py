"""The fused GEMV+AllReduce (gemv_allreduce.cu, hand-instrumented flag loads) on eidola.

The workload owns its kernels: :func:`build_module` compiles gemv_allreduce.cu with eidola's
include paths (eidola.replay.compile_cubin), :class:`GemvAllReduce` loads that cubin into an
:class:`eidola.replay.EidolaRuntime`'s context and launches it through runtime_cuda's CUDA layer,
handing each launch the device state of an eidola :class:`~eidola.replay.Replay`.

    rt = EidolaRuntime.create()
    g = GemvAllReduce(rt, GarShape(n_gpus=4, M=1024, Kl=2048, tiles=128))
    rep = Replay(rt, [g.flag_region()]); rep.register_trace(trace, g.bases()); rep.install()
    out = g.run_replay(rep, wait="spin", engine="virtual")

Mode (ii) replay: one rank, n-1 eidolons (their partials pre-staged in recv, their flags from the
table). Mode (i) :func:`run_real`: n ranks with peer pointers.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from hbfcommon.errors import ConfigError
from eidola.replay import ARCH, EidolaRuntime, FlagRange, Replay, compile_cubin, report_accounting

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "gemv_allreduce.cu"
HEADER = HERE / "gemv_allreduce.h"
KERNELS = ("gemv_allreduce_kernel", "gar_fill_kernel", "gar_partials_kernel")
LAYOUT_GLOBAL = "gar_layout"        # GAR_LAYOUT_VALUES (gemv_allreduce.h)
STAGE_FLOATS = 8192                 # GAR_STAGE_FLOATS, checked against the module
WAIT_MODES = {"spin": 0, "mesa": 1, "hoare": 2}   # GAR_WAIT_*


def build_module(out_dir: str | os.PathLike | None = None, *, arch: str = ARCH, nvcc: str | None = None) -> Path:
    """gemv_allreduce.cu as a cubin (cached by content)."""
    return compile_cubin(SOURCE, name="gemv_allreduce", depends=(HEADER,), out_dir=out_dir, arch=arch, nvcc=nvcc)


class GarParams(ctypes.Structure):
    """Mirror of gar_params (gemv_allreduce.h), passed to the kernel by value."""

    _fields_ = ([(n, ctypes.c_uint64) for n in ("A", "x", "y", "recv", "flags", "peer_recv", "peer_flags",
                                                "sink_data", "sink_flags", "marks", "seen", "polls", "release",
                                                "st")]
                + [(n, ctypes.c_int32) for n in ("rank", "n_gpus", "M", "Kl", "tiles", "tile_rows")]
                + [("seq", ctypes.c_uint32)]
                + [(n, ctypes.c_int32) for n in ("eidola", "wait_mode", "reserved")])


def layout_mirror() -> list[int]:
    """The values GAR_LAYOUT_VALUES must have, from the Python mirror."""
    return [ctypes.sizeof(GarParams), GarParams.st.offset, GarParams.rank.offset, GarParams.seq.offset,
            GarParams.reserved.offset, STAGE_FLOATS]


def check_layout(device_values: Sequence[int], what: str) -> None:
    got, want = [int(v) for v in device_values], layout_mirror()
    if got != want:
        raise ConfigError(f"gar_params layout mismatch between {what} and the Python mirror",
                          device=got, mirror=want)


def reduce_smem_bytes(tile_rows: int, n_gpus: int) -> int:
    """Dynamic shared memory of the fused kernel: the tile plus one staging chunk of peers."""
    chunk = max(1, min(n_gpus, STAGE_FLOATS // tile_rows))
    return tile_rows * 4 * (1 + chunk)


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


class GarKernels:
    """The workload's module in one runtime's context."""

    def __init__(self, rt: EidolaRuntime, cubin: str | os.PathLike | None = None) -> None:
        self.rt = rt
        self.module = rt.load_module(cubin or build_module(), KERNELS)
        check_layout(self.module.u64s(LAYOUT_GLOBAL, len(layout_mirror())), f"the module {self.module.path.name}")

    def fused(self, p: GarParams, *, threads: int, stream: int) -> None:
        if not 1 <= p.tile_rows <= threads:   # one row per thread in the reduce
            raise ConfigError("tile_rows must be in [1, threads]", tile_rows=p.tile_rows, threads=threads)
        self.module.launch("gemv_allreduce_kernel", (p.tiles,), (threads,), [p],
                           shared=reduce_smem_bytes(p.tile_rows, p.n_gpus), stream=stream)

    def fill(self, ptr: int, n: int, seed: int, *, stream: int) -> None:
        self.module.launch("gar_fill_kernel", (1024,), (256,),
                           [ctypes.c_uint64(ptr), ctypes.c_uint64(n), ctypes.c_uint64(seed)], stream=stream)

    def partials(self, A: int, x: int, recv: int, q: int, shape: GarShape, *, stream: int) -> None:
        s = shape
        self.module.launch("gar_partials_kernel", (s.tiles,), (s.threads,),
                           [ctypes.c_uint64(A), ctypes.c_uint64(x), ctypes.c_uint64(recv), ctypes.c_int32(q),
                            ctypes.c_int32(s.M), ctypes.c_int32(s.Kl), ctypes.c_int32(s.tiles),
                            ctypes.c_int32(s.tile_rows)],
                           shared=s.tile_rows * 4, stream=stream)


class GemvAllReduce:
    """Single-GPU target (rank ``rank``) with n_gpus-1 eidolons; or, with ``run_real``, n ranks
    with peer pointers (on several GPUs, or co-resident on one)."""

    def __init__(self, rt: EidolaRuntime, shape: GarShape, *, rank: int = 0, seed: int = 0,
                 cubin: str | os.PathLike | None = None) -> None:
        self.rt, self.shape, self.rank, self.seed = rt, shape, rank, seed
        self.k = GarKernels(rt, cubin)
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
        self.k.fill(self.x.ptr, s.Kl, self._seed(rank, 1), stream=st)
        tmpA = rt.alloc(s.M * s.Kl * 4, zero=False)
        tmpx = rt.alloc(s.Kl * 4, zero=False)
        for q in range(s.n_gpus):
            A, x = (self.A, self.x) if q == rank else (tmpA, tmpx)
            self.k.fill(A.ptr, s.M * s.Kl, self._seed(q, 0), stream=st)
            self.k.fill(x.ptr, s.Kl, self._seed(q, 1), stream=st)
            if q != rank:
                self.k.partials(A.ptr, x.ptr, self.recv.ptr, q, s, stream=st)
        rt.sync()
        tmpA.free()
        tmpx.free()

    def _seed(self, q: int, which: int) -> int:
        return (self.seed * 1_000_003 + q) * 2 + which

    def flag_region(self, klass: int = 1) -> FlagRange:
        return FlagRange(self.flags.ptr, self.flag_bytes, klass, "tile_flags")

    def bases(self) -> dict[str, int]:
        return {"flags": self.flags.ptr, "recv": self.recv.ptr}

    def params(self, replay: Replay, *, seq: int, wait: str, eidola: bool = True) -> GarParams:
        if wait not in WAIT_MODES:
            raise ConfigError("unknown wait mode", value=wait, known=sorted(WAIT_MODES))
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
        self.k.fused(p, threads=self.shape.threads, stream=self.rt.streams[1])
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
        self.rt.kernels.corunner(out.ptr, iters, span.ptr, blocks=blocks, threads=threads, stream=s3)
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
        self.k.partials(self.A.ptr, self.x.ptr, tmp.ptr, self.rank, s, stream=self.rt.streams[1])
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
    runtimes = {rt.device: rt}
    for d in devs:
        if d not in runtimes:
            runtimes[d] = EidolaRuntime(d, rt.module_path)
    for a in runtimes.values():
        for b in runtimes.values():
            if a is not b:
                a.enable_peer(b)
    ranks = []
    for r in range(s.n_gpus):
        sub = runtimes[devs[r]]
        g = GemvAllReduce(sub, shape, rank=r, seed=seed)
        rep = Replay(sub, [g.flag_region()])
        rep.install(engine="real", mon_mode="off")
        ranks.append((sub, g, rep))
    peer_recv = np.array([g.recv.ptr for _, g, _ in ranks], np.uint64)
    peer_flags = np.array([g.flags.ptr for _, g, _ in ranks], np.uint64)
    params = []
    for sub, g, rep in ranks:
        g.flags.fill(0)
        g.recv.fill(0)          # real pushes must arrive: nothing pre-staged
        rep.reset_launch()
        pr, pf = sub.array(peer_recv), sub.array(peer_flags)
        p = g.params(rep, seq=seq, wait=wait, eidola=False)
        p.peer_recv, p.peer_flags = pr.ptr, pf.ptr
        params.append(p)
    for (sub, g, rep), p in zip(ranks, params):   # launch all ranks before waiting on any
        g.k.fused(p, threads=s.threads, stream=sub.stream())
    out = []
    for sub, g, rep in ranks:
        sub.sync()
        rep.check(f"gemv_allreduce rank {g.rank}")
        res = g.collect(rep)
        res["rank"] = g.rank
        res["release_rel"] = g.release.download(np.uint64, s.tiles)
        out.append(res)
    rt.activate()
    return out
