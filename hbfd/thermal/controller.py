"""Throttling policies: Normal / Light / Severe / Shutdown, service fraction q in ppm.

Every policy sees, once per 10 ms tick, the hottest HBF layer temperature at the end of the tick and
decides the state for the NEXT tick: ``Decision(mode, q_ppm, admission_open)``. The device applies
q exactly once per operation: ``s_T = ceil(s · 1e6 / q)`` (:func:`throttled_service_ns`), with q
snapshotted before the reservation.

Thresholds (profile ``thermal``): LTT enters Light, STT enters Severe (admission closed), shutdown_c
enters Shutdown (terminal: the run ends with THERMAL_SHUTDOWN). Falling edges need the temperature
``hysteresis_k`` below the entering threshold AND ``min_dwell_ticks`` in the current state, so a
temperature that hovers at a threshold cannot make the state chatter. Rising edges are immediate
(a hot device is never held in a milder state by the dwell); several may happen in one tick.
RTT (the report threshold) only counts time above it.

Policies (all keep the Shutdown protection):

* ``none`` — never throttles (q = 1e6, admission open) — the baseline;
* ``hysteresis`` — the state machine above with the profile's thresholds and Light q;
* ``hysteresis-early`` — the same machine entered earlier (thresholds lowered by ``early_shift_k``,
  wider hysteresis, deeper Light q): the second setting;
* ``fixed-cap`` — admission capped at a constant q (``cap_ppm``); Severe/Shutdown as above;
* ``pi`` — proportional-integral control of q towards ``setpoint_c`` (anti-windup clamp
  ``[q_min_ppm, 1e6]``); Severe/Shutdown as above.

For long simulated horizons every policy also answers :meth:`Policy.scan`: over a stretch of future
temperatures, for how many leading ticks its decision provably stays the same; :meth:`Policy.absorb`
then accounts those ticks at once. ``scan``/``absorb``/``decide`` give exactly the step-by-step
result (tested).

Pure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

NORMAL, LIGHT, SEVERE, SHUTDOWN = 0, 1, 2, 3       # HBF_TH_* in hbf_ctl.h
MODE_NAMES = ("Normal", "Light", "Severe", "Shutdown")
Q_FULL = 1_000_000
POLICIES = ("none", "hysteresis", "hysteresis-early", "fixed-cap", "pi")


def throttled_service_ns(s_ns: int, q_ppm: int) -> int:
    """Thermal service applied once: ceil(s · 1e6 / q), integers only."""
    if not 0 < q_ppm <= Q_FULL:
        raise ValueError(f"q_ppm must be in (0, 1e6], got {q_ppm}")
    if s_ns < 0:
        raise ValueError("service time must be >= 0")
    return -((-s_ns * Q_FULL) // q_ppm)


@dataclass(frozen=True)
class Decision:
    mode: int
    q_ppm: int
    admission_open: bool


@dataclass(frozen=True)
class PolicyConfig:
    name: str
    rtt_c: float
    ltt_c: float
    stt_c: float
    shutdown_c: float
    hysteresis_k: float
    light_q_ppm: int
    min_dwell_ticks: int = 10
    early_shift_k: float = 5.0
    cap_ppm: int = 800_000
    setpoint_c: float | None = None          # PI: default ltt_c - hysteresis_k
    kp_ppm_per_k: float = 50_000.0
    ki_ppm_per_k_s: float = 5_000.0
    q_min_ppm: int = 100_000
    deadband_ppm: int = 2_000                # PI: publish a new q only when it moved this much
    dt_s: float = 0.01

    def __post_init__(self):
        if self.name not in POLICIES:
            raise ValueError(f"unknown thermal policy {self.name!r} (one of {', '.join(POLICIES)})")
        if not self.rtt_c < self.ltt_c < self.stt_c < self.shutdown_c:
            raise ValueError("need rtt_c < ltt_c < stt_c < shutdown_c")
        if not 0 < self.light_q_ppm <= Q_FULL or not 0 < self.cap_ppm <= Q_FULL or not 0 < self.q_min_ppm <= Q_FULL:
            raise ValueError("q values must be in (0, 1e6]")
        if self.min_dwell_ticks < 0 or self.hysteresis_k <= 0:
            raise ValueError("min_dwell_ticks >= 0 and hysteresis_k > 0")

    @classmethod
    def from_profile(cls, thermal, name: str, **over) -> "PolicyConfig":
        kw = dict(name=name, rtt_c=thermal.rtt_c, ltt_c=thermal.ltt_c, stt_c=thermal.stt_c,
                  shutdown_c=thermal.shutdown_c, hysteresis_k=thermal.hysteresis_k,
                  light_q_ppm=thermal.light_q_ppm)
        for f in ("min_dwell_ticks",):
            if hasattr(thermal, f):
                kw[f] = getattr(thermal, f)
        kw.update(over)
        return cls(**kw)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Policy:
    """The hysteresis state machine; subclasses change what q is inside it."""

    cfg: PolicyConfig
    mode: int = NORMAL
    dwell: int = 0                     # ticks spent in the current mode
    transitions: list[tuple[int, int, int, float]] = field(default_factory=list)  # (tick, from, to, T)

    def __post_init__(self):
        c = self.cfg
        if c.name == "hysteresis-early":
            self.up = (c.ltt_c - c.early_shift_k, c.stt_c - c.early_shift_k, c.shutdown_c)
            self.hyst = 2 * c.hysteresis_k
            self.light_q = max(1, c.light_q_ppm // 2)
        else:
            self.up = (c.ltt_c, c.stt_c, c.shutdown_c)
            self.hyst = c.hysteresis_k
            self.light_q = c.light_q_ppm

    @property
    def name(self) -> str:
        return self.cfg.name

    # ---- the state machine -------------------------------------------------------------------
    def _next_mode(self, t_c: float, dwell: int) -> list[int]:
        """Modes passed through this tick (empty: stay)."""
        m = self.mode
        path = []
        if m == SHUTDOWN:
            return path
        while m < SHUTDOWN and t_c >= self._up_threshold(m):
            m += 1
            path.append(m)
        if path:
            return path
        if m in (LIGHT, SEVERE) and dwell >= self.cfg.min_dwell_ticks and t_c <= self._up_threshold(m - 1) - self.hyst:
            path.append(m - 1)
        return path

    def _up_threshold(self, mode: int) -> float:
        """Temperature that takes ``mode`` one step up (Normal->Light is up[0])."""
        return self.up[mode]

    def decision(self) -> Decision:
        m = self.mode
        if m == SHUTDOWN:
            return Decision(SHUTDOWN, self._q_closed(), False)
        if m == SEVERE:
            return Decision(SEVERE, self._q_closed(), False)
        return Decision(m, self._q_open(), True)

    def _q_closed(self) -> int:
        return self.light_q

    def _q_open(self) -> int:
        return Q_FULL if self.mode == NORMAL else self.light_q

    def decide(self, tick: int, t_c: float) -> Decision:
        """One tick: the temperature at its end decides the state for the next one."""
        if not math.isfinite(t_c):
            raise ValueError(f"non-finite HBF temperature {t_c!r}")
        path = self._next_mode(t_c, self.dwell + 1)
        self._update_internal(t_c)
        if path:
            for to in path:
                self.transitions.append((tick, self.mode, to, float(t_c)))
                self.mode = to
            self.dwell = 0
        else:
            self.dwell += 1
        return self.decision()

    def _update_internal(self, t_c: float) -> None:
        return None

    # ---- long-horizon fast path --------------------------------------------------------------
    def scan(self, temps: np.ndarray) -> int:
        """Number of leading ticks of ``temps`` over which decide() would change nothing visible."""
        n = len(temps)
        m = self.mode
        if m == SHUTDOWN:
            return n
        up = self._up_threshold(m) if m < SHUTDOWN else math.inf
        hit_up = np.flatnonzero(temps >= up)
        first = int(hit_up[0]) if len(hit_up) else n
        if m in (LIGHT, SEVERE):
            down = self._up_threshold(m - 1) - self.hyst
            j = np.arange(n)
            ok = (temps <= down) & (self.dwell + j + 1 >= self.cfg.min_dwell_ticks)
            hit_dn = np.flatnonzero(ok)
            if len(hit_dn):
                first = min(first, int(hit_dn[0]))
        return first

    def absorb(self, temps: np.ndarray) -> None:
        """Account ticks that scan() said change nothing."""
        self.dwell += len(temps)

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.name, "mode": MODE_NAMES[self.mode], "dwell_ticks": self.dwell}


class NoThrottle(Policy):
    """Baseline: never throttles; only the Shutdown protection."""

    def _next_mode(self, t_c: float, dwell: int) -> list[int]:
        if self.mode != SHUTDOWN and t_c >= self.cfg.shutdown_c:
            return [SHUTDOWN]
        return []

    def _q_open(self) -> int:
        return Q_FULL

    def scan(self, temps: np.ndarray) -> int:
        if self.mode == SHUTDOWN:
            return len(temps)
        hit = np.flatnonzero(temps >= self.cfg.shutdown_c)
        return int(hit[0]) if len(hit) else len(temps)


class FixedCap(Policy):
    """Admission capped at cap_ppm in every open state; no Light band (Normal -> Severe at STT)."""

    def _next_mode(self, t_c: float, dwell: int) -> list[int]:
        m = self.mode
        if m == SHUTDOWN:
            return []
        if t_c >= self.up[2]:
            return [SEVERE, SHUTDOWN] if m == NORMAL else [SHUTDOWN]
        if m == NORMAL and t_c >= self.up[1]:
            return [SEVERE]
        if m == SEVERE and dwell >= self.cfg.min_dwell_ticks and t_c <= self.up[1] - self.hyst:
            return [NORMAL]
        return []

    def _q_open(self) -> int:
        return self.cfg.cap_ppm

    def _q_closed(self) -> int:
        return self.cfg.cap_ppm

    def decision(self) -> Decision:
        d = super().decision()
        if d.mode == NORMAL and self.cfg.cap_ppm < Q_FULL:
            return replace(d, mode=LIGHT)       # capped service is a Light state for the device
        return d

    def scan(self, temps: np.ndarray) -> int:
        n = len(temps)
        m = self.mode
        if m == SHUTDOWN:
            return n
        up = self.up[2] if m == SEVERE else self.up[1]
        hit = np.flatnonzero(temps >= up)
        first = int(hit[0]) if len(hit) else n
        if m == SEVERE:
            j = np.arange(n)
            ok = np.flatnonzero((temps <= self.up[1] - self.hyst) & (self.dwell + j + 1 >= self.cfg.min_dwell_ticks))
            if len(ok):
                first = min(first, int(ok[0]))
        return first


class PIPolicy(Policy):
    """q = 1e6 − clamp(Kp·e + I), e = T − setpoint; I integrates Ki·e·Δt only while unsaturated.
    The published q moves only when the controller's q leaves a ``deadband_ppm`` band around it (or
    reaches a bound), so a settled loop publishes a steady q instead of ±1 ppm jitter.
    Light whenever q < 1e6; Severe (admission closed) at STT, back below STT − hysteresis; Shutdown."""

    def __post_init__(self):
        super().__post_init__()
        c = self.cfg
        self.setpoint = c.setpoint_c if c.setpoint_c is not None else c.ltt_c - c.hysteresis_k
        self.integral = 0.0
        self.q = Q_FULL
        self.u_max = Q_FULL - c.q_min_ppm

    def _next_mode(self, t_c: float, dwell: int) -> list[int]:
        m = self.mode
        if m == SHUTDOWN:
            return []
        if t_c >= self.cfg.shutdown_c:
            return [SEVERE, SHUTDOWN] if m != SEVERE else [SHUTDOWN]
        if m != SEVERE and t_c >= self.cfg.stt_c:
            return [SEVERE]
        if m == SEVERE and dwell >= self.cfg.min_dwell_ticks and t_c <= self.cfg.stt_c - self.hyst:
            return [LIGHT if self._q_for(t_c)[0] < Q_FULL else NORMAL]
        return []

    def _q_for(self, t_c: float) -> tuple[int, float]:
        c = self.cfg
        e = t_c - self.setpoint
        integral = self.integral + c.ki_ppm_per_k_s * e * c.dt_s
        u = c.kp_ppm_per_k * e + integral
        if u > self.u_max:                     # anti-windup: hold the integral at saturation
            integral = min(integral, max(self.integral, self.u_max - c.kp_ppm_per_k * e))
            u = self.u_max
        elif u < 0:
            integral = max(integral, min(self.integral, -c.kp_ppm_per_k * e))
            u = 0.0
        integral = max(integral, 0.0)
        return int(round(Q_FULL - u)), integral

    def _update_internal(self, t_c: float) -> None:
        if self.mode != SHUTDOWN:              # terminal: the controller stops
            q, self.integral = self._q_for(t_c)
            if q != self.q and (abs(q - self.q) > self.cfg.deadband_ppm or q in (Q_FULL, self.cfg.q_min_ppm)):
                self.q = q

    def decide(self, tick: int, t_c: float) -> Decision:
        d = super().decide(tick, t_c)
        if self.mode in (NORMAL, LIGHT):
            want = LIGHT if self.q < Q_FULL else NORMAL
            if want != self.mode:
                self.transitions.append((tick, self.mode, want, float(t_c)))
                self.mode = want
                self.dwell = 0
            return self.decision()
        return d

    def _q_open(self) -> int:
        return self.q

    def _q_closed(self) -> int:
        return max(self.q, self.cfg.q_min_ppm)

    def scan(self, temps: np.ndarray) -> int:
        if self.mode == SHUTDOWN:
            return len(temps)
        c = self.cfg
        if self.mode == NORMAL and self.q == Q_FULL:
            # quiescent: while Kp·e + I <= 0 the anti-windup clamp holds I where it is and q at 1e6
            e = temps - self.setpoint
            hit = np.flatnonzero((c.kp_ppm_per_k * e + self.integral > 0) | (temps >= c.stt_c))
            return int(hit[0]) if len(hit) else len(temps)
        if self.mode == SEVERE:
            return 0
        # throttling: the integral evolves linearly while no clamp engages; stop at the first tick
        # where a clamp would engage, the published q would move, or STT is reached
        e = temps - self.setpoint
        integ = self.integral + c.ki_ppm_per_k_s * c.dt_s * np.cumsum(e)
        u = c.kp_ppm_per_k * e + integ
        q = np.rint(Q_FULL - u)
        bad = (u <= 0) | (u >= self.u_max) | (integ <= 0) | (np.abs(q - self.q) > c.deadband_ppm) \
            | (temps >= c.stt_c) | (q == Q_FULL) | (q == c.q_min_ppm)
        hit = np.flatnonzero(bad)
        return int(hit[0]) if len(hit) else len(temps)

    def absorb(self, temps: np.ndarray) -> None:
        super().absorb(temps)
        if not (self.mode == NORMAL and self.q == Q_FULL) and self.mode != SHUTDOWN:
            c = self.cfg
            self.integral += c.ki_ppm_per_k_s * c.dt_s * float(np.sum(temps - self.setpoint))

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "q_ppm": self.q, "integral_ppm": self.integral, "setpoint_c": self.setpoint}


def make_policy(cfg: PolicyConfig) -> Policy:
    cls = {"none": NoThrottle, "hysteresis": Policy, "hysteresis-early": Policy, "fixed-cap": FixedCap,
           "pi": PIPolicy}[cfg.name]
    return cls(cfg)
