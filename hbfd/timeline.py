"""The run over time: what the control loop saw at each tick, and the latency distribution of the
reference path. The run summary's ``timeline`` section; read by ``hbfctl trace`` / ``hbfctl report``.

* :class:`RunTimeline` keeps one row per control tick (10 ms by default; ``HBFD_THERMAL_TICK_NS``) on
  the run clock (ns since hbfd started): the published thermal state (mode, q, admission, hottest
  HBF layer, HBM and GPU temperature), the refresh debt and the background-drained bytes, and the
  cumulative request and byte counters of the reference path and of the device side (as last
  published by the runtime). The rows are bounded: past ``max_points`` every other row is dropped
  and only every ``stride``-th tick is kept from then on (the stride doubles each time), so a run of
  any length keeps its whole span at a resolution of at least span / max_points. The last tick is
  always kept. Cumulative counters stay exact under this thinning (a rate is a difference of two
  kept rows); a temperature peak between kept rows is in ``services.thermal.peak_c``.
* Latency: every READY reference completion's ``modeled_ns`` and ``service_ns`` go into a
  :class:`hbfd.media.hist.LogHistogram` (bounded, 1.6 % resolution); the section carries
  their quantiles at :data:`CDF_QUANTILES` (the one grid every latency CDF in a summary uses).

Columns are lists of equal length (a compact, diff-friendly layout); temperatures without a thermal
model are ``null`` (the summary is strict JSON).
"""
from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from hbfd.media.hist import LogHistogram

TIMELINE_SCHEMA = "hbfsim.timeline/1"
DEFAULT_MAX_POINTS = 2048

# the quantile grid of every latency CDF a summary carries (hbfd's and the demo workload's): every
# 0.5 %, plus the tail (99.9 %, 99.99 %); 1.0 is the maximum
CDF_QUANTILES: tuple[float, ...] = tuple(sorted({i / 200 for i in range(1, 201)} | {0.999, 0.9999}))

COLUMNS = ("t_ns", "mode", "q_ppm", "admission_open", "hbf_max_c", "hbm_c", "gpu_c",
           "refresh_debt_bytes", "refresh_drained_bytes", "ref_requests", "ref_bytes",
           "dev_requests", "dev_bytes")

MEANING = {
    "t_ns": "run clock: ns since hbfd started (the clock of attaches, reports and the thermal tick)",
    "mode": "published thermal mode: 0 Normal, 1 Light, 2 Severe (admission closed), 3 Shutdown",
    "q_ppm": "published service fraction q in parts per million (1000000 = full rate)",
    "admission_open": "1 while new requests are admitted, 0 while the controller holds them (Severe)",
    "hbf_max_c": "hottest HBF layer, deg C (null: no thermal model)",
    "hbm_c": "HBM temperature, deg C (null: no thermal model)",
    "gpu_c": "GPU die temperature, deg C (null: no thermal model)",
    "refresh_debt_bytes": "refresh debt published to the device (monotonic total, bytes)",
    "refresh_drained_bytes": "refresh bytes drained in the background so far",
    "ref_requests": "reference-path requests completed so far (cumulative)",
    "ref_bytes": "reference-path bytes completed so far (cumulative)",
    "dev_requests": "device-side requests as the runtime last published them (cumulative, at sync points)",
    "dev_bytes": "device-side bytes as the runtime last published them (cumulative, at sync points)",
}


def _temp(x: float) -> float | None:
    return round(float(x), 4) if math.isfinite(x) else None


def quantiles_of(h: LogHistogram) -> list[int] | None:
    """The histogram's values at :data:`CDF_QUANTILES` (None when empty)."""
    if h.n == 0:
        return None
    return [int(h.quantile(q)) for q in CDF_QUANTILES]


class RunTimeline:
    """Bounded per-tick rows and the reference-path latency histograms (see the module doc). The
    control thread records rows, the ring thread completions and an RPC thread reads the section:
    one lock keeps each consistent (equal-length columns, a histogram flushed once)."""

    def __init__(self, *, tick_ns: int, max_points: int = DEFAULT_MAX_POINTS,
                 refresh_quantum_bytes: int | None = None) -> None:
        if max_points < 2:
            raise ValueError(f"max_points must be >= 2, not {max_points}")
        self.tick_ns = int(tick_ns)
        self.max_points = int(max_points)
        self.refresh_quantum_bytes = refresh_quantum_bytes
        self.stride = 1
        self.ticks = 0
        self.cols: dict[str, list] = {c: [] for c in COLUMNS}
        self._last: tuple | None = None
        self._last_kept = False
        self.modeled = LogHistogram()
        self.service = LogHistogram()
        self._lock = threading.Lock()

    def record(self, t_ns: int, state: Any, *, refresh_debt_bytes: int, refresh_drained_bytes: int,
               ref_requests: int, ref_bytes: int, dev_requests: int, dev_bytes: int) -> None:
        """One control tick: ``state`` is the published :class:`hbfd.contracts.ThermalState`."""
        row = (int(t_ns), int(state.mode), int(state.q_ppm), int(bool(state.admission_open)),
               _temp(state.hbf_max_c), _temp(state.hbm_c), _temp(state.gpu_c), int(refresh_debt_bytes),
               int(refresh_drained_bytes), int(ref_requests), int(ref_bytes), int(dev_requests), int(dev_bytes))
        with self._lock:
            self._record(row)

    def _record(self, row: tuple) -> None:
        self.ticks += 1
        self._last = row
        self._last_kept = (self.ticks - 1) % self.stride == 0
        if not self._last_kept:
            return
        for c, v in zip(COLUMNS, row):
            self.cols[c].append(v)
        if len(self.cols["t_ns"]) > self.max_points:
            for c in COLUMNS:
                del self.cols[c][1::2]          # keep ticks 0, 2s, 4s, ...: consistent with the new stride
            self.stride *= 2
            self._last_kept = (self.ticks - 1) % self.stride == 0

    def completed(self, modeled_ns: np.ndarray, service_ns: np.ndarray) -> None:
        """READY reference completions just posted (their modeled and service ns)."""
        with self._lock:
            self.modeled.add(np.asarray(modeled_ns, np.int64))
            self.service.add(np.asarray(service_ns, np.int64))

    def section(self) -> dict[str, Any]:
        with self._lock:
            return self._section()

    def _section(self) -> dict[str, Any]:
        cols = {c: list(v) for c, v in self.cols.items()}
        if self._last is not None and not self._last_kept:
            for c, v in zip(COLUMNS, self._last):
                cols[c].append(v)
        return {
            "schema": TIMELINE_SCHEMA,
            "tick_ns": self.tick_ns, "ticks": self.ticks, "stride_ticks": self.stride,
            "max_points": self.max_points, "points": len(cols["t_ns"]),
            "refresh_quantum_bytes": self.refresh_quantum_bytes,
            "columns": cols,
            "meaning": dict(MEANING),
            "latency": {
                "source": "reference path: every READY completion hbfd posted (log histogram, <= 1.6 % high)",
                "q": list(CDF_QUANTILES), "n": self.modeled.n,
                "modeled_ns": quantiles_of(self.modeled), "service_ns": quantiles_of(self.service),
            },
        }
