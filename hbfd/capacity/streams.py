"""Access streams for the capacity service and its prefetch policies (pure, deterministic).

:func:`moe_stream` is the HBFSim paper's synthetic Mixture-of-Experts stream (§4.6: "8 pages per expert,
256 frames and 1033 distinct pages"). The paper does not print its definition; it is the public reference
implementation's readahead bench (benchmarks/prefetch/hbf_capacity_readahead_bench.cpp, defaults): 4 tokens x
8 layers, 16 experts per layer, 4 experts per token, 8 pages per expert, seed 5, so 1,024 accesses; "1033
distinct pages" is that bench's backing-store size (highest page + readahead 8 + 2 = 1023 + 10). Each
(token, layer) draws its experts with ``std::shuffle`` of 0..15 over ``std::mt19937_64(seed)`` and takes the
first four; :class:`Mt19937_64` and :func:`cxx_shuffle` are those two algorithms (the C++ standard's
generator, and libstdc++'s shuffle with its two-indices-per-draw step and Lemire's bounded draw, GCC >= 11),
so the stream is the paper's bit for bit (tests/capacity/test_streams.py checks it against g++ when one is
installed).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_M64 = (1 << 64) - 1


class Mt19937_64:
    """``std::mt19937_64`` (the C++ standard's 64-bit Mersenne Twister)."""

    _N, _M = 312, 156
    _A = 0xB5026F5AA96619E9
    _UM, _LM = 0xFFFFFFFF80000000, 0x7FFFFFFF

    def __init__(self, seed: int = 5489) -> None:
        mt = [0] * self._N
        mt[0] = seed & _M64
        for i in range(1, self._N):
            mt[i] = (6364136223846793005 * (mt[i - 1] ^ (mt[i - 1] >> 62)) + i) & _M64
        self.mt, self.i = mt, self._N

    def _twist(self) -> None:
        mt, n, m = self.mt, self._N, self._M
        for i in range(n):
            x = (mt[i] & self._UM) | (mt[(i + 1) % n] & self._LM)
            xa = x >> 1
            if x & 1:
                xa ^= self._A
            mt[i] = mt[(i + m) % n] ^ xa
        self.i = 0

    def __call__(self) -> int:
        if self.i >= self._N:
            self._twist()
        y = self.mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & _M64


def _bounded(g: Mt19937_64, n: int) -> int:
    """libstdc++ ``uniform_int_distribution`` on [0, n) over a full-range 64-bit generator (Lemire)."""
    p = g() * n
    low = p & _M64
    if low < n:
        threshold = ((1 << 64) - n) % n
        while low < threshold:
            p = g() * n
            low = p & _M64
    return p >> 64


def cxx_shuffle(items: list, g: Mt19937_64) -> None:
    """``std::shuffle(items.begin(), items.end(), g)`` as libstdc++ does it (in place)."""
    n = len(items)
    if n < 2:
        return
    if _M64 // n >= n:                 # two swap positions per draw
        i = 1
        if n % 2 == 0:
            j = _bounded(g, 2)
            items[i], items[j] = items[j], items[i]
            i += 1
        while i != n:
            r = i + 1                  # swap range of position i; position i+1 has r + 1
            x = _bounded(g, r * (r + 1))
            a, b = divmod(x, r + 1)
            items[i], items[a] = items[a], items[i]
            i += 1
            items[i], items[b] = items[b], items[i]
            i += 1
        return
    for i in range(1, n):
        j = _bounded(g, i + 1)
        items[i], items[j] = items[j], items[i]


@dataclass(frozen=True)
class MoeStream:
    """Parameters of :func:`moe_stream` (defaults: the paper's)."""

    tokens: int = 4
    layers: int = 8
    experts_per_layer: int = 16
    experts_per_token: int = 4
    pages_per_expert: int = 8
    seed: int = 5

    @property
    def pages(self) -> int:
        """Pages of the weights (every expert of every layer)."""
        return self.layers * self.experts_per_layer * self.pages_per_expert


def moe_stream(spec: MoeStream = MoeStream()) -> np.ndarray:
    """Logical pages in access order: per token, per layer, the router's experts (a shuffle of the layer's
    experts, the first ``experts_per_token``), each expert's pages in order. Expert e of layer l holds pages
    ``(l * experts_per_layer + e) * pages_per_expert + [0, pages_per_expert)``."""
    g = Mt19937_64(spec.seed)
    chosen = min(spec.experts_per_token, spec.experts_per_layer)
    out: list[int] = []
    ppe = spec.pages_per_expert
    for _tok in range(spec.tokens):
        for layer in range(spec.layers):
            experts = list(range(spec.experts_per_layer))
            cxx_shuffle(experts, g)
            for e in experts[:chosen]:
                base = (layer * spec.experts_per_layer + e) * ppe
                out.extend(range(base, base + ppe))
    return np.asarray(out, np.int64)


def sequential_stream(n: int, first: int = 0) -> np.ndarray:
    return np.arange(first, first + n, dtype=np.int64)
