"""Synthetic peer-write traces from a simple link model.

The modeled workload is the fused GEMV+AllReduce of workloads/gemv_allreduce: every GPU runs
``tiles`` workgroups; workgroup b of peer p computes its partial tile b, pushes it (``tile_bytes``
of data) to the target's receive buffer, then writes the flag ``flags[b][p] = seq``.

Link model, per peer (directed p -> target):
- ``latency_ns``: one-way latency added to every transfer (a flag arrives ``latency_ns`` after
  it is issued, after the tile it guards: data then flag, in order on the link);
- ``bandwidth_bytes_per_ns`` (== GB/s): the link serializes the peer's transfers;
- ``jitter_ns``: sigma of a zero-mean normal added to each tile's compute time (truncated at 0);
- ``start_skew_ns``: when the peer's kernel starts relative to the target's.

Deterministic for a given seed (numpy PCG64).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from hbfcommon.errors import ConfigError
from eidola.trace import BufferSpec, Trace, TraceHeader, TraceWrite

FLAG_SLOT_BYTES = 4


@dataclass(frozen=True)
class LinkModel:
    latency_ns: int = 700
    bandwidth_bytes_per_ns: float = 150.0   # 150 GB/s per direction per peer
    jitter_ns: int = 0
    start_skew_ns: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.latency_ns, int) or self.latency_ns < 0:
            raise ConfigError("latency_ns must be a non-negative integer", field="latency_ns",
                              value=self.latency_ns)
        if not (isinstance(self.bandwidth_bytes_per_ns, (int, float)) and self.bandwidth_bytes_per_ns > 0
                and math.isfinite(self.bandwidth_bytes_per_ns)):
            raise ConfigError("bandwidth_bytes_per_ns must be positive", field="bandwidth_bytes_per_ns",
                              value=self.bandwidth_bytes_per_ns)
        if not isinstance(self.jitter_ns, int) or self.jitter_ns < 0:
            raise ConfigError("jitter_ns must be a non-negative integer", field="jitter_ns",
                              value=self.jitter_ns)
        if not isinstance(self.start_skew_ns, int) or self.start_skew_ns < 0:
            raise ConfigError("start_skew_ns must be a non-negative integer", field="start_skew_ns",
                              value=self.start_skew_ns)

    @classmethod
    def coerce(cls, v: "LinkModel | Mapping[str, Any]") -> "LinkModel":
        if isinstance(v, LinkModel):
            return v
        unknown = sorted(set(v) - {"latency_ns", "bandwidth_bytes_per_ns", "jitter_ns", "start_skew_ns"})
        if unknown:
            raise ConfigError("unknown link model keys", keys=unknown)
        return cls(**v)


@dataclass(frozen=True)
class GemvArLayout:
    """Buffer layout of the fused GEMV+AllReduce target (mirrors gemv_allreduce.cu)."""

    n_gpus: int
    tiles: int
    tile_rows: int
    flag_stride_bytes: int = FLAG_SLOT_BYTES

    @property
    def tile_bytes(self) -> int:
        return self.tile_rows * 4  # fp32 partials

    def flag_offset(self, tile: int, src: int) -> int:
        return (tile * self.n_gpus + src) * self.flag_stride_bytes

    def flag_bytes(self) -> int:
        raw = self.tiles * self.n_gpus * self.flag_stride_bytes
        return max(128, -(-raw // 128) * 128)

    def recv_offset(self, src: int, tile: int) -> int:
        return (src * self.tiles + tile) * self.tile_bytes

    def recv_bytes(self) -> int:
        return self.n_gpus * self.tiles * self.tile_bytes

    def buffers(self) -> tuple[BufferSpec, ...]:
        return (BufferSpec("flags", "flag", self.flag_bytes()),
                BufferSpec("recv", "data", self.recv_bytes()))


def generate(*, n_gpus: int, target: int = 0, tiles: int, tile_rows: int, compute_ns: int,
             link: LinkModel | Mapping | Sequence[LinkModel | Mapping] = LinkModel(), seq: int = 1,
             seed: int = 0) -> Trace:
    """A synthetic trace for the GEMV+AllReduce target. ``link`` is one model for all peers or
    a list with one entry per rank (the target's entry is ignored)."""
    if not isinstance(n_gpus, int) or n_gpus < 2:
        raise ConfigError("n_gpus must be >= 2", field="n_gpus", value=n_gpus)
    if not isinstance(tiles, int) or tiles < 1:
        raise ConfigError("tiles must be >= 1", field="tiles", value=tiles)
    if not isinstance(tile_rows, int) or tile_rows < 1:
        raise ConfigError("tile_rows must be >= 1", field="tile_rows", value=tile_rows)
    if not isinstance(compute_ns, int) or compute_ns < 0:
        raise ConfigError("compute_ns must be >= 0", field="compute_ns", value=compute_ns)
    if isinstance(link, (LinkModel, Mapping)):
        links = [LinkModel.coerce(link)] * n_gpus
    else:
        links = [LinkModel.coerce(x) for x in link]
        if len(links) != n_gpus:
            raise ConfigError("need one link model per rank", field="link", got=len(links),
                              n_gpus=n_gpus)
    lay = GemvArLayout(n_gpus, tiles, tile_rows)
    rng = np.random.Generator(np.random.PCG64(seed))
    writes: list[TraceWrite] = []
    for p in range(n_gpus):
        if p == target:
            continue
        lk = links[p]
        jit = rng.normal(0.0, lk.jitter_ns, size=tiles) if lk.jitter_ns else np.zeros(tiles)
        release = [lk.start_skew_ns + max(0, int(round(compute_ns + j))) for j in jit]
        link_free = 0.0
        order = sorted(range(tiles), key=lambda b: (release[b], b))
        for b in order:
            start = max(float(release[b]), link_free)
            done = start + lay.tile_bytes / lk.bandwidth_bytes_per_ns
            link_free = done
            data_wake = int(math.ceil(done)) + lk.latency_ns
            writes.append(TraceWrite(src=p, dst=target, buffer="recv", offset=lay.recv_offset(p, b),
                                     size=lay.tile_bytes, value=None, wakeup_ns=data_wake,
                                     release_ns=release[b]))
            # the flag is issued after the data on the same link
            flag_done = link_free + FLAG_SLOT_BYTES / lk.bandwidth_bytes_per_ns
            link_free = flag_done
            writes.append(TraceWrite(src=p, dst=target, buffer="flags", offset=lay.flag_offset(b, p),
                                     size=FLAG_SLOT_BYTES, value=seq,
                                     wakeup_ns=int(math.ceil(flag_done)) + lk.latency_ns,
                                     release_ns=release[b], seq=seq))
    meta = {"generator": "eidola.generator", "seed": seed, "tiles": tiles,
            "tile_rows": tile_rows, "compute_ns": compute_ns, "seq": seq,
            "links": [vars(x) for x in links]}
    hdr = TraceHeader(n_gpus=n_gpus, target=target, source="synthetic", buffers=lay.buffers(),
                      meta=meta)
    return Trace(hdr, tuple(writes))


def uniform_delay(*, n_gpus: int, target: int = 0, tiles: int, tile_rows: int, delay_ns: int,
                  seq: int = 1) -> Trace:
    """Every peer's flag (and tile) becomes visible exactly ``delay_ns`` after the target starts
    (the E1/E2 sweep: the paper's single wakeupTime knob)."""
    lay = GemvArLayout(n_gpus, tiles, tile_rows)
    writes = _tile_writes(lay, n_gpus, target, [delay_ns] * tiles, seq)
    hdr = TraceHeader(n_gpus=n_gpus, target=target, source="synthetic", buffers=lay.buffers(),
                      meta={"generator": "uniform_delay", "delay_ns": delay_ns, "tiles": tiles,
                            "tile_rows": tile_rows, "seq": seq})
    return Trace(hdr, tuple(writes))


def _tile_writes(lay: "GemvArLayout", n_gpus: int, target: int, wakeups: Sequence[int],
                 seq: int) -> list[TraceWrite]:
    """Each peer's tile data then its flag for every tile b, both visible at ``wakeups[b]``."""
    writes: list[TraceWrite] = []
    for p in range(n_gpus):
        if p == target:
            continue
        for b, w in enumerate(wakeups):
            writes.append(TraceWrite(src=p, dst=target, buffer="recv", offset=lay.recv_offset(p, b),
                                     size=lay.tile_bytes, value=None, wakeup_ns=w))
            writes.append(TraceWrite(src=p, dst=target, buffer="flags", offset=lay.flag_offset(b, p),
                                     size=FLAG_SLOT_BYTES, value=seq, wakeup_ns=w, seq=seq))
    return writes


def per_tile_delay(*, n_gpus: int, target: int = 0, tiles: int, tile_rows: int,
                   base_ns: Sequence[int], delay_ns: int, seq: int = 1,
                   base_name: str = "tile_ready") -> Trace:
    """Every peer's flag (and tile) for tile b becomes visible ``delay_ns`` after ``base_ns[b]``
    (relative to the target kernel's start). With base_ns = the measured time each target tile is
    ready to wait (flags released), ``delay_ns`` is the paper's peer delay: how late the peers'
    data and flags are for the consumer waiting on them (E1 "delay from tile ready")."""
    if len(base_ns) != tiles:
        raise ConfigError("need one base time per tile", field="base_ns", got=len(base_ns), tiles=tiles)
    if not isinstance(delay_ns, int) or delay_ns < 0:
        raise ConfigError("delay_ns must be a non-negative integer", field="delay_ns", value=delay_ns)
    bases = [int(b) for b in base_ns]
    if any(b < 0 for b in bases):
        raise ConfigError("base times must be >= 0", field="base_ns", value=min(bases))
    lay = GemvArLayout(n_gpus, tiles, tile_rows)
    writes = _tile_writes(lay, n_gpus, target, [b + delay_ns for b in bases], seq)
    hdr = TraceHeader(n_gpus=n_gpus, target=target, source="synthetic", buffers=lay.buffers(),
                      meta={"generator": "per_tile_delay", "delay_ns": delay_ns, "base": base_name,
                            "base_ns": bases, "tiles": tiles, "tile_rows": tile_rows, "seq": seq})
    return Trace(hdr, tuple(writes))
