"""Full-order package model: the finite-volume RC network of a geometry (3D-ICE discretization).

One thermal cell per (z-cell, row, column). Conduction between neighbouring cells is Fourier's law
with two half-cells in series; the lid top ties to the heat-sink node (or straight to ambient) and
the substrate bottom ties to ambient through the 3D-ICE Robin series form
``G_eq = 2·k·h·A / (Δz·h + 2·k)`` (esl-epfl/3d-ice ``get_conductance_top``). Capacitance is
``C = c_v·Δx·Δy·Δz``. GPU, HBM and HBF share ONE conductance matrix ``G`` and ONE capacitance
vector ``C``; the state is the rise over ambient, ``θ = T − T_amb``, so ambient leaves the equations:

    C dθ/dt = −G θ + B p

Transient: backward Euler (L-stable; 3D-ICE's scheme), factored once with SuperLU:

    (G + C/Δt) θ[k+1] = (C/Δt) θ[k] + B p[k]

``p[k]`` is the power held over ``[kΔt, (k+1)Δt)`` and ``θ[k+1]`` the field at its end. Outputs
are volume-weighted block means of a layer (a linear map ``Cout``).

Pure: no files, clocks or sockets.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .geometry import Geometry

StepCallback = Callable[[int, int], None]      # (steps done, steps in all): progress of a stepping loop

log = logging.getLogger(__name__)


def robin_conductance(k_w_mk: float, h_w_m2k: float, area_m2: float, dz_m: float) -> float:
    """3D-ICE boundary conductance: half-cell conduction in series with convection."""
    return 2.0 * k_w_mk * h_w_m2k * area_m2 / (dz_m * h_w_m2k + 2.0 * k_w_mk)


def series_conductance(k1: np.ndarray | float, l1: float, k2: np.ndarray | float, l2: float,
                       area: float) -> np.ndarray | float:
    """Two half-cells of lengths l1, l2 (m) in series through a face of ``area`` (m²)."""
    return area / (l1 / k1 + l2 / k2)


@dataclass
class PackageModel:
    """The assembled network. Node ``n = z·ny·nx + iy·nx + ix``; the sink node (if any) is last."""

    geometry: Geometry
    G: sp.csr_matrix            # N×N, symmetric positive definite (ambient ties on the diagonal)
    C: np.ndarray               # N, J/K
    B: sp.csr_matrix            # N×p, W -> W per node
    Cout: sp.csr_matrix         # q×N, volume-weighted means
    g_ambient: np.ndarray       # N, conductance of each node to ambient (W/K)
    z_layer: np.ndarray         # z-cell -> index of its layer
    dz_m: np.ndarray            # z-cell thickness
    nx: int
    ny: int

    @property
    def n_nodes(self) -> int:
        return self.G.shape[0]

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.geometry.sources

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.geometry.outputs)

    @property
    def ambient_c(self) -> float:
        return self.geometry.ambient_c

    # ---- steady state ------------------------------------------------------------------------
    def steady_rise(self, p_w: np.ndarray) -> np.ndarray:
        """Field rise over ambient (N) at steady state for constant power vector(s) ``p_w``."""
        return _factor(self.G).solve(np.asarray(self.B @ np.asarray(p_w, float)))

    def resistance_matrix(self) -> np.ndarray:
        """R[i, j] = ΔT_i / P_j in K/W (q×p), from G θ = B at steady state."""
        lu = _factor(self.G)
        theta = lu.solve(np.asarray(self.B.toarray()))
        return np.asarray(self.Cout @ theta)

    def heat_out_w(self, theta: np.ndarray) -> float:
        """Heat leaving through every boundary (to ambient) for the field ``theta``."""
        return float(self.g_ambient @ theta)

    def stepper(self, dt_s: float) -> "BackwardEuler":
        return BackwardEuler(self, dt_s)


class BackwardEuler:
    """Transient stepping with one factorization of ``G + C/Δt``."""

    def __init__(self, model: PackageModel, dt_s: float):
        if not dt_s > 0:
            raise ValueError("dt_s must be > 0")
        self.model = model
        self.dt_s = float(dt_s)
        self._c_dt = model.C / dt_s
        self._lu = _factor(model.G + sp.diags(self._c_dt))
        self.theta = np.zeros(model.n_nodes)

    def reset(self) -> None:
        self.theta = np.zeros(self.model.n_nodes)

    def step(self, p_w: np.ndarray) -> np.ndarray:
        """Advance one Δt with power ``p_w`` held over it; returns the outputs (°C) at its end."""
        rhs = self._c_dt * self.theta + self.model.B @ np.asarray(p_w, float)
        self.theta = self._lu.solve(rhs)
        return self.model.Cout @ self.theta + self.model.ambient_c

    def run(self, p_trace_w: np.ndarray) -> np.ndarray:
        """Outputs (K×q, °C) at the ends of K steps from the current state; row k follows p[k]."""
        p_trace_w = np.asarray(p_trace_w, float)
        out = np.empty((p_trace_w.shape[0], len(self.model.output_names)))
        for k in range(p_trace_w.shape[0]):
            out[k] = self.step(p_trace_w[k])
        return out

    def run_many(self, p_traces_w: np.ndarray, on_step: StepCallback | None = None) -> np.ndarray:
        """Several traces (n×K×p) from rest at once (one multi-RHS solve per step): n×K×q °C.
        ``on_step(k + 1, K)`` after each step (progress; the model itself keeps no clock)."""
        P = np.asarray(p_traces_w, float)
        n, K, _ = P.shape
        m = self.model
        X = np.zeros((m.n_nodes, n))
        out = np.empty((n, K, len(m.output_names)))
        c = self._c_dt[:, None]
        for k in range(K):
            X = self._lu.solve(c * X + m.B @ P[:, k, :].T)
            out[:, k, :] = (m.Cout @ X).T + m.ambient_c
            if on_step is not None:
                on_step(k + 1, K)
        return out

    def unit_step_responses(self, n_steps: int, on_step: StepCallback | None = None) -> np.ndarray:
        """Output rise (n_steps×q×p) after k+1 steps of 1 W on each input from rest, all inputs at once
        (multi-RHS solves, float64, direct LU: ERA needs noise-free Markov data). ``on_step(k + 1,
        n_steps)`` after each step."""
        m = self.model
        Bd = np.asarray(m.B.toarray())
        X = np.zeros((m.n_nodes, Bd.shape[1]))
        out = np.empty((n_steps, len(m.output_names), Bd.shape[1]))
        c = self._c_dt[:, None]
        for k in range(n_steps):
            X = self._lu.solve(c * X + Bd)
            out[k] = m.Cout @ X
            if on_step is not None:
                on_step(k + 1, n_steps)
        return out


def _factor(M: sp.spmatrix):
    """SuperLU of a symmetric positive-definite network matrix. Minimum-degree ordering on A+Aᵀ with
    symmetric mode gives 2.3× less fill than the default COLAMD on these 3D grids (measured)."""
    return spla.splu(sp.csc_matrix(M), permc_spec="MMD_AT_PLUS_A",
                     options={"SymmetricMode": True})


def build_model(geometry: Geometry) -> PackageModel:
    """Assemble G, C, B, Cout from a geometry (vectorized; ~10⁴ nodes in well under a second)."""
    g = geometry
    nx, ny = g.nx, g.ny
    cell = g.cell_mm * 1e-3
    mats = g.materials
    # z-cells
    z_layer, dz = [], []
    for li, L in enumerate(g.layers):
        for _ in range(L.nz):
            z_layer.append(li)
            dz.append(L.thickness_um * 1e-6 / L.nz)
    z_layer_a = np.asarray(z_layer)
    dz_a = np.asarray(dz)
    Z = len(dz)
    xc = (np.arange(nx) + 0.5) * g.cell_mm
    yc = (np.arange(ny) + 0.5) * g.cell_mm
    XX, YY = np.meshgrid(xc, yc)                      # (ny, nx)
    block_mask: dict[str, np.ndarray] = {}
    for bname, rects in g.blocks.items():
        m = np.zeros((ny, nx), bool)
        for x0, y0, x1, y1 in rects:
            m |= (XX > x0) & (XX < x1) & (YY > y0) & (YY < y1)
        block_mask[bname] = m
    k = np.empty((Z, ny, nx))
    cv = np.empty((Z, ny, nx))
    layer_k = []
    for li, L in enumerate(g.layers):
        kl = np.full((ny, nx), mats[L.material].k_w_mk)
        cl = np.full((ny, nx), mats[L.material].cv_j_m3k)
        for r in L.regions:
            msk = block_mask[r.block]
            kl[msk] = mats[r.material].k_w_mk
            cl[msk] = mats[r.material].cv_j_m3k
        layer_k.append((kl, cl))
    for z in range(Z):
        k[z], cv[z] = layer_k[z_layer_a[z]]
    per_layer = nx * ny
    n_cells = Z * per_layer
    has_sink = g.heat_sink.sink_capacitance_j_k > 0
    N = n_cells + (1 if has_sink else 0)
    idx = np.arange(n_cells).reshape(Z, ny, nx)
    area_xy = cell * cell
    rows, cols, vals = [], [], []

    def couple(a: np.ndarray, b: np.ndarray, gval: np.ndarray) -> None:
        rows.append(a.ravel()); cols.append(b.ravel()); vals.append(gval.ravel())

    dzb = dz_a[:, None, None]
    # lateral x and y: face area = cell × dz; half-cell lengths cell/2
    gx = series_conductance(k[:, :, :-1], cell / 2, k[:, :, 1:], cell / 2, 1.0) * (cell * dzb)
    couple(idx[:, :, :-1], idx[:, :, 1:], gx)
    gy = series_conductance(k[:, :-1, :], cell / 2, k[:, 1:, :], cell / 2, 1.0) * (cell * dzb)
    couple(idx[:, :-1, :], idx[:, 1:, :], gy)
    # vertical
    if Z > 1:
        gz = area_xy / (dz_a[:-1, None, None] / (2 * k[:-1]) + dz_a[1:, None, None] / (2 * k[1:]))
        couple(idx[:-1], idx[1:], gz)
    g_amb = np.zeros(N)
    hs = g.heat_sink
    g_top = robin_conductance(k[-1], hs.h_top_w_m2k, area_xy, dz_a[-1])
    if has_sink:
        sink = n_cells
        couple(idx[-1], np.full((ny, nx), sink), g_top)
        g_amb[sink] = 1.0 / hs.sink_to_ambient_k_w
    else:
        g_amb[idx[-1].ravel()] += g_top.ravel()
    if hs.h_bottom_w_m2k > 0:
        g_amb[idx[0].ravel()] += robin_conductance(k[0], hs.h_bottom_w_m2k, area_xy, dz_a[0]).ravel()
    r = np.concatenate(rows); c = np.concatenate(cols); v = np.concatenate(vals)
    W = sp.coo_matrix((v, (r, c)), shape=(N, N))
    W = (W + W.T).tocsr()
    deg = np.asarray(W.sum(axis=1)).ravel()
    G = (sp.diags(deg + g_amb) - W).tocsr()
    C = np.empty(N)
    C[:n_cells] = (cv * dzb * area_xy).ravel()
    if has_sink:
        C[n_cells] = hs.sink_capacitance_j_k
    # sources: power spread over all z-cells of the region in proportion to volume
    vol = np.broadcast_to(dzb * area_xy, (Z, ny, nx))
    src_index = {s: j for j, s in enumerate(g.sources)}
    b_rows, b_cols, b_w = [], [], []
    for j, sname in enumerate(g.sources):
        cells, weights = [], []
        for li, L in enumerate(g.layers):
            for reg in L.regions:
                if reg.source != sname:
                    continue
                zs = np.nonzero(z_layer_a == li)[0]
                for z in zs:
                    sel = idx[z][block_mask[reg.block]]
                    cells.append(sel)
                    weights.append(vol[z][block_mask[reg.block]])
        cells_a = np.concatenate(cells)
        w = np.concatenate(weights)
        if w.sum() <= 0:
            raise ValueError(f"source {sname!r} covers no cell")
        b_rows.append(cells_a); b_cols.append(np.full(len(cells_a), src_index[sname])); b_w.append(w / w.sum())
    B = sp.coo_matrix((np.concatenate(b_w), (np.concatenate(b_rows), np.concatenate(b_cols))),
                      shape=(N, len(g.sources))).tocsr()
    o_rows, o_cols, o_w = [], [], []
    layer_index = {L.name: i for i, L in enumerate(g.layers)}
    for oi, o in enumerate(g.outputs):
        zs = np.nonzero(z_layer_a == layer_index[o.layer])[0]
        msk = block_mask[o.block]
        if not msk.any():
            raise ValueError(f"output {o.name!r}: block {o.block!r} covers no cell center on the grid")
        cells = np.concatenate([idx[z][msk] for z in zs])
        w = np.concatenate([vol[z][msk] for z in zs])
        o_rows.append(np.full(len(cells), oi)); o_cols.append(cells); o_w.append(w / w.sum())
    Cout = sp.coo_matrix((np.concatenate(o_w), (np.concatenate(o_rows), np.concatenate(o_cols))),
                         shape=(len(g.outputs), N)).tocsr()
    log.info("thermal FOM %s: %d×%d×%d cells + %d sink = %d nodes", g.name, nx, ny, Z, int(has_sink), N)
    return PackageModel(geometry=g, G=G, C=C, B=B, Cout=Cout, g_ambient=g_amb, z_layer=z_layer_a,
                        dz_m=dz_a, nx=nx, ny=ny)
