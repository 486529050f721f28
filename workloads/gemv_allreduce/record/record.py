"""Record the fused GEMV+AllReduce on n real GPUs (one process, peer pointers, no multicast).

Flow (``record(RecordConfig(...))``):
  1. primary contexts of GPUs 0..n-1; peer access enabled for every ordered pair (refused loudly
     when a pair cannot access its peer);
  2. the recording kernel (gemv_ar_record.cu, sm_90a cubin) is loaded in every context;
  3. %globaltimer resolution probed per GPU;
  4. NVLink ping-pong between every pair (a < b), ``pingpong_rounds`` round trips, at the start
     and again at the end (drift);
  5. ``warmup + runs`` back-to-back launches on all GPUs (stream per GPU, no host barrier between
     launches unless ``sync_each``), each launch logging per-workgroup stamps, per-flag release /
     first-seen / polls and read counters into its own log slot;
  6. logs, outputs (sha256 per rank; all ranks must agree: fixed-order reduction) and the inbox of
     every rank (the partials a replay pre-stages) are read back;
  7. the recording JSON (gz) is written atomically, with the inbox snapshots beside it (.npy).

The CLI: ``python -m workloads.gemv_allreduce.record --gpus 4 --out rec.json.gz [--dry-run]``.
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from workloads.gemv_allreduce.record import knobs  # sets the no-multicast env first

from hbfcommon.errors import ConfigError, CudaError, HbfError

log = logging.getLogger(__name__)

MAX_RANKS = 8
THREADS = 256
MAX_ROWS_PER_BLOCK = 256
WG_FIELDS = ("start_ns", "data_release_ns", "release_ns", "wait_start_ns", "wait_end_ns", "end_ns")


@dataclasses.dataclass(frozen=True)
class RecordConfig:
    gpus: int = 2
    M: int = 8192                # output rows
    K: int = 8192                # K-shard per rank
    blocks: int = 128            # ≤ SMs so every block is co-resident (spinning blocks)
    runs: int = 50
    warmup: int = 5
    pingpong_rounds: int = 200
    timeout_ms: int = 2000
    seed: int = 1234
    slow_rank: int = -1          # perturbation: this rank runs slow_frac slower (busy-work)
    slow_frac: float = 0.0
    sync_each: bool = False      # host barrier between launches (decoupled runs)
    out: str = "recording.json.gz"
    #: GPU of each rank (default 0..gpus-1). Several ranks on one GPU (``(0, 0)``) is a one-GPU
    #: smoke test of the whole pipeline: the ranks' blocks must all be co-resident, and the
    #: "NVLink" is then that GPU's L2. It is never an E4 result.
    devices: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        def bad(field: str, msg: str) -> ConfigError:
            return ConfigError(f"record option {field}: {msg}", field=field,
                               value=getattr(self, field))
        if not 2 <= self.gpus <= MAX_RANKS:
            raise bad("gpus", f"must be in [2, {MAX_RANKS}]")
        if self.M < 1 or self.K < 4:
            raise bad("M" if self.M < 1 else "K", "too small")
        if not 1 <= self.blocks <= 1024:
            raise bad("blocks", "must be in [1, 1024]")
        if self.rows_per_block > MAX_ROWS_PER_BLOCK:
            raise bad("blocks", f"M/blocks must be <= {MAX_ROWS_PER_BLOCK} rows per block")
        if self.runs < 1 or self.warmup < 0:
            raise bad("runs", "runs >= 1, warmup >= 0")
        if self.pingpong_rounds < 8:
            raise bad("pingpong_rounds", "need >= 8 round trips per pair")
        if not 0.0 <= self.slow_frac <= 10.0:
            raise bad("slow_frac", "must be in [0, 10]")
        if self.slow_frac and not 0 <= self.slow_rank < self.gpus:
            raise bad("slow_rank", "a slowdown needs a rank in [0, gpus)")
        if self.devices is not None:
            object.__setattr__(self, "devices", tuple(int(d) for d in self.devices))
            if len(self.devices) != self.gpus or min(self.devices) < 0:
                raise bad("devices", "needs one non-negative GPU index per rank")

    @property
    def device_map(self) -> tuple[int, ...]:
        return self.devices if self.devices is not None else tuple(range(self.gpus))

    @property
    def physical_gpus(self) -> int:
        return len(set(self.device_map))

    @property
    def shared_gpu(self) -> bool:
        return self.physical_gpus < self.gpus

    @property
    def rows_per_block(self) -> int:
        return math.ceil(self.M / self.blocks)

    @property
    def calls(self) -> int:
        return self.warmup + self.runs


# ---------------------------------------------------------------------------------------------
# device discovery (works without a driver: 0 GPUs)
def rank_inputs(seed: int, M: int, K: int):
    """(W, x) of rank 0, 1, 2, ... in order (float32, deterministic for a seed); the replay
    regenerates the target's operands with the same generator."""
    import numpy as np

    rng = np.random.default_rng(seed)
    while True:
        W = rng.standard_normal((M, K), dtype=np.float32) / np.float32(math.sqrt(K))
        x = rng.standard_normal(K, dtype=np.float32)
        yield W, x


def gpu_count() -> tuple[int, str]:
    """(number of CUDA devices, how it was found / why none)."""
    from runtime_cuda import cudrv
    try:
        return cudrv.device_count(), "cuDeviceGetCount"
    except CudaError as e:   # cuda-python missing, or cuInit / cuDeviceGetCount failed
        return 0, str(e)
    except Exception as e:  # noqa: BLE001 - no driver library on this machine
        return 0, f"no CUDA driver: {type(e).__name__}: {e}"


def plan(cfg: RecordConfig) -> dict[str, Any]:
    n = cfg.gpus
    nb, R = cfg.blocks, cfg.rows_per_block
    return {
        "gpus": n, "devices": list(cfg.device_map), "one_gpu_smoke": cfg.shared_gpu, "M": cfg.M, "K_per_rank": cfg.K, "blocks": nb, "rows_per_block": R,
        "threads": THREADS, "launches": {"warmup": cfg.warmup, "recorded": cfg.runs,
                                         "back_to_back": not cfg.sync_each},
        "pingpong": {"pairs": n * (n - 1) // 2, "rounds": cfg.pingpong_rounds,
                     "windows": ["start", "end"]},
        "flags_per_launch": nb * n * (n - 1),
        "bytes_per_rank": {"W": cfg.M * cfg.K * 4, "inbox": 2 * nb * n * R * 4,
                           "flags": nb * n * 4},
        "slowdown": ({"rank": cfg.slow_rank, "frac": cfg.slow_frac} if cfg.slow_frac else None),
        "env": knobs.check_no_multicast(),
        "out": cfg.out,
    }


# ---------------------------------------------------------------------------------------------
class GarParamsC(ctypes.Structure):
    """Mirror of ``struct GarParams`` in gemv_ar_record.cu (natural alignment, as nvcc lays it)."""

    _fields_ = [("W", ctypes.c_uint64), ("x", ctypes.c_uint64), ("y", ctypes.c_uint64),
                ("inbox", ctypes.c_uint64 * MAX_RANKS), ("flags", ctypes.c_uint64 * MAX_RANKS),
                ("wg_log", ctypes.c_uint64), ("flag_release", ctypes.c_uint64),
                ("flag_seen", ctypes.c_uint64), ("flag_polls", ctypes.c_uint64),
                ("counters", ctypes.c_uint64), ("error", ctypes.c_uint64),
                ("M", ctypes.c_int), ("K", ctypes.c_int), ("rank", ctypes.c_int), ("n", ctypes.c_int),
                ("rows_per_block", ctypes.c_int), ("call", ctypes.c_int),
                ("seq_base", ctypes.c_uint32), ("timeout_ns", ctypes.c_uint64),
                ("slow_ppm", ctypes.c_uint32), ("replay", ctypes.c_int), ("st", ctypes.c_uint64)]


HBF_EIDOLA_ENGINE_REAL = 0
FLAG_CLASS = 1  # the recording's flag region is Eidola flag class 1; class 0 is non-flag


def eidola_state_bytes(lay: dict, *, flags_base: int, flags_len: int, timeout_ns: int, ctr: int,
                       engine: int = HBF_EIDOLA_ENGINE_REAL) -> bytes:
    """An ``hbf_eidola_state`` for a real-peer launch (eidola/src/hbf_eidola.cuh), laid out
    with the offsets the layout probe measured: t0 = ~0 (the kernel's atomicMin sets it), engine
    REAL (flag loads read memory), one flag range (the flag region, class 1), counters at ``ctr``.
    Everything else zero (no table, no monitor log)."""
    import struct

    if lay.get("st.layout_version") != 1:
        raise ConfigError("hbf_eidola_state layout version changed; update record.py",
                          field="st.layout_version", value=lay.get("st.layout_version"))
    buf = bytearray(lay["st.sizeof"])
    struct.pack_into("<Q", buf, lay["st.t0"], (1 << 64) - 1)
    struct.pack_into("<I", buf, lay["st.engine"], engine)
    struct.pack_into("<I", buf, lay["st.n_flag_ranges"], 1)
    struct.pack_into("<Q", buf, lay["st.timeout_ns"], timeout_ns)
    struct.pack_into("<QQI", buf, lay["st.flag_ranges"], flags_base, flags_len, FLAG_CLASS)
    struct.pack_into("<Q", buf, lay["st.ctr"], ctr)
    return bytes(buf)


def _args(*vals: ctypes._SimpleCData) -> tuple[int, list]:
    """A void*[] of pointers to the given ctypes values (kept alive by the returned list)."""
    keep = list(vals)
    arr = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(v) for v in keep])
    keep.append(arr)
    return ctypes.addressof(arr), keep


class Rank:
    """One rank's GPU: its primary context, a non-blocking stream and its allocations (all through
    runtime_cuda's CUDA layer, cudrv)."""

    def __init__(self, dev_index: int) -> None:
        from runtime_cuda import cudrv
        self.c, self.i = cudrv.call, dev_index
        c, d = cudrv.call, cudrv.drv()
        self.dev = c("cuDeviceGet", dev_index)
        self.ctx = c("cuDevicePrimaryCtxRetain", self.dev)
        self.name = c("cuDeviceGetName", 256, self.dev).split(b"\0", 1)[0].decode()
        self.sms = c("cuDeviceGetAttribute",
                     d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.dev)
        self.set()
        self.stream = c("cuStreamCreate", d.CUstream_flags.CU_STREAM_NON_BLOCKING.value)
        self.allocs: list[Any] = []

    def set(self) -> None:
        self.c("cuCtxSetCurrent", self.ctx)

    def alloc(self, nbytes: int, zero: bool = True) -> int:
        self.set()
        p = self.c("cuMemAlloc", max(nbytes, 256))
        self.allocs.append(p)
        if zero:
            self.c("cuMemsetD8", p, 0, max(nbytes, 256))
        return int(p)

    def h2d(self, dptr: int, arr) -> None:
        self.set()
        self.c("cuMemcpyHtoD", dptr, arr.ctypes.data, arr.nbytes)

    def d2h(self, arr, dptr: int):
        self.set()
        self.c("cuMemcpyDtoH", arr.ctypes.data, dptr, arr.nbytes)
        return arr

    def sync(self) -> None:
        self.set()
        self.c("cuStreamSynchronize", self.stream)

    def ctx_sync(self) -> None:
        self.set()
        self.c("cuCtxSynchronize")

    def close(self) -> None:
        self.set()
        for p in self.allocs:
            self.c("cuMemFree", p)
        self.allocs.clear()
        self.c("cuStreamDestroy", self.stream)
        self.c("cuDevicePrimaryCtxRelease", self.dev)


def _launch(r: Rank, fn, grid: int, block: int, args_addr: int) -> None:
    r.set()
    r.c("cuLaunchKernel", fn, grid, 1, 1, block, 1, 1, 0, r.stream, args_addr, 0)


def record(cfg: RecordConfig) -> dict[str, Any]:
    """Run the recording; returns the recording dict (also written to ``cfg.out``)."""
    import numpy as np

    from eidola.from_recording import RECORDING_FORMAT, RECORDING_VERSION, save_json, validate_recording
    from workloads.gemv_allreduce.record.build import build_cubin, layout_probe

    env = knobs.check_no_multicast()
    have, how = gpu_count()
    if have <= max(cfg.device_map):
        raise ConfigError(f"recording needs {max(cfg.device_map) + 1} GPUs, found {have} ({how})",
                          field="gpus", value=cfg.gpus, found=have)
    cubin = build_cubin()
    lay = layout_probe(knobs.CACHE_DIR)
    if lay["sizeof"] != ctypes.sizeof(GarParamsC):
        raise ConfigError("GarParams layout differs from the Python mirror", field="sizeof",
                          c=lay["sizeof"], py=ctypes.sizeof(GarParamsC))
    from runtime_cuda import cudrv
    c = cudrv.call
    n, nb, R = cfg.gpus, cfg.blocks, cfg.rows_per_block
    ranks = [Rank(d) for d in cfg.device_map]
    try:
        for r in ranks:
            sharing = cfg.device_map.count(r.i)
            if nb * sharing > r.sms:
                raise ConfigError("blocks exceed the SM count: spinning blocks would not all be "
                                  "resident (one block per SM)", field="blocks", value=nb,
                                  ranks_on_gpu=sharing, sms=r.sms, gpu=r.i)
        # peer access, every ordered pair
        for a in ranks:
            for b in ranks:
                if a is b or a.i == b.i:
                    continue
                if not c("cuDeviceCanAccessPeer", a.dev, b.dev):
                    raise CudaError("GPU cannot access its peer (no NVLink/P2P path)", gpu=a.i, peer=b.i)
                a.set()
                cudrv.enable_peer_access(a.dev, b.dev, b.ctx)
        image = np.frombuffer(Path(cubin).read_bytes(), dtype=np.uint8).copy()
        fns = []
        for r in ranks:
            r.set()
            mod = c("cuModuleLoadData", image.ctypes.data)
            fns.append({k: c("cuModuleGetFunction", mod, k.encode()) for k in
                        ("gemv_ar_record", "pingpong_initiator", "pingpong_responder",
                         "timer_resolution")})
        # timer resolution
        res_ns = []
        for r, f in zip(ranks, fns):
            d = r.alloc(8)
            r.ctx_sync()
            addr, keep = _args(ctypes.c_uint64(d), ctypes.c_int(20000))
            _launch(r, f["timer_resolution"], 1, 32, addr)
            r.sync()
            res_ns.append(int(r.d2h(np.zeros(1, np.uint64), d)[0]))
        resolution = max(res_ns)
        timeout_ns = cfg.timeout_ms * 1_000_000
        # per-rank buffers
        inputs = rank_inputs(cfg.seed, cfg.M, cfg.K)
        st_stride = (lay["st.sizeof"] + 255) // 256 * 256
        ctr_bytes = lay["st.max_classes"] * lay["st.nctr"] * 8
        bufs = []
        for r in ranks:
            W, x = next(inputs)
            b = {"W": r.alloc(W.nbytes, zero=False), "x": r.alloc(x.nbytes, zero=False),
                 "y": r.alloc(cfg.M * 4), "inbox": r.alloc(2 * nb * n * R * 4),
                 "flags": r.alloc(nb * n * 4),
                 "wg_log": r.alloc(cfg.calls * nb * len(WG_FIELDS) * 8),
                 "flag_release": r.alloc(cfg.calls * nb * n * 8),
                 "flag_seen": r.alloc(cfg.calls * nb * n * 8),
                 "flag_polls": r.alloc(cfg.calls * nb * n * 4),
                 "counters": r.alloc(cfg.calls * 2 * 8), "error": r.alloc(4),
                 "pp": r.alloc(2 * MAX_RANKS * 4),
                 "st": r.alloc(cfg.calls * st_stride),
                 "ctr": r.alloc(cfg.calls * ctr_bytes),
                 "pp_t": r.alloc(4 * cfg.pingpong_rounds * 8)}
            r.h2d(b["W"], W)
            r.h2d(b["x"], x)
            del W
            states = np.zeros(cfg.calls * st_stride, np.uint8)
            for k in range(cfg.calls):
                raw = eidola_state_bytes(lay, flags_base=b["flags"], flags_len=nb * n * 4,
                                         timeout_ns=timeout_ns, ctr=b["ctr"] + k * ctr_bytes)
                states[k * st_stride:k * st_stride + len(raw)] = np.frombuffer(raw, np.uint8)
            r.h2d(b["st"], states)
            bufs.append(b)
        # uploads from pageable memory and memsets run on the legacy stream, which does not order
        # against our non-blocking streams: finish them before any kernel runs.
        for r in ranks:
            r.ctx_sync()

        pp_epoch = [0]

        def pingpong(window: str) -> list[dict[str, int]]:
            out = []
            rounds = cfg.pingpong_rounds
            for ai in range(n):
                for bi in range(ai + 1, n):
                    a, b = ranks[ai], ranks[bi]
                    base = pp_epoch[0] * (rounds + 1)
                    pp_epoch[0] += 1
                    ping = bufs[bi]["pp"] + 4 * ai              # in b's memory
                    pong = bufs[ai]["pp"] + 4 * (MAX_RANKS + bi)  # in a's memory
                    ta, tb = bufs[ai]["pp_t"], bufs[bi]["pp_t"]
                    rb = rounds * 8
                    argb, kb = _args(ctypes.c_uint64(ping), ctypes.c_uint64(pong), ctypes.c_uint32(base),
                                     ctypes.c_int(rounds), ctypes.c_uint64(tb + 2 * rb),
                                     ctypes.c_uint64(tb + 3 * rb), ctypes.c_uint64(timeout_ns),
                                     ctypes.c_uint64(bufs[bi]["error"]))
                    arga, ka = _args(ctypes.c_uint64(ping), ctypes.c_uint64(pong), ctypes.c_uint32(base),
                                     ctypes.c_int(rounds), ctypes.c_uint64(ta), ctypes.c_uint64(ta + rb),
                                     ctypes.c_uint64(timeout_ns), ctypes.c_uint64(bufs[ai]["error"]))
                    _launch(b, fns[bi]["pingpong_responder"], 1, 32, argb)
                    _launch(a, fns[ai]["pingpong_initiator"], 1, 32, arga)
                    a.sync()
                    b.sync()
                    _check_error(ranks, bufs, f"ping-pong {window} {ai}<->{bi}")
                    t1 = a.d2h(np.zeros(rounds, np.uint64), ta)
                    t3 = a.d2h(np.zeros(rounds, np.uint64), ta + rb)
                    t2 = b.d2h(np.zeros(rounds, np.uint64), tb + 2 * rb)
                    t2s = b.d2h(np.zeros(rounds, np.uint64), tb + 3 * rb)
                    for k in range(rounds):
                        out.append({"a": ai, "b": bi, "t1": int(t1[k]), "t2": int(t2[k]),
                                    "t3": int(t3[k]), "t2s": int(t2s[k])})
            return out

        samples = pingpong("start")
        params = []
        for ri, r in enumerate(ranks):
            p = GarParamsC()
            b = bufs[ri]
            p.W, p.x, p.y = b["W"], b["x"], b["y"]
            for q in range(n):
                p.inbox[q] = bufs[q]["inbox"]
                p.flags[q] = bufs[q]["flags"]
            p.wg_log, p.flag_release, p.flag_seen = b["wg_log"], b["flag_release"], b["flag_seen"]
            p.flag_polls, p.counters, p.error = b["flag_polls"], b["counters"], b["error"]
            p.M, p.K, p.rank, p.n, p.rows_per_block = cfg.M, cfg.K, ri, n, R
            p.seq_base, p.timeout_ns, p.replay = 0, timeout_ns, 0
            p.slow_ppm = int(round(cfg.slow_frac * 1e6)) if ri == cfg.slow_rank else 0
            params.append(p)
        t_wall = time.perf_counter()
        for call in range(cfg.calls):
            keep = []
            for ri, r in enumerate(ranks):
                params[ri].call = call
                params[ri].st = bufs[ri]["st"] + call * st_stride
                addr, k = _args(params[ri])
                keep.append(k)
                _launch(r, fns[ri]["gemv_ar_record"], nb, THREADS, addr)
            if cfg.sync_each:
                for r in ranks:
                    r.sync()
            # the launch copies the parameters: the ctypes objects may be reused after each call
            for r in ranks:
                r.set()
            if call % 10 == 9:
                log.info("launched %d/%d", call + 1, cfg.calls)
        for r in ranks:
            r.sync()
        wall_s = time.perf_counter() - t_wall
        _check_error(ranks, bufs, "fused kernel")
        samples += pingpong("end")

        # read back
        logs = []
        for ri, r in enumerate(ranks):
            b = bufs[ri]
            logs.append({
                "wg": r.d2h(np.zeros((cfg.calls, nb, len(WG_FIELDS)), np.uint64), b["wg_log"]),
                "rel": r.d2h(np.zeros((cfg.calls, nb, n), np.uint64), b["flag_release"]),
                "seen": r.d2h(np.zeros((cfg.calls, nb, n), np.uint64), b["flag_seen"]),
                "polls": r.d2h(np.zeros((cfg.calls, nb, n), np.uint32), b["flag_polls"]),
                "ctr": r.d2h(np.zeros((cfg.calls, 2), np.uint64), b["counters"]),
                "ectr": r.d2h(np.zeros((cfg.calls, lay["st.max_classes"], lay["st.nctr"]), np.uint64),
                              b["ctr"]),
                "y": r.d2h(np.zeros(cfg.M, np.float32), b["y"]),
                "inbox": r.d2h(np.zeros((2, nb, n, R), np.float32), b["inbox"]),
            })
        runs = runs_from_logs(logs, n=n, nb=nb, R=R, M=cfg.M, warmup=cfg.warmup, calls=cfg.calls)
        rec = {"format": RECORDING_FORMAT, "version": RECORDING_VERSION, "n_gpus": n,
               "workload": {"name": "gemv_allreduce.record", "M": cfg.M, "K_per_rank": cfg.K,
                            "blocks": nb, "rows_per_block": R, "threads": THREADS, "dtype": "float32",
                            "seed": cfg.seed, "warmup": cfg.warmup, "sync_each": cfg.sync_each,
                            "slow_rank": cfg.slow_rank, "slow_frac": cfg.slow_frac,
                            "one_gpu_smoke": cfg.shared_gpu,
                            "kernel_source_sha256": hashlib.sha256(
                                Path(__file__).with_name("gemv_ar_record.cu").read_bytes()).hexdigest(),
                            "wall_s_all_launches": wall_s},
               "buffers": [{"name": "flags", "kind": "flag", "bytes": nb * n * 4},
                           {"name": "partials", "kind": "data", "bytes": 2 * nb * n * R * 4}],
               "timer_resolution_ns": resolution,
               "clock": {"method": "nvlink-pingpong", "rounds": cfg.pingpong_rounds,
                         "per_gpu_resolution_ns": res_ns, "samples": samples},
               "env": {**env, "CUDA_VISIBLE_DEVICES": knobs.CUDA_VISIBLE_DEVICES},
               "devices": [{"rank": ri, "index": r.i, "name": r.name, "sms": int(r.sms)}
                           for ri, r in enumerate(ranks)],
               "runs": runs}
        outp = Path(cfg.out).resolve()
        outp.parent.mkdir(parents=True, exist_ok=True)
        stem = outp.name.split(".")[0]
        inbox_files = []
        for ri in range(n):
            f = outp.with_name(f"{stem}.inbox_rank{ri}.npy")
            np.save(f, logs[ri]["inbox"])
            inbox_files.append(str(f))
        np.save(outp.with_name(f"{stem}.y.npy"), logs[0]["y"])
        rec["meta"] = {"inbox_files": inbox_files, "output_file": str(outp.with_name(f"{stem}.y.npy"))}
        validate_recording(rec)
        save_json(outp, rec)
        return rec
    finally:
        for r in ranks:
            try:
                r.close()
            except HbfError:
                log.exception("cleanup of GPU %d failed", r.i)


def runs_from_logs(logs: list[dict[str, Any]], *, n: int, nb: int, R: int, M: int, warmup: int,
                   calls: int) -> list[dict[str, Any]]:
    """Device logs of every rank (arrays as read back) → the recording's ``runs`` (pure).

    ``logs[r]``: ``wg`` [calls][nb][6], ``rel``/``seen`` [calls][nb][n] u64, ``polls`` [calls][nb][n],
    ``ctr`` [calls][2], ``ectr`` [calls][classes][nctr], ``y`` [M] float32.
    """
    out_sha = [hashlib.sha256(L["y"].tobytes()).hexdigest() for L in logs]
    if len(set(out_sha)) != 1:
        raise CudaError("ranks disagree on the all-reduced output (fixed-order reduction must "
                        "be bit-identical)", sha256=out_sha)
    runs = []
    for call in range(warmup, calls):
        seq = call + 1
        parity = call & 1
        rk = []
        for ri in range(n):
            wg = logs[ri]["wg"][call]
            wgs = [{"wg": bb, **{f: int(wg[bb][j]) for j, f in enumerate(WG_FIELDS)
                                 if f != "data_release_ns"}} for bb in range(nb)]
            rk.append({"rank": ri, "kernel_start_ns": int(wg[:, 0].min()),
                       "kernel_end_ns": int(wg[:, 5].max()), "output_sha256": out_sha[ri],
                       "flag_reads": int(logs[ri]["ctr"][call][0]),
                       "nonflag_reads": int(logs[ri]["ctr"][call][1]), "workgroups": wgs,
                       "eidola_ctr": {"flag_class": FLAG_CLASS,
                                      "flag_warp": int(logs[ri]["ectr"][call][FLAG_CLASS][0]),
                                      "flag_thread": int(logs[ri]["ectr"][call][FLAG_CLASS][1])}})
        flags, datas = [], []
        for d in range(n):
            for s in range(n):
                if s == d:
                    continue
                for bb in range(nb):
                    rows = max(0, min(R, M - bb * R))
                    flags.append({"src": s, "dst": d, "buffer": "flags", "wg": bb,
                                  "offset": 4 * (bb * n + s), "size": 4, "value": seq, "seq": seq,
                                  "release_ns": int(logs[s]["rel"][call][bb][d]),
                                  "seen_ns": int(logs[d]["seen"][call][bb][s]),
                                  "polls": int(logs[d]["polls"][call][bb][s])})
                    if rows:
                        datas.append({"src": s, "dst": d, "buffer": "partials",
                                      "offset": 4 * ((parity * nb + bb) * n + s) * R,
                                      "size": 4 * rows,
                                      "release_ns": int(logs[s]["wg"][call][bb][1])})
        runs.append({"index": call - warmup, "ranks": rk, "flags": flags, "data": datas})
    return runs


def _check_error(ranks, bufs, what: str) -> None:
    import numpy as np

    for ri, r in enumerate(ranks):
        e = int(r.d2h(np.zeros(1, np.uint32), bufs[ri]["error"])[0])
        if e:
            raise CudaError(f"{what}: a wait timed out on rank {ri} (GPU {r.i}, error word {e}); a "
                            "peer never released its flag", rank=ri, gpu=r.i, error=e)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m workloads.gemv_allreduce.record",
                                 description="Record the fused GEMV+AllReduce on N real GPUs.")
    d = RecordConfig()
    ap.add_argument("--gpus", type=int, default=d.gpus)
    ap.add_argument("--M", type=int, default=d.M)
    ap.add_argument("--K", type=int, default=d.K)
    ap.add_argument("--blocks", type=int, default=d.blocks)
    ap.add_argument("--runs", type=int, default=d.runs)
    ap.add_argument("--warmup", type=int, default=d.warmup)
    ap.add_argument("--pingpong-rounds", type=int, default=d.pingpong_rounds)
    ap.add_argument("--timeout-ms", type=int, default=d.timeout_ms)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--slow-rank", type=int, default=d.slow_rank)
    ap.add_argument("--slow-frac", type=float, default=d.slow_frac)
    ap.add_argument("--sync-each", action="store_true")
    ap.add_argument("--devices", default=None,
                    help="GPU of each rank, comma-separated (e.g. 0,0: a one-GPU smoke test with "
                         "co-resident ranks; never an E4 result)")
    ap.add_argument("--out", default=d.out)
    ap.add_argument("--dry-run", action="store_true",
                    help="check the GPU count and print the plan; launch nothing")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = RecordConfig(gpus=a.gpus, M=a.M, K=a.K, blocks=a.blocks, runs=a.runs, warmup=a.warmup,
                           pingpong_rounds=a.pingpong_rounds, timeout_ms=a.timeout_ms, seed=a.seed,
                           slow_rank=a.slow_rank, slow_frac=a.slow_frac, sync_each=a.sync_each,
                           out=a.out,
                           devices=tuple(int(x) for x in a.devices.split(",")) if a.devices else None)
        if a.dry_run:
            have, how = gpu_count()
            p = plan(cfg)
            p["gpus_found"], p["gpus_found_by"] = have, how
            need = max(cfg.device_map) + 1
            p["ready"] = have >= need
            print(json.dumps(p, indent=1))
            if not p["ready"]:
                print(f"NOT READY: this plan needs {need} GPUs, found {have} ({how})",
                      file=sys.stderr)
                return 3
            return 0
        rec = record(cfg)
    except HbfError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{cfg.out}: {len(rec['runs'])} runs on {cfg.gpus} GPUs, "
          f"{len(rec['runs'][0]['flags'])} flags per run, timer {rec['timer_resolution_ns']} ns")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
