"""Steady-state thermal-resistance / cross-talk matrix and the limit solve.

``R[i, j] = ΔT_i / P_j`` (K/W) from the FOM (``G θ = B``) or the ROM's DC gain. The limit solve
answers the HBFSim paper's §6.3 question "which component reaches its thermal limit first": the HBF
stack runs at its operating power (present at every load); an external heat load ``W`` is injected
into the compute die and the HBM region in a declared split; the package is linear, so every output
is ``T_i(W) = T_amb + R_i·p_hbf + W·(R_i·s)`` and the load at which component c reaches its limit is

    W_c = min over outputs i of c of (limit_c − T_amb − R_i·p_hbf) / (R_i·s)

Pure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .geometry import Geometry

COMPONENTS = ("gpu", "hbm", "hbf")


def hbf_power_vector(input_names: Sequence[str], *, idle_w: float, j_per_byte: float,
                     read_bytes_per_s: float) -> np.ndarray:
    """HBF stack power by input: idle on the base die, transfer energy spread evenly over the NAND
    layers (reads interleave over every die of the stack)."""
    p = np.zeros(len(input_names))
    layers = [i for i, n in enumerate(input_names) if n.startswith("hbf_l")]
    base = [i for i, n in enumerate(input_names) if n == "hbf_base"]
    dyn = j_per_byte * read_bytes_per_s
    if base:
        p[base[0]] += idle_w
    elif layers:
        p[layers] += idle_w / len(layers)
    if layers:
        p[layers] += dyn / len(layers)
    elif base:
        p[base[0]] += dyn
    return p


def external_split(input_names: Sequence[str], gpu_fraction: float) -> np.ndarray:
    s = np.zeros(len(input_names))
    names = list(input_names)
    if "gpu" in names:
        s[names.index("gpu")] = gpu_fraction
    if "hbm" in names:
        s[names.index("hbm")] = 1.0 - gpu_fraction if "gpu" in names else 1.0
    if s.sum() <= 0:
        raise ValueError("geometry has neither a 'gpu' nor an 'hbm' source for the external load")
    return s / s.sum()


@dataclass(frozen=True)
class LimitRow:
    component: str
    limit_c: float
    load_w: float            # external load at which the component reaches its limit
    binding_output: str      # the output of the component that gets there first
    first: bool              # this component binds first


def limit_solve(R: np.ndarray, geometry: Geometry, *, ambient_c: float, limits_c: Mapping[str, float],
                p_hbf_w: np.ndarray, split: np.ndarray) -> list[LimitRow]:
    base = R @ p_hbf_w
    slope = R @ split
    rows = []
    for comp in COMPONENTS:
        idx = [i for i, o in enumerate(geometry.outputs) if o.limit == comp]
        if not idx or comp not in limits_c:
            continue
        loads = [(limits_c[comp] - ambient_c - base[i]) / slope[i] for i in idx]
        j = int(np.argmin(loads))
        rows.append((comp, float(limits_c[comp]), float(loads[j]), geometry.outputs[idx[j]].name))
    first = min(r[2] for r in rows)
    return [LimitRow(c, lim, w, o, w == first) for c, lim, w, o in rows]


def sweep_load(R: np.ndarray, *, ambient_c: float, p_hbf_w: np.ndarray, split: np.ndarray,
               loads_w: np.ndarray) -> np.ndarray:
    """Steady temperatures (len(loads)×q) versus external heat load (paper Fig. 3b)."""
    return ambient_c + (R @ p_hbf_w)[None, :] + np.outer(loads_w, R @ split)
