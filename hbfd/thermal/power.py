"""Power into the package model: media events binned into 10 ms, HBM from traffic, GPU from telemetry.

* HBF: every media event carries ``E = E_cmd + e_byte × bytes`` (profile ``energy``: read_j,
  program_j, erase_j, j_per_byte). :class:`EnergyBinner` accumulates event energy in bins of
  ``bin_ns``; an event spanning several bins is split in proportion to its time overlap with each
  (HBFSim paper §4.3). Node power in bin k is ``E[k]/Δt + P_idle``.
* HBM: ``P = P_idle + e_byte × traffic`` (bytes/s), per the HBM energy parameters given.
* GPU: the measured board power minus the modeled HBM power (the board reading contains the memory),
  never below zero.

Pure.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OP_READ, OP_PROGRAM, OP_ERASE = 0, 1, 2


def event_energy_j(op: int, nbytes: int, *, read_j: float, program_j: float, erase_j: float,
                   j_per_byte: float) -> float:
    if op == OP_READ:
        return read_j + j_per_byte * nbytes
    if op == OP_PROGRAM:
        return program_j + j_per_byte * nbytes
    if op == OP_ERASE:
        return erase_j
    raise ValueError(f"unknown media op {op}")


class EnergyBinner:
    """Per-node energy in fixed time bins, with time-overlap splitting of events.

    Bins are ``[t0 + k·bin_ns, t0 + (k+1)·bin_ns)``. ``add`` may be called for any event that ends
    after the last popped bin; ``pop_until(now_ns)`` returns the energy of every bin that ends at or
    before ``now_ns`` (k×n_nodes) and forgets them. An instantaneous event (start == end) lands in the
    bin that contains it."""

    def __init__(self, bin_ns: int, n_nodes: int, t0_ns: int = 0):
        if bin_ns <= 0 or n_nodes <= 0:
            raise ValueError("bin_ns and n_nodes must be > 0")
        self.bin_ns = int(bin_ns)
        self.n_nodes = n_nodes
        self.next_bin = 0                          # index of the first bin not yet popped
        self.t0_ns = int(t0_ns)
        self._acc: dict[int, np.ndarray] = {}
        self.total_j = 0.0

    def add(self, start_ns: int, end_ns: int, energy_j: float, node: int | np.ndarray) -> None:
        """``node``: one node index, or a weight vector over nodes (sums to 1)."""
        if end_ns < start_ns:
            raise ValueError(f"event ends before it starts ({start_ns} > {end_ns})")
        if energy_j < 0:
            raise ValueError("negative event energy")
        w = np.zeros(self.n_nodes)
        if np.ndim(node) == 0:
            w[int(node)] = 1.0
        else:
            w[:] = node
        s, e = start_ns - self.t0_ns, end_ns - self.t0_ns
        first = s // self.bin_ns
        if end_ns == start_ns:
            if first < self.next_bin:
                raise ValueError(f"event at {start_ns} ns falls in a bin already handed out")
            self._bin(first)[:] += energy_j * w
            self.total_j += energy_j
            return
        last = (e - 1) // self.bin_ns
        if first < self.next_bin:
            raise ValueError(f"event [{start_ns}, {end_ns}) starts in a bin already handed out")
        span = e - s
        for k in range(first, last + 1):
            lo = max(s, k * self.bin_ns)
            hi = min(e, (k + 1) * self.bin_ns)
            self._bin(k)[:] += energy_j * (hi - lo) / span * w
        self.total_j += energy_j

    def _bin(self, k: int) -> np.ndarray:
        b = self._acc.get(k)
        if b is None:
            b = self._acc[k] = np.zeros(self.n_nodes)
        return b

    def complete_bins(self, now_ns: int) -> int:
        return max(0, (now_ns - self.t0_ns) // self.bin_ns - self.next_bin)

    def pop_until(self, now_ns: int) -> np.ndarray:
        n = self.complete_bins(now_ns)
        out = np.zeros((n, self.n_nodes))
        for i in range(n):
            b = self._acc.pop(self.next_bin + i, None)
            if b is not None:
                out[i] = b
        self.next_bin += n
        return out


@dataclass(frozen=True)
class HbmPowerModel:
    idle_w: float              # all stacks together
    j_per_byte: float

    def power_w(self, traffic_bytes_per_s: float) -> float:
        if traffic_bytes_per_s < 0:
            raise ValueError("negative HBM traffic")
        return self.idle_w + self.j_per_byte * traffic_bytes_per_s


# HBM3E-class defaults (assumed; see docs/thermal.md): ~3.9 pJ/bit access energy = 31.2 pJ/B, 2 W idle
# per stack; the H200 exposes ~55 W average memory-rail power under load (notes §6, nvidia-smi).
DEFAULT_HBM = HbmPowerModel(idle_w=2.0 * 5, j_per_byte=31.2e-12)


def gpu_die_power_w(board_power_w: float, hbm_power_w: float) -> float:
    """The compute-die source: board power minus the modeled memory power (never negative)."""
    return max(0.0, board_power_w - hbm_power_w)


@dataclass(frozen=True)
class ModeledHbmSplit:
    """The assumed split of the measured board power (no calibration): HBM = the HBM power model at the
    profile's traffic; compute die = the rest (:func:`gpu_die_power_w`)."""

    hbm: HbmPowerModel
    hbm_traffic_bytes_per_s: float

    def powers_w(self, board_power_w: float) -> tuple[float, float]:
        hbm_w = self.hbm.power_w(self.hbm_traffic_bytes_per_s)
        return gpu_die_power_w(board_power_w, hbm_w), hbm_w


@dataclass(frozen=True)
class FittedSplit:
    """The calibrated split (hbfd/thermal/calibrate.py): fixed shares of the board power dissipated in the compute
    die and in the HBM region; the rest leaves the package (VRM, board). The HBM traffic model is not used: the
    board power already holds the memory's power."""

    die_fraction: float
    hbm_fraction: float

    def __post_init__(self):
        if not (0.0 <= self.die_fraction <= 1.0 and 0.0 <= self.hbm_fraction <= 1.0
                and self.die_fraction + self.hbm_fraction <= 1.0 + 1e-9):
            raise ValueError(f"power shares {self.die_fraction}, {self.hbm_fraction} are not fractions of one power")

    def powers_w(self, board_power_w: float) -> tuple[float, float]:
        return self.die_fraction * board_power_w, self.hbm_fraction * board_power_w


def hbf_layer_weights(input_names, *, dynamic: bool) -> np.ndarray:
    """How HBF energy spreads over the model's inputs: idle power on the base die (logic, PHY);
    per-event energy evenly over the NAND layers (pages interleave over every die of the stack)."""
    names = list(input_names)
    w = np.zeros(len(names))
    layers = [i for i, n in enumerate(names) if n.startswith("hbf_l")]
    base = [i for i, n in enumerate(names) if n == "hbf_base"]
    if dynamic and layers:
        w[layers] = 1.0 / len(layers)
    elif base:
        w[base[0]] = 1.0
    elif layers:
        w[layers] = 1.0 / len(layers)
    else:
        raise ValueError("geometry has no HBF source (hbf_base or hbf_l*)")
    return w
