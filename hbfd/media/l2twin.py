"""CPU twin of the device L2 model (runtime_cuda/src/hbf_l2.cuh; docs/design.md §3.12).

The same algorithm, word for word: a set-associative tag store of 64-bit words (bits 63..40 the line's tag + 1,
bits 39..32 the line's present granules, bits 31..0 the stamp (ns >> 6) mod 2^32), one access of one line at a
time (:meth:`L2Twin.access_line` is ``hb_l2_access``), a page group's lines in order (:meth:`L2Twin.request` is
``hb_l2_group`` for one warp, whose lanes take distinct lines of distinct sets, so their order does not matter).
tests/runtime/test_l2_model.py runs the device source compiled for the host on the same streams and compares
every answer and the final tag store.

What it is for besides that test: the expected HBF traffic of a kernel's address stream under the model
(bench/l2_vs_ncu.py's CPU part, tests/runtime/test_l2_traffic.py). It sees one request at a time in the order
given: the device's concurrency (several warps missing one line at once: merged or lost CASes) is not in it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from hbfcommon.profile import L2, L2_MIN_SETS, L2_POLICIES, l2_sets

STAMP_SHIFT = 6           # HBF_L2_STAMP_SHIFT
STAMP_MASK = 0xFFFFFFFF   # HBF_L2_STAMP_MASK
MASK_SHIFT = 32           # HBF_L2_MASK_SHIFT
TAG_SHIFT = 40            # HBF_L2_TAG_SHIFT
TOUCH_UNITS = 16          # HBF_L2_TOUCH_UNITS
LRU, FIFO = L2_POLICIES["lru"], L2_POLICIES["fifo"]
EV_MERGED, EV_LOST = 0x1, 0x2
_U64 = (1 << 64) - 1


HASH_K = 2654435761       # HBF_L2_HASH_K


def set_of(line: int, sets: int) -> int:
    """hb_l2_set_of: (line % sets + (q * HASH_K mod 2^32) % sets) % sets, q = line // sets."""
    q = line // sets
    return ((line - q * sets) + ((q * HASH_K) & 0xFFFFFFFF) % sets) % sets


def _tag(w: int) -> int:
    return w >> TAG_SHIFT


def _have(w: int) -> int:
    return (w >> MASK_SHIFT) & 0xFF


def _age(w: int, now_u: int) -> int:
    return (now_u - (w & STAMP_MASK)) & STAMP_MASK


def _word(tag1: int, have: int, now_u: int) -> int:
    return (tag1 << TAG_SHIFT) | ((have & 0xFF) << MASK_SHIFT) | (now_u & STAMP_MASK)


@dataclass
class L2Stats:
    lines: int = 0          # line lookups (l2_lines)
    hit_bytes: int = 0      # granule bytes served (l2_hit_bytes)
    miss_bytes: int = 0     # granule bytes charged to HBF (l2_miss_bytes)
    requests: int = 0       # page-group requests seen
    media_requests: int = 0  # ... that still went to the media (some granule missed)
    merged: int = 0
    lost: int = 0


class L2Twin:
    """The tag store and its accesses. ``capacity_bytes``, ``line_bytes``, ``ways``, ``policy`` ('lru' or 'fifo',
    or its code), ``partitions`` as in the profile's l2 section (the store holds capacity / partitions: what a
    working set read from the SMs of every partition has, docs/design.md §3.12); ``granule`` = the read
    granularity, ``page_bytes`` the page."""

    def __init__(self, capacity_bytes: int, line_bytes: int = 128, ways: int = 16, policy: str | int = "lru",
                 granule: int = 64, page_bytes: int = 4096, partitions: int = 1):
        self.sets = l2_sets(capacity_bytes, ways, line_bytes, partitions)
        if self.sets < L2_MIN_SETS or self.sets * ways * line_bytes * partitions != capacity_bytes:
            raise ValueError(f"L2 {capacity_bytes} B / ({partitions} partition(s) x {ways} ways x {line_bytes} B): "
                             f"not a whole number of at least {L2_MIN_SETS} sets")
        self.partitions = partitions
        self.ways, self.line_bytes, self.granule, self.page_bytes = ways, line_bytes, granule, page_bytes
        self.policy = L2_POLICIES[policy] if isinstance(policy, str) else int(policy)
        self.lshift = line_bytes.bit_length() - 1
        self.gsh = granule.bit_length() - 1
        self.pshift = page_bytes.bit_length() - 1
        self.gpl = self.lshift - self.gsh
        self.words = [0] * (self.sets * ways)
        self.stats = L2Stats()

    @classmethod
    def from_profile(cls, l2: L2, granule: int = 64, page_bytes: int = 4096) -> "L2Twin":
        """The twin of the tag store the runtime sizes from a profile's l2 section (hbfcommon.profile.L2)."""
        return cls(l2.capacity_bytes, l2.line_bytes, l2.ways, l2.policy, granule, page_bytes, l2.partitions)

    # ---- hb_l2_access ----------------------------------------------------------------------------------
    def access_line(self, line: int, need: int, now_ns: int, race: int = 0) -> tuple[int, int]:
        """One access of ``line`` needing the granule mask ``need`` at ``now_ns``: (charged granules, events).
        ``race`` (tests): a word another warp writes to the CAS's target between the read and the CAS."""
        now_u = (now_ns >> STAMP_SHIFT) & STAMP_MASK
        s = set_of(line, self.sets) * self.ways
        tag1 = line // self.sets + 1
        m, victim, vage, have_empty = -1, 0, 0, False
        for k in range(self.ways):
            i = (tag1 + k) % self.ways          # both scans start at way tag1 % ways
            w = self.words[s + i]
            t = _tag(w)
            if t == tag1 and m < 0:
                m = i
            if have_empty:
                continue
            if t == 0:
                have_empty, victim = True, i
                continue
            a = _age(w, now_u)
            if k == 0 or a > vage:
                victim, vage = i, a
        if m >= 0:
            wm = self.words[s + m]
            miss = need & ~_have(wm)
            if miss == 0:
                if self.policy == LRU and _age(wm, now_u) >= TOUCH_UNITS:
                    self._cas(s + m, wm, _word(tag1, _have(wm), now_u), race)
                return 0, 0
            idx, exp = s + m, wm
            des = _word(tag1, _have(wm) | miss, now_u if self.policy == LRU else wm & STAMP_MASK)
        else:
            miss, idx, exp = need, s + victim, self.words[s + victim]
            des = _word(tag1, need, now_u)
        got = self._cas(idx, exp, des, race)
        if got == exp:
            return miss, 0
        ev = 0
        if _tag(got) == tag1:
            merged = miss & _have(got)
            if merged:
                ev |= EV_MERGED
                miss &= ~merged
        if miss:
            ev |= EV_LOST
        return miss, ev

    def _cas(self, idx: int, expect: int, desired: int, race: int) -> int:
        if race:
            self.words[idx] = race & _U64
        old = self.words[idx]
        if old == expect:
            self.words[idx] = desired
        return old

    # ---- hb_l2_group (one warp) -----------------------------------------------------------------------------
    def request(self, page_media: int, granules: int, now_ns: int) -> int:
        """A page group's request: ``granules`` = the 64-bit mask of the page's granules its lanes touch. Returns
        the bytes charged to HBF (0: the L2 serves it whole, no media request)."""
        st = self.stats
        st.requests += 1
        missed = 0
        gmask = (1 << (1 << self.gpl)) - 1
        for L in range(1 << (self.pshift - self.lshift)):
            need = (granules >> (L << self.gpl)) & gmask
            if not need:
                continue
            miss, ev = self.access_line((page_media >> self.lshift) + L, need, now_ns)
            missed += bin(miss).count("1")
            st.lines += 1
            st.merged += ev & EV_MERGED
            st.lost += (ev >> 1) & 1
        tot = bin(granules).count("1")
        st.hit_bytes += (tot - missed) << self.gsh
        st.miss_bytes += missed << self.gsh
        st.media_requests += missed != 0
        return missed << self.gsh

    def access(self, addr: int, nbytes: int, now_ns: int) -> int:
        """A contiguous access [addr, addr + nbytes) as warp requests of at most one page each (what a coalesced
        warp makes of it): the bytes charged to HBF."""
        out, end = 0, addr + nbytes
        while addr < end:
            page = addr >> self.pshift << self.pshift
            hi = min(end, page + self.page_bytes)
            g0, g1 = (addr - page) >> self.gsh, (hi - 1 - page) >> self.gsh
            out += self.request(page, ((2 << g1) - (1 << g0)) & _U64, now_ns)
            addr = hi
        return out

    def stream(self, accesses: Iterable[tuple[int, int, int]]) -> int:
        """(addr, nbytes, now_ns) accesses in order: the total bytes charged to HBF."""
        return sum(self.access(a, n, t) for a, n, t in accesses)
