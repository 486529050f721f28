"""Flag vs non-flag read accounting (the paper's Fig. 6 / Fig. 9 split), per registered class.

The instrumented device code (eidola/src/hbf_eidola.cuh) counts every global read it makes
into ``ctr[class][counter]`` (u64). Class 0 is "non-flag" (every read outside the registered flag
ranges); classes 1..MAX_CLASSES-1 are the registered flag-range classes (``HBF_MODE_FLAG`` ranges,
``flag_class`` of the range). Two units: per warp-instruction (one count per executed load
instruction of a warp, vector loads count once) and per thread (one per active lane).

This module is the host side: the classifier the host uses to give ranges their class ids and to
check device classification, and the summary (with invariant checks, loud on violation).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from hbfcommon.errors import RangeError, TelemetryError

MAX_CLASSES = 16            # mirrors HBF_EIDOLA_MAX_CLASSES
COUNTERS = ("warp_insts", "thread_reads", "monitor_arms", "mwait_calls", "wake_word_reads",
            "virtual_loads", "mwait_wait_ns", "spin_iters")   # mirrors HBF_EIDOLA_C_*
NONFLAG_CLASS = 0


@dataclass(frozen=True)
class FlagRange:
    """A flag range: [base, base + length), reads counted in class ``klass`` (1..MAX_CLASSES-1).
    The one record of a flag range: eidola.replay.Replay's device table holds these."""
    base: int
    length: int
    klass: int = 1
    name: str = ""


class FlagClassifier:
    """Sorted, non-overlapping flag ranges -> class id; anything else is class 0 (non-flag)."""

    def __init__(self, ranges: Sequence[FlagRange] = ()) -> None:
        rs = sorted(ranges, key=lambda r: r.base)
        for r in rs:
            if r.length <= 0:
                raise RangeError("flag range has zero length", base=hex(r.base))
            if not (1 <= r.klass < MAX_CLASSES):
                raise RangeError(f"flag class must be in [1, {MAX_CLASSES})", klass=r.klass)
            if r.base % 128:
                raise RangeError("flag ranges must be 128-byte aligned", base=hex(r.base))
        for a, b in zip(rs, rs[1:]):
            if a.base + a.length > b.base:
                raise RangeError("flag ranges overlap", a=hex(a.base), b=hex(b.base))
        self.ranges = tuple(rs)
        self._bases = [r.base for r in rs]

    def classify(self, addr: int, size: int = 4) -> int:
        i = bisect.bisect_right(self._bases, addr) - 1
        if i >= 0:
            r = self.ranges[i]
            if addr < r.base + r.length:
                if addr + size > r.base + r.length:
                    raise RangeError("access straddles the end of a flag range", addr=hex(addr),
                                     size=size, range_base=hex(r.base))
                return r.klass
        j = i + 1
        if j < len(self.ranges) and addr + size > self.ranges[j].base:
            raise RangeError("access straddles the start of a flag range", addr=hex(addr), size=size)
        return NONFLAG_CLASS

    def class_names(self) -> dict[int, str]:
        names = {NONFLAG_CLASS: "nonflag"}
        for r in self.ranges:
            names.setdefault(r.klass, r.name or f"flag{r.klass}")
        return names


def summarize(ctr: np.ndarray, class_names: Mapping[int, str] | None = None) -> dict:
    """Turn the device counter block (MAX_CLASSES x len(COUNTERS), u64) into the run-summary
    dict. Raises TelemetryError when the counts are impossible (thread reads below warp
    instructions or above 32x, reads counted in a class nobody registered)."""
    a = np.asarray(ctr, dtype=np.uint64)
    if a.shape != (MAX_CLASSES, len(COUNTERS)):
        raise TelemetryError("accounting block has the wrong shape", shape=list(a.shape),
                             expected=[MAX_CLASSES, len(COUNTERS)])
    names = dict(class_names or {NONFLAG_CLASS: "nonflag"})
    names.setdefault(NONFLAG_CLASS, "nonflag")
    classes: dict[str, dict[str, int]] = {}
    for c in range(MAX_CLASSES):
        row = {k: int(v) for k, v in zip(COUNTERS, a[c])}
        if not any(row.values()):
            continue
        if c not in names:
            raise TelemetryError("reads counted in an unregistered class", klass=c)
        w, t = row["warp_insts"], row["thread_reads"]
        if t < w or t > 32 * w:
            raise TelemetryError("impossible read counts: need warp_insts <= thread_reads <= 32*warp_insts",
                                 klass=c, warp_insts=w, thread_reads=t)
        if row["virtual_loads"] > t:
            raise TelemetryError("more virtual loads than reads", klass=c)
        classes[names[c]] = row
    flag_rows = [{k: int(v) for k, v in zip(COUNTERS, a[c])} for c in range(1, MAX_CLASSES)]
    flag = {k: sum(r[k] for r in flag_rows) for k in COUNTERS}
    nonflag = {k: int(v) for k, v in zip(COUNTERS, a[NONFLAG_CLASS])}
    return {"flag_reads_warp": flag["warp_insts"], "flag_reads_thread": flag["thread_reads"],
            "nonflag_reads_warp": nonflag["warp_insts"], "nonflag_reads_thread": nonflag["thread_reads"],
            "monitor_arms": flag["monitor_arms"], "mwait_calls": flag["mwait_calls"],
            "wake_word_reads": flag["wake_word_reads"], "virtual_loads": flag["virtual_loads"],
            "mwait_wait_ns": flag["mwait_wait_ns"], "spin_iters": flag["spin_iters"],
            "classes": classes}


def predicted_spin_reads(wait_ns: Sequence[int], poll_ns: float) -> float:
    """Flag reads a spinning poller makes while waiting: 1 + floor(wait / poll) per wait
    (the linear model of E1; poll_ns measured: ~150 ns on the H200)."""
    if poll_ns <= 0:
        raise ValueError("poll_ns must be positive")
    return float(sum(1 + max(0, int(w)) // poll_ns for w in wait_ns))


def linear_fit(x: Sequence[float], y: Sequence[float]) -> dict:
    """Least squares y = a + b x with R^2 (for E1/E3/E4)."""
    xa, ya = np.asarray(x, float), np.asarray(y, float)
    if len(xa) < 2:
        raise ValueError("need two points")
    b, a = np.polyfit(xa, ya, 1)
    pred = a + b * xa
    ss_res = float(np.sum((ya - pred) ** 2))
    ss_tot = float(np.sum((ya - ya.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    return {"intercept": float(a), "slope": float(b), "r2": r2}
