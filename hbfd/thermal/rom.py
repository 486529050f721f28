"""Reduced-order thermal model: ERA on 1 W unit-step responses of the full-order model.

Identification (Juang & Pappa 1985), on the rise over ambient ``θ``:

1. Each input j gets 1 W from rest; the FOM (float64, direct LU) records the outputs ``s[k]`` at the
   end of step k. Markov parameters: ``Y0 = s[0]``, ``Yk = s[k] − s[k−1]``.
2. Block Hankel ``H0 = [Y_{i+j+1}]``, ``H1 = [Y_{i+j+2}]`` (i, j < m); SVD ``H0 = U Σ Vᵀ``.
3. Order r = number of singular values with ``σ_r/σ_1`` above the floor (1e-12 by default; noise
   below that floor makes extra states unstable), capped at ``r_max`` (256).
4. ``A = Σr^-½ Urᵀ H1 Vr Σr^-½``, ``B = (Σr^½ Vrᵀ)[:, :p]``, ``C = (Ur Σr^½)[:q]``, ``D = Y0``.
5. Checks: ρ(A) < 1 (refused otherwise), eigenvalues of an RC network are real in (0, 1) (reported).

The model is ``x[k+1] = A x[k] + B p[k] + b``, ``T[k] = C x[k] + D p[k] + d`` with ``b = 0`` and
``d = T_amb`` (identification is on ``θ``; ambient is the affine term).

Sample alignment (the "one-sample feedthrough" of the HBFSim paper §6.3): ``p[k]`` is the power held
over ``[kΔt, (k+1)Δt)``; ``T[k]`` is the temperature at the END of that interval, ``(k+1)Δt``. The
FOM's backward-Euler field ``θ[k+1]`` is the same instant. Comparing ``T[k]`` with the FOM's field at
``kΔt`` instead (the start of the interval, where both are still at ambient for k = 0) leaves a
first-sample discrepancy equal to ``D·p[0]`` exactly; :func:`alignment_check` measures both.

Why our ERA and not ``control.eigensys_realization`` (python-control 0.10.2), which implements the
same algebra: theirs (a) needs r up front and ties the Hankel size to it (m = n = 2r by default), so
choosing r at the singular-value floor means a second call; (b) takes a full ``np.linalg.svd`` with
``full_matrices=True`` (O(N³) memory for U and V even when r ≪ N); (c) multiplies B by ``dt`` when
``dt`` is a float (unit-area impulse convention), a silent factor-100 error at 10 ms if one passes
the sample period; (d) returns a ``StateSpace`` without the stability and physics checks. The two
agree to round-off on the same data when called with ``dt=True`` and the same m, n and r
(:func:`compare_with_python_control`, reported by ``hbfd thermal validate``).

Pure: saving/loading takes explicit paths given by the caller.
"""
from __future__ import annotations

import io
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.linalg as sl

from hbfcommon.errors import HbfError
from hbfcommon.fsutil import atomic_write_bytes

from .fom import PackageModel

log = logging.getLogger(__name__)

ROM_FORMAT = "hbfsim.thermal.rom/1"
DEFAULT_DT_S = 0.01
DEFAULT_HANKEL_BLOCKS = 150
DEFAULT_SV_FLOOR = 1e-12
R_MAX = 256
REAL_POLE_TOL = 1e-9          # |Im λ| above this is a complex pole (the modal form refuses those)


class RomError(HbfError):
    """The reduced-order fit failed a check (unstable, too large, stale cache)."""


def markov_from_steps(steps: np.ndarray) -> np.ndarray:
    """Unit-step responses (K×q×p) -> Markov parameters Y0..Y_{K-1} (K×q×p)."""
    Y = np.empty_like(steps)
    Y[0] = steps[0]
    Y[1:] = steps[1:] - steps[:-1]
    return Y


def block_hankel(Y: np.ndarray, m: int, n: int, shift: int) -> np.ndarray:
    """(m·q)×(n·p) block Hankel with block (i, j) = Y[i + j + shift]."""
    q, p = Y.shape[1:]
    ii = np.arange(m)[:, None] + np.arange(n)[None, :] + shift
    return Y[ii].transpose(0, 2, 1, 3).reshape(m * q, n * p)


@dataclass
class EraFit:
    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray
    singular_values: np.ndarray
    order: int
    spectral_radius: float
    max_imag_eig: float


def era(Y: np.ndarray, *, m: int, n: int | None = None, sv_floor: float = DEFAULT_SV_FLOOR,
        r_max: int = R_MAX, r: int | None = None) -> EraFit:
    """ERA on Markov parameters ``Y`` (K×q×p, K ≥ m + n + 1)."""
    n = m if n is None else n
    if Y.shape[0] < m + n + 1:
        raise RomError(f"ERA needs {m + n + 1} Markov parameters, got {Y.shape[0]}")
    q, p = Y.shape[1:]
    H0 = block_hankel(Y, m, n, 1)
    H1 = block_hankel(Y, m, n, 2)
    U, s, Vt = sl.svd(H0, full_matrices=False, lapack_driver="gesdd")
    if r is None:
        r = int(np.count_nonzero(s / s[0] > sv_floor))
        r = min(r, r_max)
    if not 1 <= r <= min(r_max, len(s)):
        raise RomError(f"ERA order {r} outside 1..{r_max}")
    sr = s[:r]
    si = 1.0 / np.sqrt(sr)
    A = (si[:, None] * (U[:, :r].T @ H1 @ Vt[:r].T)) * si[None, :]
    B = (np.sqrt(sr)[:, None] * Vt[:r])[:, :p]
    C = (U[:q, :r] * np.sqrt(sr)[None, :])
    ev = np.linalg.eigvals(A)
    rho = float(np.abs(ev).max())
    return EraFit(A, B, C, Y[0].copy(), s, r, rho, float(np.abs(ev.imag).max()))


@dataclass
class ThermalROM:
    """Discrete state space at ``dt_s``: x' = A x + B p + b, T = C x + D p + d (°C)."""

    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray
    b: np.ndarray
    d: np.ndarray
    dt_s: float
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    geometry_sha256: str
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.x = np.zeros(self.A.shape[0])

    @property
    def order(self) -> int:
        return self.A.shape[0]

    @property
    def dt_ns(self) -> int:
        return int(round(self.dt_s * 1e9))

    def reset(self) -> None:
        self.x = np.zeros(self.order)

    def step(self, p_w: np.ndarray) -> np.ndarray:
        """Temperatures (°C) at the end of an interval with power ``p_w`` held over it; advances x."""
        p = np.asarray(p_w, float)
        y = self.C @ self.x + self.D @ p + self.d
        self.x = self.A @ self.x + self.B @ p + self.b
        return y

    def run(self, p_trace_w: np.ndarray) -> np.ndarray:
        P = np.asarray(p_trace_w, float)
        out = np.empty((P.shape[0], len(self.output_names)))
        for k in range(P.shape[0]):
            out[k] = self.step(P[k])
        return out

    def dc_gain(self) -> np.ndarray:
        """Steady-state R_ij = ΔT_i / P_j (K/W)."""
        r = self.order
        return self.C @ np.linalg.solve(np.eye(r) - self.A, self.B) + self.D

    def steady_state_c(self, p_w: np.ndarray) -> np.ndarray:
        return self.dc_gain() @ np.asarray(p_w, float) + self.d

    # ---- modal form (fast long-horizon simulation) -----------------------------------------
    def modal(self) -> "ModalROM":
        ev, V = np.linalg.eig(self.A)
        if np.abs(ev.imag).max() > 1e-9 * max(1.0, np.abs(ev).max()):
            raise RomError("ROM has complex poles; modal fast path needs real eigenvalues",
                           max_imag=float(np.abs(ev.imag).max()))
        ev = ev.real
        V = V.real
        Vi = np.linalg.inv(V)
        return ModalROM(lam=ev, Bm=Vi @ self.B, Cm=self.C @ V, D=self.D, d=self.d, dt_s=self.dt_s,
                        output_names=self.output_names, input_names=self.input_names)

    # ---- persistence ------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.savez(buf, format=np.array(ROM_FORMAT), A=self.A, B=self.B, C=self.C, D=self.D, b=self.b, d=self.d,
                 dt_s=np.array(self.dt_s), input_names=np.array(self.input_names),
                 output_names=np.array(self.output_names), geometry_sha256=np.array(self.geometry_sha256),
                 meta=np.array(repr(self.meta)))
        return buf.getvalue()

    def save(self, path: str | Path) -> None:
        """Atomic replace."""
        atomic_write_bytes(path, self.to_bytes())

    @classmethod
    def load(cls, path: str | Path, *, geometry_sha256: str | None = None) -> "ThermalROM":
        with np.load(path, allow_pickle=False) as z:
            if str(z["format"]) != ROM_FORMAT:
                raise RomError(f"{path}: not a {ROM_FORMAT} file", file=str(path))
            sha = str(z["geometry_sha256"])
            if geometry_sha256 is not None and sha != geometry_sha256:
                raise RomError(f"{path}: ROM was fit on geometry {sha[:12]}, not {geometry_sha256[:12]}",
                               file=str(path))
            import ast
            rom = cls(A=z["A"], B=z["B"], C=z["C"], D=z["D"], b=z["b"], d=z["d"], dt_s=float(z["dt_s"]),
                      input_names=tuple(str(s) for s in z["input_names"]),
                      output_names=tuple(str(s) for s in z["output_names"]), geometry_sha256=sha,
                      meta=ast.literal_eval(str(z["meta"])))
        _check_stable(rom.A)
        return rom


@dataclass
class ModalROM:
    """Diagonal (modal) form of a ROM with real poles: z' = λ∘z + Bm p, T = Cm z + D p + d.

    Over a stretch of n steps with constant power the whole output sequence is closed form, which is
    what lets an 86,400 s run take seconds: :meth:`advance_constant`."""

    lam: np.ndarray
    Bm: np.ndarray
    Cm: np.ndarray
    D: np.ndarray
    d: np.ndarray
    dt_s: float
    output_names: tuple[str, ...]
    input_names: tuple[str, ...]

    def __post_init__(self):
        self.z = np.zeros(len(self.lam))

    def reset(self) -> None:
        self.z = np.zeros(len(self.lam))

    def step(self, p_w: np.ndarray) -> np.ndarray:
        p = np.asarray(p_w, float)
        y = self.Cm @ self.z + self.D @ p + self.d
        self.z = self.lam * self.z + self.Bm @ p
        return y

    def outputs_constant(self, p_w: np.ndarray, n: int) -> np.ndarray:
        """Outputs (n×q) of the next n steps if ``p_w`` is held, without advancing."""
        p = np.asarray(p_w, float)
        one_minus = 1.0 - self.lam
        zss = (self.Bm @ p) / one_minus
        if (self.lam <= 0).any():
            powers = self.lam[None, :] ** np.arange(n)[:, None]
        else:                                                  # n×r: λ^j, via exp (10× faster)
            powers = np.exp(np.arange(n)[:, None] * np.log(self.lam)[None, :])
        zj = powers * (self.z - zss)[None, :] + zss[None, :]
        return zj @ self.Cm.T + (self.D @ p + self.d)[None, :]

    def advance_constant(self, p_w: np.ndarray, n: int) -> None:
        p = np.asarray(p_w, float)
        zss = (self.Bm @ p) / (1.0 - self.lam)
        self.z = self.lam ** n * (self.z - zss) + zss


def _check_stable(A: np.ndarray) -> float:
    rho = float(np.abs(np.linalg.eigvals(A)).max())
    if not rho < 1.0:
        raise RomError(f"ROM is unstable: spectral radius {rho:.9f} >= 1", spectral_radius=rho)
    return rho


def fit_rom(model: PackageModel, *, dt_s: float = DEFAULT_DT_S, hankel_blocks: int = DEFAULT_HANKEL_BLOCKS,
            sv_floor: float = DEFAULT_SV_FLOOR, r_max: int = R_MAX, steps: np.ndarray | None = None) -> ThermalROM:
    """Unit-step the FOM from rest on every input, then ERA. ``steps`` may pass precomputed responses."""
    m = hankel_blocks
    if steps is None:
        log.info("thermal ROM: %d unit-step samples × %d inputs on the %d-node FOM", 2 * m + 2,
                 len(model.input_names), model.n_nodes)
        steps = model.stepper(dt_s).unit_step_responses(2 * m + 2)
    Y = markov_from_steps(steps)
    fit = era(Y, m=m, sv_floor=sv_floor, r_max=r_max)
    # an order above the floor can still come out unstable, or with complex poles (an RC network has real ones:
    # a complex pair is fit noise, and the modal fast path needs real poles): step down until neither
    while (fit.spectral_radius >= 1.0 or fit.max_imag_eig > REAL_POLE_TOL) and fit.order > 1:
        log.warning("ERA order %d: ρ=%.9f, largest imaginary part of a pole %.3g; trying %d", fit.order,
                    fit.spectral_radius, fit.max_imag_eig, fit.order - 1)
        fit = era(Y, m=m, r=fit.order - 1)
    _check_stable(fit.A)
    q, p = Y.shape[1:]
    meta = {"order": fit.order, "hankel_blocks": m, "sv_floor": sv_floor, "spectral_radius": fit.spectral_radius,
            "max_imag_eig": fit.max_imag_eig, "sigma_r_over_sigma_1": float(fit.singular_values[fit.order - 1]
                                                                           / fit.singular_values[0]),
            "fom_nodes": model.n_nodes, "geometry": model.geometry.name}
    return ThermalROM(A=fit.A, B=fit.B, C=fit.C, D=fit.D, b=np.zeros(fit.order),
                      d=np.full(q, model.ambient_c), dt_s=dt_s, input_names=model.input_names,
                      output_names=model.output_names, geometry_sha256=model.geometry.sha256, meta=meta)


def cached_rom(model: PackageModel, cache_dir: str | Path, **kw) -> ThermalROM:
    """Load the ROM for this geometry (by SHA-256 and fit options) from ``cache_dir``, or fit and save it."""
    dt_s = kw.get("dt_s", DEFAULT_DT_S)
    m = kw.get("hankel_blocks", DEFAULT_HANKEL_BLOCKS)
    path = Path(cache_dir) / f"rom-{model.geometry.sha256[:16]}-dt{int(dt_s * 1e6)}us-m{m}.npz"
    if path.exists():
        try:
            return ThermalROM.load(path, geometry_sha256=model.geometry.sha256)
        except (RomError, OSError, KeyError, ValueError) as e:
            log.warning("ignoring ROM cache %s: %s", path, e)
    rom = fit_rom(model, **kw)
    rom.save(path)
    return rom


def compare_with_python_control(steps: np.ndarray, *, m: int, r: int, dt_s: float) -> dict[str, float]:
    """Fit python-control's ``eigensys_realization`` on the same Markov data (same m, n, r; ``dt=True``
    so it does not scale B) and report how far its model is from ours.

    python-control is a dev dependency: without it the comparison is skipped and the report says so
    (``{"skipped": reason}``)."""
    try:
        import control
    except ImportError:
        return {"skipped": "python-control (the `control` package, a dev dependency) is not installed: "
                           "the comparison with its eigensys_realization was not run"}
    import time
    Y = markov_from_steps(steps)
    t0 = time.perf_counter()
    ours = era(Y, m=m, r=r)
    t_ours = time.perf_counter() - t0
    YY = np.transpose(Y, (1, 2, 0))          # (q, p, l)
    t0 = time.perf_counter()
    sys, _ = control.eigensys_realization(YY, r, m=m, n=m, dt=True)
    t_theirs = time.perf_counter() - t0
    r_ours = ours.C @ np.linalg.solve(np.eye(r) - ours.A, ours.B) + ours.D
    A2, B2, C2, D2 = (np.asarray(x) for x in (sys.A, sys.B, sys.C, sys.D))
    r_theirs = C2 @ np.linalg.solve(np.eye(r) - A2, B2) + D2
    # Markov parameters of both (realizations differ by a similarity transform)
    K = min(200, Y.shape[0])
    err = 0.0
    x1 = ours.B.copy(); x2 = B2.copy()
    for _ in range(1, K):
        err = max(err, float(np.abs(ours.C @ x1 - C2 @ x2).max()))
        x1 = ours.A @ x1; x2 = A2 @ x2
    return {"order": r, "hankel_blocks": m, "seconds_ours": t_ours, "seconds_python_control": t_theirs,
            "max_markov_diff_k_per_w": err, "max_dc_gain_diff_k_per_w": float(np.abs(r_ours - r_theirs).max()),
            "spectral_radius_ours": ours.spectral_radius,
            "spectral_radius_python_control": float(np.abs(np.linalg.eigvals(A2)).max())}
