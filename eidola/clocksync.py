"""Clock alignment between GPUs from NVLink ping-pong samples (pure; no clocks, files or devices).

Each GPU stamps events with its own ``%globaltimer``. To put the stamps of a multi-GPU recording on
one time axis we measure, per GPU pair (a, b), a few hundred NTP-style round trips at the start (and,
optionally, at the end) of the recording:

    a: t1 = now_a; st.release.sys  peer_b.ping = k ; spin on pong == k ; t3 = now_a
    b:             spin on ping == k ; t2 = now_b ; (t2s = now_b) ; st.release.sys peer_a.pong = k

Model: ``c_x(r) = r + off_x`` (plus a small linear drift, see below), one-way delays ``d1`` (a→b,
including b's polling lag) and ``d2`` (b→a, including b's reply processing and a's polling lag), both
``>= 0``.  With theta = off_a - off_b (a's clock minus b's clock):

    offset = (t1 + t3)/2 - (t2 + t2s)/2 = theta + (d2 - d1)/2
    rtt    = (t3 - t1) - (t2s - t2)     = d1 + d2

so ``|offset - theta| <= rtt/2`` whatever the asymmetry: the uncertainty bound of a sample is half its
round trip (plus the timer quantization, see :func:`sample_bound_ns`). The sample with the smallest
round trip has the tightest bound, so each pair's estimate is its min-RTT sample (the median offset of
the samples tied at the minimum RTT, within one timer step). Offsets are composed along the path to the
reference rank that minimizes the summed bound (Dijkstra), and every rank's stamps are converted into
the reference clock: ``t_ref = t_r - theta(r, ref)``.

Drift: when samples exist in two windows (start and end of the recording), each window gives a min-RTT
estimate; the drift is the slope between them, and the offset is interpolated linearly in a's clock.
With one window the drift is taken as zero (over a ~100 µs kernel, 10 ppm is 1 ns) and the report says
so. Times are integer nanoseconds; results round to the nearest nanosecond.
"""
from __future__ import annotations

import dataclasses
import heapq
import math
from typing import Any, Iterable, Mapping, Sequence

from hbfcommon.errors import TraceError

__all__ = [
    "PingSample", "PairEstimate", "ClockModel",
    "sample_offset_ns", "sample_rtt_ns", "sample_bound_ns",
    "estimate_pair", "estimate_pairs", "compose", "align",
]


@dataclasses.dataclass(frozen=True)
class PingSample:
    """One round trip initiated by rank ``a`` to rank ``b``.

    ``t1``/``t3`` are a's clock (send ping, see pong); ``t2`` is b's clock when it saw the ping and
    ``t2s`` b's clock when it sent the pong (``None``: same as ``t2``, the 3-stamp form).
    """

    a: int
    b: int
    t1: int
    t2: int
    t3: int
    t2s: int | None = None

    def __post_init__(self) -> None:
        for name in ("a", "b", "t1", "t2", "t3"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise TraceError("ping sample field must be an integer", field=name, value=v)
        if self.t2s is not None and (not isinstance(self.t2s, int) or self.t2s < self.t2):
            raise TraceError("ping sample t2s must be an integer >= t2", t2=self.t2, t2s=self.t2s)
        if self.a == self.b or self.a < 0 or self.b < 0:
            raise TraceError("ping sample needs two distinct non-negative ranks", a=self.a, b=self.b)
        if self.t3 < self.t1:
            raise TraceError("ping sample has t3 < t1 (the initiator's clock ran backwards)",
                             a=self.a, b=self.b, t1=self.t1, t3=self.t3)
        if self.rtt_ns < 0:
            raise TraceError("ping sample responder hold time exceeds the round trip",
                             a=self.a, b=self.b, t1=self.t1, t2=self.t2, t2s=self.t2s, t3=self.t3)

    @property
    def t2_send(self) -> int:
        return self.t2 if self.t2s is None else self.t2s

    @property
    def rtt_ns(self) -> int:
        return (self.t3 - self.t1) - (self.t2_send - self.t2)

    @property
    def offset2_ns(self) -> int:
        """Twice the offset estimate (exact integer)."""
        return (self.t1 + self.t3) - (self.t2 + self.t2_send)

    @property
    def mid_a_ns(self) -> float:
        return (self.t1 + self.t3) / 2

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PingSample":
        unknown = set(d) - {"a", "b", "t1", "t2", "t3", "t2s"}
        if unknown:
            raise TraceError("unknown ping sample field", fields=sorted(unknown))
        try:
            return cls(a=d["a"], b=d["b"], t1=d["t1"], t2=d["t2"], t3=d["t3"], t2s=d.get("t2s"))
        except KeyError as e:
            raise TraceError("ping sample misses a field", field=str(e.args[0])) from None

    def to_dict(self) -> dict[str, int]:
        out = {"a": self.a, "b": self.b, "t1": self.t1, "t2": self.t2, "t3": self.t3}
        if self.t2s is not None:
            out["t2s"] = self.t2s
        return out


def sample_offset_ns(s: PingSample) -> float:
    """theta(a, b) estimate of one sample: a's clock minus b's clock."""
    return s.offset2_ns / 2


def sample_rtt_ns(s: PingSample) -> int:
    return s.rtt_ns


def sample_bound_ns(s: PingSample, resolution_ns: int = 0) -> float:
    """Worst-case |estimate - theta| of one sample.

    rtt/2 for exact stamps. With stamps floored to a ``resolution_ns`` grid each stamp is low by
    [0, res): the offset estimate moves by less than ``res`` and the measured RTT understates the true
    one by less than ``res``, so the bound is ``rtt/2 + 1.5·res``.
    """
    return s.rtt_ns / 2 + 1.5 * resolution_ns


@dataclasses.dataclass(frozen=True)
class PairEstimate:
    """theta(a, b) = c_a - c_b, valid at ``at_a_ns`` (a's clock), drifting ``drift_ppb`` per ns of a."""

    a: int
    b: int
    offset_ns: float
    rtt_ns: int
    bound_ns: float
    at_a_ns: float
    n_samples: int
    drift_ppb: float = 0.0
    drift_estimated: bool = False

    def offset_at(self, t_a_ns: float) -> float:
        return self.offset_ns + self.drift_ppb * 1e-9 * (t_a_ns - self.at_a_ns)

    def reversed(self) -> "PairEstimate":
        # theta(b, a) = -theta(a, b); the reference time moves to b's clock.
        return PairEstimate(a=self.b, b=self.a, offset_ns=-self.offset_ns, rtt_ns=self.rtt_ns,
                            bound_ns=self.bound_ns, at_a_ns=self.at_a_ns - self.offset_ns,
                            n_samples=self.n_samples, drift_ppb=-self.drift_ppb,
                            drift_estimated=self.drift_estimated)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _min_rtt_window(samples: Sequence[PingSample], resolution_ns: int) -> tuple[float, int, float, float]:
    """(offset, rtt, bound, at_a) from the min-RTT samples of one window."""
    rtt_min = min(s.rtt_ns for s in samples)
    tie = max(resolution_ns, 0)
    best = sorted((s for s in samples if s.rtt_ns <= rtt_min + tie), key=lambda s: s.offset2_ns)
    # Median of the tied samples; every one of them satisfies the bound of the largest tied RTT.
    mid = best[(len(best) - 1) // 2]
    rtt = max(s.rtt_ns for s in best)
    bound = rtt / 2 + 1.5 * resolution_ns
    return sample_offset_ns(mid), rtt, bound, mid.mid_a_ns


def estimate_pair(samples: Iterable[PingSample], *, resolution_ns: int = 0,
                  window_split_ns: int | None = None) -> PairEstimate:
    """theta(a, b) from the ping-pong samples of one ordered pair (a initiated).

    ``window_split_ns``: samples whose ``t1`` is below it form the start window, the others the end
    window; with both windows non-empty the drift is estimated from their two min-RTT estimates.
    ``None`` splits at the largest gap between consecutive ``t1`` when that gap exceeds 10x the
    median spacing (a start and an end burst), else uses one window.
    """
    ss = sorted(samples, key=lambda s: s.t1)
    if not ss:
        raise TraceError("no ping-pong samples for a clock pair")
    pairs = {(s.a, s.b) for s in ss}
    if len(pairs) != 1:
        raise TraceError("estimate_pair got samples of several pairs", pairs=sorted(pairs))
    a, b = ss[0].a, ss[0].b
    if resolution_ns < 0:
        raise TraceError("resolution_ns must be >= 0", resolution_ns=resolution_ns)
    windows: list[list[PingSample]] = [ss]
    if window_split_ns is not None:
        w0 = [s for s in ss if s.t1 < window_split_ns]
        w1 = [s for s in ss if s.t1 >= window_split_ns]
        windows = [w for w in (w0, w1) if w]
    elif len(ss) >= 4:
        gaps = [ss[i + 1].t1 - ss[i].t1 for i in range(len(ss) - 1)]
        med = sorted(gaps)[len(gaps) // 2]
        i = max(range(len(gaps)), key=lambda k: gaps[k])
        if gaps[i] > 10 * max(med, 1) and i >= 1 and len(ss) - i - 1 >= 2:
            windows = [ss[: i + 1], ss[i + 1:]]
    if len(windows) == 1:
        off, rtt, bound, at = _min_rtt_window(windows[0], resolution_ns)
        return PairEstimate(a=a, b=b, offset_ns=off, rtt_ns=rtt, bound_ns=bound, at_a_ns=at,
                            n_samples=len(ss))
    (o0, r0, b0, t0), (o1, r1, b1, t1) = (_min_rtt_window(w, resolution_ns) for w in windows)
    drift = 0.0 if t1 == t0 else (o1 - o0) / (t1 - t0) * 1e9
    # Report the start window's estimate (recordings are aligned at their start); the bound of an
    # interpolated offset between the windows is the larger of the two window bounds.
    return PairEstimate(a=a, b=b, offset_ns=o0, rtt_ns=max(r0, r1), bound_ns=max(b0, b1), at_a_ns=t0,
                        n_samples=len(ss), drift_ppb=drift, drift_estimated=True)


def estimate_pairs(samples: Iterable[PingSample | Mapping[str, Any]], *, resolution_ns: int = 0,
                   window_split_ns: int | None = None) -> dict[tuple[int, int], PairEstimate]:
    """One :class:`PairEstimate` per ordered pair present in ``samples``."""
    by: dict[tuple[int, int], list[PingSample]] = {}
    for s in samples:
        ps = s if isinstance(s, PingSample) else PingSample.from_dict(s)
        by.setdefault((ps.a, ps.b), []).append(ps)
    return {k: estimate_pair(v, resolution_ns=resolution_ns, window_split_ns=window_split_ns)
            for k, v in sorted(by.items())}


@dataclasses.dataclass(frozen=True)
class ClockModel:
    """Per-rank conversion into the reference rank's clock.

    ``offset_ns[r]`` = c_r - c_ref at ``at_ns[r]`` (rank r's clock), drifting ``drift_ppb[r]``;
    ``bound_ns[r]`` the composed uncertainty (sum of the pair bounds along the path);
    ``path[r]`` the ranks visited from r to the reference.
    """

    ref: int
    offset_ns: Mapping[int, float]
    bound_ns: Mapping[int, float]
    drift_ppb: Mapping[int, float]
    at_ns: Mapping[int, float]
    path: Mapping[int, tuple[int, ...]]
    pairs: Mapping[tuple[int, int], PairEstimate]
    drift_estimated: bool

    def to_ref(self, rank: int, t_ns: int | float) -> int:
        """A stamp of ``rank``'s clock expressed in the reference clock (nearest ns)."""
        if rank not in self.offset_ns:
            raise TraceError("rank has no clock alignment to the reference", rank=rank, ref=self.ref)
        off = self.offset_ns[rank] + self.drift_ppb[rank] * 1e-9 * (t_ns - self.at_ns[rank])
        return int(math.floor(t_ns - off + 0.5))

    def from_ref(self, rank: int, t_ref_ns: int | float) -> int:
        """Inverse of :meth:`to_ref` (a reference-clock time in ``rank``'s clock)."""
        if rank not in self.offset_ns:
            raise TraceError("rank has no clock alignment to the reference", rank=rank, ref=self.ref)
        k = self.drift_ppb[rank] * 1e-9
        # t_ref = t - off0 - k (t - at)  =>  t = (t_ref + off0 - k at) / (1 - k)
        t = (t_ref_ns + self.offset_ns[rank] - k * self.at_ns[rank]) / (1 - k)
        return int(math.floor(t + 0.5))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "drift_estimated": self.drift_estimated,
            "ranks": {str(r): {"offset_ns": self.offset_ns[r], "bound_ns": self.bound_ns[r],
                               "drift_ppb": self.drift_ppb[r], "at_ns": self.at_ns[r],
                               "path": list(self.path[r])} for r in sorted(self.offset_ns)},
            "pairs": [p.to_dict() for p in self.pairs.values()],
        }


def compose(pairs: Mapping[tuple[int, int], PairEstimate] | Iterable[PairEstimate], ref: int,
            ranks: Iterable[int] | None = None) -> ClockModel:
    """Compose pair offsets into offsets to ``ref`` along min-summed-bound paths.

    Both directions of a measured pair are usable (theta(b,a) = -theta(a,b)); when both (a,b) and
    (b,a) were measured the tighter estimate wins. Raises when a rank is not connected to ``ref``.
    """
    plist = list(pairs.values()) if isinstance(pairs, Mapping) else list(pairs)
    edges: dict[tuple[int, int], PairEstimate] = {}
    for p in plist:
        for e in (p, p.reversed()):
            cur = edges.get((e.a, e.b))
            if cur is None or e.bound_ns < cur.bound_ns:
                edges[(e.a, e.b)] = e
    nodes = {ref} | {k[0] for k in edges} | {k[1] for k in edges}
    want = set(nodes if ranks is None else ranks) | {ref}
    adj: dict[int, list[PairEstimate]] = {}
    for (x, _y), e in edges.items():
        adj.setdefault(x, []).append(e)
    # Dijkstra from ref over edges e=(x->y) meaning theta(y, x) = -theta(x, y): we walk from the
    # reference outwards, so use reversed edges: dist[y] via e=(y, x) with x settled.
    dist: dict[int, float] = {ref: 0.0}
    off: dict[int, float] = {ref: 0.0}
    drift: dict[int, float] = {ref: 0.0}
    at: dict[int, float] = {ref: 0.0}
    path: dict[int, tuple[int, ...]] = {ref: (ref,)}
    heap: list[tuple[float, int]] = [(0.0, ref)]
    done: set[int] = set()
    while heap:
        d, x = heapq.heappop(heap)
        if x in done:
            continue
        done.add(x)
        for e in adj.get(x, []):  # e: theta(x, y) with x settled; we need theta(y, ref)
            y = e.b
            nd = d + e.bound_ns
            if y in done or nd >= dist.get(y, math.inf):
                continue
            dist[y] = nd
            # theta(y, ref) = theta(y, x) + theta(x, ref); theta(y, x) = -theta(x, y)
            ey = e.reversed()  # theta(y, x), valid at y-clock time ey.at_a_ns
            # Evaluate x's leg at y's reference instant so both legs share one time origin.
            off[y] = ey.offset_ns + off[x] + drift[x] * 1e-9 * (ey.at_a_ns - at[x])
            drift[y] = ey.drift_ppb + drift[x]
            at[y] = ey.at_a_ns
            path[y] = (y,) + path[x]
            heapq.heappush(heap, (nd, y))
    missing = sorted(r for r in want if r not in dist)
    if missing:
        raise TraceError("ranks not connected to the reference rank by ping-pong samples",
                         missing=missing, ref=ref)
    keep = sorted(want)
    return ClockModel(ref=ref, offset_ns={r: off[r] for r in keep}, bound_ns={r: dist[r] for r in keep},
                      drift_ppb={r: drift[r] for r in keep}, at_ns={r: at[r] for r in keep},
                      path={r: path[r] for r in keep}, pairs=dict(edges),
                      drift_estimated=all(e.drift_estimated for e in plist) if plist else False)


def align(samples: Iterable[PingSample | Mapping[str, Any]], ref: int, *, ranks: Iterable[int] | None = None,
          resolution_ns: int = 0, window_split_ns: int | None = None) -> ClockModel:
    """Samples → per-pair min-RTT estimates → offsets composed to ``ref``."""
    return compose(estimate_pairs(samples, resolution_ns=resolution_ns, window_split_ns=window_split_ns),
                   ref, ranks)
