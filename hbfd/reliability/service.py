"""The daemon's refresh service: retention damage, refresh plan, published byte debt, hazard sweep.

Implements ``hbfd.services.RefreshService``: ``tick(now_ns, thermal) -> debt_total_bytes``.

* Damage ages each HBF layer at its own temperature when the thermal state carries the layers
  (``PackageThermalState.hbf_layers_c``); otherwise at the hottest HBF temperature for every layer
  (conservative). With no thermal model at all (NaN temperatures) nothing is accumulated and the
  summary says so.
* Registered blocks: the daemon's range registrations do not reach this interface yet, so every
  physical block of the profile's geometry is registered at start as zone 0 holding valid data.
* The plan is published as monotonic byte debt. The device claims debt with its admissions; that
  claim is not reported back through this interface, so the host drains the in-flight plan in the
  background at the media bandwidth times the published q while admission is open (the paper's
  "host decay"), and commits PEC when a block's bytes are all drained. The summary reports this
  disposition as ``background_drained_bytes``.

Pure.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .hazard import HazardSweep
from .ledger import BlockLedger, ReliabilityParams
from .refresh import RefreshScheduler


class ReliabilityService:
    name = "retention-refresh"

    def __init__(self, ledger: BlockLedger, scheduler: RefreshScheduler, hazard: HazardSweep, *,
                 media_bytes_per_s: float):
        self.ledger = ledger
        self.sched = scheduler
        self.hazard = hazard
        self.media_bytes_per_s = media_bytes_per_s
        self.last_now: int | None = None
        self.background_drained_bytes = 0
        self.ticks = 0
        self.ticks_without_temperature = 0
        self.layer_source = "none"
        self._carry = 0.0

    def tick(self, now_ns: int, thermal) -> int:
        now_ns = int(now_ns)
        if self.last_now is None:
            self.last_now = now_ns
            return int(self.sched.debt_total_bytes)
        if now_ns < self.last_now:
            raise ValueError(f"refresh tick time went backwards ({now_ns} < {self.last_now})")
        dt_s = (now_ns - self.last_now) / 1e9
        self.last_now = now_ns
        self.ticks += 1
        layers = getattr(thermal, "hbf_layers_c", ())
        if len(layers) == self.ledger.layers and all(math.isfinite(x) for x in layers):
            temps = np.asarray(layers, float)
            self.layer_source = "per-layer"
        elif math.isfinite(thermal.hbf_max_c):
            temps = np.full(self.ledger.layers, float(thermal.hbf_max_c))
            self.layer_source = "hbf_max for every layer"
        else:
            self.ticks_without_temperature += 1
            temps = None
        if temps is not None and dt_s > 0:
            self.ledger.accumulate(dt_s, temps)
            self.hazard.add(dt_s, float(temps.max()))
        self.sched.update_eligibility()
        if self.sched.in_flight is None:
            self.sched.plan()
        if thermal.admission_open and self.sched.in_flight is not None:
            self._carry += self.media_bytes_per_s * thermal.q_ppm / 1e6 * dt_s
            while self._carry >= self.sched.page_bytes:
                if self.sched.in_flight is None and self.sched.plan() is None:
                    break
                used = self.sched.drain(int(self._carry))
                if not used:
                    break
                self._carry -= used
                self.background_drained_bytes += used
            if self.sched.in_flight is None:
                self._carry = 0.0
        return int(self.sched.debt_total_bytes)

    def summary_section(self) -> dict[str, Any]:
        return {
            "refresh": self.name,
            "model_ticks": self.ticks,
            "temperature_source": self.layer_source,
            "ticks_without_temperature": self.ticks_without_temperature,
            "debt_disposition": {"published_bytes": int(self.sched.debt_total_bytes),
                                 "background_drained_bytes": int(self.background_drained_bytes),
                                 "pending_bytes": int(self.sched.pending_bytes),
                                 "device_claimed_bytes": None,
                                 "note": "device claims are not reported to the host through this interface"},
            **self.sched.summary(),
            "ledger": self.ledger.summary(),
            "hazard_sweep": self.hazard.rows(),
            "registered": "every physical block of the profile's geometry, zone 0, valid from start",
        }


def make_ledger(profile, *, register_all: bool = True) -> BlockLedger:
    g = profile.geometry
    led = BlockLedger(ReliabilityParams.from_profile(profile.reliability), channels=g.channels,
                      dies_per_channel=g.dies_per_channel, layers=min(g.stack_height, g.dies_per_channel),
                      block_bytes=g.pages_per_block * g.page_bytes, pages_per_block=g.pages_per_block)
    if register_all:
        n_blocks = g.channels * g.dies_per_channel * g.planes_per_die * g.blocks_per_plane
        led.register(0, np.arange(n_blocks))
    return led
