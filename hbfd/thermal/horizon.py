"""The thermal snapshot's validity horizon (issue 13; docs/design.md §3.3 "Validity horizon").

hbfd publishes, beside the thermal words, a GPU time ``valid_until_gpu_ns`` (hbf_ctl.h hbf_thermal_snapshot)
before which the CONTRACT WORDS -- mode, q_ppm, admission_open and the refresh debt total -- do not change. The
device then keeps its cached snapshot while ``age <= thermal_max_age_ns OR now < horizon``
(runtime_cuda/include/hbf_thc.h) instead of re-reading the host after every gap longer than the max age.

The guarantee (enforced here, for any horizon length):

    hbfd never publishes a change of a contract word before the hbfd-clock deadline of every horizon it has
    published; a change that comes earlier is HELD until that deadline (the caller waits, then publishes).

So the guarantee does not depend on the model's prediction being right: the prediction (``hint_ns``: how long the
model says the words cannot change, :func:`policy_hint_ticks`) only decides how often a hold happens; a hold
delays a change by at most the horizon, which is capped by ``HBFD_THERMAL_HORIZON_NS``. Severe and Shutdown
publish no horizon (hint 0), so a device in Severe re-reads as today, and an operator override waits at most
one horizon (the summary counts holds and their longest wait).

The clock (:class:`GpuClockRef`): hbfd knows GPU times only from values the GPU wrote before hbfd read them
(hbf_activity.clock_echo_ns, written at every thermal snapshot read, and gpu_ns, at every activity flush). A value
g read at hbfd time t_read means the GPU clock at hbfd time t is at least g + (t - t_read) (less drift). A horizon
of hbfd deadline D is published as ``g + (D - t_read) - margin``, margin = ``drift_ppm`` of (D - t_read) plus a
fixed ``margin_ns``: at hbfd time D the GPU clock has passed it, so the device stops trusting the old words
before hbfd may change them. No reference yet: 0 (no horizon).

Publication order when enabled: refresh debt first, then the thermal section with its horizon (the device reads
the thermal seqlock, then the debt: a device that sees the new horizon sees the debt it covers).

Pure: time arrives as integers; the caller publishes and sleeps.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hbfcommon import ctl
from hbfcommon.errors import ConfigError

from .controller import SEVERE

NEVER = ctl.HBF_THC_HORIZON_MAX_NS   # the longest horizon a device word carries (~68.7 s): "nothing can change"


@dataclass(frozen=True)
class HorizonConfig:
    """``enabled``: publish horizons (``HBFD_THERMAL_HORIZON``); ``max_ns``: the cap on one horizon and so on the
    longest hold (``HBFD_THERMAL_HORIZON_NS``); ``drift_ppm``/``margin_ns``: the clock margin."""

    enabled: bool = False
    max_ns: int = 50_000_000
    drift_ppm: int = 200
    margin_ns: int = 50_000

    def __post_init__(self):
        if not (0 <= self.max_ns <= NEVER):
            raise ConfigError(f"thermal horizon max_ns must be in [0, {NEVER}], got {self.max_ns}",
                              field="HBFD_THERMAL_HORIZON_NS")
        if self.drift_ppm < 0 or self.margin_ns < 0:
            raise ConfigError(f"thermal horizon drift_ppm and margin_ns must be >= 0, got {self.drift_ppm} and "
                              f"{self.margin_ns}", field="HBFD_THERMAL_HORIZON_DRIFT_PPM/_MARGIN_NS")


class GpuClockRef:
    """A lower bound of the GPU clock at hbfd times, from GPU-written times hbfd read."""

    def __init__(self) -> None:
        self.g: int | None = None          # GPU ns of the reference
        self.t_read: int | None = None     # hbfd monotonic ns when it was read (after the GPU wrote it)
        self.observations = 0

    def observe(self, g: int, t_read: int) -> None:
        """``g`` (a GPU-written %globaltimer value, 0 = none) was read at hbfd time ``t_read``. Keeps the
        reference that bounds the clock highest now (a newer write of the same clock, usually)."""
        g, t_read = int(g), int(t_read)
        if g <= 0:
            return
        self.observations += 1
        if self.g is None or g - t_read >= self.g - self.t_read:
            self.g, self.t_read = g, t_read

    def gpu_time_at(self, t_host: int, cfg: HorizonConfig) -> int:
        """The GPU time that the GPU clock has certainly passed at hbfd time ``t_host`` (0: no reference)."""
        if self.g is None:
            return 0
        age = max(0, int(t_host) - self.t_read)
        margin = -(-age * cfg.drift_ppm // 1_000_000) + cfg.margin_ns
        return max(0, self.g + age - margin)


Words = tuple[int, int, int, int]      # mode, q_ppm, admission_open, debt_total_bytes


def contract_words(state, debt_total_bytes: int) -> Words:
    return (int(state.mode), int(state.q_ppm), 1 if state.admission_open else 0, int(debt_total_bytes))


@dataclass
class Offer:
    """The gate's answer: publish ``words`` with ``valid_until_gpu_ns``, or (``wait_ns`` > 0) hold until then."""

    publish: bool
    valid_until_gpu_ns: int = 0
    wait_ns: int = 0


@dataclass
class HorizonGate:
    """Decides, per publication, the horizon and whether a change must wait (the guarantee above)."""

    cfg: HorizonConfig
    ref: GpuClockRef = field(default_factory=GpuClockRef)
    last: Words | None = None
    hold_until: int = 0                # hbfd ns: no contract word changes before this
    publications: int = 0
    with_horizon: int = 0
    ahead_sum_ns: int = 0              # sum over horizons of (deadline - publication time)
    ahead_max_ns: int = 0
    holds: int = 0
    held_ns_sum: int = 0
    held_ns_max: int = 0

    def offer(self, now: int, words: Words, hint_ns: int) -> Offer:
        """At hbfd time ``now`` the words to publish are ``words`` and the model says they cannot change for
        ``hint_ns``. Either publish (with the horizon to write), or wait ``wait_ns`` and offer again."""
        now = int(now)
        if self.last is not None and words != self.last and now < self.hold_until:
            wait = self.hold_until - now
            self.holds += 1
            self.held_ns_sum += wait
            self.held_ns_max = max(self.held_ns_max, wait)
            return Offer(False, wait_ns=wait)
        self.last = words
        self.publications += 1
        if not self.cfg.enabled:
            h = 0
        elif hint_ns >= NEVER:           # nothing can change (no thermal model, no refresh model)
            h = NEVER
        else:
            h = max(0, min(int(hint_ns), self.cfg.max_ns))
        if h == 0 or self.ref.g is None:
            return Offer(True, 0)
        deadline = now + h
        until = self.ref.gpu_time_at(deadline, self.cfg)
        if until == 0:
            return Offer(True, 0)
        self.hold_until = max(self.hold_until, deadline)
        self.with_horizon += 1
        self.ahead_sum_ns += h
        self.ahead_max_ns = max(self.ahead_max_ns, h)
        return Offer(True, until)

    def summary(self) -> dict[str, Any]:
        return {"enabled": self.cfg.enabled, "max_ns": self.cfg.max_ns, "drift_ppm": self.cfg.drift_ppm,
                "margin_ns": self.cfg.margin_ns, "publications": self.publications,
                "with_horizon": self.with_horizon,
                "mean_ahead_ns": (self.ahead_sum_ns // self.with_horizon) if self.with_horizon else 0,
                "max_ahead_ns": self.ahead_max_ns, "clock_references": self.ref.observations,
                "held_changes": self.holds, "held_ns_max": self.held_ns_max,
                "held_ns_mean": (self.held_ns_sum // self.holds) if self.holds else 0,
                "what": "valid_until_gpu_ns published with the thermal snapshot: how far ahead (hbfd clock) the "
                        "horizons reached, and the changes held until a published horizon passed"}


# ---- hbfd's publication (the control tick calls this; tests call it with a simulated clock) -----------------
def service_hint_ns(thermal, refresh_name: str, state) -> int:
    """How long the model says the contract words cannot change: 0 in Severe/Shutdown; the thermal service's
    ``horizon_hint_ns()`` when it has one (no thermal model: NEVER), else 0 -- and never at all only without a
    refresh model too (the debt may grow: NEVER - 1, which the gate caps)."""
    if int(state.mode) >= SEVERE:
        return 0
    f = getattr(thermal, "horizon_hint_ns", None)
    h = int(f()) if f is not None else 0
    if refresh_name != "none":
        h = min(h, NEVER - 1)
    return h


def publish_with_horizon(gate: HorizonGate, region, state, tick: int, debt: int, quantum: int, drained: int,
                         hint_ns: int, *, clock, sleep) -> Offer:
    """Read the GPU clock references from the region, then publish the refresh debt and the thermal snapshot with
    its horizon; a change of a contract word before the deadline of a published horizon first waits for it
    (``sleep(ns)``, then asks again). ``clock()``: hbfd's monotonic ns. Returns the offer published."""
    a = region.ctl.activity
    echo, flushed = int(a.clock_echo_ns), int(a.gpu_ns)
    t_read = clock()                  # after the reads: the GPU clock at t_read is at least each value
    gate.ref.observe(echo, t_read)
    gate.ref.observe(flushed, t_read)
    words = contract_words(state, debt)
    while True:
        off = gate.offer(clock(), words, hint_ns)
        if off.publish:
            break
        sleep(off.wait_ns)
    region.publish_refresh(int(debt), int(quantum), background_drained_bytes=int(drained))
    region.publish_thermal(state, tick, valid_until_gpu_ns=off.valid_until_gpu_ns)
    return off


# ---- the model's hint -------------------------------------------------------------------------------------
HINT_TICKS_MAX = 100


def policy_hint_ticks(policy, t_c: float, rate_k_per_tick: float, *, max_ticks: int = HINT_TICKS_MAX) -> int:
    """Ticks over which the policy's decision stays the same for every trajectory that moves at most
    ``rate_k_per_tick`` per tick from ``t_c`` -- asked of the policy's own :meth:`scan` along the extreme
    trajectories (rising, falling and flat). 0 in Severe/Shutdown (those publish no horizon)."""
    if policy.mode >= SEVERE or not np.isfinite(t_c):
        return 0
    k = np.arange(1, max_ticks + 1, dtype=np.float64)
    r = max(float(rate_k_per_tick), 0.0)
    n = max_ticks
    for traj in (t_c + r * k, t_c - r * k, np.full(max_ticks, float(t_c))):
        n = min(n, int(policy.scan(traj)))
        if n == 0:
            break
    return n


__all__ = ["GpuClockRef", "HorizonConfig", "HorizonGate", "NEVER", "Offer", "contract_words", "policy_hint_ticks",
           "publish_with_horizon", "service_hint_ns"]
