"""Calibration of the package boundary against a real card (issue 17): fit to recorded NVML phases.

What is fitted. The package model proper (layers, materials, footprints: ``profiles/thermal/<name>.json``)
is kept; what the card decides and the geometry only assumes is its boundary and its power in:

* ``coolant_c``           the coolant / inlet temperature the heat sink rejects to (°C);
* ``sink_to_ambient_k_w`` the cold plate's resistance to the coolant (K/W; its inverse is the
                          heat-sink conductance);
* ``sink_tau_s``          the cold plate's time constant (its capacitance is ``tau / R``, J/K);
* ``die_fraction``        the share of the measured board power (minus the memory-rail power where
                          the card reports it) dissipated in the compute die;
* ``hbm_fraction``        the share dissipated in the HBM region (of the memory-rail power where
                          reported, else of the board power); the rest is off-package (VRM, board).

Model (:class:`CalibratedModel`). The package is the geometry's ROM with the sink PINNED (its lid ties to a
node held at the sink temperature: ``pinned_geometry``), and the cold plate is one lumped node outside it
that every watt dissipated in the package reaches:
``T_s[k+1] = a T_s[k] + (1 − a) R P_pkg[k]`` with ``a = exp(−Δt/τ)``; outputs
``T[k] = coolant + T_s[k+1] + C x[k] + D p[k]`` (the ROM's end-of-interval convention). This is again a
discrete state space, :func:`calibrated_rom` returns it as a :class:`ThermalROM` (one more state) that the
daemon's service runs unchanged. The compute-die output (block mean) is compared with the GPU sensor, the
HBM output with the memory sensor where the card has one.

Fit. The board power sampled at ≥ 10 Hz is held over the ROM's 10 ms steps; each segment (one continuous
recording: the GPU script may record in two device calls) starts from the steady state of its first
power and its first ``settle_s`` are left out of the residuals; phases whose duty-cycle window the sampling
does not resolve (:func:`aliased_duty_phases`) have their power held at the phase mean. For a fixed τ the
outputs are linear in (coolant, die_fraction, hbm_fraction, R·fractions): a variable-projection search over τ
(bounded linear least squares on a log grid, refined by a bounded scalar search) gives a start at each of the
grid's lowest local minima, ``scipy.optimize.least_squares`` refines all five with bounds from each, and the
lowest training cost wins. Residuals
are taken on the training phases; the report gives RMS / max error per held-out phase (goal ≤ 1 K RMS,
≤ 2 K max; the sensors read whole °C, so 0.29 K RMS is the floor).

Recorder v2 (2026-12-05, docs/thermal.md §8): where every phase carries NVML's total energy counter (CSV column
``energy_mj``), the board power is its mean over each interval (:func:`energy_power`; spans start at each phase's
load switch) and a reading's output is the end of the last model step before it; ``free_start`` fits each segment's
cold plate start (``sink_start_k``); ``split_kinds`` gives load kinds their own die/HBM shares (a diagnosis:
:func:`load_fragment` refuses it); :func:`fast_steps` compares the sensors' first 0.1-2 s after each large step.

Bad recordings are refused with :class:`CalibrationError` naming what is wrong (too few or too short
phases, sampling under 10 Hz, gaps, time going backwards, non-finite or out-of-range values, phases whose
powers do not differ enough to separate the sink from the split, missing card/driver/date).

Output: :func:`fragment` (``hbfsim.thermal.calibration/1``: every number with provenance; kind ``measured`` for a
card's recording, ``synthetic`` for one the model generated). In the daemon (``hbfd serve --thermal-calibration``):
:func:`load_fragment` checks a fragment against the profile's package and refuses it with a named ``reason``
(:data:`REFUSALS`); :func:`calibrated_rom` is the model the daemon then runs (docs/thermal.md §8.1).

Pure: reading and writing files goes through explicit paths handed in by the caller.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Collection, Sequence

import numpy as np

from hbfcommon.errors import ConfigError
from hbfcommon.fsutil import atomic_write_bytes, atomic_write_json

from .geometry import Geometry
from .rom import ThermalROM

RECORDING_SCHEMA = "hbfsim.thermal.recording/1"
FRAGMENT_SCHEMA = "hbfsim.thermal.calibration/1"
PHASE_COLUMNS = ("t_ns", "board_power_w", "gpu_temp_c", "mem_temp_c", "mem_power_w")
# NVML's total energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded), read at every sample
# by the v2 recorder: written as a sixth column only where present, so older recordings (and their SHA-256) are as
# they were
ENERGY_COLUMN = "energy_mj"
GOAL_RMS_K = 1.0
GOAL_MAX_K = 2.0
PARAMS = ("coolant_c", "sink_to_ambient_k_w", "sink_tau_s", "die_fraction", "hbm_fraction")
# what the fitted shares are shares of (fragment "power_split.of"): the board power (the GPU splits it over die and
# HBM), or the board less the memory rail (die) and the memory rail (HBM), where the card reports that rail
SPLIT_BOARD, SPLIT_RAIL = "board", "board-minus-memory-rail"
SPLIT_TEXT = {SPLIT_BOARD: "board power (both shares)",
              SPLIT_RAIL: "board - memory rail (die), memory rail (hbm)"}


class CalibrationError(ConfigError):
    """A recording cannot be used for calibration (or the fit cannot be made); the message says why."""


# ---------------------------------------------------------------------------------------------- recording
@dataclass
class Phase:
    """One phase of a recording: samples of NVML board power and the temperature sensors.

    ``mem_temp_c`` / ``mem_power_w`` are NaN where the card does not report them (then for every sample of
    the recording). ``segment``: phases of one segment were sampled back to back (one continuous clock)."""

    name: str
    kind: str
    segment: int
    t_ns: np.ndarray
    board_power_w: np.ndarray
    gpu_temp_c: np.ndarray
    mem_temp_c: np.ndarray
    mem_power_w: np.ndarray
    target: dict[str, Any] = field(default_factory=dict)
    energy_mj: np.ndarray | None = None     # NVML's total energy counter at each sample (mJ); None where not read

    @property
    def seconds(self) -> float:
        """The time the phase's samples cover: first sample to last, plus the last sample's hold (one median
        period: each reading stands until the next, as the fit holds the power). A 60 s phase sampled at 20 Hz
        holds 1200 samples spanning 59.95 s; it covers 60 s."""
        if len(self.t_ns) < 2:
            return 0.0
        span = int(self.t_ns[-1] - self.t_ns[0])
        return float(span + int(np.median(np.diff(self.t_ns)))) / 1e9


@dataclass
class Recording:
    card: str
    driver: str
    date: str
    phases: list[Phase]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def has_mem_temp(self) -> bool:
        return all(np.isfinite(p.mem_temp_c).all() for p in self.phases) if self.phases else False

    @property
    def has_mem_power(self) -> bool:
        return all(np.isfinite(p.mem_power_w).all() for p in self.phases) if self.phases else False

    @property
    def has_energy(self) -> bool:
        """Every phase carries NVML's energy counter (the fit then takes the power from it)."""
        return all(p.energy_mj is not None for p in self.phases) if self.phases else False

    @property
    def synthetic(self) -> bool:
        """Generated by the model itself (:func:`synthetic_recording`), not recorded on a card."""
        return bool(self.meta.get("synthetic"))

    def sha256(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps([self.card, self.driver, self.date], sort_keys=True).encode())
        if self.synthetic:
            h.update(b"synthetic")
        for p in self.phases:
            h.update(p.name.encode())
            h.update(_phase_csv(p))
        return h.hexdigest()


def _phase_csv(p: Phase) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = [p.t_ns, p.board_power_w, p.gpu_temp_c, p.mem_temp_c, p.mem_power_w]
    if p.energy_mj is not None:
        w.writerow(PHASE_COLUMNS + (ENERGY_COLUMN,))
        cols.append(p.energy_mj)
    else:
        w.writerow(PHASE_COLUMNS)
    for row in zip(*cols):
        w.writerow([int(row[0])] + ["" if not math.isfinite(v) else repr(float(v)) for v in row[1:]])
    return buf.getvalue().encode()


def write_phase(directory: str | Path, index: int, phase: Phase, meta: dict[str, Any]) -> Path:
    """Add one phase to a recording directory (atomic: the phase CSV, then ``recording.json``); what was
    written before stays, so a recording interrupted between phases keeps its finished phases."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    fname = f"phase_{index:02d}_{phase.name}.csv"
    raw = _phase_csv(phase)
    atomic_write_bytes(d / fname, raw)
    mpath = d / "recording.json"
    doc = json.loads(mpath.read_text()) if mpath.exists() else {"schema": RECORDING_SCHEMA, "phases": []}
    for k in ("card", "driver", "date", "nvml", "sample_hz", "command", "synthetic", "recorder"):
        if k in meta:
            doc[k] = meta[k]
    doc["phases"] = [q for q in doc["phases"] if q["index"] != index]
    doc["phases"].append({"index": index, "name": phase.name, "kind": phase.kind, "segment": phase.segment,
                          "file": fname, "sha256": hashlib.sha256(raw).hexdigest(), "target": phase.target,
                          "seconds": phase.seconds, "samples": int(len(phase.t_ns))})
    doc["phases"].sort(key=lambda q: q["index"])
    atomic_write_json(mpath, doc, indent=1)
    return d / fname


def load_recording(directory: str | Path) -> Recording:
    """Read a recording directory (``recording.json`` + one CSV per phase, each bound to its SHA-256)."""
    d = Path(directory)
    mpath = d / "recording.json"
    if not mpath.is_file():
        raise CalibrationError(f"{d}: no recording.json (not a thermal recording directory)", file=str(d))
    try:
        doc = json.loads(mpath.read_text())
    except (OSError, ValueError) as e:
        raise CalibrationError(f"{mpath}: unreadable: {e}", file=str(mpath)) from None
    if not isinstance(doc, dict) or doc.get("schema") != RECORDING_SCHEMA:
        raise CalibrationError(f"{mpath}: schema must be {RECORDING_SCHEMA!r}", file=str(mpath))
    phases = []
    for q in doc.get("phases", []):
        f = d / q["file"]
        try:
            raw = f.read_bytes()
        except OSError as e:
            raise CalibrationError(f"{f}: phase {q.get('name')!r} unreadable: {e}", file=str(f)) from None
        if hashlib.sha256(raw).hexdigest() != q.get("sha256"):
            raise CalibrationError(f"{f}: SHA-256 does not match recording.json (edited or truncated)", file=str(f))
        rows = list(csv.reader(io.StringIO(raw.decode())))
        if not rows or tuple(rows[0]) not in (PHASE_COLUMNS, PHASE_COLUMNS + (ENERGY_COLUMN,)):
            raise CalibrationError(f"{f}: header must be {','.join(PHASE_COLUMNS)}[,{ENERGY_COLUMN}]", file=str(f))
        ncol = len(rows[0])
        try:
            a = np.array([[float(v) if v != "" else np.nan for v in r] for r in rows[1:]], float).reshape(-1, ncol)
        except ValueError as e:
            raise CalibrationError(f"{f}: a value is not a number (or a row of another length): {e}",
                                   file=str(f)) from None
        phases.append(Phase(q["name"], q.get("kind", ""), int(q.get("segment", 0)), a[:, 0].astype(np.int64),
                            a[:, 1], a[:, 2], a[:, 3], a[:, 4], q.get("target", {}),
                            a[:, 5] if ncol == 6 else None))
    return Recording(str(doc.get("card", "")), str(doc.get("driver", "")), str(doc.get("date", "")), phases,
                     {k: v for k, v in doc.items() if k not in ("phases",)})


@dataclass(frozen=True)
class Requirements:
    """What a recording must satisfy (the issue's: ≥ 10 phases of ≥ 60 s at ≥ 10 Hz)."""

    min_phases: int = 10
    min_phase_s: float = 60.0
    min_sample_hz: float = 10.0
    max_gap_s: float = 1.0
    min_power_span_w: float = 50.0
    max_power_w: float = 2000.0
    temp_range_c: tuple[float, float] = (-20.0, 150.0)


def validate_recording(rec: Recording, req: Requirements = Requirements()) -> None:
    """Refuse a recording the fit cannot use; the message names the phase and what is wrong."""
    for k in ("card", "driver", "date"):
        if not getattr(rec, k):
            raise CalibrationError(f"recording: {k} is missing (the fitted parameters need their provenance)",
                                   field=k)
    if len(rec.phases) < req.min_phases:
        raise CalibrationError(f"recording has {len(rec.phases)} phases; calibration needs at least {req.min_phases}",
                               field="phases")
    mem_t = [bool(np.isfinite(p.mem_temp_c).any()) for p in rec.phases]
    mem_p = [bool(np.isfinite(p.mem_power_w).any()) for p in rec.phases]
    for p, mt, mp in zip(rec.phases, mem_t, mem_p):
        where = f"phase {p.name!r}"
        n = len(p.t_ns)
        if n < 2:
            raise CalibrationError(f"{where}: {n} samples", field=p.name)
        dt = np.diff(p.t_ns)
        if (dt <= 0).any():
            k = int(np.argmax(dt <= 0))
            raise CalibrationError(f"{where}: time does not increase at sample {k + 1} "
                                   f"({int(p.t_ns[k])} -> {int(p.t_ns[k + 1])} ns)", field=p.name)
        hz = 1e9 / float(np.median(dt))
        # the samples resolve the phase's length to one period: within half of one of the minimum is enough (a
        # 60 s phase sampled at 20 Hz covers 59.99999 s when the sampler's clock jitters by microseconds)
        if p.seconds < req.min_phase_s - 0.5 / hz:
            raise CalibrationError(f"{where}: covers {p.seconds:.2f} s; each phase must last at least "
                                   f"{req.min_phase_s:.0f} s", field=p.name)
        if hz < req.min_sample_hz * 0.95:
            raise CalibrationError(f"{where}: sampled at {hz:.2f} Hz (median); at least {req.min_sample_hz:.0f} Hz "
                                   "is needed", field=p.name)
        if dt.max() > req.max_gap_s * 1e9:
            k = int(np.argmax(dt))
            raise CalibrationError(f"{where}: a {dt[k] / 1e9:.2f} s gap after sample {k} (at most "
                                   f"{req.max_gap_s:.1f} s)", field=p.name)
        for name, arr, lo, hi, need in (("board_power_w", p.board_power_w, 0.0, req.max_power_w, True),
                                        ("gpu_temp_c", p.gpu_temp_c, *req.temp_range_c, True),
                                        ("mem_temp_c", p.mem_temp_c, *req.temp_range_c, mt),
                                        ("mem_power_w", p.mem_power_w, 0.0, req.max_power_w, mp)):
            if not need:
                continue
            bad = ~np.isfinite(arr) | (arr < lo) | (arr > hi)
            if bad.any():
                k = int(np.argmax(bad))
                raise CalibrationError(f"{where}: {name} at sample {k} is {arr[k]!r} (must be finite, in "
                                       f"[{lo:g}, {hi:g}])", field=f"{p.name}.{name}")
    if len(set(mem_t)) > 1 or len(set(mem_p)) > 1:
        raise CalibrationError("recording: the memory sensor columns are present in some phases and missing in "
                               "others", field="mem_temp_c")
    if len({p.energy_mj is None for p in rec.phases}) > 1:
        raise CalibrationError(f"recording: the energy counter ({ENERGY_COLUMN}) is present in some phases and "
                               "missing in others", field=ENERGY_COLUMN)
    by_seg: dict[int, list[Phase]] = {}
    for p in rec.phases:
        by_seg.setdefault(p.segment, []).append(p)
    for s, ps in by_seg.items():
        for a, b in zip(ps, ps[1:]):
            gap = int(b.t_ns[0]) - int(a.t_ns[-1])
            if gap <= 0 or gap > req.max_gap_s * 1e9:
                raise CalibrationError(f"segment {s}: phase {b.name!r} starts {gap / 1e9:.3f} s after {a.name!r} "
                                       f"ends (phases of one segment are sampled back to back: 0 < gap <= "
                                       f"{req.max_gap_s:.1f} s)", field=b.name)
        if rec.has_energy:
            energy_power(np.concatenate([p.t_ns for p in ps]), np.concatenate([p.energy_mj for p in ps]),
                         where=f"segment {s} ({ps[0].name}..{ps[-1].name})", max_power_w=req.max_power_w)
    means = [float(np.mean(p.board_power_w)) for p in rec.phases]
    if max(means) - min(means) < req.min_power_span_w:
        raise CalibrationError(f"recording: phase mean board powers span only {max(means) - min(means):.1f} W "
                               f"(at least {req.min_power_span_w:.0f} W): the sink conductance and the power split "
                               "cannot be told apart from the coolant temperature; record phases of different power",
                               field="board_power_w")


ENERGY_MIN_SPAN_S = 1.0           # energy_power's shortest span (20 samples at 20 Hz; v2 loads are steady within a phase)


def energy_power(t_ns: np.ndarray, energy_mj: np.ndarray, *, where: str = "recording",
                 max_power_w: float = 2000.0, min_span_s: float = ENERGY_MIN_SPAN_S,
                 breaks: Collection[int] = ()) -> np.ndarray:
    """The mean board power (W) held from each sample to the next, from NVML's total energy counter read at each
    sample: what the card dissipated over the interval, where an instantaneous reading is one moment of it (a load
    switched faster than the sampling aliases in the instantaneous readings, never in the counter's differences).

    The counter may advance less often than it is read (it then repeats a value): the energy between two reads
    where it changed is spread evenly over the samples between them; before its first change and after its last,
    the nearest span's power is held. Spans are at least ``min_span_s`` long (a change seen sooner is merged into
    the next span): a counter that advances in steps not commensurate with the reads would otherwise count one
    step more in some intervals than in others, a power jitter of one step per interval the package never saw.
    ``breaks``: samples where a span must start whatever its length (the last sample before a load switch: the
    v2 recorder switches just after a sample, so the step is not smeared over a merged span).
    Refused: non-finite readings, a counter going backwards (a driver reload),
    fewer than two distinct readings, a mean power outside [0, max_power_w]."""
    t = np.asarray(t_ns, np.int64)
    e = np.asarray(energy_mj, float)
    if len(t) != len(e) or len(t) < 2:
        raise CalibrationError(f"{where}: {len(e)} energy readings for {len(t)} samples (at least 2, one per sample)",
                               field=ENERGY_COLUMN)
    if not np.isfinite(e).all():
        k = int(np.argmax(~np.isfinite(e)))
        raise CalibrationError(f"{where}: {ENERGY_COLUMN} at sample {k} is {e[k]!r}", field=ENERGY_COLUMN)
    de = np.diff(e)
    if (de < 0).any():
        k = int(np.argmax(de < 0))
        raise CalibrationError(f"{where}: the energy counter goes back at sample {k + 1} ({e[k]:.0f} -> "
                               f"{e[k + 1]:.0f} mJ; the driver reloaded?)", field=ENERGY_COLUMN)
    seen = np.flatnonzero(de > 0) + 1                              # samples where a new counter value was first seen
    brk = sorted({int(b) for b in breaks if 0 < int(b) < len(t) - 1})
    span_ns = min_span_s * 1e9
    keep, last, bi = [0], int(t[0]), 0
    for k in sorted(set(seen.tolist()) | set(brk)):
        while bi < len(brk) and brk[bi] < k:
            bi += 1
        if k in brk:
            keep.append(k)
        elif int(t[k]) - last >= span_ns and (bi >= len(brk) or int(t[brk[bi]]) - int(t[k]) >= span_ns):
            keep.append(k)
        else:
            continue
        last = int(t[k])
    ch = np.array(keep)
    if len(ch) < 2:
        raise CalibrationError(f"{where}: the energy counter never advances ({e[0]:.0f} mJ throughout)",
                               field=ENERGY_COLUMN)
    # the energy at the spans' ends (knots): least squares of the piecewise-linear energy between them on every
    # reading, not the two readings at the ends (a counter advancing in steps is then off by up to one step's energy
    # at each end, a per-span power error of a step over the span; the fit through all readings averages it out)
    tk = t[ch].astype(float) * 1e-9
    ts = t.astype(float) * 1e-9
    j = np.clip(np.searchsorted(tk, ts, side="right") - 1, 0, len(tk) - 2)
    w1 = np.clip((ts - tk[j]) / (tk[j + 1] - tk[j]), 0.0, None)      # past the last knot: extrapolated
    w0 = 1.0 - w1
    nk = len(tk)
    ab = np.zeros((2, nk))                                             # A^T A (tridiagonal), upper banded form
    np.add.at(ab[1], j, w0 * w0)
    np.add.at(ab[1], j + 1, w1 * w1)
    np.add.at(ab[0], j + 1, w0 * w1)
    e0 = e - e[0]
    rhs = np.zeros(nk)
    np.add.at(rhs, j, w0 * e0)
    np.add.at(rhs, j + 1, w1 * e0)
    from scipy.linalg import solveh_banded
    ek = solveh_banded(ab, rhs)
    span_w = np.diff(ek) * 1e-3 / np.diff(tk)
    if not ((span_w >= 0) & (span_w <= max_power_w)).all():
        k = int(np.argmax(~((span_w >= 0) & (span_w <= max_power_w))))
        raise CalibrationError(f"{where}: the energy counter gives {span_w[k]:.1f} W between samples {ch[k]} and "
                               f"{ch[k + 1]} (must be in [0, {max_power_w:g}] W)", field=ENERGY_COLUMN)
    out = np.empty(len(t))
    for a, b, w in zip(ch[:-1], ch[1:], span_w):
        out[a:b] = w
    out[ch[-1]:] = span_w[-1]
    return out


# ---------------------------------------------------------------------------------------------- the model
def pinned_geometry(geom: Geometry) -> Geometry:
    """The geometry with its cold plate taken out: the lid ties to a node held at the sink temperature."""
    hs = replace(geom.heat_sink, sink_capacitance_j_k=0.0)
    sha = hashlib.sha256((geom.sha256 + ":pinned-sink").encode()).hexdigest()
    return replace(geom, heat_sink=hs, name=f"{geom.name}-pinned-sink", sha256=sha)


@dataclass(frozen=True)
class CalibrationParams:
    coolant_c: float
    sink_to_ambient_k_w: float
    sink_tau_s: float
    die_fraction: float
    hbm_fraction: float
    # phases of these kinds split the board power their own way: ((kind, die_fraction, hbm_fraction), ...); every
    # other phase by die_fraction / hbm_fraction (``CalibratedModel(split_kinds=...)``; hbfd cannot use it: its
    # telemetry does not say which kind of load runs)
    kind_split: tuple[tuple[str, float, float], ...] = ()
    # per segment (in order), the cold plate's temperature at its start above the steady state of its first power
    # (K; ``CalibratedModel(free_start=True)``): a device call that starts off that steady state (the H100's second
    # call began 8 K hot). Of the recording, not of the card: never in a fragment's boundary
    sink_start_k: tuple[float, ...] = ()

    @property
    def sink_capacitance_j_k(self) -> float:
        return self.sink_tau_s / self.sink_to_ambient_k_w

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, k) for k in PARAMS], float)

    def shares(self, kind: str | None) -> tuple[float, float]:
        """(die, HBM) shares of the board power in phases of ``kind`` (None: the shared split)."""
        if kind is None:
            return self.die_fraction, self.hbm_fraction
        for k, fd, fh in self.kind_split:
            if k == kind:
                return fd, fh
        raise CalibrationError(f"no power split for phases of kind {kind!r} (have "
                               f"{[k for k, _, _ in self.kind_split]})")


def calibrated_rom(pinned: ThermalROM, prm: CalibrationParams, *, provenance: dict[str, Any] | None = None
                   ) -> ThermalROM:
    """The pinned package ROM plus the fitted cold plate, as one ThermalROM (one more state).

    x' = [[A, 0], [0, a]] x + [[B], [(1−a)R·1ᵀ]] p;  T = [C, a·1] x + (D + (1−a)R·1·1ᵀ) p + coolant
    (every input dissipates in the package; the sink state is its rise over the coolant)."""
    r, p = pinned.B.shape
    q = pinned.C.shape[0]
    a = math.exp(-pinned.dt_s / prm.sink_tau_s)
    g = (1.0 - a) * prm.sink_to_ambient_k_w
    A = np.zeros((r + 1, r + 1))
    A[:r, :r] = pinned.A
    A[r, r] = a
    B = np.vstack([pinned.B, np.full((1, p), g)])
    C = np.hstack([pinned.C, np.full((q, 1), a)])
    D = pinned.D + g
    meta = dict(pinned.meta)
    # the shared split only (a per-kind split is refused for the daemon: load_fragment)
    meta.update({"calibrated": 1, **{f"cal_{k}": float(getattr(prm, k)) for k in PARAMS}})
    if provenance:
        meta.update({f"cal_{k}": str(v) for k, v in provenance.items()})
    return ThermalROM(A=A, B=B, C=C, D=D, b=np.zeros(r + 1), d=np.full(q, prm.coolant_c), dt_s=pinned.dt_s,
                      input_names=pinned.input_names, output_names=pinned.output_names,
                      geometry_sha256=pinned.geometry_sha256, meta=meta)


def _first_order(u: np.ndarray, lam: np.ndarray, b: np.ndarray, x0: np.ndarray) -> np.ndarray:
    """x[k] for k = 0..n-1 of x[k+1] = lam∘x[k] + b·u[k] (columns: modes), x[0] = x0."""
    from scipy.signal import lfilter
    n = len(u)
    X = np.empty((n, len(lam)))
    X[0] = x0
    for i, (l, bi) in enumerate(zip(lam, b)):
        nxt = lfilter([bi], [1.0, -l], u[:-1], zi=[l * x0[i]])[0]
        X[1:, i] = nxt
    return X


class CalibratedModel:
    """Fast evaluation of the calibration model over a recording (modal form, per-mode linear filters).

    Per segment the board (and memory) power is held over the ROM's Δt grid; the unit responses of the
    pinned package to board power in the die input and in the HBM input are computed once; a parameter set
    then costs one first-order filter (the cold plate) and a few linear combinations."""

    def __init__(self, pinned: ThermalROM, rec: Recording, *, outputs: Sequence[str] = ("gpu", "hbm"),
                 settle_s: float = 20.0, mean_power_phases: Collection[int] = (), use_energy: bool = True,
                 split_kinds: Sequence[str] = (), free_start: bool = False):
        """``mean_power_phases``: indices of phases whose power readings do not resolve the load (a duty cycle
        whose window is not several sample periods long: instantaneous readings at the window's own rate alias
        it into a slow beat that the package never saw); their board (and memory-rail) power is held at the
        phase's mean instead of sample by sample (:func:`aliased_duty_phases` says which). ``use_energy``: take the
        board power from NVML's energy counter where every phase has it (:func:`energy_power`). ``split_kinds``:
        phase kinds (``hbm``: streaming) whose board power splits over die and HBM by shares of their own
        (``CalibrationParams.kind_split``); every other phase by the shared ``die_fraction`` / ``hbm_fraction``.
        ``free_start``: each segment's cold plate starts at a fitted offset from the steady state of its first power
        (``CalibrationParams.sink_start_k``), not at it."""
        self.pinned = pinned
        self.rec = rec
        bad = sorted(set(mean_power_phases) - set(range(len(rec.phases))))
        if bad:
            raise CalibrationError(f"mean_power_phases {bad}: the recording has phases 0..{len(rec.phases) - 1}")
        self.mean_power_phases = sorted(set(mean_power_phases))
        self.split_kinds = tuple(dict.fromkeys(split_kinds))
        missing = [k for k in self.split_kinds if k not in {p.kind for p in rec.phases}]
        if missing:
            raise CalibrationError(f"split_kinds {missing}: no phase of that kind in the recording "
                                   f"(kinds: {sorted({p.kind for p in rec.phases})})")
        self.classes: list[str | None] = [None, *self.split_kinds]
        self.free_start = bool(free_start)
        self.dt_ns = pinned.dt_ns
        names = list(pinned.input_names)
        outs = list(pinned.output_names)
        if "gpu" not in names or "gpu" not in outs:
            raise CalibrationError("the package model has no 'gpu' input/output to hold against the GPU sensor")
        self.use_mem_power = rec.has_mem_power
        # NVML's energy counter, where recorded, gives the board power (mean over each sample interval); the
        # instantaneous readings are then kept for reference only and no phase needs its power held at the mean
        self.use_energy = rec.has_energy and use_energy
        if self.use_energy:
            self.mean_power_phases = []
        self.outputs = [o for o in outputs if o in outs and (o != "hbm" or rec.has_mem_temp)]
        self.o_idx = [outs.index(o) for o in self.outputs]
        modal = pinned.modal()
        lam = modal.lam
        self.segments = []
        by_seg: dict[int, list[int]] = {}
        for i, p in enumerate(rec.phases):
            by_seg.setdefault(p.segment, []).append(i)
        for seg, idx in sorted(by_seg.items()):
            ph = [rec.phases[i] for i in idx]
            t = np.concatenate([p.t_ns for p in ph]).astype(np.int64)

            def held(i: int, v: np.ndarray) -> np.ndarray:
                return np.full(len(v), float(np.mean(v))) if i in self.mean_power_phases else v

            if self.use_energy:
                # the mean power over each sample interval from the energy counter (resolves any load switching)
                # a span starts at the last sample before each phase's load switch (the recorder switches just after
                # a sample): the step stays where it happened
                last_before = np.cumsum([len(p.t_ns) for p in ph])[:-1] - 1
                bw = energy_power(t, np.concatenate([p.energy_mj for p in ph]), where=f"segment {seg}",
                                  breaks=last_before)
            else:
                bw = np.concatenate([held(i, p.board_power_w) for i, p in zip(idx, ph)])
            mw = (np.concatenate([held(i, p.mem_power_w) for i, p in zip(idx, ph)]) if self.use_mem_power
                  else None)
            t0 = int(t[0])
            n = int((t[-1] - t0) // self.dt_ns) + 1
            grid = t0 + np.arange(n, dtype=np.int64) * self.dt_ns
            # power held from each sample to the next (zero-order hold), on the ROM grid
            k = np.clip(np.searchsorted(t, grid, side="right") - 1, 0, len(t) - 1)
            ub = bw[k]
            um = mw[k] if mw is not None else None
            u_die = np.maximum(ub - um, 0.0) if um is not None else ub
            u_hbm = um if um is not None else ub
            phase_of = np.concatenate([np.full(len(p.t_ns), i) for i, p in zip(idx, ph)])
            # each tick's split class: 0 (shared split) or 1 + the index of its phase's kind in split_kinds
            kind_cls = np.array([self.classes.index(p.kind) if p.kind in self.split_kinds else 0 for p in rec.phases])
            # the power held from sample k is the load's over [t_k, t_k+1): from the energy counter, the load that ran
            # there, which at a phase's last sample is already the next phase's (the recorder switches just after it)
            ph_int = np.append(phase_of[1:], phase_of[-1]) if self.use_energy else phase_of
            cls = kind_cls[ph_int[k]]
            uc, rc = [], []
            for c in range(len(self.classes)):
                on = (cls == c).astype(float)
                ud, uh = u_die * on, u_hbm * on
                resp = {}
                for key, u, inp in (("die", ud, "gpu"), ("hbm", uh, "hbm")):
                    if inp not in names:
                        resp[key] = np.zeros((n, len(self.o_idx)))
                        continue
                    j = names.index(inp)
                    bm = modal.Bm[:, j]
                    x0 = bm * u[0] / (1.0 - lam)                     # steady state at the first power
                    X = _first_order(u, lam, bm, x0)
                    resp[key] = X @ modal.Cm[self.o_idx].T + np.outer(u, modal.D[self.o_idx, j])
                uc.append((ud, uh))
                rc.append(resp)
            # sample instants: the end of the tick that contains each sample time (v1); with the energy counter, the
            # end of the last tick before it: the power held from a sample on is the load's after the reading (the
            # v2 recorder switches loads 10 ms after a reading), which that reading cannot have seen
            ks = np.clip((t - t0) // self.dt_ns - (1 if self.use_energy else 0), 0, n - 1)
            keep = (t - t0) >= settle_s * 1e9
            meas = [np.concatenate([p.gpu_temp_c if o == "gpu" else p.mem_temp_c for p in ph]) for o in self.outputs]
            self.segments.append({"u_die": u_die, "u_hbm": u_hbm, "uc": uc, "rc": rc, "ks": ks, "phase": phase_of,
                                  "keep": keep, "meas": np.stack(meas, axis=1), "n": n, "board_w": bw, "t": t})

    def predict(self, prm: CalibrationParams) -> list[np.ndarray]:
        """Modeled sensor outputs (samples × outputs) per segment."""
        from scipy.signal import lfilter
        a = math.exp(-self.pinned.dt_s / prm.sink_tau_s)
        out = []
        shares = [prm.shares(c) for c in self.classes]
        if self.free_start and len(prm.sink_start_k) != len(self.segments):
            raise CalibrationError(f"free_start: {len(prm.sink_start_k)} sink start offsets for {len(self.segments)} "
                                   "segments")
        for si, s in enumerate(self.segments):
            p_pkg = sum(fd * ud + fh * uh for (fd, fh), (ud, uh) in zip(shares, s["uc"]))
            # T_s[k+1] = a T_s[k] + (1-a) R P[k], from the steady state of the first power
            ts0 = prm.sink_to_ambient_k_w * p_pkg[0]
            ts_next = lfilter([(1 - a) * prm.sink_to_ambient_k_w], [1.0, -a], p_pkg, zi=[a * ts0])[0]
            if self.free_start:
                ts_next = ts_next + prm.sink_start_k[si] * a ** np.arange(1, s["n"] + 1)
            T = prm.coolant_c + ts_next[:, None] + sum(fd * r["die"] + fh * r["hbm"]
                                                        for (fd, fh), r in zip(shares, s["rc"]))
            out.append(T[s["ks"]])
        return out

    def residuals(self, prm: CalibrationParams, phases: set[int]) -> np.ndarray:
        r = []
        for s, y in zip(self.segments, self.predict(prm)):
            m = s["keep"] & np.isin(s["phase"], list(phases))
            r.append((y[m] - s["meas"][m]).ravel())
        return np.concatenate(r) if r else np.zeros(0)

    def errors(self, prm: CalibrationParams, phases: Sequence[int]) -> dict[str, Any]:
        """RMS / max |error| per phase and output, and over all of ``phases``."""
        per: dict[str, Any] = {}
        allr = {o: [] for o in self.outputs}
        preds = self.predict(prm)
        for i in phases:
            row = {}
            for s, y in zip(self.segments, preds):
                m = s["keep"] & (s["phase"] == i)
                if not m.any():
                    continue
                for j, o in enumerate(self.outputs):
                    e = y[m, j] - s["meas"][m, j]
                    allr[o].append(e)
                    row[o] = {"rms_k": float(np.sqrt(np.mean(e ** 2))), "max_abs_k": float(np.abs(e).max()),
                              "bias_k": float(e.mean()), "samples": int(m.sum())}
            per[self.rec.phases[i].name] = row
        total = {}
        for o, es in allr.items():
            if es:
                e = np.concatenate(es)
                total[o] = {"rms_k": float(np.sqrt(np.mean(e ** 2))), "max_abs_k": float(np.abs(e).max()),
                            "samples": int(len(e))}
        return {"per_phase": per, "total": total}


# ---------------------------------------------------------------------------------------------- the fit
@dataclass(frozen=True)
class FitBounds:
    coolant_c: tuple[float, float] = (0.0, 80.0)
    sink_to_ambient_k_w: tuple[float, float] = (1e-4, 1.0)
    sink_tau_s: tuple[float, float] = (0.05, 2000.0)
    die_fraction: tuple[float, float] = (0.0, 1.0)
    hbm_fraction: tuple[float, float] = (0.0, 1.0)
    sink_start_k: tuple[float, float] = (-40.0, 40.0)


MAX_STARTS = 3                    # refinements of the fit, one from each of the τ grid's lowest local minima


def default_holdout(rec: Recording) -> list[int]:
    """Every third phase (2, 5, 8, ...) is held out, so held-out phases interleave with training ones."""
    return [i for i in range(len(rec.phases)) if i % 3 == 2]


def aliased_duty_phases(rec: Recording, duty_window_s: float, *, min_samples_per_window: float = 4.0) -> list[int]:
    """Phases whose load is a duty cycle (a target ``gemm_duty`` or ``hbm_duty`` strictly between 0 and 1) in windows
    of ``duty_window_s`` that the recording's sampling does not resolve (fewer than ``min_samples_per_window`` samples
    per window). Their instantaneous power readings alias the window: sampled at nearly the window's own rate (the
    plan's 50 ms windows at 20 Hz), a 20 Hz on/off load reads as a sawtooth of ~20 s period between the on and off
    powers, which the package never saw; only the mean over the phase is the power it dissipated. The temperature
    readings of these phases alias the die's ripple the same way: that stays in their residuals."""
    if duty_window_s <= 0:
        raise CalibrationError(f"duty window {duty_window_s!r} s must be > 0")
    out = []
    for i, p in enumerate(rec.phases):
        duties = [float(p.target.get(k, 0.0) or 0.0) for k in ("gemm_duty", "hbm_duty")]
        if not any(0.0 < d < 1.0 for d in duties) or len(p.t_ns) < 2 or p.energy_mj is not None:
            continue                      # steady, or its power comes from the energy counter (never aliased)
        period_s = float(np.median(np.diff(p.t_ns))) / 1e9
        w = p.target.get("duty_window_s", duty_window_s)
        window_s = float(max(w) if isinstance(w, (list, tuple)) else w)      # v2: [shortest, longest] window
        if window_s < min_samples_per_window * period_s:
            out.append(i)
    return out


def _linear_at_tau(model: CalibratedModel, tau: float, train: set[int], bounds: FitBounds
                   ) -> tuple[np.ndarray, float]:
    """For a fixed τ the model is linear in (coolant, f_die, f_hbm, R·f_die, R·f_hbm): least squares within the
    bounds (coolant and shares in theirs, R·f in [0, R_max]). Unbounded, a recording the model does not describe
    exactly (a real card) can put the optimum at a negative share or R·f, a start the refinement cannot use."""
    from scipy.optimize import lsq_linear
    from scipy.signal import lfilter
    a = math.exp(-model.pinned.dt_s / tau)
    cols, ys = [], []
    nseg = len(model.segments) if model.free_start else 0
    for si, s in enumerate(model.segments):
        m = s["keep"] & np.isin(s["phase"], list(train))
        if not m.any():
            continue
        decay = [(a ** (s["ks"] + 1.0))[m] if q == si else np.zeros(int(m.sum())) for q in range(nseg)]
        lp = [lfilter([1 - a], [1.0, -a], u, zi=[a * u[0]])[0][s["ks"]] for ud_uh in s["uc"] for u in ud_uh]
        for j in range(len(model.outputs)):
            X = np.stack([np.ones(int(m.sum()))]
                         + [r[key][s["ks"], j][m] for r in s["rc"] for key in ("die", "hbm")]
                         + [v[m] for v in lp] + decay, axis=1)
            cols.append(X)
            ys.append(s["meas"][m, j])
    X = np.vstack(cols)
    y = np.concatenate(ys)
    # without an HBM input (or with no memory sensor and the same board power in both) columns coincide: any
    # least-squares optimum will do (the bounded solver's is one)
    r_hi = bounds.sink_to_ambient_k_w[1]
    nc = len(model.classes)
    lo = ([bounds.coolant_c[0]] + [bounds.die_fraction[0], bounds.hbm_fraction[0]] * nc + [0.0, 0.0] * nc
          + [bounds.sink_start_k[0]] * nseg)
    hi = ([bounds.coolant_c[1]] + [bounds.die_fraction[1], bounds.hbm_fraction[1]] * nc + [r_hi, r_hi] * nc
          + [bounds.sink_start_k[1]] * nseg)
    beta = lsq_linear(X, y, bounds=(lo, hi), method="bvls").x
    r = X @ beta - y
    return beta, float(r @ r)


def fit(model: CalibratedModel, *, holdout: Sequence[int] | None = None, bounds: FitBounds = FitBounds()
        ) -> dict[str, Any]:
    """Fit the five boundary parameters (and a die / HBM share pair per ``model.split_kinds``) on the training
    phases; errors on the held-out ones. A kind with its own split needs a training phase of that kind."""
    from scipy.optimize import least_squares, minimize_scalar
    rec = model.rec
    held = list(default_holdout(rec) if holdout is None else holdout)
    train = {i for i in range(len(rec.phases)) if i not in held}
    if not held or not train:
        raise CalibrationError(f"need held-out and training phases (held out: {held} of {len(rec.phases)})")
    for k in model.split_kinds:
        if not any(rec.phases[i].kind == k for i in train):
            raise CalibrationError(f"the split of {k!r} phases cannot be fitted: every {k!r} phase is held out "
                                   f"({[p.name for p in rec.phases if p.kind == k]})", field="holdout")
    lo_t, hi_t = bounds.sink_tau_s
    grid = np.geomspace(lo_t, hi_t, 25)
    sse = np.array([_linear_at_tau(model, t, train, bounds)[1] for t in grid])
    extra = [(f"die_fraction@{k}", f"hbm_fraction@{k}") for k in model.split_kinds]
    nseg = len(model.segments) if model.free_start else 0
    names = (list(PARAMS) + [n for pair in extra for n in pair]
             + [f"sink_start_k@{model.rec.phases[int(s['phase'][0])].name}" for s in model.segments[:nseg]])
    b = ([getattr(bounds, k) for k in PARAMS] + [bounds.die_fraction, bounds.hbm_fraction] * len(extra)
         + [bounds.sink_start_k] * nseg)
    blo, bhi = [v[0] for v in b], [v[1] for v in b]
    n_sh = 5 + 2 * len(extra)

    def params(x) -> CalibrationParams:
        ks = tuple((k, float(x[5 + 2 * i]), float(x[6 + 2 * i])) for i, k in enumerate(model.split_kinds))
        return CalibrationParams(*(float(v) for v in x[:5]), kind_split=ks,
                                 sink_start_k=tuple(float(v) for v in x[n_sh:n_sh + nseg]))

    def res(x):
        return model.residuals(params(x), train)

    # every local minimum of the τ grid (at most MAX_STARTS, lowest first) starts a refinement; the lowest training
    # cost wins. One start from the global grid minimum is enough for a recording the model describes; on a card
    # the variable-projection surface can have several minima and the best of them is not always the refined best
    loc = [j for j in range(len(grid)) if sse[j] <= sse[max(j - 1, 0)] and sse[j] <= sse[min(j + 1, len(grid) - 1)]]
    starts = sorted(loc, key=lambda j: sse[j])[:MAX_STARTS]
    sol, tau_starts = None, []
    for j in starts:
        lo, hi = np.log(grid[max(j - 1, 0)]), np.log(grid[min(j + 1, len(grid) - 1)])
        best = minimize_scalar(lambda lt: _linear_at_tau(model, float(np.exp(lt)), train, bounds)[1], bounds=(lo, hi),
                               method="bounded", options={"xatol": 1e-4})
        tau0 = float(np.exp(best.x))
        tau_starts.append(tau0)
        beta, _ = _linear_at_tau(model, tau0, train, bounds)
        nc = len(model.classes)
        c0, f, rf = float(beta[0]), beta[1:1 + 2 * nc], beta[1 + 2 * nc:1 + 4 * nc]
        fsum = float(f.sum())
        R0 = float(rf.sum()) / fsum if fsum > 1e-9 else 0.01
        x0 = np.clip(np.array([c0, R0, tau0, *f, *beta[1 + 4 * nc:]]), blo, bhi)
        x0 = np.minimum(np.maximum(x0, [v + 1e-9 for v in blo]), [v - 1e-9 for v in bhi])
        got = least_squares(res, x0, bounds=(blo, bhi), x_scale="jac", method="trf")
        if sol is None or got.cost < sol.cost:
            sol, tau_start = got, tau0
    prm = params(sol.x)
    steps = fast_steps(model, prm)
    held_err = model.errors(prm, held)
    train_err = model.errors(prm, sorted(train))
    worst_rms = max((v["rms_k"] for v in held_err["total"].values()), default=math.inf)
    worst_max = max((v["max_abs_k"] for v in held_err["total"].values()), default=math.inf)
    # the parameters' standard errors from the Jacobian at the optimum (a scale for what recovered means)
    dof = max(1, len(sol.fun) - len(sol.x))
    s2 = float(sol.fun @ sol.fun) / dof
    try:
        cov = np.linalg.inv(sol.jac.T @ sol.jac) * s2
        se = np.sqrt(np.clip(np.diag(cov), 0, None))
    except np.linalg.LinAlgError:
        se = np.full(len(names), np.nan)
    return {
        "params": prm, "std_error": dict(zip(names, (float(v) for v in se))),
        "split_kinds": list(model.split_kinds), "free_start": model.free_start,
        "sink_start_k": dict(zip(names[n_sh:], prm.sink_start_k)), "power_from": "energy_counter" if model.use_energy else "readings",
        "held_out": [rec.phases[i].name for i in held], "trained": [rec.phases[i].name for i in sorted(train)],
        "outputs": list(model.outputs), "held_out_errors": held_err, "training_errors": train_err,
        "goal": {"rms_k": GOAL_RMS_K, "max_abs_k": GOAL_MAX_K, "worst_rms_k": worst_rms, "worst_max_abs_k": worst_max,
                 "met": bool(worst_rms <= GOAL_RMS_K and worst_max <= GOAL_MAX_K)},
        "solver": {"status": int(sol.status), "message": str(sol.message), "nfev": int(sol.nfev),
                   "cost": float(sol.cost), "tau_start_s": tau_start, "tau_starts_s": tau_starts},
        "mean_power_phases": [rec.phases[i].name for i in model.mean_power_phases],
        "fast_steps": steps,
    }


def fast_steps(model: CalibratedModel, prm: CalibrationParams, *, min_step_w: float = 200.0,
               after_s: Sequence[float] = (0.1, 0.5, 2.0), around_s: float = 2.0) -> list[dict[str, Any]]:
    """The sensors' fast response at every phase boundary where the board power steps by at least ``min_step_w``
    (means over ``around_s`` either side), measured against modeled: the change from the last second before the step
    to the first sample ``after_s`` after it. Within 0.1 s of a step the package's slow parts (sink, spreading) have
    not moved, so the GPU sensor's change there is the die's share of the step through the model's fastest paths
    (its direct feedthrough D and fast modes): ``die_share_asked`` = die_fraction x measured / modeled is the share
    that would make the model's fast response match (on an H100, 2026-12-05: a 543 W step down dropped the sensor
    10 K in 0.1 s where the pinned 8-high package gives 0.021 K/W at 0.1 s: ~0.87 of the step in the die, where the
    fit had settled on 0.47)."""
    preds = model.predict(prm)
    out = []
    for s, y in zip(model.segments, preds):
        t, ph, bw = s["t"], s["phase"], s["board_w"]
        for b in np.flatnonzero(np.diff(ph) != 0) + 1:
            tb = int(t[b])
            pre = (t >= tb - around_s * 1e9) & (t < tb)
            post = (t >= tb) & (t < tb + around_s * 1e9)
            if not pre.any() or not post.any():
                continue
            dp = float(bw[post].mean() - bw[pre].mean())
            if abs(dp) < min_step_w:
                continue
            last = (t >= tb - 1e9) & (t < tb)
            row: dict[str, Any] = {"phase": model.rec.phases[int(ph[b])].name,
                                   "from": model.rec.phases[int(ph[b - 1])].name, "step_w": dp}
            for j, o in enumerate(model.outputs):
                m0, y0 = float(s["meas"][last, j].mean()), float(y[last, j].mean())
                per = {}
                for a in after_s:
                    k = int(np.searchsorted(t, tb + a * 1e9))
                    if k < len(t) and ph[k] == ph[b]:
                        per[f"{a:g}s"] = {"measured_k": float(s["meas"][k, j] - m0), "modeled_k": float(y[k, j] - y0)}
                row[o] = per
            g = row.get("gpu", {}).get(f"{after_s[0]:g}s")
            if g and abs(g["modeled_k"]) > 1e-9:
                kind = model.rec.phases[int(ph[b])].kind
                fd = prm.shares(kind if kind in model.split_kinds else None)[0]
                row["die_share_asked"] = float(fd * g["measured_k"] / g["modeled_k"])
            out.append(row)
    return out


def fragment(result: dict[str, Any], rec: Recording, geom: Geometry, *, fitted_on: str,
             report: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fitted parameters as a profile fragment, every number with its provenance: ``measured`` on the card
    (card, driver, recording date and SHA-256), or, for a recording the model generated itself
    (:func:`synthetic_recording`), ``synthetic`` (the numbers' provenance ``assumed``: they recover the
    generator's assumed values, they measure nothing). ``report``: free-form extras of the caller (the bench's
    command, timings, the synthetic comparison), kept under ``"report"`` and never read by the daemon."""
    prm: CalibrationParams = result["params"]
    kind = "synthetic" if rec.synthetic else "measured"
    src = (f"fit of {len(result['trained'])} {'synthetic ' if rec.synthetic else ''}recorded phases on {rec.card}, "
           f"driver {rec.driver}, recorded {rec.date} (recording SHA-256 {rec.sha256()[:16]}); held-out worst RMS "
           f"{result['goal']['worst_rms_k']:.3f} K, max {result['goal']['worst_max_abs_k']:.3f} K")

    def num(v: float, what: str) -> dict[str, Any]:
        return {"value": float(v), "provenance": "assumed" if rec.synthetic else "measured", "source": f"{what}: {src}"}

    frag = {
        "schema": FRAGMENT_SCHEMA,
        "provenance": {"kind": kind, "card": rec.card, "driver": rec.driver, "recorded": rec.date,
                       "fitted": fitted_on, "recording_sha256": rec.sha256(), "method": "hbfd.thermal.calibrate"},
        "geometry": {"name": geom.name, "sha256": geom.sha256,
                     "kept": "layers, materials, footprints, lid-to-sink h_top (the package itself)"},
        "thermal": {"ambient_c": num(prm.coolant_c, "coolant temperature the cold plate rejects to")},
        "heat_sink": {"sink_to_ambient_k_w": num(prm.sink_to_ambient_k_w, "cold plate to coolant"),
                      "sink_capacitance_j_k": num(prm.sink_capacitance_j_k, "cold plate (tau / R)"),
                      "sink_tau_s": num(prm.sink_tau_s, "cold plate time constant")},
        "power_split": {"die_fraction": num(prm.die_fraction, "board power in the compute die"),
                        "hbm_fraction": num(prm.hbm_fraction, "power in the HBM region"),
                        "of": SPLIT_RAIL if rec.has_mem_power else SPLIT_BOARD,
                        "explained": SPLIT_TEXT[SPLIT_RAIL if rec.has_mem_power else SPLIT_BOARD]},
        "std_error": result["std_error"],
        "errors": {"held_out": result["held_out_errors"], "training": result["training_errors"],
                   "goal": result["goal"]},
    }
    if prm.kind_split:
        # the errors above are of this model: shares per load kind, which hbfd cannot apply (load_fragment refuses)
        frag["power_split"]["by_kind"] = {
            k: {"die_fraction": num(fd, f"board power in the compute die in {k!r} phases"),
                "hbm_fraction": num(fh, f"power in the HBM region in {k!r} phases")} for k, fd, fh in prm.kind_split}
        frag["power_split"]["explained"] += ("; phases of kind " + ", ".join(k for k, _, _ in prm.kind_split)
                                             + " by their own shares (by_kind), every other phase by these")
    if report:
        frag["report"] = report
    return frag


def write_fragment(path: str | Path, frag: dict[str, Any]) -> Path:
    return atomic_write_json(path, frag, indent=1)


# ---------------------------------------------------------------------------------------------- in the daemon
# Why a fragment is refused (CalibrationError field ``reason``; code INVALID_ARGUMENT): stable names for scripts
REFUSALS = ("unreadable", "schema", "provenance", "geometry_mismatch", "value", "power_split", "goal_missed")
FRAGMENT_KEYS = {"schema", "provenance", "geometry", "thermal", "heat_sink", "power_split", "std_error", "errors",
                 "report"}
PROVENANCE_FIELDS = ("kind", "card", "driver", "recorded", "fitted", "recording_sha256", "method")
FRAGMENT_KINDS = ("measured", "synthetic")


@dataclass(frozen=True)
class CalibrationOptions:
    """What the daemon was asked to load (``hbfd serve --thermal-calibration PATH``,
    ``--thermal-calibration-allow-goal-miss``; env ``HBFD_THERMAL_CALIBRATION``,
    ``HBFD_THERMAL_CALIBRATION_ALLOW_GOAL_MISS``)."""

    path: str
    allow_goal_miss: bool = False

    def __post_init__(self):
        if not isinstance(self.path, str) or not self.path:
            raise CalibrationError("thermal calibration: the fragment path is empty", field="path",
                                   reason="unreadable")


@dataclass(frozen=True)
class LoadedCalibration:
    """A validated calibration fragment: the boundary the daemon's package model runs with."""

    path: str
    sha256: str                       # of the fragment file as read
    kind: str                         # measured | synthetic
    params: CalibrationParams
    split_of: str                     # SPLIT_BOARD | SPLIT_RAIL
    provenance: tuple[tuple[str, str], ...]
    geometry_name: str
    geometry_sha256: str
    worst_rms_k: float
    worst_max_abs_k: float
    goal_met: bool
    goal_miss_allowed: bool

    def line(self) -> str:
        """One line for ``hbfctl status``: what is in force and where it comes from."""
        pv = dict(self.provenance)
        return (f"{self.kind}: {pv['card']}, driver {pv['driver']}, recorded {pv['recorded']}, held-out "
                f"{self.worst_rms_k:.2f} K RMS / {self.worst_max_abs_k:.2f} K max "
                f"(goal {'met' if self.goal_met else 'MISSED, allowed'}); fragment {self.path} "
                f"sha256 {self.sha256[:16]}")

    def summary(self) -> dict[str, Any]:
        return {"in_force": self.kind, "path": self.path, "sha256": self.sha256, "provenance": dict(self.provenance),
                "geometry": {"name": self.geometry_name, "sha256": self.geometry_sha256},
                "params": {k: getattr(self.params, k) for k in PARAMS}, "sink_capacitance_j_k": self.params.sink_capacitance_j_k,
                "power_split_of": self.split_of, "power_split": SPLIT_TEXT[self.split_of],
                "held_out": {"worst_rms_k": self.worst_rms_k, "worst_max_abs_k": self.worst_max_abs_k,
                             "goal_rms_k": GOAL_RMS_K, "goal_max_abs_k": GOAL_MAX_K, "goal_met": self.goal_met,
                             "goal_miss_allowed": self.goal_miss_allowed},
                "line": self.line()}


def _refuse(where: str, reason: str, msg: str, **fields: Any) -> CalibrationError:
    return CalibrationError(f"{where}: {msg}", file=where, reason=reason, **fields)


def _fnum(obj: Any, where: str, name: str, lo: float, hi: float, *, open_lo: bool = False) -> float:
    if not isinstance(obj, dict) or set(obj) != {"value", "provenance", "source"}:
        raise _refuse(where, "value", f"field {name!r} must be {{value, provenance, source}}", field=name)
    v = obj["value"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _refuse(where, "value", f"field {name!r}: value must be a finite number, got {v!r}", field=name)
    if obj["provenance"] not in ("measured", "assumed"):
        raise _refuse(where, "provenance", f"field {name!r}: provenance must be measured or assumed, got "
                      f"{obj['provenance']!r}", field=name)
    if not isinstance(obj["source"], str) or not obj["source"]:
        raise _refuse(where, "provenance", f"field {name!r}: source must be a non-empty string", field=name)
    if not ((lo < v) if open_lo else (lo <= v)) or not v <= hi:
        raise _refuse(where, "value", f"field {name!r} = {v!r} is outside {'(' if open_lo else '['}{lo:g}, {hi:g}]",
                      field=name)
    return float(v)


def load_fragment(path: str | Path, geom: Geometry, *, allow_goal_miss: bool = False,
                  bounds: FitBounds | None = None) -> LoadedCalibration:
    """Read and check a calibration fragment for the package ``geom`` (the profile's geometry).

    Refused (:class:`CalibrationError`, field ``reason`` one of :data:`REFUSALS`): an unreadable or non-JSON file;
    a wrong schema or an unknown key; provenance missing or incomplete (kind measured|synthetic, card, driver,
    recorded, fitted, recording_sha256, method); a fragment fitted on another package geometry (name or SHA-256);
    a parameter non-finite, outside the fit's bounds, or a capacitance that is not tau / R; shares summing over 1;
    a split of the board less the memory rail (hbfd's telemetry reports board power only); a held-out error above
    the goal (<= 1 K RMS, <= 2 K max) unless ``allow_goal_miss``."""
    from hbfcommon.fsutil import read_json_document
    try:
        doc = read_json_document(path, what="thermal calibration fragment", error=CalibrationError)
    except CalibrationError as e:
        raise CalibrationError(str(e), file=str(path), reason="unreadable") from None
    where, d = doc.where, doc.data
    if not isinstance(d, dict) or d.get("schema") != FRAGMENT_SCHEMA:
        raise _refuse(where, "schema", f"not a calibration fragment (schema must be {FRAGMENT_SCHEMA!r}; "
                      "bench/thermal_calibrate.py writes one)", field="schema")
    extra = sorted(set(d) - FRAGMENT_KEYS)
    if extra:
        raise _refuse(where, "schema", f"unknown key {extra[0]!r} (allowed: {', '.join(sorted(FRAGMENT_KEYS))})",
                      field=extra[0])
    for k in ("provenance", "geometry", "thermal", "heat_sink", "power_split", "errors"):
        if not isinstance(d.get(k), dict):
            raise _refuse(where, "provenance" if k == "provenance" else "schema",
                          f"missing section {k!r} (an object)", field=k)
    pv = d["provenance"]
    for k in PROVENANCE_FIELDS:
        if not isinstance(pv.get(k), str) or not pv[k]:
            raise _refuse(where, "provenance", f"provenance.{k} is missing: a calibration is used only with its "
                          "provenance (kind, card, driver, recorded, fitted, recording_sha256, method)",
                          field=f"provenance.{k}")
    if pv["kind"] not in FRAGMENT_KINDS:
        raise _refuse(where, "provenance", f"provenance.kind must be one of {', '.join(FRAGMENT_KINDS)}, got "
                      f"{pv['kind']!r}", field="provenance.kind")
    if len(pv["recording_sha256"]) != 64 or any(c not in "0123456789abcdef" for c in pv["recording_sha256"]):
        raise _refuse(where, "provenance", "provenance.recording_sha256 must be 64 lowercase hex digits",
                      field="provenance.recording_sha256")
    g = d["geometry"]
    if g.get("name") != geom.name or g.get("sha256") != geom.sha256:
        raise _refuse(where, "geometry_mismatch",
                      f"fitted on package geometry {g.get('name')!r} (sha256 {str(g.get('sha256'))[:16]}...), but the "
                      f"profile's package is {geom.name!r} (sha256 {geom.sha256[:16]}...): refit on this geometry "
                      "(bench/thermal_calibrate.py --fit-only ... --geometry NAME)", field="geometry",
                      fragment_geometry=g.get("name"), profile_geometry=geom.name)
    b = bounds or FitBounds()
    coolant = _fnum(d["thermal"].get("ambient_c"), where, "thermal.ambient_c", *b.coolant_c)
    hs, ps = d["heat_sink"], d["power_split"]
    R = _fnum(hs.get("sink_to_ambient_k_w"), where, "heat_sink.sink_to_ambient_k_w", *b.sink_to_ambient_k_w)
    tau = _fnum(hs.get("sink_tau_s"), where, "heat_sink.sink_tau_s", *b.sink_tau_s)
    cap = _fnum(hs.get("sink_capacitance_j_k"), where, "heat_sink.sink_capacitance_j_k", 0.0, math.inf, open_lo=True)
    fd = _fnum(ps.get("die_fraction"), where, "power_split.die_fraction", *b.die_fraction)
    fh = _fnum(ps.get("hbm_fraction"), where, "power_split.hbm_fraction", *b.hbm_fraction)
    if abs(cap - tau / R) > 1e-6 * (tau / R):
        raise _refuse(where, "value", f"heat_sink.sink_capacitance_j_k {cap!r} is not sink_tau_s / sink_to_ambient_k_w "
                      f"= {tau / R!r}", field="heat_sink.sink_capacitance_j_k")
    if ps.get("of") not in SPLIT_TEXT:
        raise _refuse(where, "power_split", f"power_split.of must be one of {', '.join(SPLIT_TEXT)}, got "
                      f"{ps.get('of')!r}", field="power_split.of")
    if ps["of"] == SPLIT_BOARD and fd + fh > 1.0 + 1e-9:
        raise _refuse(where, "value", f"die_fraction + hbm_fraction = {fd + fh:.4f} > 1 of the same board power",
                      field="power_split")
    if "by_kind" in ps:
        raise _refuse(where, "power_split", f"fitted with a power split per load kind ({', '.join(ps['by_kind'])}): "
                      "its held-out errors are of a model hbfd cannot run (its telemetry does not say which kind of "
                      "load runs); refit without --split-kinds for the daemon", field="power_split.by_kind")
    if ps["of"] != SPLIT_BOARD:
        raise _refuse(where, "power_split", "fitted as shares of the board power less the memory rail and of the "
                      "memory rail, but hbfd's telemetry (constant, trace, NVML) reports board power only: refit on a "
                      "recording without mem_power_w", field="power_split.of")
    goal = d["errors"].get("goal")
    if not isinstance(goal, dict):
        raise _refuse(where, "schema", "errors.goal is missing (the held-out error report)", field="errors.goal")
    rms, mx = goal.get("worst_rms_k"), goal.get("worst_max_abs_k")
    for k, v in (("worst_rms_k", rms), ("worst_max_abs_k", mx)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise _refuse(where, "schema", f"errors.goal.{k} must be a finite number >= 0, got {v!r}",
                          field=f"errors.goal.{k}")
    met = bool(rms <= GOAL_RMS_K and mx <= GOAL_MAX_K)          # judged here, not taken from the file
    if not met and not allow_goal_miss:
        raise _refuse(where, "goal_missed", f"held-out error {rms:.3f} K RMS / {mx:.3f} K max is above the goal "
                      f"(<= {GOAL_RMS_K:g} K RMS, <= {GOAL_MAX_K:g} K max): not used unless allowed explicitly "
                      "(hbfd serve --thermal-calibration-allow-goal-miss)", field="errors.goal",
                      worst_rms_k=rms, worst_max_abs_k=mx)
    return LoadedCalibration(
        path=where, sha256=hashlib.sha256(doc.raw).hexdigest(), kind=pv["kind"],
        params=CalibrationParams(coolant, R, tau, fd, fh), split_of=ps["of"],
        provenance=tuple((k, str(pv[k])) for k in PROVENANCE_FIELDS), geometry_name=geom.name,
        geometry_sha256=geom.sha256, worst_rms_k=float(rms), worst_max_abs_k=float(mx), goal_met=met,
        goal_miss_allowed=bool(allow_goal_miss and not met))


def assumed_boundary(geom: Geometry, *, ambient_c: float, hbm_traffic_bytes_per_s: float) -> dict[str, Any]:
    """The summary's calibration section when no fragment is loaded: the geometry's own (assumed) boundary."""
    hs = geom.heat_sink
    pv = geom.provenance
    return {"in_force": "assumed", "path": None, "sha256": None,
            "boundary": {"ambient_c": ambient_c, "sink_to_ambient_k_w": hs.sink_to_ambient_k_w,
                         "sink_capacitance_j_k": hs.sink_capacitance_j_k, "h_top_w_m2k": hs.h_top_w_m2k,
                         "provenance": {k: list(pv.get(f"heat_sink.{k}", ("?", "?"))) for k in
                                        ("sink_to_ambient_k_w", "sink_capacitance_j_k", "h_top_w_m2k")}},
            "power_split": ("compute die = board power - modeled HBM power; HBM = the HBM power model at "
                            f"{hbm_traffic_bytes_per_s:g} B/s (assumed, not fitted)"),
            "line": (f"assumed: the geometry's boundary ({geom.name}: cold plate {hs.sink_to_ambient_k_w:g} K/W, "
                     f"{hs.sink_capacitance_j_k:g} J/K, coolant {ambient_c:g} C), not calibrated against a card")}


# ---------------------------------------------------------------------------------------------- synthetic
def synthetic_recording(pinned: ThermalROM, prm: CalibrationParams, plan: Sequence[tuple[str, str, float]], *,
                        phase_s: float = 60.0, sample_hz: float = 10.0, power_noise_w: float = 3.0,
                        temp_noise_k: float = 0.2, quantize_c: float = 1.0, with_mem: bool = True,
                        with_mem_power: bool | None = None, mem_share: float = 0.08, mem_idle_w: float = 20.0,
                        segments: int = 1, seed: int = 0, card: str = "synthetic", driver: str = "model",
                        date: str = "2026-12-04") -> Recording:
    """A recording generated by the calibration model itself with known parameters: board power per phase
    (``plan``: name, kind, watts), white sensor noise, then the sensors' whole-°C quantization (NVML's).
    The power is held at each sample (what the model assumes of NVML's 100 ms power readings). ``with_mem``: a
    memory temperature sensor; ``with_mem_power`` (default: ``with_mem``): a memory-rail power reading (the H200
    has the sensor through NVML but no NVML field known to carry the rail: ``with_mem_power=False``)."""
    rng = np.random.default_rng(seed)
    per_seg = math.ceil(len(plan) / segments)
    phases: list[Phase] = []
    t_next = 1_000_000_000
    dt_ns = int(round(1e9 / sample_hz))
    for si in range(segments):
        part = plan[si * per_seg:(si + 1) * per_seg]
        t_next += 3_600 * 1_000_000_000 * si             # a segment is another device call: another clock origin
        for name, kind, watts in part:
            n = int(round(phase_s * sample_hz)) + 1
            t = t_next + np.arange(n, dtype=np.int64) * dt_ns
            t_next = int(t[-1]) + dt_ns
            bw = np.maximum(watts + rng.normal(0, power_noise_w, n), 0.0)
            mw = np.full(n, np.nan)
            if with_mem if with_mem_power is None else with_mem_power:
                mw = np.maximum(mem_share * bw + mem_idle_w + rng.normal(0, 0.2 * power_noise_w, n), 0.0)
            phases.append(Phase(name, kind, si, t, bw, np.zeros(n), np.full(n, np.nan), mw, {"board_w": watts}))
    rec = Recording(card, driver, date, phases, {"synthetic": True})
    # temperatures from the model (exact equations), then noise and quantization
    mem_t = with_mem and "hbm" in pinned.output_names
    model = CalibratedModel(pinned, Recording(card, driver, date,
                                              [replace(p, mem_temp_c=np.zeros(len(p.t_ns)) if mem_t else p.mem_temp_c)
                                               for p in phases]), settle_s=0.0)
    preds = model.predict(prm)
    by_seg: dict[int, list[Phase]] = {}
    for p in phases:
        by_seg.setdefault(p.segment, []).append(p)
    for y, (seg, ps) in zip(preds, sorted(by_seg.items())):
        off = 0
        for p in ps:
            n = len(p.t_ns)
            for j, o in enumerate(model.outputs):
                v = y[off:off + n, j] + rng.normal(0, temp_noise_k, n)
                v = np.round(v / quantize_c) * quantize_c if quantize_c > 0 else v
                if o == "gpu":
                    p.gpu_temp_c = v
                else:
                    p.mem_temp_c = v
            off += n
    return rec
