"""MediaGeometry: the frozen, validated parameters of the NAND media model.

The model reads only this dataclass; ``MediaGeometry.from_profile(profile)`` adapts a device
profile (``hbfcommon.profile.Profile``). Tests build small geometries directly.

Address interleave (profile ``media.interleave`` = 0): logical page ``n`` lives on
``channel = n % C``, ``die = (n // C) % D``, ``plane = (n // (C*D)) % P``; inside its plane it is
logical page ``n // (C*D*P)``. Plane allocation is static (a logical page is always programmed in
its home plane), so the plane a read senses never depends on the FTL state.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from hbfcommon.errors import ConfigError, ErrorCode, HbfError
from hbfcommon.profile import NandTopology, gc_start_blocks, gc_victim_problem, logical_pages_per_plane

PAGE_BYTES = 4096
SECTOR_BYTES = 64
SECTORS_PER_PAGE = PAGE_BYTES // SECTOR_BYTES  # 64: one bit each in a uint64 write mask


class MediaError(HbfError):
    """The media model was asked something it cannot serve (bad address, full device)."""

    code = ErrorCode.INVALID_ARGUMENT


@dataclass(frozen=True)
class MediaGeometry(NandTopology):
    """dies, planes, blocks, raw_pages, raw_bytes, aggregate_bytes_per_s: :class:`NandTopology`."""

    channels: int
    dies_per_channel: int
    planes_per_die: int
    blocks_per_plane: int
    pages_per_block: int
    channel_bytes_per_s: int        # per channel
    t_read_ns: int                  # tR: page sense
    t_prog_ns: int                  # tPROG
    t_erase_ns: int                 # tBERS
    t_cmd_ns: int = 0               # command/address latency before the array operation starts
    queue_depth: int = 32           # outstanding commands per die (admission to completion)
    over_provisioning: float = 0.07
    gc_start_free_fraction: float = 0.05
    gc_hard_free_fraction: float = 0.005
    write_flush_timeout_ns: int = 1_000_000   # a partial page is programmed this long after its first store
    page_bytes: int = PAGE_BYTES
    read_granularity: int = SECTOR_BYTES
    page_buffers_per_plane: int = 2  # decoded page buffers per plane (OCP bank), LRU by use

    def __post_init__(self) -> None:
        bad = list(self._invariants())
        if bad:
            f, msg = bad[0]
            raise ConfigError(f"media geometry: {f}: {msg}", field=f, value=getattr(self, f, None))

    def _invariants(self):
        for f in ("channels", "dies_per_channel", "planes_per_die", "blocks_per_plane", "pages_per_block",
                  "channel_bytes_per_s", "t_read_ns", "t_prog_ns", "t_erase_ns", "queue_depth",
                  "page_buffers_per_plane"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                yield f, "must be an integer >= 1"
        for f in ("t_cmd_ns", "write_flush_timeout_ns"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                yield f, "must be an integer >= 0"
        if self.page_bytes != PAGE_BYTES:
            yield "page_bytes", "pages are 4 KiB (4096)"
        if self.read_granularity != SECTOR_BYTES:
            yield "read_granularity", "reads are served at 64 B granularity"
        if not 0.0 <= self.over_provisioning < 1.0:
            yield "over_provisioning", "must be in [0, 1)"
        if not 0.0 < self.gc_hard_free_fraction <= self.gc_start_free_fraction < 1.0:
            yield "gc_start_free_fraction", "need 0 < gc_hard_free_fraction <= gc_start_free_fraction < 1"
        if self.planes >= 1 << 31:
            yield "planes_per_die", "too many planes"
        # GC must always find a victim with an invalid page (hbfcommon.profile's one rule)
        if all(isinstance(getattr(self, f), int) and getattr(self, f) >= 1
               for f in ("blocks_per_plane", "pages_per_block")) and 0.0 <= self.over_provisioning < 1.0:
            gc = gc_victim_problem(self.blocks_per_plane, self.pages_per_block, self.over_provisioning,
                                   self.gc_start_free_fraction)
            if gc:
                yield "over_provisioning", gc

    # ---- derived ------------------------------------------------------------------------------
    @property
    def logical_pages_per_plane(self) -> int:
        """:func:`hbfcommon.profile.logical_pages_per_plane`, the one capacity rule."""
        return logical_pages_per_plane(self.blocks_per_plane, self.pages_per_block, self.over_provisioning)

    @property
    def logical_pages(self) -> int:
        return self.logical_pages_with(self.over_provisioning)

    @property
    def capacity_bytes(self) -> int:
        """Logical (host-visible) capacity: raw minus over-provisioning (equal to
        ``Profile.capacity_bytes`` for a geometry built by :meth:`from_profile`)."""
        return self.logical_pages * self.page_bytes

    @property
    def gc_start_blocks(self) -> int:
        """GC runs in a plane while its free blocks are fewer than this."""
        return gc_start_blocks(self.blocks_per_plane, self.gc_start_free_fraction)

    @property
    def array_read_bytes_per_s(self) -> int:
        """Sensing bound: every plane senses one 4 KiB page per tR."""
        return self.planes * self.page_bytes * 1_000_000_000 // self.t_read_ns

    @property
    def read_bound_bytes_per_s(self) -> int:
        """The most 4 KiB-read bandwidth the geometry allows: min(channels, sensing)."""
        return min(self.aggregate_bytes_per_s, self.array_read_bytes_per_s)

    def transfer_ns(self, nbytes: int) -> int:
        """Channel occupancy of ``nbytes``: ceil(nbytes * 1e9 / channel_bytes_per_s), integer ns."""
        return -(-int(nbytes) * 1_000_000_000 // self.channel_bytes_per_s)

    def single_read_ns(self, nbytes: int = PAGE_BYTES) -> int:
        """Modeled latency of one read on an idle device: t_cmd + tR + transfer(bytes rounded out to
        64 B sectors). ``nbytes`` here is the sector-rounded transfer size."""
        return self.t_cmd_ns + self.t_read_ns + self.transfer_ns(nbytes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MediaGeometry":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"media geometry: unknown field {unknown[0]!r}", field=unknown[0])
        return cls(**dict(d))

    @classmethod
    def from_profile(cls, profile: Any, **overrides: Any) -> "MediaGeometry":
        """Adapter from ``hbfcommon.profile.Profile`` (or anything ``as_profile`` accepts)."""
        from hbfcommon.profile import as_profile
        p = as_profile(profile)
        g, t, m = p.geometry, p.timing, p.media
        kw: dict[str, Any] = dict(
            channels=g.channels, dies_per_channel=g.dies_per_channel, planes_per_die=g.planes_per_die,
            blocks_per_plane=g.blocks_per_plane, pages_per_block=g.pages_per_block,
            channel_bytes_per_s=int(g.channel_bytes_per_s), t_read_ns=t.t_read_ns, t_prog_ns=t.t_prog_ns,
            t_erase_ns=t.t_erase_ns, t_cmd_ns=t.t_cmd_ns, queue_depth=m.queue_depth,
            over_provisioning=m.over_provisioning, gc_start_free_fraction=m.gc_start_free_fraction,
            gc_hard_free_fraction=m.gc_hard_free_fraction, page_bytes=g.page_bytes,
            read_granularity=g.read_granularity, page_buffers_per_plane=g.page_buffers_per_plane)
        kw.update(overrides)
        return cls(**kw)
