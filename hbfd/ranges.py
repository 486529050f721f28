"""The range table: validation, media-space allocation, the sorted snapshot. Pure (no IO).

Timing and capacity ranges take any base and length (tensors from torch's caching allocator are
512 B aligned, cuMemAlloc sub-buffers can be anywhere). Pages are modeled on the device address
space: the media address of byte ``addr`` is ``media_offset + (addr - base)`` with
``media_offset == base (mod PAGE)``, so in-page offsets and page boundaries are those of the device
addresses. Each range owns the whole media pages it touches (``media_extent``): two ranges never
share a media page, even when their device bytes share a 4 KiB device page.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

from hbfcommon import ctl
from hbfcommon.errors import ErrorCode, RangeError

PAGE = 4096
U64 = 1 << 64


@dataclass(frozen=True)
class Range:
    range_id: int
    base: int
    length: int
    mode: int                 # HBF_MODE_*
    perms: int                # HBF_PERM_*
    page_bytes: int = PAGE
    stream: int = 0
    media_offset: int = 0     # == base (mod page_bytes), inside the profile capacity (timing/capacity)
    backing_offset: int = 0
    label: str = ""
    flag_class: int = 0

    @property
    def end(self) -> int:
        return self.base + self.length

    @property
    def media_extent(self) -> tuple[int, int]:
        """[lo, hi): the whole media pages this range owns (page-aligned; empty for flag ranges)."""
        if self.mode == ctl.HBF_MODE_FLAG:
            return (0, 0)
        p = self.page_bytes
        lo = self.media_offset - self.media_offset % p
        return lo, lo + _span_bytes(self.base, self.length, p)

    def as_dict(self) -> dict:
        d = self.__dict__.copy()
        d["mode_name"] = ctl.MODE_NAMES.get(self.mode, "?")
        return d


def _span_bytes(base: int, length: int, page: int) -> int:
    """Bytes of the whole pages that [base, base + length) touches."""
    first = base - base % page
    return -(-(base + length - first) // page) * page


def _err(code: ErrorCode, msg: str, **fields) -> RangeError:
    return RangeError(msg, code=code, **fields)


class RangeTable:
    """Non-overlapping ranges sorted by base; media space allocated first-fit in whole pages."""

    def __init__(self, capacity_bytes: int, max_ranges: int = ctl.HBF_MAX_RANGES) -> None:
        self.capacity_bytes = capacity_bytes
        self.max_ranges = max_ranges
        self._ranges: list[Range] = []   # sorted by base
        self._next_id = 1
        self.generation = 0
        self.history: list[dict] = []    # every registration / unregistration, for the summary

    @property
    def ranges(self) -> list[Range]:
        return list(self._ranges)

    def get(self, range_id: int) -> Range:
        for r in self._ranges:
            if r.range_id == range_id:
                return r
        raise _err(ErrorCode.RANGE_NOT_FOUND, f"no range with id {range_id}", range_id=range_id)

    def validate(self, base: int, length: int, mode: int, perms: int, page_bytes: int) -> None:
        if mode not in ctl.MODE_NAMES:
            raise _err(ErrorCode.RANGE_BAD_MODE, "mode must be timing, capacity or flag", mode=mode)
        if length == 0:
            raise _err(ErrorCode.RANGE_ZERO_LENGTH, "a range needs a nonzero length", base=hex(base))
        if perms == 0 or perms & ~ctl.HBF_PERM_ALL:
            raise _err(ErrorCode.RANGE_BAD_PERMISSIONS,
                       "perms must be a nonzero combination of READ=1, WRITE=2, ATOMIC=4", perms=perms)
        if mode == ctl.HBF_MODE_CAPACITY and not perms & ctl.HBF_PERM_READ:
            raise _err(ErrorCode.RANGE_BAD_PERMISSIONS, "a capacity range must be readable", perms=perms)
        if base < 0 or length < 0 or base + length > U64:
            raise _err(ErrorCode.INVALID_ARGUMENT, "range wraps the 64-bit address space",
                       base=hex(base), length=length)
        if mode == ctl.HBF_MODE_FLAG:
            if base % 4 or length % 4:
                raise _err(ErrorCode.RANGE_MISALIGNED, "flag ranges need 4-byte aligned base and length",
                           base=hex(base), length=length)
        else:
            if page_bytes not in (0, PAGE):
                raise _err(ErrorCode.RANGE_MISALIGNED, "page_bytes must be 4096 (the profile page)",
                           page_bytes=page_bytes)
        i = bisect.bisect_left([r.base for r in self._ranges], base)
        for r in self._ranges[max(0, i - 1):i + 1]:
            if base < r.end and r.base < base + length:
                raise _err(ErrorCode.RANGE_OVERLAP, f"overlaps range {r.range_id}",
                           base=hex(base), length=length, other_id=r.range_id,
                           other_base=hex(r.base), other_length=r.length)
        if len(self._ranges) >= self.max_ranges:
            raise _err(ErrorCode.RANGE_TABLE_FULL, f"the range table holds {self.max_ranges} ranges")

    def _alloc_media(self, base: int, length: int) -> int:
        """First-fit page-aligned extent for the whole pages [base, base+length) touches; returns
        media_offset = extent start + base % PAGE (so media_offset == base mod PAGE)."""
        need = _span_bytes(base, length, PAGE)
        extents = sorted(r.media_extent for r in self._ranges if r.mode != ctl.HBF_MODE_FLAG)
        cur = 0
        for lo, hi in extents:
            if lo - cur >= need:
                return cur + base % PAGE
            cur = max(cur, hi)
        if self.capacity_bytes - cur >= need:
            return cur + base % PAGE
        raise _err(ErrorCode.RANGE_TABLE_FULL, "the modeled stack has no free media space for this range",
                   length=length, pages_bytes=need, capacity_bytes=self.capacity_bytes, used_bytes=cur)

    def register(self, base: int, length: int, mode: int, perms: int, *, page_bytes: int = 0,
                 stream: int = 0, backing_offset: int = 0, label: str = "", flag_class: int = 0) -> Range:
        self.validate(base, length, mode, perms, page_bytes)
        media = 0 if mode == ctl.HBF_MODE_FLAG else self._alloc_media(base, length)
        r = Range(self._next_id, base, length, mode, perms, PAGE,
                  stream, media, backing_offset, label, flag_class)
        self._next_id += 1
        bisect.insort(self._ranges, r, key=lambda x: x.base)
        self.generation += 1
        self.history.append({"event": "register", **r.as_dict()})
        return r

    def unregister(self, range_id: int) -> Range:
        r = self.get(range_id)
        self._ranges.remove(r)
        self.generation += 1
        self.history.append({"event": "unregister", "range_id": range_id})
        return r
