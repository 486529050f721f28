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
        # media hand-off (see attach_media): plan handed to the engine, commit due time (run clock)
        self.media_attached = False
        self._handed: int | None = None            # first request id of the plan handed out
        self._handed_at_ns: int | None = None
        self._due_ns: int | None = None
        self.media_refresh_pages = 0
        self.media_refresh_ns = 0

    # ---- media model hand-off ----------------------------------------------------------------
    def attach_media(self) -> None:
        """Refresh runs through the media model instead of the background drain: the caller (the
        thread that owns the engine) takes each planned block with :meth:`media_work`, runs
        ``engine.refresh(lpns, at_ns)`` and reports the duration with :meth:`media_done`; the block
        commits (PEC, damage and disturb cleared) on the first tick at or after that duration."""
        self.media_attached = True

    def media_work(self, now_ns: int) -> tuple[int, np.ndarray] | None:
        """(token, logical pages) of the planned block not yet handed to the engine, else None."""
        pl = self.sched.plan_now
        if pl is None or self._handed == pl.first_id:
            return None
        L = self.ledger
        local = pl.block // (L.channels * L.dies)
        page = np.arange(L.pages_per_block, dtype=np.int64)
        lpns = ((local * L.pages_per_block + page) * L.dies + pl.die) * L.channels + pl.channel
        # store order matters: another thread's tick() commits only when _handed matches AND _due_ns
        # is set, so clear _due_ns before _handed names the new plan
        self._due_ns = None
        self._handed_at_ns = int(now_ns)
        self._handed = pl.first_id
        return pl.first_id, lpns

    def media_done(self, token: int, duration_ns: int) -> None:
        """The engine finished the block's refresh ``duration_ns`` after it was handed out."""
        if token != self._handed or self._handed_at_ns is None:
            raise ValueError(f"refresh token {token} was not handed out")
        if duration_ns < 0:
            raise ValueError("negative refresh duration")
        self._due_ns = self._handed_at_ns + int(duration_ns)
        self.media_refresh_pages += self.ledger.pages_per_block
        self.media_refresh_ns += int(duration_ns)

    def _media_commit(self, now_ns: int) -> None:
        pl = self.sched.plan_now
        if pl is not None and self._handed == pl.first_id and self._due_ns is not None and now_ns >= self._due_ns:
            for rid in range(pl.first_id, pl.first_id + pl.n_requests):
                self.sched.complete(rid, True)
            self._handed = self._handed_at_ns = self._due_ns = None

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
        if self.media_attached:
            self._media_commit(now_ns)
        self.sched.update_eligibility()
        if self.sched.in_flight is None:
            self.sched.plan()
        if not self.media_attached and thermal.admission_open and self.sched.in_flight is not None:
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
            "refresh_path": "media model (engine.refresh)" if self.media_attached else "background drain",
            "media_refresh_pages": self.media_refresh_pages, "media_refresh_ns": self.media_refresh_ns,
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


def make_ledger(profile, *, register_all: bool = True, logical_pages: int | None = None) -> BlockLedger:
    """Ledger for the profile's geometry; ``logical_pages`` (the media model's logical capacity)
    keeps only blocks whose pages all lie inside it."""
    g = profile.geometry
    led = BlockLedger(ReliabilityParams.from_profile(profile.reliability), channels=g.channels,
                      dies_per_channel=g.dies_per_channel, layers=min(g.stack_height, g.dies_per_channel),
                      block_bytes=g.pages_per_block * g.page_bytes, pages_per_block=g.pages_per_block)
    if register_all:
        n_blocks = g.channels * g.dies_per_channel * g.planes_per_die * g.blocks_per_plane
        blocks = np.arange(n_blocks)
        if logical_pages is not None:
            local = blocks // (g.channels * g.dies_per_channel)
            die = (blocks // g.channels) % g.dies_per_channel
            last = ((local * g.pages_per_block + g.pages_per_block - 1) * g.dies_per_channel + die) * g.channels \
                + blocks % g.channels
            blocks = blocks[last < logical_pages]
        led.register(0, blocks)
    return led
