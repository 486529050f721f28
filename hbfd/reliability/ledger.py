"""Per-block retention damage, read disturb, zone and PEC (HBFSim paper §4.4, eqs. 4–6).

Retention lifetime (Arrhenius, anchored at the profile's reference condition):

    L(T) = L_ref · exp[(Ea_r / k_B) · (1/T − 1/T_ref)]

Damage over a changing trajectory (Miner): ``D += a_t · Δt / L(T)``, where ``a_t`` is the disclosed
reliability-time acceleration (1.0 = real time) and every summary states it.

All blocks of one HBF layer see the same temperature, so the ledger keeps one running integral per
layer, ``I_l(t) = Σ a_t·Δt/L(T_l)``, and per block only the value of that integral when the block was
last programmed: ``damage_b = I_layer(b) − base_b``. Accumulation is O(layers) per tick whatever the
number of blocks.

Physical block id → location (the reference scheduler's mapping, interleave 0):
``channel = b % C``, ``die = (b // C) % D``. The stack's dies are numbered ``die * C + channel`` (the
media map's order, channel fastest) and fill the ``layers`` from the bottom (layer 0) up, ``C * D / layers``
dies per layer: ``layer = (die * C + channel) * layers // (C * D)``. With ``layers == D`` (several dies
per channel) that is the die index within its channel; with one die per channel (the OCP grades: die c
on channel c) it is the channel.

Pure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

K_B_EV = 8.617333262145e-5            # Boltzmann constant, eV/K
C_TO_K = 273.15


def lifetime_h(temp_c: np.ndarray | float, *, ea_ev: float, l_ref_h: float, t_ref_c: float) -> np.ndarray | float:
    T = np.asarray(temp_c, float) + C_TO_K
    return l_ref_h * np.exp(ea_ev / K_B_EV * (1.0 / T - 1.0 / (t_ref_c + C_TO_K)))


def acceleration(temp_c: np.ndarray | float, *, ea_ev: float, t_ref_c: float) -> np.ndarray | float:
    """exp[(Ea/k_B)(1/T_ref − 1/T)]: how much faster than at T_ref."""
    T = np.asarray(temp_c, float) + C_TO_K
    return np.exp(ea_ev / K_B_EV * (1.0 / (t_ref_c + C_TO_K) - 1.0 / T))


@dataclass(frozen=True)
class ReliabilityParams:
    ea_retention_ev: float
    l_ref_h: float
    t_ref_c: float
    a_t: float
    refresh_damage_threshold: float
    read_disturb_limit: int
    pec_limit: int

    @classmethod
    def from_profile(cls, r) -> "ReliabilityParams":
        return cls(r.ea_retention_ev, r.l_ref_h, r.t_ref_c, r.a_t, r.refresh_damage_threshold,
                   r.read_disturb_limit, r.pec_limit)


class BlockLedger:
    """Registered blocks and their retention/disturb/wear state."""

    def __init__(self, params: ReliabilityParams, *, channels: int, dies_per_channel: int, layers: int,
                 block_bytes: int, pages_per_block: int, blocks_per_entry: int = 1):
        if min(channels, dies_per_channel, layers, block_bytes, pages_per_block) <= 0:
            raise ValueError("ledger geometry must be positive")
        if layers > channels * dies_per_channel:
            raise ValueError(f"{layers} layers for {channels * dies_per_channel} dies: a layer holds at least one die")
        self.p = params
        self.channels, self.dies, self.layers = channels, dies_per_channel, layers
        self.block_bytes, self.pages_per_block = block_bytes, pages_per_block
        # an entry may stand for a group of physical blocks refreshed together (long-horizon
        # experiments); read-disturb counts stay per physical block
        self.blocks_per_entry = blocks_per_entry
        self.integral = np.zeros(layers)            # I_l
        self.block = np.zeros(0, np.int64)
        self.zone = np.zeros(0, np.int32)
        self.channel = np.zeros(0, np.int32)
        self.die = np.zeros(0, np.int32)
        self.layer = np.zeros(0, np.int32)
        self.base = np.zeros(0)
        self.reads = np.zeros(0, np.int64)
        self.uniform_reads = 0.0                    # page reads spread evenly over every block
        self.reads_base = np.zeros(0)
        self.pec = np.zeros(0, np.int64)
        self.elapsed_s = 0.0
        self.active = np.zeros(0, bool)             # registered now (an unregistered entry keeps its PEC)
        self.refs = np.zeros(0, np.int32)           # registrations holding the block (ranges may share one)
        self.unregistered_reads = 0                 # application reads of blocks no registration holds
        self._index: dict[int, int] = {}
        self._dense = np.full(0, -1, np.int64)      # block id -> entry (-1: none), for vectorized reads
        self._live = np.full(0, -1, np.int64)       # block id -> entry while registered (-1: not now)

    # ---- registration --------------------------------------------------------------------------
    def register(self, zone: int, blocks: np.ndarray, *, pec: int = 0, shared: bool = False) -> None:
        """Blocks of a registered range hold valid data from now (damage 0).

        ``shared=False``: a block already registered is an error. ``shared=True`` (the daemon's range
        registrations, where two ranges may own pages of one block): a block still held by another
        registration gains a reference and keeps its state and zone; a block registered before and
        since unregistered becomes valid again (damage and disturb 0, zone ``zone``, PEC kept)."""
        blocks = np.asarray(blocks, np.int64)
        if len(np.unique(blocks)) != len(blocks):
            raise ValueError("block repeated in one registration")
        self._grow_dense(int(blocks.max()) + 1 if len(blocks) else 0)
        known = self._dense[blocks] if len(blocks) else np.zeros(0, np.int64)
        old = known >= 0
        if old.any() and not shared:
            raise ValueError(f"block {int(blocks[old][0])} registered twice")
        if old.any():
            idx = known[old]
            held = self.active[idx]
            self.refs[idx[held]] += 1
            re = idx[~held]
            self.active[re] = True
            self.refs[re] = 1
            self.zone[re] = zone
            self.base[re] = self.integral[self.layer[re]]
            self.reads[re] = 0
            self.reads_base[re] = self.uniform_reads
            self._live[blocks[old]] = idx
            blocks = blocks[~old]
        start = len(self.block)
        self.block = np.concatenate([self.block, blocks])
        self.zone = np.concatenate([self.zone, np.full(len(blocks), zone, np.int32)])
        ch = (blocks % self.channels).astype(np.int32)
        die = ((blocks // self.channels) % self.dies).astype(np.int32)
        self.channel = np.concatenate([self.channel, ch])
        self.die = np.concatenate([self.die, die])
        lay = ((die.astype(np.int64) * self.channels + ch) * self.layers
               // (self.channels * self.dies)).astype(np.int32)
        self.layer = np.concatenate([self.layer, lay])
        self.base = np.concatenate([self.base, self.integral[lay]])
        self.reads = np.concatenate([self.reads, np.zeros(len(blocks), np.int64)])
        self.reads_base = np.concatenate([self.reads_base, np.full(len(blocks), self.uniform_reads)])
        self.pec = np.concatenate([self.pec, np.full(len(blocks), pec, np.int64)])
        self.active = np.concatenate([self.active, np.ones(len(blocks), bool)])
        self.refs = np.concatenate([self.refs, np.ones(len(blocks), np.int32)])
        self._dense[blocks] = start + np.arange(len(blocks))
        self._live[blocks] = start + np.arange(len(blocks))
        for i, b in enumerate(blocks):
            self._index[int(b)] = start + i

    def _grow_dense(self, n: int) -> None:
        if n > len(self._dense):
            pad = np.full(n - len(self._dense), -1, np.int64)
            self._dense = np.concatenate([self._dense, pad])
            self._live = np.concatenate([self._live, pad])

    def unregister(self, blocks: np.ndarray) -> int:
        """Drop one registration of each block (the inverse of :meth:`register`); a block no
        registration holds any more stops ageing into refresh eligibility (its PEC is kept).
        Returns how many blocks became unregistered."""
        blocks = np.asarray(blocks, np.int64)
        idx = self._dense[blocks[blocks < len(self._dense)]] if len(blocks) else np.zeros(0, np.int64)
        if len(idx) != len(blocks) or (idx < 0).any() or not self.active[idx].all():
            raise ValueError("unregistering a block that is not registered")
        self.refs[idx] -= 1
        gone = idx[self.refs[idx] == 0]
        self.active[gone] = False
        self._live[self.block[gone]] = -1
        return int(len(gone))

    @property
    def n_active(self) -> int:
        return int(self.active.sum())

    def index_of(self, block: int) -> int:
        return self._index[int(block)]

    @property
    def n_blocks(self) -> int:
        return len(self.block)

    # ---- time ------------------------------------------------------------------------------------
    def accumulate(self, dt_s: float, layer_temps_c: np.ndarray) -> None:
        """One interval of ``dt_s`` at the given per-layer temperatures."""
        if dt_s < 0:
            raise ValueError("negative interval")
        t = np.asarray(layer_temps_c, float)
        if t.shape != (self.layers,) or not np.isfinite(t).all():
            raise ValueError(f"need {self.layers} finite layer temperatures")
        L = lifetime_h(t, ea_ev=self.p.ea_retention_ev, l_ref_h=self.p.l_ref_h, t_ref_c=self.p.t_ref_c)
        self.integral += self.p.a_t * (dt_s / 3600.0) / L
        self.elapsed_s += dt_s

    def accumulate_series(self, dt_s: float, layer_temps_c: np.ndarray) -> None:
        """Many intervals at once (n×layers)."""
        t = np.asarray(layer_temps_c, float)
        if t.ndim != 2 or t.shape[1] != self.layers or not np.isfinite(t).all():
            raise ValueError(f"need n×{self.layers} finite layer temperatures")
        L = lifetime_h(t, ea_ev=self.p.ea_retention_ev, l_ref_h=self.p.l_ref_h, t_ref_c=self.p.t_ref_c)
        self.integral += self.p.a_t * (dt_s / 3600.0) * (1.0 / L).sum(axis=0)
        self.elapsed_s += dt_s * t.shape[0]

    def seconds_until_damage(self, layer_temps_c: np.ndarray) -> float:
        """At constant per-layer temperatures, seconds until the first block reaches the refresh
        threshold (0 if one already has; inf if none registered)."""
        if not self.n_active:
            return math.inf
        L = lifetime_h(np.asarray(layer_temps_c, float), ea_ev=self.p.ea_retention_ev, l_ref_h=self.p.l_ref_h,
                       t_ref_c=self.p.t_ref_c)
        rate = self.p.a_t / 3600.0 / L                       # damage per second per layer
        dmg = self.damage()
        need = self.p.refresh_damage_threshold - dmg
        per = need / rate[self.layer]
        return float(max(0.0, per[self.active].min()))

    # ---- state -------------------------------------------------------------------------------
    def damage(self) -> np.ndarray:
        return self.integral[self.layer] - self.base

    def add_reads(self, blocks: np.ndarray, counts: np.ndarray | int = 1) -> None:
        idx = np.fromiter((self._index[int(b)] for b in np.atleast_1d(blocks)), np.int64)
        np.add.at(self.reads, idx, counts)

    def count_block_reads(self, blocks: np.ndarray) -> None:
        """One read per element of ``blocks`` (block ids, any order, repeats allowed), vectorized:
        reads of blocks no registration holds are counted in ``unregistered_reads``."""
        b = np.asarray(blocks, np.int64)
        n = len(b)
        if not n:
            return
        live = self._live
        if int(b.max()) < len(live) and int(b.min()) >= 0:
            idx = live[b]
        else:   # ids outside the ledger (a negative one too: an address >= 2^63 seen as int64)
            idx = np.full(n, -1, np.int64)
            inside = (b >= 0) & (b < len(live))
            idx[inside] = live[b[inside]]
        if int(idx.min()) < 0:
            ok = idx >= 0
            self.unregistered_reads += int(n - ok.sum())
            idx = idx[ok]
        if len(idx) > 256:
            self.reads += np.bincount(idx, minlength=len(self.reads))
        elif len(idx):
            np.add.at(self.reads, idx, 1)

    def add_uniform_reads(self, page_reads: float) -> None:
        """``page_reads`` page reads spread evenly over every registered block (fluid workloads)."""
        if self.n_active and page_reads > 0:
            self.uniform_reads += page_reads / (self.n_active * self.blocks_per_entry)

    def disturb(self) -> np.ndarray:
        return self.reads + (self.uniform_reads - self.reads_base)

    def eligible_mask(self) -> np.ndarray:
        due = (self.damage() >= self.p.refresh_damage_threshold) | (self.disturb() >= self.p.read_disturb_limit)
        return due & self.active

    def commit_refresh(self, i: int) -> None:
        """A block's refresh completed: one PEC, damage and disturb cleared."""
        self.pec[i] += 1
        self.base[i] = self.integral[self.layer[i]]
        self.reads[i] = 0
        self.reads_base[i] = self.uniform_reads

    def summary(self) -> dict[str, Any]:
        a = self.active
        d = self.damage()[a] if a.any() else np.zeros(1)
        rd = self.disturb()[a] if a.any() else np.zeros(1)
        pec = self.pec[a] if a.any() else np.zeros(1, np.int64)
        return {
            "registered_blocks": self.n_active * self.blocks_per_entry,
            "ledger_entries": int(self.n_blocks),
            "unregistered_reads": int(self.unregistered_reads),
            "blocks_per_ledger_entry": self.blocks_per_entry,
            "reliability_a_t": self.p.a_t,
            "ea_retention_ev": self.p.ea_retention_ev, "l_ref_h": self.p.l_ref_h, "t_ref_c": self.p.t_ref_c,
            "damage_max": float(d.max()), "damage_mean": float(d.mean()),
            "damage_by_layer": [float(x) for x in self.integral],
            "read_disturb_max": float(rd.max()),
            "read_disturb_limit": self.p.read_disturb_limit,
            "pec_max": int(self.pec.max()) if self.n_blocks else 0,
            "pec_mean": float(pec.mean()),
            "pec_limit": self.p.pec_limit,
            "blocks_over_pec_limit": int((self.pec >= self.p.pec_limit).sum()),
        }
