"""Calibrated cumulative-burst curve (HBFSim paper §8).

A curve is a list of fitted points ``(pages, cumulative_ns)``: the time to serve a sequential
burst of ``pages`` 4 KiB pages. A page that is the next page (same op) after the previous one
extends the current burst to length n; anything else (random, reverse, repeated, other op) starts
a new burst of length 1. The page is charged ``cum(n) - cum(n-1)``, where ``cum`` interpolates
linearly between the fitted points (integer ns, ceiling), starts from ``cum(0) = 0`` and past the
last point continues on the slope of the last segment.

Held-out points are measured points that were *not* used to fit: ``fit_report`` gives the error
on the fitted points (zero for an interpolating curve, by construction) separately from the error
on the held-out points (the honest number).

Per operation (the one definition of curve timing; the device's curve source is the same,
runtime_cuda/include/hbf_curve.h, and tests/runtime/test_curve_agreement.py checks both exactly):
loads and cp.async read (their pages are charged on the burst curve); a store is posted and costs
write time, ``write_ns`` per 4 KiB it writes (``ceil(write_ns * bytes / 4096)``, never per store
instruction; its pages do not enter the read burst); an atomic is a read-modify-write: the read
(on the burst curve) plus the write time of its bytes. :meth:`BurstCurve.request_ns` is the charge
of one request that starts a new burst at a page boundary -- what the device evaluates per warp
request (it keeps no burst state between requests).

``CurveEngine`` serves reference-path requests with the curve: the curve was measured on one
host paging path at queue depth 1, so requests are served one after another on one server
(start = max(arrival, previous completion)), and a sequential read burst continues across
requests. Thermal scaling is applied once, by the waiter on the device (not here).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from hbfcommon import ctl
from hbfcommon.errors import ConfigError

from hbfd.contracts import drain_completions

from .engine import COMPLETION_BATCH_DTYPE, OP_ATOMIC, OP_STORE
from .geometry import PAGE_BYTES
from .lindley import segmented_fcfs

# The Dell CD8P (PCIe 5.0 x4) vmem cold-fault P50 curve of the reference implementation
# (shared/notes/reference-implementation.md §4): a host-attached end-to-end model, not HBF media.
CD8P_P50_POINTS: tuple[tuple[int, int], ...] = (
    (1, 11_133), (4, 41_495), (16, 168_606), (64, 2_824_351), (256, 10_767_793), (512, 20_254_374))
CD8P_PROGRAM_P50_NS = 408_305


def _check(points: Sequence[tuple[int, int]], what: str) -> tuple[tuple[int, int], ...]:
    pts = tuple((int(p), int(ns)) for p, ns in points)
    for p, ns in pts:
        if p < 1 or ns < 0:
            raise ConfigError(f"curve {what}: pages must be >= 1 and cumulative_ns >= 0", field=what, point=(p, ns))
    for (p0, n0), (p1, n1) in zip(pts, pts[1:]):
        if not (p1 > p0 and n1 >= n0):
            raise ConfigError(f"curve {what}: pages must increase strictly and cumulative_ns must not decrease",
                              field=what, points=[(p0, n0), (p1, n1)])
    return pts


@dataclass(frozen=True)
class BurstCurve:
    points: tuple[tuple[int, int], ...]
    write_ns: int = 0
    held_out: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        pts = _check(self.points, "points")
        if len(pts) < 2:
            raise ConfigError("curve points: at least 2 fitted points are needed", field="points")
        object.__setattr__(self, "points", pts)
        object.__setattr__(self, "held_out", _check(self.held_out, "held_out"))
        if int(self.write_ns) < 0:
            raise ConfigError("curve write_ns must be >= 0", field="write_ns")
        # knots with the origin: cum(0) = 0
        xs = [0] + [p for p, _ in pts]
        ys = [0] + [ns for _, ns in pts]
        object.__setattr__(self, "_xs", np.asarray(xs, np.int64))
        object.__setattr__(self, "_ys", np.asarray(ys, np.int64))

    @classmethod
    def from_profile(cls, profile: Any) -> "BurstCurve":
        from hbfcommon.profile import as_profile
        p = as_profile(profile)
        c = p.timing_model.curve
        if c is None:
            raise ConfigError("profile has no timing_model.curve", field="timing_model.curve", profile=p.path)
        return cls(points=tuple(c.points), write_ns=int(c.write_ns), held_out=tuple(c.held_out))

    def cum(self, n: Iterable[int] | int) -> np.ndarray | int:
        """Cumulative ns of a burst of ``n`` pages (n >= 0)."""
        scalar = np.ndim(n) == 0
        n = np.atleast_1d(np.asarray(n, np.int64))
        if (n < 0).any():
            raise ValueError("burst length must be >= 0")
        xs, ys = self._xs, self._ys
        seg = np.clip(np.searchsorted(xs, n, "right") - 1, 0, len(xs) - 2)
        x0, x1, y0, y1 = xs[seg], xs[seg + 1], ys[seg], ys[seg + 1]
        num = (n - x0) * (y1 - y0)
        den = x1 - x0
        out = y0 + np.where(num >= 0, -(-num // den), num // den)   # ceiling, also past the end
        return int(out[0]) if scalar else out

    def write_ns_for(self, nbytes) -> np.ndarray | int:
        """Write time of a store (or an atomic's write) of ``nbytes``: ceil(write_ns * nbytes / 4096)."""
        nb = np.asarray(nbytes, np.int64)
        r = -(-int(self.write_ns) * nb // PAGE_BYTES)
        return int(r) if np.ndim(r) == 0 else r

    def request_ns(self, op: int, nbytes: int) -> int:
        """Charge of one request of ``nbytes`` that starts a new burst at a page boundary:
        loads/cp.async cum(pages), stores the write time, atomics both (pages = ceil(nbytes / 4 KiB))."""
        op, nbytes = int(op), int(nbytes)
        if not 0 <= op < ctl.HBF_N_OPS or nbytes < 0:
            raise ConfigError("request needs an op in HBF_OP_* and nbytes >= 0", op=op, nbytes=nbytes)
        read = 0 if op == OP_STORE else int(self.cum(-(-nbytes // PAGE_BYTES)))
        write = int(self.write_ns_for(nbytes)) if op in (OP_STORE, OP_ATOMIC) else 0
        return read + write

    def service(self, n) -> np.ndarray | int:
        """Charge of the n-th page of a burst (n >= 1): cum(n) - cum(n - 1)."""
        n = np.asarray(n, np.int64)
        r = self.cum(n) - self.cum(n - 1)
        return int(r) if np.ndim(r) == 0 else r

    def fit_report(self) -> dict[str, Any]:
        """Errors on the fitted points and, separately, on the held-out points."""
        def rows(pts):
            out = []
            for p, ns in pts:
                pred = int(self.cum(p))
                out.append({"pages": p, "measured_ns": ns, "model_ns": pred, "error_ns": pred - ns,
                            "rel_error": (pred - ns) / ns if ns else 0.0})
            return out

        def agg(r):
            if not r:
                return {"n": 0, "max_abs_rel_error": None, "mean_abs_rel_error": None}
            e = [abs(x["rel_error"]) for x in r]
            return {"n": len(r), "max_abs_rel_error": max(e), "mean_abs_rel_error": sum(e) / len(e)}
        f, h = rows(self.points), rows(self.held_out)
        return {"fitted": {"points": f, **agg(f)}, "held_out": {"points": h, **agg(h)}}


def burst_lengths(page: np.ndarray, op: np.ndarray, prev_page: int = -2, prev_op: int = -1,
                  prev_run: int = 0) -> np.ndarray:
    """Burst length of each page access in order (see module doc); vectorized."""
    n = len(page)
    if n == 0:
        return np.zeros(0, np.int64)
    pp = np.empty(n, np.int64)
    pp[0] = prev_page
    pp[1:] = page[:-1]
    po = np.empty(n, np.int64)
    po[0] = prev_op
    po[1:] = op[:-1]
    cont = (page == pp + 1) & (op == po)
    idx = np.arange(n, dtype=np.int64)
    start = np.maximum.accumulate(np.where(cont, -1, idx))   # index where the current burst began
    run = idx - start + 1
    if cont[0]:   # the first burst continues the one carried from the previous batch
        first = start < 0
        run = np.where(first, idx + 1 + prev_run, run)
    return run


class CurveEngine:
    """ServiceEngine that charges the calibrated curve (see module doc)."""

    name = "curve"

    def __init__(self, curve: BurstCurve) -> None:
        self.curve = curve
        self._free = 0
        self._prev = (-2, -1, 0)   # last page, op class, burst length
        self._pending: list[np.ndarray] = []
        self.n_requests = 0
        self.n_pages = 0
        self.max_run = 0

    @classmethod
    def from_profile(cls, profile: Any) -> "CurveEngine":
        return cls(BurstCurve.from_profile(profile))

    def submit(self, batch: np.ndarray) -> None:
        n = len(batch)
        if n == 0:
            return
        a = batch["arrival_ns"].astype(np.int64)
        order = np.argsort(a, kind="stable")
        addr = batch["media_address"].astype(np.int64)[order]
        nb = np.maximum(batch["bytes"].astype(np.int64)[order], 1)
        op = batch["op"].astype(np.int64)[order]
        first = addr // PAGE_BYTES
        npg = (addr + nb - 1) // PAGE_BYTES - first + 1
        req = np.repeat(np.arange(n), npg)
        k = np.arange(len(req)) - np.repeat(np.cumsum(npg) - npg, npg)
        page = first[req] + k
        is_w = (op == OP_STORE)[req]
        cls_ = np.where(is_w, 1, 0)
        run = burst_lengths(page, cls_, *self._prev)
        read_cost = self.curve.service(run)
        svc_page = np.where(is_w, 0, read_cost)
        svc = np.bincount(req, weights=svc_page, minlength=n).astype(np.int64)
        wr = (op == OP_STORE) | (op == OP_ATOMIC)
        svc = svc + np.where(wr, self.curve.write_ns_for(nb), 0)
        self._prev = (int(page[-1]), int(cls_[-1]), int(run[-1]))
        done = segmented_fcfs(a[order], svc, np.zeros(n, np.int64), np.array([self._free], np.int64))
        self._free = int(done[-1])
        out = np.empty(n, COMPLETION_BATCH_DTYPE)
        out["id"] = batch["id"][order]
        out["modeled_ns"] = (done - a[order]).astype(np.uint64)
        unsup = op >= ctl.HBF_N_OPS
        out["status"] = np.where(unsup, ctl.HBF_ST_UNSUPPORTED, ctl.HBF_ST_READY)
        self._pending.append(out)
        self.n_requests += n
        self.n_pages += len(page)
        self.max_run = max(self.max_run, int(run.max()))

    def advance(self, now_ns: int) -> None:
        return None

    def collect(self) -> np.ndarray:
        return drain_completions(self._pending)

    def stats(self) -> dict[str, Any]:
        return {"engine": self.name, "requests": self.n_requests, "pages": self.n_pages,
                "longest_burst": self.max_run, "write_ns_per_4k": self.curve.write_ns,
                "fit": self.curve.fit_report()}
