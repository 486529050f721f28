"""Write Tracking Table: the peer writes the eidolons enact, sorted by wakeup.

``register_write(addr, value, size, wakeup_ns)`` may be called in any order (registration order
is free); ``freeze()`` produces the table both replay engines use:

- engine (a), the eidolon kernel, walks ``by_time`` (sorted by wakeup, then address, then
  registration order) and performs the stores;
- engine (b), virtualized flag loads, uses the per-address index: sorted unique addresses, and for
  each address its events sorted by time; ``value_at(addr, t)`` is the value of the last event with
  ``wakeup_ns <= t`` (or the initial value) — two binary searches, exactly what the device does.

Pure: numpy only, no device, no files.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from hbfcommon.errors import TraceError
from eidola.trace import Trace

FLAG_SIZES = (1, 2, 4, 8)
NEVER = (1 << 63) - 1


@dataclass(frozen=True)
class WttEntry:
    addr: int
    value: int
    size: int
    wakeup_ns: int
    src: int = -1
    order: int = 0  # registration order (tie-break only)


def _check(addr: int, value: int, size: int, wakeup_ns: int) -> None:
    for name, v in (("addr", addr), ("value", value), ("size", size), ("wakeup_ns", wakeup_ns)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise TraceError(f"register_write: {name} must be an integer", field=name, value=v)
    if size not in FLAG_SIZES:
        raise TraceError(f"register_write: size must be one of {FLAG_SIZES}", field="size", value=size)
    if addr <= 0 or addr % size:
        raise TraceError("register_write: addr must be nonzero and aligned to size", field="addr",
                         value=hex(int(addr)), size=size)
    if wakeup_ns < 0:
        raise TraceError("register_write: wakeup_ns must be >= 0", field="wakeup_ns", value=wakeup_ns)
    if not (0 <= value < (1 << (8 * size))):
        raise TraceError("register_write: value does not fit in size bytes", field="value",
                         value=value, size=size)


class WriteTrackingTable:
    """Mutable registration phase. ``freeze()`` validates and sorts."""

    def __init__(self) -> None:
        self._entries: list[WttEntry] = []

    def __len__(self) -> int:
        return len(self._entries)

    def register_write(self, addr: int, value: int, size: int, wakeup_ns: int, *, src: int = -1) -> None:
        _check(addr, value, size, wakeup_ns)
        self._entries.append(WttEntry(int(addr), int(value), int(size), int(wakeup_ns), int(src),
                                      len(self._entries)))

    def register_many(self, addrs, values, sizes, wakeups, srcs=None) -> None:
        n = len(addrs)
        srcs = [-1] * n if srcs is None else srcs
        for a, v, s, w, p in zip(addrs, values, sizes, wakeups, srcs):
            self.register_write(int(a), int(v), int(s), int(w), src=int(p))

    @classmethod
    def from_trace(cls, trace: Trace, bases: Mapping[str, int], *, target: int | None = None,
                   include_data: bool = False) -> "WriteTrackingTable":
        """Flag writes (and, if asked, small data writes) of ``trace`` aimed at ``target``,
        placed at ``bases[buffer] + offset``. Every buffer used needs a base."""
        t = trace.header.target if target is None else target
        kinds = {b.name: b.kind for b in trace.header.buffers}
        wtt = cls()
        for w in trace.writes:
            if w.dst != t:
                continue
            if kinds[w.buffer] != "flag" and not include_data:
                continue
            if w.buffer not in bases:
                raise TraceError("no device base address for buffer", field="buffer", value=w.buffer)
            if w.value is None:
                raise TraceError("cannot table a write without a value", field="value",
                                 buffer=w.buffer, offset=w.offset)
            wtt.register_write(int(bases[w.buffer]) + w.offset, w.value, w.size, w.wakeup_ns, src=w.src)
        return wtt

    def freeze(self) -> "FrozenWtt":
        return FrozenWtt(self._entries)


class FrozenWtt:
    """The sorted table plus the per-address index (see module doc)."""

    def __init__(self, entries: Iterable[WttEntry]) -> None:
        ents = sorted(entries, key=lambda e: (e.wakeup_ns, e.addr, e.order))
        self.by_time: tuple[WttEntry, ...] = tuple(ents)
        per: dict[int, list[WttEntry]] = {}
        for e in ents:
            per.setdefault(e.addr, []).append(e)
        self.addresses: list[int] = sorted(per)
        # sizes per address must agree and addresses must not overlap
        prev_end = -1
        prev_addr = None
        for a in self.addresses:
            sizes = {e.size for e in per[a]}
            if len(sizes) != 1:
                raise TraceError("writes to one address with different sizes", field="size",
                                 addr=hex(a), sizes=sorted(sizes))
            if a < prev_end:
                raise TraceError("overlapping write addresses", field="addr", addr=hex(a),
                                 previous=hex(prev_addr))
            prev_end, prev_addr = a + next(iter(sizes)), a
            evs = per[a]
            for x, y in zip(evs, evs[1:]):
                if x.wakeup_ns == y.wakeup_ns and x.value != y.value:
                    raise TraceError("two writes to one address at the same wakeup_ns with "
                                     "different values", field="value", addr=hex(a),
                                     wakeup_ns=x.wakeup_ns, values=[x.value, y.value])
        self._times: dict[int, list[int]] = {a: [e.wakeup_ns for e in per[a]] for a in self.addresses}
        self._values: dict[int, list[int]] = {a: [e.value for e in per[a]] for a in self.addresses}
        self._sizes: dict[int, int] = {a: per[a][0].size for a in self.addresses}

    def __len__(self) -> int:
        return len(self.by_time)

    def span_ns(self) -> int:
        return self.by_time[-1].wakeup_ns if self.by_time else 0

    def value_at(self, addr: int, t_ns: int, initial: int = 0) -> int:
        """Value visible at ``addr`` at time ``t_ns`` (relative to the target kernel start)."""
        i = bisect.bisect_left(self.addresses, addr)
        if i == len(self.addresses) or self.addresses[i] != addr:
            return initial
        times = self._times[addr]
        j = bisect.bisect_right(times, t_ns)
        return initial if j == 0 else self._values[addr][j - 1]

    def next_match(self, addr: int, t_ns: int, value: int, mask: int = (1 << 64) - 1,
                   initial: int = 0) -> int | None:
        """Earliest time >= t_ns at which the visible value v satisfies (v & mask) == (value & mask)
        (Hoare wake); None if never."""
        if (self.value_at(addr, t_ns, initial) & mask) == (value & mask):
            return t_ns
        times = self._times.get(addr)
        if not times:
            return None
        j = bisect.bisect_right(times, t_ns)
        for k in range(j, len(times)):
            if (self._values[addr][k] & mask) == (value & mask):
                return times[k]
        return None

    def next_write_to_line(self, addr: int, t_ns: int, line_bytes: int = 128) -> int | None:
        """Earliest wakeup > t_ns of any write to the line holding ``addr`` (Mesa wake)."""
        lo = addr - addr % line_bytes
        i = bisect.bisect_left(self.addresses, lo)
        best = None
        while i < len(self.addresses) and self.addresses[i] < lo + line_bytes:
            times = self._times[self.addresses[i]]
            j = bisect.bisect_right(times, t_ns)
            if j < len(times) and (best is None or times[j] < best):
                best = times[j]
            i += 1
        return best

    def device_arrays(self) -> dict[str, np.ndarray]:
        """Arrays the device tables are made of (uploaded by eidola/replay.py).

        by_time: t_addr, t_value, t_size, t_wakeup (sorted by wakeup);
        per address: v_addr (sorted unique), v_begin (len n+1), v_time, v_value (by address,
        then time)."""
        n = len(self.by_time)
        out = {
            "t_addr": np.fromiter((e.addr for e in self.by_time), np.uint64, n),
            "t_value": np.fromiter((e.value for e in self.by_time), np.uint64, n),
            "t_size": np.fromiter((e.size for e in self.by_time), np.uint32, n),
            "t_wakeup": np.fromiter((e.wakeup_ns for e in self.by_time), np.uint64, n),
            "t_src": np.fromiter((e.src for e in self.by_time), np.int32, n),
            "v_addr": np.asarray(self.addresses, np.uint64),
        }
        begin = [0]
        vt: list[int] = []
        vv: list[int] = []
        for a in self.addresses:
            vt.extend(self._times[a])
            vv.extend(self._values[a])
            begin.append(len(vt))
        out["v_begin"] = np.asarray(begin, np.uint32)
        out["v_time"] = np.asarray(vt, np.uint64)
        out["v_value"] = np.asarray(vv, np.uint64)
        return out
