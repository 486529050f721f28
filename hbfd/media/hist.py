"""A bounded log-linear histogram of non-negative integer nanoseconds (64 sub-buckets per power
of two: a reported quantile is the upper edge of its bucket, at most 1/64 = 1.6 % above the true
value; values below 64 ns are exact). ``max`` is exact."""
from __future__ import annotations

import math

import numpy as np

from hbfd import accel

_SUB = 64
_NB = 64 * _SUB


_BUF = 8192


class LogHistogram:
    """Values are buffered (a pre-allocated array) and binned in bulk when the buffer fills or the
    histogram is read, so adding a handful of values per batch costs one copy."""

    def __init__(self) -> None:
        self._counts = np.zeros(_NB, np.int64)
        self._buf = np.empty(_BUF, np.int64)
        self._nbuf = 0
        self.n = 0
        self.max = 0
        self.total = 0

    @property
    def counts(self) -> np.ndarray:
        self._flush()
        return self._counts

    def _flush(self) -> None:
        if self._nbuf:
            v = self._buf[:self._nbuf]
            if accel.enabled():
                mx, tot = _bin_into(v, self._counts)
            else:
                self._counts += np.bincount(self._index(v), minlength=_NB)
                mx, tot = int(v.max()), int(np.maximum(v, 0).sum())
            self.max = max(self.max, mx)
            self.total += tot
            self._nbuf = 0

    @staticmethod
    def _index(v: np.ndarray) -> np.ndarray:
        v = np.maximum(np.asarray(v, np.int64), 0)
        small = v < _SUB
        m, e = np.frexp(v.astype(np.float64))          # v = m * 2**e, m in [0.5, 1)
        idx = (e.astype(np.int64) - 6) * _SUB + ((m - 0.5) * 2 * _SUB).astype(np.int64) + _SUB
        return np.where(small, v, np.minimum(idx, _NB - 1))

    @staticmethod
    def _upper(i: int) -> int:
        if i < _SUB:
            return i
        e = (i - _SUB) // _SUB + 6
        k = (i - _SUB) % _SUB
        return int(np.ceil(2.0 ** e * (0.5 + (k + 1) / (2 * _SUB)))) - 1

    def add(self, v: np.ndarray) -> None:
        k = len(v)
        if k == 0:
            return
        if self._nbuf + k > _BUF:
            self._flush()
        if k > _BUF:
            self._buf = np.empty(k, np.int64)
        self._buf[self._nbuf:self._nbuf + k] = v
        self._nbuf += k
        self.n += k

    def quantile(self, q: float) -> int:
        self._flush()
        if self.n == 0:
            return 0
        c = np.cumsum(self.counts)
        i = int(np.searchsorted(c, q * self.n, "left"))
        return min(self._upper(i), self.max)

    def summary(self) -> dict:
        self._flush()
        return {"n": self.n, "mean": (self.total / self.n) if self.n else 0.0,
                "p50": self.quantile(0.5), "p90": self.quantile(0.9), "p99": self.quantile(0.99),
                "max": self.max}


@accel.jit
def _bin_into(v, counts):
    """``LogHistogram._index`` + bincount, loop form (compiled by numba): adds the values ``v`` to ``counts``;
    returns (max of v, sum of max(v, 0)). Tests: tests/media/test_accel_media.py."""
    mx = v[0]
    tot = 0
    for i in range(v.shape[0]):
        x = v[i]
        if x > mx:
            mx = x
        if x < 0:
            x = 0
        tot += x
        if x < _SUB:
            counts[x] += 1
        else:
            m, e = math.frexp(float(x))
            idx = (e - 6) * _SUB + int((m - 0.5) * 2 * _SUB) + _SUB
            counts[idx if idx < _NB - 1 else _NB - 1] += 1
    return mx, tot


def warm_twin() -> float:
    """Compile (or load) the binning twin before the daemon serves: every hbfd keeps its reference latencies
    in LogHistograms (hbfd/timeline.py) whatever the engine, and a first flush in the ring thread would
    otherwise compile it there (a cold compile stalls the loop past the heartbeat's 1 s and ends the run)."""
    def run() -> None:
        h = LogHistogram()
        h.add(np.arange(-1, 5000, 7, dtype=np.int64))
        h.quantile(0.5)
    return accel.warm("latency histogram", run, (_bin_into,))
