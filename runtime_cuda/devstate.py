"""Python mirror of runtime_cuda/include/hbf_device.h (the device-memory state block).

``tests/runtime/test_abi.py`` compiles an offsetof/sizeof probe of the header and compares it with
these classes field by field; change both together (and bump HBF_DEVSTATE_VERSION).

Pure (no CUDA): building and parsing the block is tested on CPU; session.py copies it to the GPU.
"""
from __future__ import annotations

import ctypes
from ctypes import c_uint8, c_uint32, c_uint64
from dataclasses import dataclass
from typing import Iterable

from hbfcommon import abi
from hbfcommon import ctl as C
from hbfcommon.abi import (HBF_F_ACTIVE, HBF_F_GENERIC, HBF_F_NC, HBF_F_OP_MASK, HBF_F_RELEASE,  # noqa: F401
                           HBF_F_WAIT_NOW, HBF_FUTURE_TICKET_BIT, HBF_HELPER_ABI_VERSION)  # hbf_abi.h
from hbfcommon.errors import ConfigError, ErrorCode, HbfError, RangeError
from hbfcommon.profile import L2_MAX_PARTITIONS, L2_MAX_SETS, L2_MIN_SETS, L2_POLICIES, l2_model_bytes, l2_sets
from hbfcommon.status import STATUS_NAMES

HBF_DEVSTATE_MAGIC = 0x3130545344464248  # "HBFDST01"
HBF_DEVSTATE_VERSION = 7   # 4: the L2 model (l2_*); 5: the tma_* kernel counters (issue 15); 6: ring stealing (ref_*);
#                            7: inline_ns in the kernel counters (l2_reserved 2 -> 1)
HBF_DEV_MAX_CHANNELS = 64
HBF_DEV_MAX_BANKS = 8192   # channels * dies_per_channel * planes_per_die, fast source (hbf_device.h)
HBF_BUF_READY_BITS = 40
HBF_DEV_GUARD_BYTES = 65536
HBF_KSHARDS = 32   # counter shards per kernel slot (hbf_device.h): by %smid
HBF_THC_REPLICA_STRIDE = 16   # u64 words between two thermal replicas (hbf_device.h)
# Stack bytes the helpers' calls can add to a kernel's own frame (per thread). The lean helper build calls
# its pieces through opaque pointers, so ptxas cannot bound a kernel's stack ("cannot be statically
# determined") and the driver's default stack (1 KiB) applies: a kernel with a large frame (Triton with a
# 64 Ki-element block) then overflows it inside a helper (an illegal address). The runtime raises the
# context's stack limit to the kernel's frame + this bound when it binds a module. Sound because the helper
# call graph is acyclic: a chain is at most the sum of all helper frames, which
# tests/runtime/test_runtime_helpers_ptx.py checks against ptxas -v of both helper builds. 2048 until the TMA
# and capacity helpers came (2026-12-05: the lean build's frames sum to 2224 B); 3072 reserves about 0.8 GB of
# device memory for the stacks of a full H200 (2048 threads x 132 SMs) where 2048 reserved 0.55 GB. 3328 since the
# batched TMA issue (issue 15's issue cost, hbf_tma.cuh hb_tma_batch; 2026-12-06: the lean frames sum to 3224 B,
# 2888 before): about 0.07 GB more on a full H200. 3392 since the ring claim fix (stop 45: hb_join_slow's elected
# taker, the overflow wait's live checks; the lean frames sum to 3368 B).
HELPER_STACK_BOUND = 3392
HBF_DSF_ALLOW_UNMODELED = 0x1
HBF_DSF_TMA_DEVICE = 0x2   # hbf_device.h: model TMA copies (knobs.tma_device)


class hbf_dev_range(ctypes.Structure):
    _fields_ = [("base", c_uint64), ("end", c_uint64), ("media_offset", c_uint64),
                ("range_id", c_uint32), ("mode", c_uint8), ("perms", c_uint8),
                ("page_shift", c_uint8), ("reserved", c_uint8)]


# the TMA counters (issue 15, hbf_tma.cuh; hbf_device.h hbf_kernel_counters after the L2 words)
TMA_COUNTERS = ("tma_copies", "tma_hbf_bytes", "tma_hbm_bytes", "tma_oob_bytes", "tma_phases", "tma_consumed",
                "tma_stale", "tma_leaked")


class hbf_kernel_counters(ctypes.Structure):
    _fields_ = [("ops", C.hbf_op_counters * C.HBF_N_OPS), ("status", c_uint64 * C.HBF_N_STATUS),
                ("wait_calls", c_uint64), ("wait_wall_ns", c_uint64), ("wait_overhead_ns", c_uint64),
                ("launches", c_uint64), ("blocks_exited", c_uint64), ("kstart_ns", c_uint64),
                ("kend_ns", c_uint64), ("thermal_waits", c_uint64), ("thermal_wait_ns", c_uint64),
                ("refresh_claims", c_uint64), ("refresh_bytes", c_uint64), ("bias_clamps", c_uint64),
                ("ready_waits", c_uint64), ("slack_ns", c_uint64), ("wait_helper_ns", c_uint64),
                ("inline_requests", c_uint64), ("inline_ns", c_uint64),   # inline_ns: helper ABI 8
                # the L2 in front of HBF (docs/design.md §3.12; hbf_l2.cuh)
                ("l2_lines", c_uint64), ("l2_hit_bytes", c_uint64), ("l2_miss_bytes", c_uint64),
                ("l2_merged", c_uint64), ("l2_lost", c_uint64), ("l2_unmodeled", c_uint64),
                ("l2_reserved", c_uint64 * 1)] + [(f, c_uint64) for f in TMA_COUNTERS]


class hbf_device_state(ctypes.Structure):
    _fields_ = [
        ("lo", c_uint64), ("span", c_uint64), ("enabled", c_uint32), ("n_ranges", c_uint32),
        ("range_seq", c_uint64), ("generation", c_uint64), ("ctl", c_uint64),
        ("timing_source", c_uint32), ("flags", c_uint32), ("magic", c_uint64),
        ("version", c_uint32), ("state_bytes", c_uint32), ("heartbeat_timeout_ns", c_uint64),
        ("thermal_max_age_ns", c_uint64), ("completion_timeout_ns", c_uint64),
        ("backoff_max_ns", c_uint64), ("deadline_bias_ns", c_uint64), ("kshards", c_uint64),
        ("ring_key", c_uint64),
        ("failure", c_uint64), ("failure_addr", c_uint64), ("thermal_cache", c_uint64),
        ("debt_seen", c_uint64), ("debt_claimed", c_uint64), ("refresh_quantum", c_uint64),
        ("ref_next_ticket", c_uint64), ("reserved2", c_uint64 * 1),
        ("media", C.hbf_media_params),
        ("chan_tail", c_uint64 * HBF_DEV_MAX_CHANNELS),
        ("kslots", hbf_kernel_counters * C.HBF_MAX_KERNEL_SLOTS),
        ("ranges", hbf_dev_range * C.HBF_MAX_RANGES),
        ("thc_replica", c_uint64 * (HBF_KSHARDS * HBF_THC_REPLICA_STRIDE)),
        ("bank_buf", c_uint64 * (HBF_DEV_MAX_BANKS * 2)), ("bank_busy", c_uint64 * HBF_DEV_MAX_BANKS),
        ("act_stamp", c_uint64), ("act_cursor", c_uint64), ("act_pub_seq", c_uint64), ("act_flushes", c_uint64),
        ("act_visits", c_uint64), ("act_launch_ns", c_uint64), ("act_reserved", c_uint64 * 2),
        ("act_mask", c_uint64 * (C.HBF_MAX_KERNEL_SLOTS // 64)), ("act_total", c_uint64 * (2 * C.HBF_N_OPS)),
        ("act_seen", c_uint64 * (C.HBF_MAX_KERNEL_SLOTS * 2 * C.HBF_N_OPS)),
        ("l2_tags", c_uint64), ("l2_sets", c_uint32), ("l2_ways", c_uint32), ("l2_line_shift", c_uint32),
        ("l2_policy", c_uint32), ("l2_magic", c_uint64), ("l2_reserved", c_uint64 * 4),
        # the reference ring's slot stealing (hbf_device.h; docs/runtime.md "ring")
        ("ref_ovf", c_uint64), ("ref_ovf_mask", c_uint64), ("ref_floor", c_uint64), ("ref_steals", c_uint64),
        ("ref_ovf_takes", c_uint64), ("ref_reserved", c_uint64 * 3), ("ref_claim", c_uint64 * C.HBF_RING_SLOTS),
    ]


class hbf_ref_ovf(ctypes.Structure):
    """One entry of the device's ring overflow table (hbf_device.h; numpy twin: hbfcommon.ctl.RING_OVF_DTYPE)."""
    _fields_ = [(name, c_uint64) for name in C.RING_OVF_DTYPE.names]


class hbf_cdesc(ctypes.Structure):
    _fields_ = [("st", c_uint64), ("r0_base", c_uint64), ("r0_end", c_uint64), ("r0_media", c_uint64),
                ("kslot", c_uint64), ("replica", c_uint64), ("bias", c_uint64), ("max_age", c_uint64),
                ("fixed_read_ns", c_uint32), ("fixed_write_ns", c_uint32), ("flags", c_uint32),
                ("kslot_stride", c_uint32), ("kshard_stride", c_uint32), ("kmax", c_uint32),
                ("r0_perms", c_uint8), ("r0_page_shift", c_uint8), ("read_gshift", c_uint8),
                ("reserved0", c_uint8), ("reserved1", c_uint32),
                ("r0_len", c_uint64), ("inl_read_delay", c_uint64), ("inl_write_delay", c_uint64),
                ("inl_flags", c_uint32), ("inl_nranges", c_uint32),
                ("inl_base", c_uint64 * abi.INL_MAX_RANGES), ("inl_len", c_uint64 * abi.INL_MAX_RANGES)]


STRUCTS = {c.__name__: c for c in (hbf_dev_range, hbf_kernel_counters, hbf_device_state, hbf_cdesc, hbf_ref_ovf)}
HBF_REF_OVF_BUSY = (1 << 64) - 1   # hbf_device.h: an entry a stealer is writing
REF_FLOOR_OFF = hbf_device_state.ref_floor.offset    # host-written at synchronization points (session)
REF_STEALS_OFF = hbf_device_state.ref_steals.offset  # ref_steals, ref_ovf_takes: GPU counters
STATE_BYTES = ctypes.sizeof(hbf_device_state)
HEAD_BYTES = hbf_device_state.media.offset          # lines 0..2 (what a range update rewrites)
KSLOTS_OFF = hbf_device_state.kslots.offset
KSLOTS_BYTES = ctypes.sizeof(hbf_kernel_counters) * C.HBF_MAX_KERNEL_SLOTS
KSHARD_BYTES = ctypes.sizeof(hbf_kernel_counters) * C.HBF_MAX_KERNEL_SLOTS * HBF_KSHARDS   # [slot][shard]
# fields of hbf_kernel_counters that are timestamps: shards (and modules) combine them with max, not sum
COUNTER_MAX_FIELDS = ("kstart_ns", "kend_ns")
RANGES_OFF = hbf_device_state.ranges.offset
REF_NEXT_TICKET_OFF = hbf_device_state.ref_next_ticket.offset   # line 2: never rewritten by range updates
DEADLINE_BIAS_OFF = hbf_device_state.deadline_bias_ns.offset     # line 1: host-owned run parameter


HBF_CD_ON, HBF_CD_FAST, HBF_CD_SHARDED, HBF_CD_MULTI = 0x1, 0x2, 0x4, 0x8   # hbf_cdesc.flags (hbf_device.h)
HBF_CD_L2 = 0x10                       # the L2 model is on (hbf_device_state.l2_tags)
HBF_CDI_READ, HBF_CDI_WRITE, HBF_CDI_GROUP = abi.HBF_CDI_READ, abi.HBF_CDI_WRITE, abi.HBF_CDI_GROUP   # inl_flags
CDESC_BYTES = ctypes.sizeof(hbf_cdesc)
THC_REPLICA_OFF = hbf_device_state.thc_replica.offset
_U32 = (1 << 32) - 1


# the inline path's limits: granule keys are 32 bits of (address >> read_gshift), exact within 2^37 bytes
# for the smallest granule it serves (32 B); a deadline further than the wait's bound is the helpers' to refuse
INLINE_MAX_RANGE = 1 << 37
CDESC_BYTES_V5 = abi.CDESC_BYTES_V5      # a module built before ABI 6 (sessions write it the one-range form)
HBF_MAX_WAIT_NS = 10_000_000_000         # hbf_device.h: the longest single modeled wait


def _keys_disjoint(spans: list[tuple[int, int]], gshift: int) -> bool:
    """The inline sites' granule keys (32 bits of addr >> gshift, hbf_abi.h "Inline issue") name one granule
    each over all of ``spans`` ([base, end) pairs): each span's granules [base >> g, (end - 1) >> g] are at
    most 2^32, and their intervals modulo 2^32 do not meet (ranges 2^(32 + g) bytes apart would). Then the
    warp's count of key changes along ascending lanes is its count of distinct granules, whichever ranges
    its lanes touch."""
    iv = []
    for base, end in spans:
        first, last = base >> gshift, (end - 1) >> gshift
        if last - first + 1 > 1 << 32:
            return False
        iv.append((first & _U32, last - first + 1))
    iv.sort()
    for (s0, n0), (s1, _n1) in zip(iv, iv[1:]):
        if s0 + n0 > s1:
            return False
    s_last, n_last = iv[-1]
    return s_last + n_last - (1 << 32) <= iv[0][0]      # the last interval, wrapped, ends before the first


def _inline_multi(st: hbf_device_state, d: hbf_cdesc, n: int, l2: bool) -> None:
    """The multi-range inline path (ABI 6, docs/design.md §3.3): 2..INL_MAX_RANGES ranges, every one TIMING and
    at most INLINE_MAX_RANGE bytes; an op is inline when every range grants it (loads: also a granule of at
    least 32 B, the ranges' granule keys disjoint, no L2 model); then inl_base / inl_len hold every range,
    32-byte aligned inwards (a site's one compare per range: an aligned access of at most 32 B that starts in
    it ends in it; a range's unaligned edges take the helpers). Anything else: r0 only, as before ABI 6."""
    spans, perms = [], C.HBF_PERM_READ | C.HBF_PERM_WRITE
    for k in range(n):
        r = st.ranges[k]
        base, end = int(r.base), int(r.end)
        if int(r.mode) != C.HBF_MODE_TIMING or not 0 < end - base <= INLINE_MAX_RANGE:
            return
        spans.append((base, end))
        perms &= int(r.perms)
    flags = 0
    if (perms & C.HBF_PERM_READ and d.read_gshift >= 5 and d.inl_read_delay < HBF_MAX_WAIT_NS and not l2
            and _keys_disjoint(spans, d.read_gshift)):
        flags |= HBF_CDI_READ
    if perms & C.HBF_PERM_WRITE and d.inl_write_delay < HBF_MAX_WAIT_NS:
        flags |= HBF_CDI_WRITE
    if not flags:
        return
    d.inl_flags |= flags
    d.inl_nranges = n
    for k, (base, end) in enumerate(spans):
        b, e = (base + 31) & ~31, end & ~31
        d.inl_base[k], d.inl_len[k] = b, max(e - b, 0)


def cdesc_for(st: hbf_device_state, state_dptr: int, kslot_base: int, inline: bool = True,
              multi: bool = True) -> hbf_cdesc:
    """A module's launch descriptor (hbf_device.h hbf_cdesc) for the device state ``st`` at ``state_dptr``:
    a pure function of the block's host-owned words, the module's first counter slot, ``inline``
    (runtime knob HBF_INLINE_ISSUE) and ``multi`` (HBF_INLINE_MULTI; False also for a module built before
    ABI 6, whose sites know r0 only). flags stays 0 (the general path for every access, as without a
    descriptor) unless the compact path may serve it: the FIXED or FAST source, a thermal snapshot reused
    (thermal_max_age_ns > 0), at least one range, a module with counter slots, fixed service times that fit
    32 bits. inl_flags (hbf_abi.h "Inline issue") allows loads / stores inline only for the FIXED source
    with one TIMING range that grants the op, up to INLINE_MAX_RANGE bytes (loads: a read granularity of at
    least 32 B, so an aligned access of at most 32 B touches one granule), or with ``multi`` 2..INL_MAX_RANGES
    such ranges that all grant it (_inline_multi: inl_nranges, inl_base, inl_len); HBF_CDI_GROUP lets the FAST
    source serve issue groups in one call (__hb_issue_group: the compact path's decision per site, the page
    transactions together), with one range or several."""
    d = hbf_cdesc()
    src = int(st.timing_source)
    n = int(st.n_ranges)
    kshards = int(st.kshards)
    size = ctypes.sizeof(hbf_kernel_counters)
    if not 0 <= kslot_base < C.HBF_MAX_KERNEL_SLOTS:
        return d
    fr, fw = int(st.media.fixed_read_ns), int(st.media.fixed_write_ns)
    if (src not in (C.HBF_SRC_FIXED, C.HBF_SRC_FAST) or int(st.thermal_max_age_ns) <= 0 or n < 1
            or int(st.span) == 0 or fr > _U32 or fw > _U32 or state_dptr == 0):
        return d
    d.st = state_dptr
    r = st.ranges[0]
    d.r0_base, d.r0_end, d.r0_media = int(r.base), int(r.end), int(r.media_offset)
    d.r0_perms = int(r.perms) if int(r.mode) == C.HBF_MODE_TIMING else 0
    d.r0_page_shift = int(r.page_shift) or 12
    rg = int(st.media.read_granularity) or 64
    d.read_gshift = (rg & -rg).bit_length() - 1          # hb_granule_shift: the lowest set bit
    if kshards:
        d.kslot = kshards + kslot_base * HBF_KSHARDS * size
        d.kslot_stride, d.kshard_stride = HBF_KSHARDS * size, size
    else:
        d.kslot = state_dptr + KSLOTS_OFF + kslot_base * size
        d.kslot_stride, d.kshard_stride = size, 0
    d.kmax = C.HBF_MAX_KERNEL_SLOTS - 1 - kslot_base
    d.replica = state_dptr + THC_REPLICA_OFF
    d.bias, d.max_age = int(st.deadline_bias_ns), int(st.thermal_max_age_ns)
    d.fixed_read_ns, d.fixed_write_ns = fr, fw
    d.flags = (HBF_CD_ON | (HBF_CD_FAST if src == C.HBF_SRC_FAST else 0) | (HBF_CD_SHARDED if kshards else 0)
               | (HBF_CD_MULTI if n > 1 else 0))
    d.r0_len = d.r0_end - d.r0_base
    bias = d.bias

    def delay(fixed: int) -> int:          # hb_issue_fast: max(service, 1), less the bias unless it clamps
        m = max(fixed, 1)
        return m - bias if bias == 0 or m > bias else 0

    d.inl_read_delay, d.inl_write_delay = delay(fr), delay(fw)
    l2 = int(st.l2_tags) != 0      # the L2 model (§3.12): loads go through the helpers' lookups, never inline
    if l2:
        d.flags |= HBF_CD_L2
    if (inline and src == C.HBF_SRC_FIXED and n == 1 and d.r0_perms and 0 < d.r0_len <= INLINE_MAX_RANGE):
        if (d.r0_perms & C.HBF_PERM_READ and d.read_gshift >= 5 and d.inl_read_delay < HBF_MAX_WAIT_NS
                and not l2):
            d.inl_flags |= HBF_CDI_READ
        if d.r0_perms & C.HBF_PERM_WRITE and d.inl_write_delay < HBF_MAX_WAIT_NS:
            d.inl_flags |= HBF_CDI_WRITE
    elif inline and multi and src == C.HBF_SRC_FIXED and 2 <= n <= abi.INL_MAX_RANGES:
        _inline_multi(st, d, n, l2)
    if inline and src == C.HBF_SRC_FAST and not l2:
        d.inl_flags |= HBF_CDI_GROUP
    return d


def cdesc_for_module(st: hbf_device_state, state_dptr: int, kslot_base: int, cdesc_bytes: int, inline: bool = True,
                     multi: bool = True) -> hbf_cdesc:
    """The descriptor for a module whose ``__hb_cdesc`` has ``cdesc_bytes`` (the runtime writes its first
    cdesc_bytes bytes): CDESC_BYTES (ABI 6) -> cdesc_for as asked; CDESC_BYTES_V5 (a module built before ABI 6,
    whose sites check r0 only) -> the one-range descriptor it was built for (``multi`` off: its first 128 bytes
    are exactly what the runtime wrote it before ABI 6)."""
    if cdesc_bytes < CDESC_BYTES_V5:
        raise HbfError("a module's launch descriptor is smaller than any helper ABI's", code=ErrorCode.ABI_MISMATCH,
                       cdesc_bytes=cdesc_bytes, least=CDESC_BYTES_V5)
    return cdesc_for(st, state_dptr, kslot_base, inline, multi=multi and cdesc_bytes >= CDESC_BYTES)


@dataclass(frozen=True)
class DevRange:
    base: int
    length: int
    media_offset: int
    range_id: int
    mode: int
    perms: int
    page_bytes: int = 4096

    @property
    def end(self) -> int:
        return self.base + self.length


@dataclass(frozen=True)
class RunParams:
    heartbeat_timeout_ns: int = 50_000_000
    thermal_max_age_ns: int = 1_000_000  # 10% of hbfd's 10 ms controller tick
    completion_timeout_ns: int = 0
    backoff_max_ns: int = 8192
    allow_unmodeled: bool = False
    deadline_bias_ns: int = 0      # measured by runtime_cuda.calibrate (never assumed); 0 = off
    tma_device: bool = True        # model TMA / bulk copies (HBF_TMA_DEVICE, default 1): else they fail closed


def ranges_from_ctl(snap: "C.hbf_range_snapshot") -> tuple[int, list[DevRange]]:
    """Read (generation, ranges) from the control region's seqlocked range snapshot."""
    def read():
        n = min(int(snap.count), C.HBF_MAX_RANGES)
        rs = [DevRange(int(r.base), int(r.length), int(r.media_offset), int(r.range_id), int(r.mode),
                       int(r.perms), int(r.page_bytes) or 4096) for r in snap.ranges[:n]]
        return int(snap.generation), rs
    return C.seqlock_read(snap, read)


def check_ranges(ranges: list[DevRange]) -> list[DevRange]:
    rs = sorted(ranges, key=lambda r: r.base)
    if len(rs) > C.HBF_MAX_RANGES:
        raise RangeError("too many ranges for the device table", code=ErrorCode.RANGE_TABLE_FULL, count=len(rs))
    for a, b in zip(rs, rs[1:]):
        if a.end > b.base:
            raise RangeError("ranges overlap", code=ErrorCode.RANGE_OVERLAP, a=hex(a.base), b=hex(b.base))
    for r in rs:
        if r.length <= 0:
            raise RangeError("zero-length range", code=ErrorCode.RANGE_ZERO_LENGTH, base=hex(r.base))
        if r.page_bytes & (r.page_bytes - 1):
            raise RangeError("page_bytes must be a power of two", code=ErrorCode.RANGE_MISALIGNED,
                             page_bytes=r.page_bytes)
    return rs


def device_ranges(ranges: Iterable[DevRange]) -> list[DevRange]:
    """The ranges the timing helpers serve: all but FLAG ranges. Flag ranges are eidola's (its own
    device state classifies flag loads, eidola.replay.Replay); hbfd's table records them for the
    summary only, so in the helpers an access to one is native, like any unregistered address."""
    return [r for r in ranges if r.mode != C.HBF_MODE_FLAG]


def fill_ranges(st: hbf_device_state, ranges: Iterable[DevRange], generation: int) -> None:
    """Write the range table (:func:`device_ranges` of ``ranges``), bounds and generation (the
    caller handles range_seq)."""
    rs = device_ranges(check_ranges(list(ranges)))
    for i, r in enumerate(rs):
        d = st.ranges[i]
        d.base, d.end, d.media_offset = r.base, r.end, r.media_offset
        d.range_id, d.mode, d.perms = r.range_id, r.mode, r.perms
        d.page_shift = r.page_bytes.bit_length() - 1
    st.n_ranges = len(rs)
    st.generation = generation
    if rs:
        lo = max(0, rs[0].base - HBF_DEV_GUARD_BYTES)
        st.lo, st.span = lo, rs[-1].end - lo
    else:
        st.lo, st.span = (1 << 64) - 1, 0   # every address: addr - lo >= 0 -> native


def new_state(ctl_dev: int, media: "C.hbf_media_params | None", params: RunParams,
              refresh_quantum: int = 0) -> hbf_device_state:
    st = hbf_device_state()
    st.magic, st.version, st.state_bytes = HBF_DEVSTATE_MAGIC, HBF_DEVSTATE_VERSION, STATE_BYTES
    st.enabled = 1
    st.ctl = ctl_dev
    if media is not None:
        ctypes.memmove(ctypes.addressof(st.media), ctypes.addressof(media), ctypes.sizeof(media))
        st.timing_source = int(media.timing_source)
    st.flags = ((HBF_DSF_ALLOW_UNMODELED if params.allow_unmodeled else 0)
                | (HBF_DSF_TMA_DEVICE if params.tma_device else 0))
    st.heartbeat_timeout_ns = params.heartbeat_timeout_ns
    st.thermal_max_age_ns = params.thermal_max_age_ns
    st.completion_timeout_ns = params.completion_timeout_ns
    st.backoff_max_ns = params.backoff_max_ns
    st.deadline_bias_ns = params.deadline_bias_ns
    st.refresh_quantum = refresh_quantum
    fill_ranges(st, [], 0)
    return st


@dataclass(frozen=True)
class L2Geometry:
    """The L2 model's tag store (hbf_device_state.l2_*), from the control region's media parameters (the
    profile's l2 section, hbfcommon.profile.L2)."""
    capacity_bytes: int  # the card's L2 (all partitions)
    line_bytes: int
    ways: int
    policy: int          # HBF_L2_POLICY_* (1 LRU, 2 FIFO)
    sets: int
    partitions: int = 1  # the tag store holds capacity / partitions (hbfcommon.profile.l2_model_bytes)

    @property
    def tag_bytes(self) -> int:
        return self.sets * self.ways * 8

    def summary(self) -> dict:
        return {"capacity_bytes": self.capacity_bytes, "partitions": self.partitions,
                "model_bytes": l2_model_bytes(self.capacity_bytes, self.partitions), "line_bytes": self.line_bytes,
                "ways": self.ways, "sets": self.sets,
                "policy": {v: k for k, v in L2_POLICIES.items()}.get(self.policy, "?")}


def l2_geometry(media: "C.hbf_media_params") -> L2Geometry:
    """The L2 model's geometry from the media parameters; a ConfigError naming what is wrong when they hold none
    (a daemon that does not publish them) or one the device model does not cover (hbfcommon.profile.L2)."""
    cap, line, ways, pol = (int(media.l2_bytes), int(media.l2_line_bytes), int(media.l2_ways),
                            int(media.l2_policy))
    parts = int(media.l2_partitions) or 1          # 0: a daemon that predates the field
    rg, pg = int(media.read_granularity) or 64, int(media.page_bytes) or 4096
    if cap == 0:
        raise ConfigError("HBF_L2_MODEL=1 but the daemon's media parameters carry no L2 geometry (l2_bytes 0): "
                          "an hbfd that predates the profile's l2 section", knob="HBF_L2_MODEL")
    sets = l2_sets(cap, ways, line, parts) if ways and line else 0
    ok = (line >= 32 and not line & (line - 1) and 1 <= ways <= 32 and pol in L2_POLICIES.values()
          and 1 <= parts <= L2_MAX_PARTITIONS and cap == sets * ways * line * parts
          and L2_MIN_SETS <= sets < L2_MAX_SETS and rg <= line <= pg
          and line // rg <= 8 and pg <= 32 * line and pg <= 64 * rg)
    if not ok:
        raise ConfigError(f"the L2 geometry in the media parameters is not one the device model covers: "
                          f"{cap} B in {parts} partition(s), {line} B lines, {ways} ways, policy {pol}, granule "
                          f"{rg} B, page {pg} B (hbfcommon.profile.L2)", knob="HBF_L2_MODEL")
    return L2Geometry(cap, line, ways, pol, sets, parts)


def set_l2(st: hbf_device_state, geom: "L2Geometry | None", tags_dptr: int) -> None:
    """Point the block at the (zeroed) tag store; geom None: the model off."""
    if geom is None or not tags_dptr:
        st.l2_tags, st.l2_sets, st.l2_ways, st.l2_line_shift, st.l2_policy, st.l2_magic = 0, 0, 0, 0, 0, 0
        return
    st.l2_tags, st.l2_sets, st.l2_ways = tags_dptr, geom.sets, geom.ways
    st.l2_line_shift, st.l2_policy = geom.line_bytes.bit_length() - 1, geom.policy
    st.l2_magic = l2_magic(geom.sets)


def l2_magic(sets: int) -> int:
    """hb_l2_magic (hbf_l2.cuh): line / sets = mulhi(line, magic), exact for line < 2^64 / sets."""
    return ((1 << 64) - 1) // sets + 1


def kernel_counters_dict(k: hbf_kernel_counters) -> dict:
    ops = {}
    for i, name in enumerate(C.OP_NAMES):
        o = k.ops[i]
        ops[name] = {f: int(getattr(o, f)) for f in ("requests", "bytes", "program_bytes", "modeled_ns",
                                                      "wall_ns", "service_ns", "overhead_ns")}
    d = {"ops": ops, "status": {C_STATUS_NAMES[i]: int(k.status[i]) for i in range(len(C_STATUS_NAMES))
                                if int(k.status[i])}}
    for f in ("wait_calls", "wait_wall_ns", "wait_overhead_ns", "launches", "blocks_exited", "kstart_ns",
              "kend_ns", "thermal_waits", "thermal_wait_ns", "refresh_claims", "refresh_bytes", "bias_clamps",
              "ready_waits", "slack_ns", "inline_requests", "inline_ns", *L2_COUNTERS, *TMA_COUNTERS):
        d[f] = int(getattr(k, f))
    return d


L2_COUNTERS = ("l2_lines", "l2_hit_bytes", "l2_miss_bytes", "l2_merged", "l2_lost", "l2_unmodeled")
C_STATUS_NAMES = STATUS_NAMES   # hbfcommon.status: the one definition of the request states


def sum_shards(slots: "ctypes.Array", shards: "ctypes.Array", n: int) -> None:
    """slots[k] += the HBF_KSHARDS shards of slot k (``shards`` laid out [slot][shard]) for k < n:
    counters add, the timestamp fields (COUNTER_MAX_FIELDS) take the max."""
    import numpy as np  # noqa: PLC0415
    w = ctypes.sizeof(hbf_kernel_counters) // 8
    dst = np.frombuffer(slots, dtype=np.uint64, count=n * w).reshape(n, w)
    src = np.frombuffer(shards, dtype=np.uint64, count=n * HBF_KSHARDS * w).reshape(n, HBF_KSHARDS, w)
    tot = dst + src.sum(axis=1, dtype=np.uint64)
    for f in COUNTER_MAX_FIELDS:
        i = getattr(hbf_kernel_counters, f).offset // 8
        tot[:, i] = np.maximum(dst[:, i], src[:, :, i].max(axis=1))
    dst[:] = tot
