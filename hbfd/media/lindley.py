"""Exact vectorized FCFS for many single servers at once (segmented Lindley recursion).

For one FCFS server with ready times r_k (in service order), services s_k and a server that is
busy until ``seed`` before the first job:

    d_k = max(r_k, d_{k-1}) + s_k,  d_{-1} = seed
        = S_k + max(seed, max_{j<=k} (r_j - S_{j-1}))       with S_k = s_0 + ... + s_k

so the whole recursion is one cumulative sum and one cumulative maximum. Jobs of many servers are
handled at once by sorting them by (server, service order) and running the cumulative maximum per
segment (an offset per segment keeps segments from leaking into each other).
"""
from __future__ import annotations

import numpy as np

from hbfd import accel

from .kernels import _packed_build, _packed_build_into, _packed_sort

_PACKED_TWIN_MIN = 2048     # from this many keys on, the compiled twin builds them (kernels.py)


def segment_starts(seg: np.ndarray) -> np.ndarray:
    """Indices where a new segment begins in an array sorted by segment id."""
    n = len(seg)
    if n <= 1:
        return np.zeros(n, np.int64)
    brk = np.empty(n, bool)
    brk[0] = True
    np.not_equal(seg[1:], seg[:-1], out=brk[1:])
    return np.flatnonzero(brk)


def packed_order(major: np.ndarray, nmajor: int, minor: np.ndarray) -> np.ndarray | None:
    """The permutation that sorts by (``major``, ``minor``, index), as the stable sorts by ``minor``
    then by ``major`` give it, from one unstable sort of packed int64 keys (``packed_keys``; unique, so
    the order is the same); None when the keys do not fit in 63 bits (the caller sorts the slow way).
    ``major`` in [0, nmajor)."""
    pk = packed_keys(major, nmajor, minor)
    if pk is None:
        return None
    key, bits, _, _ = pk
    key &= (1 << bits) - 1
    return key


def packed_keys(major: np.ndarray, nmajor: int, minor: np.ndarray):
    """``packed_order``'s sorted keys ``(((major << sbits) + minor - lo) << bits) | index`` and (bits, sbits,
    lo) (``1 << sbits``: the span of ``minor`` rounded up to a power of two), from which the order (the low
    ``bits``), ``major`` and ``minor`` of each position decode by shifts; None when they do not fit in 63
    bits."""
    return packed_keys_parts([major], nmajor, [minor])


def packed_keys_parts(majors: list, nmajor: int, minors: list):
    """``packed_keys(np.concatenate(majors), nmajor, np.concatenate(minors))``: where the compiled twins build
    the keys, each piece goes into its place in the keys (its indices from its offset on) and the pieces are
    never concatenated."""
    n = sum(len(m) for m in minors)
    if n == 0:
        return np.zeros(0, np.int64), 1, 0, 0
    lo = min(int(m.min()) for m in minors if len(m))
    sbits = (max(int(m.max()) for m in minors if len(m)) - lo).bit_length()
    bits = max(1, (n - 1).bit_length())
    if (nmajor << sbits) << bits >= (1 << 63):
        return None
    if n >= _PACKED_TWIN_MIN and accel.enabled():
        if len(minors) == 1:
            key = _packed_build(np.ascontiguousarray(majors[0], np.int64), np.ascontiguousarray(minors[0], np.int64),
                                lo, sbits, bits)
        else:
            key = np.empty(n, np.int64)
            off = 0
            for mj, mn in zip(majors, minors):
                _packed_build_into(key, off, np.ascontiguousarray(mj, np.int64), np.ascontiguousarray(mn, np.int64),
                                   lo, sbits, bits)
                off += len(mn)
        return _packed_sort(key, bits), bits, sbits, lo     # (a radix sort: np.sort's array, faster)
    major = majors[0] if len(majors) == 1 else np.concatenate(majors)
    minor = minors[0] if len(minors) == 1 else np.concatenate(minors)
    key = major.astype(np.int64, copy=True)
    key <<= sbits
    key += minor
    key -= lo
    key <<= bits
    key |= np.arange(n, dtype=np.int64)
    key.sort()
    return key, bits, sbits, lo


def segment_ends(starts: np.ndarray, n: int) -> np.ndarray:
    """Index of the last element of each segment, from ``segment_starts`` (n elements)."""
    ends = np.empty(len(starts), np.int64)
    ends[:-1] = starts[1:]
    ends -= 1
    if len(ends):
        ends[-1] = n - 1
    return ends


def segmented_fcfs(ready: np.ndarray, service: np.ndarray | int, seg: np.ndarray,
                   seed: np.ndarray) -> np.ndarray:
    """Departure times of FCFS single servers.

    ``ready``, ``service`` (array or one int), ``seg`` (server id) are in service order, grouped by
    server (``seg`` non-decreasing is not required, only contiguity). ``seed[server]`` is the time
    the server becomes free. Returns int64 departure times (start = departure - service).
    """
    ready = np.asarray(ready, np.int64)
    n = len(ready)
    if n == 0:
        return np.zeros(0, np.int64)
    scalar = np.isscalar(service) or np.ndim(service) == 0
    seed = np.asarray(seed, np.int64)
    if n == 1:
        return np.maximum(ready, seed[seg]) + (int(service) if scalar else np.asarray(service, np.int64))
    starts = segment_starts(seg)
    nseg = len(starts)
    if nseg == n:            # one job per server (small batches): d = max(r, seed) + s
        return np.maximum(ready, seed[seg]) + (int(service) if scalar else np.asarray(service, np.int64))
    # segment id of every job (a cumulative count of the segment starts)
    segid = np.zeros(n, np.int64)
    segid[starts[1:]] = 1
    np.cumsum(segid, out=segid)
    if scalar:
        s = int(service)
        # local index k within segment
        k = np.arange(n, dtype=np.int64) - starts[segid]
        s_prev = k * s                       # S_{k-1} (local)
        s_incl = s_prev + s                  # S_k
    else:
        service = np.asarray(service, np.int64)
        cum = np.cumsum(service)
        s_incl = cum - (cum[starts] - service[starts])[segid]
        s_prev = s_incl - service
    w = ready - s_prev
    # max(seed, max_{j<=k} w_j) == max_{j<=k} w'_j with w' = w except w'_start = max(w_start, seed)
    w[starts] = np.maximum(w[starts], seed[seg[starts]])
    lo = int(w.min())
    span = int(w.max()) - lo + 1
    if nseg == 1:
        cm = np.maximum.accumulate(w)
    elif span * nseg < (1 << 62):
        off = segid * span
        cm = np.maximum.accumulate((w - lo) + off) - off + lo
    else:  # offsets would overflow int64: one segment at a time (never on realistic spans)
        cm = np.empty(n, np.int64)
        for a, b in zip(starts, np.append(starts[1:], n)):
            cm[a:b] = np.maximum.accumulate(w[a:b])
    return s_incl + cm


def sorted_fcfs(ready: np.ndarray, service: np.ndarray | int, seg: np.ndarray, nseg: int,
                free: np.ndarray) -> np.ndarray | None:
    """``segmented_fcfs`` for jobs sorted by server (``seg`` non-decreasing, in [0, nseg)), in fewer
    passes; also sets ``free`` of the servers met to their last departure. With C the cumulative
    service over the whole array (not per server) and st the server's first job,

        d_i = C_i + max(free - C_{st-1}, max_{st <= j <= i} (r_j - C_{j-1})),

    and the server ids themselves offset the segments of the running maximum. None (nothing
    changed) when those offsets would overflow int64: the caller takes ``segmented_fcfs``."""
    n = len(ready)
    if np.ndim(service) == 0:
        service = int(service)
        cprev = np.arange(n, dtype=np.int64)
        cprev *= service
    else:
        cprev = np.cumsum(service)
        cprev -= service
    w = ready - cprev
    brk = np.empty(n, bool)
    brk[0] = True
    np.not_equal(seg[1:], seg[:-1], out=brk[1:])
    st = np.flatnonzero(brk)
    first = seg[st]
    w[st] = np.maximum(w[st], free[first] - cprev[st])
    lo = int(w.min())
    span = int(w.max()) - lo + 1
    if span * nseg >= (1 << 62):
        return None
    off = seg.astype(np.int64, copy=False) * span
    off -= lo
    w += off
    np.maximum.accumulate(w, out=w)
    w -= off
    w += cprev
    w += service
    en = np.empty(len(st), np.int64)
    en[:-1] = st[1:] - 1
    en[-1] = n - 1
    free[seg[en]] = w[en]
    return w


def rank_order(primary: np.ndarray, secondary: np.ndarray) -> np.ndarray | None:
    """``np.lexsort((secondary, primary))`` (order by ``primary``, then ``secondary``, then index) with the twins
    on: a stable argsort of ``secondary`` (its ranks; the channel items' seqs come in ascending runs, which the
    stable sort takes fast), then ``_packed_sort`` of the keys ``((primary - lo) << bits) | rank`` laid out in
    rank order (so each key's low bits are its position, the radix sort's condition): the same permutation.
    None when those keys do not fit in 63 bits (the caller takes lexsort)."""
    n = len(primary)
    if n == 0:
        return np.zeros(0, np.int64)
    bits = max(1, (n - 1).bit_length())
    lo = int(primary.min())
    if (int(primary.max()) - lo) >> (62 - bits):
        return None
    os_ = np.argsort(secondary, kind="stable")
    key = primary[os_].astype(np.int64)
    key -= lo
    key <<= bits
    key |= np.arange(n, dtype=np.int64)
    key = _packed_sort(key, bits)
    key &= (1 << bits) - 1
    return os_[key]

