"""Python mirror of runtime_cuda/include/hbf_ctl.h (the control region). Read it through here.

``tests/test_ctl_layout.py`` compiles an offsetof/sizeof probe of every field with the C compiler
and compares it to these ctypes classes; change both together (and bump HBF_CTL_ABI_VERSION).

Memory ordering: on x86-64 (TSO) an aligned 8-byte store from Python is a single store and stores
are not reordered with earlier stores, so "write payload fields, then write seq" is a release;
loads are not reordered with earlier loads, so "read seq, then payload" is an acquire.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from ctypes import c_int32, c_uint8, c_uint16, c_uint32, c_uint64
import dataclasses
from dataclasses import dataclass

import numpy as np

from hbfcommon.abi import HBF_OP_ATOMIC, HBF_OP_CPASYNC, HBF_OP_LOAD, HBF_OP_STORE  # noqa: F401 (HBF_OP_*: one definition)
from hbfcommon.errors import ControlRegionError, ErrorCode
from hbfcommon.status import RequestStatus

HBF_CTL_MAGIC = 0x3130544C43464248  # "HBFCTL01" little-endian
HBF_CTL_ABI_VERSION = 4   # 2: every ring request carries its tag under the run key (request_tag); 3: hbf_activity;
                          # 4: completions carry req_site_flags / req_q_tag and are written under a seqlock

HBF_MAX_RANGES = 1024
HBF_RING_SLOTS = 4096
HBF_MAX_CURVE_POINTS = 16
HBF_N_OPS = 4
HBF_N_STATUS = 16
HBF_MAX_KERNEL_SLOTS = 1024
HBF_ACT_PERIOD_NS = 1_000_000        # hbf_activity: at most one GPU publication per millisecond
HBF_ACT_SLOTS_PER_FLUSH = 4          # kernel slots summed per publication
HBF_ACT_MIN_RUN_NS = 2_000_000       # ... and only once the latest launched kernel has run 2 ms
HBF_THC_HORIZON_MAX_NS = 1 << 36     # hbf_thc.h: the longest validity horizon a thermal word carries (~68.7 s)

# request states: the values of hbfcommon.status.RequestStatus (the one definition), under their C names
HBF_ST_PENDING = int(RequestStatus.PENDING)
HBF_ST_READY = int(RequestStatus.READY)
HBF_ST_IO_ERROR = int(RequestStatus.IO_ERROR)
HBF_ST_COPY_ERROR = int(RequestStatus.COPY_ERROR)
HBF_ST_CHECKSUM_ERROR = int(RequestStatus.CHECKSUM_ERROR)
HBF_ST_TIMEOUT = int(RequestStatus.TIMEOUT)
HBF_ST_UNSUPPORTED = int(RequestStatus.UNSUPPORTED)
HBF_ST_DAEMON_LOST = int(RequestStatus.DAEMON_LOST)
HBF_ST_THERMAL_SHUTDOWN = int(RequestStatus.THERMAL_SHUTDOWN)
HBF_ST_RING_OVERFLOW = int(RequestStatus.RING_OVERFLOW)
HBF_ST_WARP_GROUP = int(RequestStatus.WARP_GROUP)
assert {k for k in globals() if k.startswith("HBF_ST_")} == {s.c_name for s in RequestStatus}, \
    "every RequestStatus has its HBF_ST_ constant here, and nothing else"
assert len(RequestStatus) <= HBF_N_STATUS

OP_NAMES = ("load", "store", "atomic", "cpasync")

HBF_MODE_TIMING = 1
HBF_MODE_CAPACITY = 2
HBF_MODE_FLAG = 3
MODE_NAMES = {HBF_MODE_TIMING: "timing", HBF_MODE_CAPACITY: "capacity", HBF_MODE_FLAG: "flag"}
HBF_PERM_READ = 1
HBF_PERM_WRITE = 2
HBF_PERM_ATOMIC = 4
HBF_PERM_ALL = HBF_PERM_READ | HBF_PERM_WRITE | HBF_PERM_ATOMIC

HBF_SRC_FIXED = 1
HBF_SRC_CURVE = 2
HBF_SRC_FAST = 3
HBF_SRC_REFERENCE = 4
TIMING_SOURCE = {"fixed": HBF_SRC_FIXED, "curve": HBF_SRC_CURVE, "fast": HBF_SRC_FAST,
                 "reference": HBF_SRC_REFERENCE}

HBF_TH_NORMAL = 0
HBF_TH_LIGHT = 1
HBF_TH_SEVERE = 2
HBF_TH_SHUTDOWN = 3
THERMAL_MODE_NAMES = ("Normal", "Light", "Severe", "Shutdown")

HBF_FAIL_NONE = 0
HBF_FAIL_REASON_SHUTDOWN = 1
HBF_FAIL_REASON_ENGINE = 2
HBF_FAIL_REASON_THERMAL = 3
HBF_FAIL_REASON_DEVICE = 4
HBF_FAIL_REASON_TELEMETRY = 5


_TAG_KI = 0x9E3779B97F4A7C15
_TAG_K = np.uint64(_TAG_KI)
_M64 = (1 << 64) - 1
_TAG_SCALAR_ROWS = 2


def request_tag(req: np.ndarray, key: int) -> np.ndarray:
    """The 32-bit tag of raw request records (uint64 rows: 0 seq, 1 arrival_ns, 2 address, 3 media_address,
    4 bytes | op << 32, 5 range_id | kernel_slot << 32, 6 site | flags << 32, 7 thermal_q_ppm | tag << 32)
    under the run's ring key (hbfd's AttachReply.ring_key, never written into the region): the hash the
    device helpers compute (runtime_cuda/src/hbf_helpers.cu hb_req_tag), never 0. A writer that only maps
    the region does not know the key, so hbfd does not take what it writes (a check against mistakes and
    stray writers, not a cryptographic one). hbfd computes it for every batch it takes: a few rows go
    through Python integers (numpy's per-call cost is larger there), more through in-place array ops
    (unsigned array arithmetic wraps modulo 2^64 without a warning)."""
    n = req.shape[0]
    if n <= _TAG_SCALAR_ROWS:
        out = np.empty(n, np.uint64)
        for i, r in enumerate(req.tolist()):
            h = ((r[0] ^ key) * _TAG_KI) & _M64
            for w in r[1:7]:
                h = ((h ^ w) * _TAG_KI) & _M64
            h = ((h ^ (r[7] & 0xFFFFFFFF)) * _TAG_KI) & _M64
            h ^= h >> 29
            out[i] = (h >> 32) | 1
        return out
    h = req[:, 0] ^ np.uint64(key)
    h *= _TAG_K
    for i in range(1, 7):
        h ^= req[:, i]
        h *= _TAG_K
    h ^= req[:, 7] & np.uint64(0xFFFFFFFF)
    h *= _TAG_K
    h ^= h >> np.uint64(29)
    return (h >> np.uint64(32)) | np.uint64(1)


def failure_word(status: int, reason: int) -> int:
    return (status << 32) | reason


class hbf_media_params(ctypes.Structure):
    _fields_ = [
        ("timing_source", c_uint32), ("page_bytes", c_uint32), ("read_granularity", c_uint32),
        ("write_granularity", c_uint32), ("channels", c_uint32), ("dies_per_channel", c_uint32),
        ("planes_per_die", c_uint32), ("queue_depth", c_uint32),
        ("t_read_ns", c_uint64), ("t_prog_ns", c_uint64), ("t_erase_ns", c_uint64),
        ("channel_bytes_per_s", c_uint64), ("fixed_read_ns", c_uint64), ("fixed_write_ns", c_uint64),
        ("interleave", c_uint32), ("curve_points", c_uint32),
        ("curve_pages", c_uint32 * HBF_MAX_CURVE_POINTS),
        ("curve_cum_ns", c_uint64 * HBF_MAX_CURVE_POINTS),
        ("curve_write_ns", c_uint64), ("refresh_quantum_bytes", c_uint64),
        ("page_buffers", c_uint32), ("t_cmd_ns", c_uint32),
        ("l2_bytes", c_uint64), ("l2_line_bytes", c_uint32), ("l2_ways", c_uint16), ("l2_policy", c_uint8),
        ("l2_partitions", c_uint8),
    ]


class hbf_header(ctypes.Structure):
    _fields_ = [
        ("magic", c_uint64), ("abi_version", c_uint32), ("header_bytes", c_uint32),
        ("total_bytes", c_uint64), ("off_ranges", c_uint64), ("off_thermal", c_uint64),
        ("off_refresh", c_uint64), ("off_ring", c_uint64), ("off_completions", c_uint64),
        ("off_counters", c_uint64), ("ring_slots", c_uint32), ("max_ranges", c_uint32),
        ("daemon_pid", c_uint64), ("generation", c_uint64),
        ("heartbeat", c_uint64), ("heartbeat_period_ns", c_uint64), ("failure", c_uint64),
        ("admission_closed", c_uint64),
        ("ring_head", c_uint64), ("device_failure", c_uint64),
        ("workload_pid", c_uint64), ("device_state_ptr", c_uint64),
        ("profile_sha256", c_uint8 * 32), ("off_activity", c_uint64), ("reserved0", c_uint8 * 56),
        ("media", hbf_media_params),
    ]


class hbf_range(ctypes.Structure):
    _fields_ = [
        ("base", c_uint64), ("length", c_uint64), ("media_offset", c_uint64),
        ("range_id", c_uint32), ("mode", c_uint32), ("perms", c_uint32), ("page_bytes", c_uint32),
        ("stream", c_uint32), ("flags", c_uint32), ("backing_offset", c_uint64), ("reserved", c_uint64),
    ]


class hbf_range_snapshot(ctypes.Structure):
    _fields_ = [
        ("seq", c_uint64), ("generation", c_uint64), ("count", c_uint32), ("reserved0", c_uint32),
        ("reserved", c_uint64 * 5), ("ranges", hbf_range * HBF_MAX_RANGES),
    ]


class hbf_thermal_snapshot(ctypes.Structure):
    _fields_ = [
        ("seq", c_uint64), ("mode", c_uint32), ("q_ppm", c_uint32), ("admission_open", c_uint32),
        ("policy", c_uint32), ("hbf_max_millic", c_int32), ("hbm_millic", c_int32),
        ("gpu_millic", c_int32), ("reserved0", c_uint32), ("tick", c_uint64),
        ("valid_until_gpu_ns", c_uint64), ("reserved", c_uint64 * 1),
    ]


class hbf_refresh_debt(ctypes.Structure):
    _fields_ = [
        ("seq", c_uint64), ("debt_total_bytes", c_uint64), ("quantum_bytes", c_uint64),
        ("background_drained_bytes", c_uint64), ("reserved", c_uint64 * 4),
    ]


class hbf_request(ctypes.Structure):
    _fields_ = [
        ("seq", c_uint64), ("arrival_ns", c_uint64), ("address", c_uint64), ("media_address", c_uint64),
        ("bytes", c_uint32), ("op", c_uint32), ("range_id", c_uint32), ("kernel_slot", c_uint32),
        ("site", c_uint32), ("flags", c_uint32), ("thermal_q_ppm", c_uint64),
    ]


class hbf_completion(ctypes.Structure):
    _fields_ = [
        ("seq", c_uint64), ("arrival_ns", c_uint64), ("modeled_ns", c_uint64), ("service_ns", c_uint64),
        ("status", c_uint32), ("reserved0", c_uint32), ("consumed", c_uint64),
        ("req_site_flags", c_uint64), ("req_q_tag", c_uint64),   # copies of the request's words 6 and 7
    ]


class hbf_op_counters(ctypes.Structure):
    _fields_ = [
        ("requests", c_uint64), ("bytes", c_uint64), ("modeled_ns", c_uint64), ("wall_ns", c_uint64),
        ("service_ns", c_uint64), ("overhead_ns", c_uint64), ("program_bytes", c_uint64), ("reserved", c_uint64),
    ]


class hbf_counters(ctypes.Structure):
    _fields_ = [
        ("daemon", hbf_op_counters * HBF_N_OPS), ("device", hbf_op_counters * HBF_N_OPS),
        ("daemon_status", c_uint64 * HBF_N_STATUS), ("device_status", c_uint64 * HBF_N_STATUS),
        ("device_sync_seq", c_uint64), ("device_inline_ns", c_uint64),   # a reserved word until helper ABI 8
        ("reserved", c_uint64 * 6),
    ]


class hbf_activity_op(ctypes.Structure):
    _fields_ = [("requests", c_uint64), ("bytes", c_uint64)]


class hbf_activity(ctypes.Structure):
    _fields_ = [
        ("seq", c_uint64), ("flushes", c_uint64), ("gpu_ns", c_uint64), ("slot_visits", c_uint64),
        ("state_ptr", c_uint64), ("clock_echo_ns", c_uint64), ("reserved", c_uint64 * 2), ("ops", hbf_activity_op * HBF_N_OPS),
    ]


class hbf_ctl(ctypes.Structure):
    _fields_ = [
        ("header", hbf_header), ("ranges", hbf_range_snapshot), ("thermal", hbf_thermal_snapshot),
        ("refresh", hbf_refresh_debt), ("ring", hbf_request * HBF_RING_SLOTS),
        ("completions", hbf_completion * HBF_RING_SLOTS), ("counters", hbf_counters),
        ("activity", hbf_activity),
    ]


# Every struct the header defines, by C name (the layout test walks these).
STRUCTS = {c.__name__: c for c in (hbf_media_params, hbf_header, hbf_range, hbf_range_snapshot,
                                   hbf_thermal_snapshot, hbf_refresh_debt, hbf_request,
                                   hbf_completion, hbf_op_counters, hbf_counters, hbf_activity_op,
                                   hbf_activity, hbf_ctl)}
CTL_BYTES = ctypes.sizeof(hbf_ctl)
OFFSETS = {name: getattr(hbf_ctl, name).offset
           for name in ("ranges", "thermal", "refresh", "ring", "completions", "counters", "activity")}

# numpy views for vectorized scans of the ring (same layout as the ctypes classes).
REQUEST_DTYPE = np.dtype(hbf_request)
COMPLETION_DTYPE = np.dtype(hbf_completion)
OP_COUNTERS_DTYPE = np.dtype(hbf_op_counters)


@dataclass
class CtlMap:
    """A mapped control region: ``ctl`` (ctypes view), numpy views of ring and completions."""

    mm: mmap.mmap
    ctl: hbf_ctl
    ring: np.ndarray
    completions: np.ndarray
    daemon_counters: np.ndarray
    device_counters: np.ndarray

    @classmethod
    def from_mmap(cls, mm: mmap.mmap) -> "CtlMap":
        ctl = hbf_ctl.from_buffer(mm)
        ring = np.frombuffer(mm, REQUEST_DTYPE, HBF_RING_SLOTS, OFFSETS["ring"])
        comp = np.frombuffer(mm, COMPLETION_DTYPE, HBF_RING_SLOTS, OFFSETS["completions"])
        cnt = OFFSETS["counters"]
        daemon = np.frombuffer(mm, OP_COUNTERS_DTYPE, HBF_N_OPS, cnt + hbf_counters.daemon.offset)
        device = np.frombuffer(mm, OP_COUNTERS_DTYPE, HBF_N_OPS, cnt + hbf_counters.device.offset)
        return cls(mm, ctl, ring, comp, daemon, device)

    def check_header(self) -> None:
        h = self.ctl.header
        if h.magic != HBF_CTL_MAGIC:
            raise ControlRegionError("control region has the wrong magic", magic=hex(h.magic))
        if h.abi_version != HBF_CTL_ABI_VERSION:
            raise ControlRegionError("control region ABI version mismatch", code=ErrorCode.ABI_MISMATCH,
                                     region=h.abi_version, mirror=HBF_CTL_ABI_VERSION)
        if h.total_bytes != CTL_BYTES:
            raise ControlRegionError("control region size mismatch", region=h.total_bytes, mirror=CTL_BYTES)

    @property
    def address(self) -> int:
        """Host virtual address of the mapping (what the workload registers with CUDA)."""
        return ctypes.addressof(self.ctl)

    def close(self) -> None:
        # drop the exported buffers before closing the mmap
        self.ring = self.completions = self.daemon_counters = self.device_counters = None  # type: ignore
        self.ctl = None  # type: ignore
        try:
            self.mm.close()
        except BufferError:  # a caller still holds a view; the mapping dies with the process
            pass


def map_region(path_or_fd: str | os.PathLike | int, *, check: bool = True) -> CtlMap:
    """Map an existing control region, shared, read-write: a path (``/proc/<pid>/fd/<fd>``
    from Attach) or an open fd. The fd is closed again after mapping if we opened it."""
    if isinstance(path_or_fd, int):
        fd, own = path_or_fd, False
    else:
        try:
            fd, own = os.open(os.fspath(path_or_fd), os.O_RDWR | os.O_CLOEXEC), True
        except OSError as e:
            raise ControlRegionError(f"cannot open control region: {e.strerror}", path=str(path_or_fd)) from e
    try:
        size = os.fstat(fd).st_size
        if size < CTL_BYTES:
            raise ControlRegionError("control region is smaller than hbf_ctl", size=size, expected=CTL_BYTES)
        mm = mmap.mmap(fd, CTL_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        if own:
            os.close(fd)
    m = CtlMap.from_mmap(mm)
    if check:
        m.check_header()
    return m


def seqlock_write(snapshot, fill) -> None:
    """Writer side of a seqlock section (``seq`` field): odd, fill(), even."""
    s = snapshot.seq
    snapshot.seq = s + 1 if s % 2 == 0 else s + 2
    fill()
    snapshot.seq = snapshot.seq + 1


@dataclass(frozen=True)
class Activity:
    """One consistent read of the live media activity section (hbf_activity)."""

    requests: tuple[int, ...]          # per op (OP_NAMES)
    bytes: tuple[int, ...]
    flushes: int
    gpu_ns: int
    slot_visits: int
    state_ptr: int

    @classmethod
    def zero(cls) -> "Activity":
        """Nothing published yet (what a reader holds before its first consistent read)."""
        return cls((0,) * HBF_N_OPS, (0,) * HBF_N_OPS, 0, 0, 0, 0)


def read_activity(c: "hbf_ctl") -> Activity:
    """The GPU-published activity totals under their seqlock (hbf_ctl.h hbf_activity)."""
    a = c.activity

    def read() -> Activity:
        return Activity(tuple(int(o.requests) for o in a.ops), tuple(int(o.bytes) for o in a.ops), int(a.flushes),
                        int(a.gpu_ns), int(a.slot_visits), int(a.state_ptr))
    # the GPU writes it in microseconds, but its writer lane can be held between the odd and the even store (design.md
    # §3.1): its readers (hbfd's control tick) never wait for it, so ~1 ms of spinning and no waiting
    return seqlock_read(a, read, tries=2000, wait_s=0.0)


@dataclass(frozen=True)
class RingState:
    """The reference ring as host memory shows it (issue 13): read from the control region alone -- no CUDA call,
    no lock, no RPC -- so a watcher can read it while the workload's main thread is blocked in the driver. Slots are
    read without their seqlocks (a slot hbfd is posting reads as not answered for a moment): counts, not proofs.

    ``published``: the highest ticket + 1 whose request the device published (max ring[].seq); ``answered``: the
    completions hbfd posted in all (the daemon counters' requests); ``unanswered``: slots whose published request
    hbfd has not answered yet (request seq > completion seq); ``unconsumed``: slots whose completion is posted and
    not yet consumed (completion seq > consumed: the device has not taken it, or a stealer has not freed it);
    ``consumed_sum``: the slots' consumed words summed modulo 2^64 (a fingerprint: it changes whenever the device
    consumes); ``failure``/``device_failure``: the header's words (hbfd's terminal state, the first device failure);
    ``heartbeat``: the header's heartbeat."""

    published: int
    answered: int
    unanswered: int
    unconsumed: int
    consumed_sum: int
    failure: int
    device_failure: int
    heartbeat: int

    def progress_key(self) -> tuple[int, int, int]:
        """What changes while the ring moves: a request published, a completion posted, a completion consumed."""
        return (self.published, self.answered, self.consumed_sum)

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def read_ring_state(m: CtlMap) -> RingState:
    """The ring's state now (:class:`RingState`), from the mapped region's ring, completions, counters and header."""
    req = np.asarray(m.ring["seq"], np.uint64)
    c = m.completions
    cseq = np.asarray(c["seq"], np.uint64)
    cons = np.asarray(c["consumed"], np.uint64)
    h = m.ctl.header
    return RingState(published=int(req.max()), answered=int(m.daemon_counters["requests"].sum(dtype=np.uint64)),
                     unanswered=int((req > cseq).sum()), unconsumed=int((cseq > cons).sum()),
                     consumed_sum=int(cons.sum(dtype=np.uint64)), failure=int(h.failure),
                     device_failure=int(h.device_failure), heartbeat=int(h.heartbeat))


def seqlock_read(snapshot, read, *, tries: int = 10000, wait_s: float = 2.0):
    """Reader side: retry until seq is even and unchanged around read(): ``tries`` spins, then (``wait_s`` > 0)
    yielding the CPU between tries for up to ``wait_s`` seconds -- a writer in a host process (hbfd's publishers are
    Python threads) can be preempted between its odd and even store for many milliseconds on a loaded machine (a
    CI failure of 2026-12-05: 10,000 spins were ~3 ms). ControlRegionError when it never settles."""
    def attempt():
        s0 = snapshot.seq
        if s0 % 2:
            return False, None
        v = read()
        return snapshot.seq == s0, v
    for _ in range(tries):
        ok, v = attempt()
        if ok:
            return v
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        time.sleep(0.0005)
        ok, v = attempt()
        if ok:
            return v
    raise ControlRegionError("seqlock never settled (writer stuck?)", tries=tries, waited_s=wait_s)


_FENCE = threading.Lock()


def full_fence() -> None:
    """A full memory fence on the host (a locked read-modify-write: the lock round trip), for the host side of
    the host/GPU protocols on shared memory: x86-64 TSO keeps stores in order but lets a later load pass an
    earlier store (the store-load order a Dekker-style handshake needs, e.g. capacity mode's eviction: state =
    EVICTING, fence, read pins; docs/design.md §3.6). Also orders non-temporal stores a copy loop might use."""
    _FENCE.acquire()
    _FENCE.release()


# ---- completion seqlock (hbf_ctl.h hbf_completion): the one writer and the one validated reader --------------
COMPLETION_WORDS = COMPLETION_DTYPE.itemsize // 8   # a completion as uint64 words: 0 seq, 1 arrival_ns,
# 2 modeled_ns, 3 service_ns, 4 status | reserved0 << 32, 5 consumed, 6 req_site_flags, 7 req_q_tag


_POST_COLUMNS_MIN = 512   # from this batch size on, one 1-D scatter per payload column (fewer calls below it)


def post_completions(c64: np.ndarray, slots: np.ndarray, seq: np.ndarray, pay: np.ndarray, req67: np.ndarray,
                     *, seqlock: bool = True, per_column: bool | None = None) -> None:
    """Write completions into ``c64`` (the completions as an (N, 8) uint64 matrix) under the seqlock: every
    slot's seq to 0 (its previous ticket no longer reads as posted), fence, the payload (``pay``: words 1..4;
    ``req67``: the request's words 6 and 7), fence, then seq. x86-64 (TSO) keeps the three store passes in
    order; the fences also order non-temporal stores a copy loop might use. ``seqlock=False`` (the protocol
    before control-region ABI 4: payload, then seq) is for the tests that show the marker is needed; ``per_column``
    forces one of the two store forms (None: by batch size)."""
    if seqlock:
        c64[slots, 0] = 0
        full_fence()
    if per_column if per_column is not None else len(slots) >= _POST_COLUMNS_MIN:
        # one 1-D scatter per column: numpy's mixed fancy-index + slice stores cost more on large batches (4,096
        # slots: ~164 us in all for this post, ~237 us with c64[slots, 1:5] and c64[slots, 6:8]); fewer calls win
        # on small ones (256: ~25 us vs ~31 us)
        for j in range(4):
            c64[:, 1 + j][slots] = pay[:, j]
        c64[:, 6][slots] = req67[:, 0]
        c64[:, 7][slots] = req67[:, 1]
    else:
        c64[slots, 1:5] = pay
        c64[slots, 6:8] = req67
    full_fence()
    c64[slots, 0] = seq                                  # release: after every payload


def read_completion_validated(comp: np.ndarray, slot: int, want: int) -> tuple[int, ...] | None:
    """The seqlock reader of one completion, word by word as the GPU reads it: seq == ``want`` (acquire),
    the payload words, then seq again (after them); returns (arrival_ns, modeled_ns, service_ns, status,
    req_site_flags, req_q_tag) when both seq reads are ``want``, else None (not posted yet, or being
    rewritten / rewritten for a later ticket). On x86-64 loads are not reordered with other loads."""
    if int(comp["seq"][slot]) != want:
        return None
    row = (int(comp["arrival_ns"][slot]), int(comp["modeled_ns"][slot]), int(comp["service_ns"][slot]),
           int(comp["status"][slot]), int(comp["req_site_flags"][slot]), int(comp["req_q_tag"][slot]))
    if int(comp["seq"][slot]) != want:
        return None
    return row


# ---- the device's ring overflow table (runtime_cuda/include/hbf_device.h hbf_ref_ovf; its CPU model in
# hbfd/hostring.py): one 64-byte entry per stolen completion, at index ticket & (entries - 1)
RING_OVF_DTYPE = np.dtype([("arrival_ns", np.uint64), ("modeled_ns", np.uint64), ("service_ns", np.uint64),
                           ("status", np.uint64), ("req_site_flags", np.uint64), ("req_q_tag", np.uint64),
                           ("tick1", np.uint64), ("taken", np.uint64)])
assert RING_OVF_DTYPE.itemsize == 64
