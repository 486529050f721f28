"""Operator thermal override: force the published thermal state (mode, q, admission) — for tests of
the throttling path on a real GPU and for operator drills. Never on by accident:

* hbfd must be started with ``HBFD_THERMAL=hbfd.thermal.override:make_service`` (override over no
  thermal model: Normal, q = 1e6 until overridden) or ``hbfd.thermal.override:make_model_service``
  (override over the profile's package model, which keeps running underneath);
* an override is set through the Report RPC, kind ``thermal_override``, JSON
  ``{"mode": "Light", "q_ppm": 500000}`` / ``{"mode": "Severe"}`` / ``{"mode": "Shutdown"}`` /
  ``{"clear": true}`` (``hbfctl thermal-override Light --q-ppm 500000``, ``hbfctl thermal-override clear``);
* the control loop publishes it at its next tick (<= HBFD_THERMAL_TICK_NS); Shutdown then ends the run
  exactly as a model-reached Shutdown does (THERMAL_SHUTDOWN to every waiter);
* the run summary's thermal section is named ``operator-override(<base>)`` and lists every override
  with the tick it took effect: a forced state is never reported as a model result.

Rules (the ones the device relies on): Normal publishes q = 1e6 and admission open; Light takes
0 < q <= 1e6 (admission open); Severe closes admission (q as given, default the current one);
Shutdown is terminal. Pure: the RPC thread only appends to a deque (atomic in CPython), the control
thread drains it at its tick; no lock, no thread here.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any

from hbfcommon.errors import ErrorCode, HbfError
from hbfd.contracts import NoThermal, ThermalState

from .controller import LIGHT, MODE_NAMES, NORMAL, Q_FULL, SEVERE, SHUTDOWN

KIND = "thermal_override"


def parse_override(obj: Any) -> dict | None:
    """A validated override ({"mode", "q_ppm", "admission_open"}) or None for clear."""
    if not isinstance(obj, dict):
        raise HbfError("thermal override must be a JSON object", code=ErrorCode.INVALID_ARGUMENT, value=repr(obj))
    unknown = set(obj) - {"mode", "q_ppm", "clear", "note"}
    if unknown:
        raise HbfError(f"thermal override: unknown field(s) {sorted(unknown)}", code=ErrorCode.INVALID_ARGUMENT,
                       allowed="mode, q_ppm, clear, note")
    if obj.get("clear"):
        if "mode" in obj or "q_ppm" in obj:
            raise HbfError("thermal override: clear takes no mode/q_ppm", code=ErrorCode.INVALID_ARGUMENT)
        return None
    m = obj.get("mode")
    if isinstance(m, str) and m.capitalize() in MODE_NAMES:
        mode = MODE_NAMES.index(m.capitalize())
    elif isinstance(m, int) and not isinstance(m, bool) and 0 <= m < len(MODE_NAMES):
        mode = m
    else:
        raise HbfError(f"thermal override: mode must be one of {', '.join(MODE_NAMES)}", code=ErrorCode.INVALID_ARGUMENT,
                       value=repr(m))
    q = obj.get("q_ppm")
    if q is not None and (isinstance(q, bool) or not isinstance(q, int) or not 0 < q <= Q_FULL):
        raise HbfError("thermal override: q_ppm must be an integer in (0, 1000000]", code=ErrorCode.INVALID_ARGUMENT,
                       value=repr(q))
    if mode == NORMAL:
        if q not in (None, Q_FULL):
            raise HbfError("thermal override: Normal publishes q_ppm = 1000000", code=ErrorCode.INVALID_ARGUMENT,
                           value=q)
        q = Q_FULL
    elif mode == LIGHT and q is None:
        raise HbfError("thermal override: Light needs q_ppm", code=ErrorCode.INVALID_ARGUMENT)
    return {"mode": mode, "q_ppm": q, "admission_open": mode in (NORMAL, LIGHT)}


class OperatorOverrideThermal:
    """A ThermalService that publishes the base service's state unless an operator override is set."""

    def __init__(self, base) -> None:
        self.base = base
        self.name = f"operator-override({base.name})"
        self._ov: dict | None = None          # written by tick() only
        self._pending: collections.deque = collections.deque()   # RPC thread appends, tick() drains
        self.history: list[dict] = []
        self._ticks = 0
        self._last: ThermalState | None = None

    @property
    def calibration_line(self) -> str:
        """The base model's calibration in force (hbfctl status)."""
        return getattr(self.base, "calibration_line", "none (no package thermal model)")

    def set_override(self, obj: Any) -> dict | None:
        ov = parse_override(obj)
        self._pending.append((ov, {"override": None if ov is None else {**ov, "mode": MODE_NAMES[ov["mode"]]},
                                   "note": obj.get("note", "") if isinstance(obj, dict) else ""}))
        return ov

    def tick(self, now_ns: int, media_energy_j: float) -> ThermalState:
        st = self.base.tick(now_ns, media_energy_j)
        self._ticks += 1
        while self._pending:
            ov_new, p = self._pending.popleft()
            self._ov = ov_new
            self.history.append({**p, "effective_tick": self._ticks, "effective_t_ns": int(now_ns)})
        ov = self._ov
        if ov is not None:
            q = ov["q_ppm"] if ov["q_ppm"] is not None else (st.q_ppm if self._last is None else self._last.q_ppm)
            st = dataclasses.replace(st, mode=ov["mode"], q_ppm=int(q), admission_open=ov["admission_open"])
        self._last = st
        return st

    def horizon_hint_ns(self) -> int:
        """The validity horizon's hint (hbfd/thermal/horizon.py): none while an override waits for the next tick
        or forces Severe/Shutdown; under an open override, no model limit (the gate caps it and holds the next
        override until the published horizon has passed: an override takes effect at most one horizon late);
        else the base model's."""
        from .horizon import NEVER
        if self._pending:
            return 0
        if self._ov is not None:
            return 0 if self._ov["mode"] >= SEVERE else NEVER - 1
        f = getattr(self.base, "horizon_hint_ns", None)
        # an override may come at any tick: never "nothing can change" (NEVER), so the gate caps the horizon
        return min(int(f()), NEVER - 1) if f is not None else 0

    def summary_section(self) -> dict[str, Any]:
        sec = dict(self.base.summary_section())
        last = self._last or ThermalState()
        sec.update({"thermal": self.name, "base_service": self.base.name,
                    "mode": MODE_NAMES[last.mode], "q_ppm": last.q_ppm,
                    "operator_override": {"active": self._ov is not None, "history": list(self.history)},
                    "note": "the published thermal state was forced by an operator override "
                            "(Report kind thermal_override) whenever one was active; those states are not "
                            "model results"})
        if last.mode == SHUTDOWN and self._ov is not None and self._ov["mode"] == SHUTDOWN:
            sec["terminal_status"] = "thermal_shutdown"
        return sec


def make_service(profile) -> OperatorOverrideThermal:
    """Override over no thermal model (HBFD_THERMAL=hbfd.thermal.override:make_service)."""
    return OperatorOverrideThermal(NoThermal())


def make_model_service(profile) -> OperatorOverrideThermal:
    """Override over the profile's package thermal model (HBFD_THERMAL=hbfd.thermal.override:make_model_service)."""
    from . import make_service as make_model
    return OperatorOverrideThermal(make_model(profile))


__all__ = ["KIND", "OperatorOverrideThermal", "make_model_service", "make_service", "parse_override", "SEVERE"]
