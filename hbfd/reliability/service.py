"""The daemon's refresh service: retention damage, refresh plan, published byte debt, hazard sweep.

Implements ``hbfd.contracts.RefreshService``: ``tick(now_ns, thermal) -> debt_total_bytes``.

* Damage ages each HBF layer at its own temperature when the thermal state carries the layers
  (``PackageThermalState.hbf_layers_c``); otherwise at the hottest HBF temperature for every layer
  (conservative). With no thermal model at all (NaN temperatures) nothing is accumulated and the
  summary says so.
* Registered blocks: built alone (tests, simulate), every physical block of the profile's geometry
  is registered at start as zone 0 holding valid data. The daemon calls
  :meth:`ReliabilityService.use_range_registrations` before readiness: the ledger starts empty and
  each RegisterRange/UnregisterRange reaches it (:meth:`register_range` / :meth:`unregister_range`,
  zone = range id, the blocks holding the range's media pages). Application reads from the ring
  count per block (:meth:`count_reads`), so read disturb acts in the daemon.
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
    counts_reads = True                    # the daemon hands it every application read (read disturb)

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
        self.idle_media_refresh_bytes = 0          # refresh handed to the media model from the idle tick
        self._handed_idle = False
        self.logical_pages: int | None = None      # the media model's logical capacity (blocks beyond it are not registered)
        self.range_mode = False
        self._range_blocks: dict[int, np.ndarray] = {}

    # ---- range registrations (the daemon) -------------------------------------------------------
    def use_range_registrations(self) -> None:
        """Start from an empty ledger: from now on only registered ranges hold valid blocks."""
        if self.sched.next_seq or self.ledger.elapsed_s:
            raise ValueError("range registrations must be bound before the first refresh plan")
        L = self.ledger
        led = BlockLedger(L.p, channels=L.channels, dies_per_channel=L.dies, layers=L.layers,
                          block_bytes=L.block_bytes, pages_per_block=L.pages_per_block,
                          blocks_per_entry=L.blocks_per_entry)
        self.ledger = led
        self.sched = RefreshScheduler(led, page_bytes=self.sched.page_bytes)
        self.range_mode = True

    def blocks_of_pages(self, first_page: int, end_page: int) -> np.ndarray:
        """Physical blocks holding logical pages [first_page, end_page) (the mapping of
        :meth:`media_work`: block = lpn // (C·D·ppb) · C·D + lpn mod C·D), sorted, unique; blocks
        with a page beyond the media's logical capacity are left out."""
        L = self.ledger
        cd = L.channels * L.dies
        G = cd * L.pages_per_block
        a, b = int(first_page), int(end_page)
        if b <= a:
            return np.zeros(0, np.int64)
        parts = []
        g0, g1 = a // G, (b - 1) // G
        for g in sorted({g0, g1}):
            lo, hi = max(a, g * G) - g * G, min(b, (g + 1) * G) - g * G
            res = np.arange(cd) if hi - lo >= cd else np.unique(np.arange(lo, hi) % cd)
            parts.append(g * cd + res)
        if g1 - g0 > 1:
            parts.append((np.arange(g0 + 1, g1, dtype=np.int64)[:, None] * cd + np.arange(cd)).ravel())
        blocks = np.unique(np.concatenate(parts).astype(np.int64))
        if self.logical_pages is not None:
            local, rem = blocks // cd, blocks % cd
            last = (local * L.pages_per_block + L.pages_per_block - 1) * cd + rem
            blocks = blocks[last < self.logical_pages]
        return blocks

    def register_range(self, range_id: int, media_lo: int, media_hi: int) -> int:
        """A range owning media bytes [media_lo, media_hi) was registered: its blocks hold valid
        data from now, zone = range id. Returns the number of blocks."""
        pb = self.sched.page_bytes
        blocks = self.blocks_of_pages(media_lo // pb, -(-media_hi // pb))
        if range_id in self._range_blocks:
            raise ValueError(f"range {range_id} already registered with the ledger")
        self.ledger.register(int(range_id), blocks, shared=True)
        self._range_blocks[int(range_id)] = blocks
        return int(len(blocks))

    def unregister_range(self, range_id: int) -> int:
        blocks = self._range_blocks.pop(int(range_id), None)
        if blocks is None:
            return 0
        return self.ledger.unregister(blocks)

    def count_reads(self, media_addresses: np.ndarray) -> None:
        """One application read per address (the ring's loads), counted on its block."""
        L = self.ledger
        lpn = np.asarray(media_addresses, np.int64) // self.sched.page_bytes
        cd = L.channels * L.dies
        self.ledger.count_block_reads(lpn // (cd * L.pages_per_block) * cd + lpn % cd)

    # ---- media model hand-off ----------------------------------------------------------------
    def attach_media(self) -> bool:
        """Refresh runs through the media model instead of the background drain: the caller (the
        thread that owns the engine) takes each planned block with :meth:`media_work`, runs
        ``engine.refresh(lpns, at_ns)`` and reports the duration with :meth:`media_done`; the block
        commits (PEC, damage and disturb cleared) on the first tick at or after that duration.
        Returns True (the plan now runs through the engine)."""
        self.media_attached = True
        return True

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

    def media_done(self, token: int, duration_ns: int, *, idle: bool = False) -> None:
        """The engine finished the block's refresh ``duration_ns`` after it was handed out
        (``idle``: handed out by the daemon's tick, not beside ring traffic)."""
        if token != self._handed or self._handed_at_ns is None:
            raise ValueError(f"refresh token {token} was not handed out")
        if duration_ns < 0:
            raise ValueError("negative refresh duration")
        self._due_ns = self._handed_at_ns + int(duration_ns)
        self.media_refresh_pages += self.ledger.pages_per_block
        self.media_refresh_ns += int(duration_ns)
        self._handed_idle = idle

    def _media_commit(self, now_ns: int) -> None:
        pl = self.sched.plan_now
        if pl is not None and self._handed == pl.first_id and self._due_ns is not None and now_ns >= self._due_ns:
            # the drained bytes first: a summary read in between never shows the block completed
            # without its bytes
            if self._handed_idle:
                self.idle_media_refresh_bytes += pl.bytes
                self.background_drained_bytes += pl.bytes
            for rid in range(pl.first_id, pl.first_id + pl.n_requests):
                self.sched.complete(rid, True)
            self._handed = self._handed_at_ns = self._due_ns = None
            self._handed_idle = False

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
            "idle_media_refresh_bytes": int(self.idle_media_refresh_bytes),
            "debt_disposition": {"published_bytes": int(self.sched.debt_total_bytes),
                                 "background_drained_bytes": int(self.background_drained_bytes),
                                 "pending_bytes": int(self.sched.pending_bytes),
                                 "device_claimed_bytes": None,
                                 "note": "device claims are not reported to the host through this interface"},
            **self.sched.summary(),
            "ledger": self.ledger.summary(),
            "hazard_sweep": self.hazard.rows(),
            "registered": ("the blocks of the registered ranges (zone = range id)" if self.range_mode else
                           "every physical block of the profile's geometry, zone 0, valid from start"),
            "registered_ranges": sorted(self._range_blocks),
        }


def make_ledger(profile, *, register_all: bool = True, logical_pages: int | None = None) -> BlockLedger:
    """Ledger for the profile's geometry; ``logical_pages`` (the media model's logical capacity)
    keeps only blocks whose pages all lie inside it."""
    g = profile.geometry
    led = BlockLedger(ReliabilityParams.from_profile(profile.reliability), channels=g.channels,
                      dies_per_channel=g.dies_per_channel, layers=min(g.stack_height, g.dies),
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
