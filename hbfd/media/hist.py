"""A bounded log-linear histogram of non-negative integer nanoseconds (64 sub-buckets per power
of two: a reported quantile is the upper edge of its bucket, at most 1/64 = 1.6 % above the true
value; values below 64 ns are exact). ``max`` is exact."""
from __future__ import annotations

import numpy as np

_SUB = 64
_NB = 64 * _SUB


class LogHistogram:
    def __init__(self) -> None:
        self.counts = np.zeros(_NB, np.int64)
        self.n = 0
        self.max = 0
        self.total = 0

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
        v = np.asarray(v, np.int64)
        if len(v) == 0:
            return
        self.counts += np.bincount(self._index(v), minlength=_NB)
        self.n += len(v)
        self.max = max(self.max, int(v.max()))
        self.total += int(np.maximum(v, 0).sum())

    def quantile(self, q: float) -> int:
        if self.n == 0:
            return 0
        c = np.cumsum(self.counts)
        i = int(np.searchsorted(c, q * self.n, "left"))
        return min(self._upper(i), self.max)

    def summary(self) -> dict:
        return {"n": self.n, "mean": (self.total / self.n) if self.n else 0.0,
                "p50": self.quantile(0.5), "p90": self.quantile(0.9), "p99": self.quantile(0.99),
                "max": self.max}
