"""Hazard sweep over the failure activation energy (HBFSim paper eq. 6).

    H(Ea) = Σ_i Δt_i / M_ref · exp[(Ea/k_B)(1/T_ref − 1/T_i)],   P_fail = 1 − e^{−H}

reported for every Ea of the profile's sweep, instead of one asserted lifetime. The retention
activation energy (ledger) and this failure activation energy are separate profile inputs.
``a_t`` (the disclosed reliability-time acceleration) multiplies Δt as for retention.

Pure.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .ledger import K_B_EV, C_TO_K


class HazardSweep:
    def __init__(self, *, ea_min_ev: float, ea_max_ev: float, ea_step_ev: float, mtbf_ref_h: float, t_ref_c: float,
                 a_t: float = 1.0):
        if not (ea_step_ev > 0 and ea_max_ev >= ea_min_ev and mtbf_ref_h > 0):
            raise ValueError("bad hazard sweep parameters")
        n = int(math.floor((ea_max_ev - ea_min_ev) / ea_step_ev + 1e-9)) + 1
        self.ea = np.round(ea_min_ev + ea_step_ev * np.arange(n), 9)
        self.mtbf_ref_h = mtbf_ref_h
        self.t_ref_k = t_ref_c + C_TO_K
        self.a_t = a_t
        self.hazard = np.zeros(n)
        self.hours = 0.0

    @classmethod
    def from_profile(cls, r) -> "HazardSweep":
        return cls(ea_min_ev=r.ea_failure_ev_min, ea_max_ev=r.ea_failure_ev_max, ea_step_ev=r.ea_failure_ev_step,
                   mtbf_ref_h=r.mtbf_ref_h, t_ref_c=r.t_ref_c, a_t=r.a_t)

    def add(self, dt_s: float, temp_c: float) -> None:
        T = temp_c + C_TO_K
        self.hazard += self.a_t * dt_s / 3600.0 / self.mtbf_ref_h * np.exp(self.ea / K_B_EV * (1 / self.t_ref_k - 1 / T))
        self.hours += dt_s / 3600.0

    def add_series(self, dt_s: float, temps_c: np.ndarray) -> None:
        T = np.asarray(temps_c, float) + C_TO_K
        if T.size == 0:
            return
        # Σ exp(Ea/k (1/Tref − 1/T_i)) for every Ea, computed stably through the max term
        x = (1 / self.t_ref_k - 1 / T)[None, :] * (self.ea / K_B_EV)[:, None]
        mx = x.max(axis=1, keepdims=True)
        s = np.exp(mx[:, 0]) * np.exp(x - mx).sum(axis=1)
        self.hazard += self.a_t * dt_s / 3600.0 / self.mtbf_ref_h * s
        self.hours += dt_s * T.size / 3600.0

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for ea, h in zip(self.ea, self.hazard):
            out.append({"activation_energy_ev": float(ea), "hazard": float(h),
                        "failure_probability": float(-math.expm1(-h)),
                        "equivalent_mtbf_hours": (self.hours * self.a_t / h) if h > 0 else None})
        return out
