"""Device profiles: typed, validated twice, every number with its provenance.

A profile is a JSON file in ``profiles/``. It is validated first against
``profiles/profile.schema.json`` (structure; unknown keys rejected), then against the invariants
of the frozen dataclasses below (meaning: geometry self-consistency, ordered thresholds, ...).
Every error is a :class:`ProfileError` whose fields name the file and the dotted field.

In the JSON every number is written with its provenance::

    "t_read_ns": {"value": 20000, "provenance": "literature", "source": "..."}

The loader exposes plain values (``profile.timing.t_read_ns == 20000``) and a provenance map
(``profile.provenance["timing.t_read_ns"].kind == "literature"``).

Adding a field: add it to the section's dataclass (a default makes it optional) and to the
section's ``properties`` in the schema; ``tests/test_profiles.py`` checks that the two agree.
There is no time multiplier: modeled time is device time, 1:1 (a ``time_scale`` key is refused).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from hbfcommon.errors import ProfileError
from hbfcommon.fsutil import atomic_write_json, read_json_document
from hbfcommon.resources import data_path

PROFILE_DIR = data_path("hbfcommon", "profiles")   # packaged data (hbfcommon/profiles; hbfcommon.resources)
SCHEMA_PATH = PROFILE_DIR / "profile.schema.json"
SCHEMA_VERSION = 1
PROVENANCE_KINDS = ("spec", "literature", "measured", "assumed")
TIMING_SOURCES = ("fixed", "curve", "fast", "reference")
MAX_CURVE_POINTS = 16  # HBF_MAX_CURVE_POINTS in hbf_ctl.h


@dataclass(frozen=True)
class Provenance:
    kind: str     # spec | literature | measured | assumed
    source: str


def logical_pages_per_plane(blocks_per_plane: int, pages_per_block: int, over_provisioning: float) -> int:
    """The one capacity rule: the pages of a plane the host may address, raw minus over-provisioning
    (rounded down). :attr:`Profile.capacity_bytes` (what ranges may claim) and the media model
    (``hbfd.media.MediaGeometry``) both derive from it."""
    return int(blocks_per_plane * pages_per_block * (1.0 - over_provisioning))


def gc_start_blocks(blocks_per_plane: int, gc_start_free_fraction: float) -> int:
    """GC runs in a plane while its free blocks are fewer than this."""
    return max(1, math.ceil(gc_start_free_fraction * blocks_per_plane))


def gc_victim_problem(blocks_per_plane: int, pages_per_block: int, over_provisioning: float,
                      gc_start_free_fraction: float) -> str | None:
    """The one GC rule (the profile's validation and the media model's): when a plane's free blocks drop to
    gc_start_blocks - 1, its closed blocks must hold more pages than the logical pages, so GC always finds a
    victim with an invalid page. None when it holds, else what is wrong."""
    closed = blocks_per_plane - gc_start_blocks(blocks_per_plane, gc_start_free_fraction)
    logical = logical_pages_per_plane(blocks_per_plane, pages_per_block, over_provisioning)
    if closed * pages_per_block <= logical:
        return (f"{logical} logical pages per plane do not leave a GC victim: (blocks_per_plane - gc_start_blocks) "
                f"x pages_per_block = {closed * pages_per_block} must exceed them (raise over_provisioning or "
                "lower gc_start_free_fraction)")
    return None


class NandTopology:
    """The counts a NAND geometry derives from its fields, defined once for the profile's
    :class:`Geometry` and the media model's ``hbfd.media.MediaGeometry`` (each provides channels,
    dies_per_channel, planes_per_die, blocks_per_plane, pages_per_block, page_bytes and
    channel_bytes_per_s)."""

    __slots__ = ()

    @property
    def aggregate_bytes_per_s(self) -> int:
        return self.channels * self.channel_bytes_per_s

    @property
    def dies(self) -> int:
        return self.channels * self.dies_per_channel

    @property
    def planes(self) -> int:
        return self.dies * self.planes_per_die

    @property
    def blocks(self) -> int:
        return self.planes * self.blocks_per_plane

    @property
    def raw_pages(self) -> int:
        """Every physical page, over-provisioning included."""
        return self.blocks * self.pages_per_block

    @property
    def raw_bytes(self) -> int:
        """Raw media bytes, over-provisioning included (ranges claim only the usable capacity:
        :attr:`Profile.capacity_bytes`)."""
        return self.raw_pages * self.page_bytes

    def logical_pages_with(self, over_provisioning: float) -> int:
        """Host-addressable pages: :func:`logical_pages_per_plane` on every plane."""
        return logical_pages_per_plane(self.blocks_per_plane, self.pages_per_block, over_provisioning) * self.planes


# ---- sections ------------------------------------------------------------------------------
# Each section is a frozen dataclass. ``_invariants`` yields (field, message) for violations.

@dataclass(frozen=True)
class Geometry(NandTopology):
    page_bytes: int
    read_granularity: int
    write_granularity: int
    channels: int
    dies_per_channel: int
    planes_per_die: int
    blocks_per_plane: int
    pages_per_block: int
    channel_width_bits: int
    channel_rate_mtps: float
    stack_height: int
    host_link_bytes_per_s: float | None = None
    # payload fraction of the raw channel rate (OCP HBF v0.7.0 p16: x64 * GT/s / 8 * 0.75)
    channel_efficiency: float = 1.0
    # decoded page buffers per plane (the OCP "bank": one ordered sense engine, two page buffers)
    page_buffers_per_plane: int = 2

    @property
    def channel_bytes_per_s(self) -> int:
        """Per channel payload: width/8 bytes per transfer × rate (MT/s) × 1e6 × channel_efficiency."""
        return round(self.channel_width_bits / 8 * self.channel_rate_mtps * 1e6 * self.channel_efficiency)

    def _invariants(self):
        if self.page_bytes != 4096:
            yield "page_bytes", "pages are 4 KiB (4096)"
        if self.read_granularity != 64:
            yield "read_granularity", "reads are served at 64 B granularity"
        if self.write_granularity != 4096:
            yield "write_granularity", "writes are assembled to 4 KiB (4096)"
        if self.channel_width_bits % 8:
            yield "channel_width_bits", "must be a whole number of bytes"
        if not 0.0 < self.channel_efficiency <= 1.0:
            yield "channel_efficiency", "must be a fraction in (0, 1]"
            return
        if not 1 <= self.page_buffers_per_plane <= 2:
            yield "page_buffers_per_plane", "must be 1 or 2 (the device model keeps a plane's buffers in one 16-byte record)"
        cbps = self.channel_width_bits / 8 * self.channel_rate_mtps * 1e6 * self.channel_efficiency
        if not 1 <= cbps <= I64_MAX or not 1 <= cbps * self.channels <= I64_MAX:
            yield ("channel_rate_mtps",
                   f"channel_width_bits/8 x channel_rate_mtps x 1e6 = {cbps:.6g} B/s per channel, {self.channels} "
                   f"channels: the rate must be in [1, {I64_MAX}] B/s in total (channel_bytes_per_s is a u64 "
                   "of hbf_media_params)")
            return
        if self.host_link_bytes_per_s is not None and self.aggregate_bytes_per_s > self.host_link_bytes_per_s:
            yield ("host_link_bytes_per_s",
                   f"aggregate media bandwidth channels × channel_bytes_per_s = {self.channels} × "
                   f"{self.channel_bytes_per_s} = {self.aggregate_bytes_per_s} B/s exceeds the host link "
                   f"({self.host_link_bytes_per_s:.0f} B/s): the geometry contradicts the link; "
                   f"lower channel_rate_mtps/channels or raise the link")


@dataclass(frozen=True)
class Timing:
    t_read_ns: int    # tR: page sense
    t_prog_ns: int    # tPROG
    t_erase_ns: int   # tBERS
    t_cmd_ns: int     # command/address overhead per operation

    def _invariants(self):
        if not self.t_read_ns < self.t_prog_ns < self.t_erase_ns:
            yield "t_prog_ns", "NAND timing must satisfy t_read_ns < t_prog_ns < t_erase_ns"


@dataclass(frozen=True)
class Media:
    queue_depth: int              # per die
    over_provisioning: float      # fraction of raw capacity hidden from the host
    gc_start_free_fraction: float  # background GC starts below this free-block fraction
    gc_hard_free_fraction: float   # foreground (blocking) GC below this
    refresh_quantum_bytes: int    # one admission claims at most this much refresh debt
    interleave: int = 0           # 0: page -> channel = page % C, die = (page / C) % D

    def _invariants(self):
        if not 0.0 <= self.over_provisioning < 1.0:
            yield "over_provisioning", "must be a fraction in [0, 1)"
        if not 0.0 < self.gc_hard_free_fraction < self.gc_start_free_fraction < 1.0:
            yield "gc_hard_free_fraction", "need 0 < gc_hard_free_fraction < gc_start_free_fraction < 1"
        if self.refresh_quantum_bytes % 4096:
            yield "refresh_quantum_bytes", "must be a multiple of the 4096 B page"
        if self.interleave != 0:
            yield "interleave", "only interleave 0 (page % channels, then dies) is defined"


@dataclass(frozen=True)
class Energy:
    read_j: float      # per read command (sense)
    program_j: float   # per program command
    erase_j: float     # per block erase
    j_per_byte: float  # transfer energy
    idle_w: float      # static power of the stack

    def _invariants(self):
        return ()


@dataclass(frozen=True)
class Thermal:
    ambient_c: float
    limit_hbf_c: float
    limit_hbm_c: float
    limit_gpu_c: float
    rtt_c: float        # report (warning) threshold
    ltt_c: float        # light-throttle threshold
    stt_c: float        # severe-throttle threshold (admission closed)
    shutdown_c: float
    light_q_ppm: int    # service fraction in Light mode
    hysteresis_k: float
    # package model and controller (hbfd/thermal); telemetry must be declared for a thermal run
    geometry: str = "hbf-package-8hi"          # profiles/thermal/<name>.json
    policy: str = "hysteresis"                 # none | hysteresis | hysteresis-early | fixed-cap | pi
    min_dwell_ticks: int = 10                  # 10 ms ticks before a falling transition
    telemetry: str | None = None               # constant | trace | nvml
    telemetry_gpu_power_w: float | None = None  # constant source
    telemetry_gpu_temp_c: float | None = None
    telemetry_trace: str | None = None          # trace source: CSV path (relative to the profile)
    telemetry_trace_sha256: str | None = None   # ... bound to this SHA-256
    telemetry_max_age_ms: float | None = None   # older readings end the run (default 1000 ms)
    hbm_traffic_bytes_per_s: float | None = None  # HBM power model input (default 0: idle power only)

    def _invariants(self):
        if self.telemetry not in (None, "constant", "trace", "nvml"):
            yield "telemetry", "one of constant, trace, nvml"
        if self.telemetry == "constant" and (self.telemetry_gpu_power_w is None or self.telemetry_gpu_temp_c is None):
            yield "telemetry_gpu_power_w", "constant telemetry declares telemetry_gpu_power_w and telemetry_gpu_temp_c"
        if self.telemetry == "trace" and not (self.telemetry_trace and self.telemetry_trace_sha256):
            yield "telemetry_trace", "trace telemetry declares telemetry_trace and telemetry_trace_sha256"
        if self.policy not in ("none", "hysteresis", "hysteresis-early", "fixed-cap", "pi"):
            yield "policy", "one of none, hysteresis, hysteresis-early, fixed-cap, pi"
        if not self.rtt_c < self.ltt_c < self.stt_c < self.shutdown_c:
            yield "ltt_c", "controller thresholds must satisfy rtt_c < ltt_c < stt_c < shutdown_c"
        if self.ambient_c >= self.rtt_c:
            yield "ambient_c", "ambient must be below the first controller threshold rtt_c"
        if not 0 < self.light_q_ppm <= 1_000_000:
            yield "light_q_ppm", "service fraction must be in (0, 1e6]"
        if self.hysteresis_k >= self.ltt_c - self.rtt_c:
            yield "hysteresis_k", "hysteresis must be smaller than the gap between rtt_c and ltt_c"


@dataclass(frozen=True)
class Reliability:
    ea_retention_ev: float
    l_ref_h: float
    t_ref_c: float
    ea_failure_ev_min: float
    ea_failure_ev_max: float
    ea_failure_ev_step: float
    mtbf_ref_h: float
    read_disturb_limit: int
    pec_limit: int
    refresh_damage_threshold: float
    a_t: float           # reliability acceleration, disclosed in every summary

    def _invariants(self):
        if not self.ea_failure_ev_min <= self.ea_failure_ev_max:
            yield "ea_failure_ev_max", "need ea_failure_ev_min <= ea_failure_ev_max"
        if not 0.0 < self.refresh_damage_threshold <= 1.0:
            yield "refresh_damage_threshold", "Miner damage threshold must be in (0, 1]"


@dataclass(frozen=True)
class FixedTiming:
    read_ns: int
    write_ns: int

    def _invariants(self):
        return ()


@dataclass(frozen=True)
class CurveTiming:
    points: tuple[tuple[int, int], ...]     # (pages, cumulative_ns), strictly increasing
    write_ns: int
    held_out: tuple[tuple[int, int], ...] = ()

    def _invariants(self):
        if len(self.points) < 2:
            yield "points", "a curve needs at least 2 points"
        if len(self.points) > MAX_CURVE_POINTS:
            yield "points", f"at most {MAX_CURVE_POINTS} points fit the control region"
        for name, pts in (("points", self.points), ("held_out", self.held_out)):
            for a, b in zip(pts, pts[1:]):
                if not (b[0] > a[0] and b[1] >= a[1]):
                    yield name, "pages must increase strictly and cumulative_ns must not decrease"
                    break
            if any(p < 1 or ns < 0 for p, ns in pts):
                yield name, "pages >= 1 and cumulative_ns >= 0"


@dataclass(frozen=True)
class TimingModel:
    timing_source: str
    fixed: FixedTiming
    curve: CurveTiming | None = None

    def _invariants(self):
        if self.timing_source not in TIMING_SOURCES:
            yield "timing_source", f"one of {', '.join(TIMING_SOURCES)}"
        if self.timing_source == "curve" and self.curve is None:
            yield "curve", "timing_source 'curve' needs a curve"


L2_POLICIES = {"lru": 1, "fifo": 2}   # hbf_media_params.l2_policy (HBF_L2_POLICY_* in runtime_cuda/src/hbf_l2.cuh)
# the NVIDIA H200's L2: 60 MiB, measured (cudaGetDeviceProperties().l2CacheSize = 62914560 on the H200 of
# bench/results/l2_vs_ncu.json; the GH100 die has 60 MB, the H100 SXM/PCIe enable 50 MB: NVIDIA "Hopper
# Architecture In-Depth", chipsandcheese "Nvidia's H100: Funny L2"), 128-byte lines of 32-byte sectors (CUDA C++
# Best Practices Guide); associativity and policy are not published
H200_L2_BYTES = 60 << 20
# two partitions, each caching the data its own SMs read: documented for the A100 (NVIDIA A100 whitepaper, "A100 L2
# Cache": "The L2 cache is divided into two partitions ... Each L2 partition localizes and caches data for memory
# accesses from SMs in the GPCs directly connected to the partition"), assumed for GH100 (the H200's ncu counters and
# bench/l2_partition.py support it): a line read from SMs of both holds a place in both, so a working set read from
# all SMs fits in capacity / partitions (docs/design.md §3.12)
H200_L2_PARTITIONS = 2
L2_MIN_SETS = 32      # hb_l2_group: a page's (at most 32) lines fall in distinct sets
L2_MAX_SETS = 1 << 20  # HBF_L2_MAX_SETS: the device divides by sets with a 64-bit multiply (exact below it)
L2_MAX_PARTITIONS = 8


def l2_model_bytes(capacity_bytes: int, partitions: int) -> int:
    """What the L2 model's tag store holds (the one definition): one partition's share, capacity / partitions (a
    line read from SMs of every partition is held by each; the model keeps one copy per line)."""
    return capacity_bytes // max(1, partitions)


def l2_sets(capacity_bytes: int, ways: int, line_bytes: int, partitions: int = 1) -> int:
    """The L2 model's sets (the one definition: the profile's check, the runtime's tag store, the twin)."""
    return l2_model_bytes(capacity_bytes, partitions) // (ways * line_bytes)


@dataclass(frozen=True)
class L2:
    """The GPU's L2 in front of HBF (docs/design.md §3.12): what the runtime's L2 model (HBF_L2_MODEL) sizes
    its tag store from. Optional in a profile; the defaults are the H200's L2 (see H200_L2_BYTES,
    H200_L2_PARTITIONS)."""
    capacity_bytes: int = H200_L2_BYTES
    line_bytes: int = 128
    ways: int = 16
    policy: str = "lru"
    partitions: int = H200_L2_PARTITIONS

    @property
    def model_bytes(self) -> int:
        return l2_model_bytes(self.capacity_bytes, self.partitions)

    @property
    def sets(self) -> int:
        return l2_sets(self.capacity_bytes, self.ways, self.line_bytes, self.partitions)

    def _invariants(self):
        if self.line_bytes < 32 or self.line_bytes & (self.line_bytes - 1):
            yield "line_bytes", "must be a power of two, at least 32"
        if not 1 <= self.partitions <= L2_MAX_PARTITIONS:
            yield "partitions", f"must be 1..{L2_MAX_PARTITIONS}"
        elif not 1 <= self.ways <= 32:
            yield "ways", "must be 1..32 (the device model reads a set's ways in one pass)"
        elif self.capacity_bytes % (self.partitions * self.ways * self.line_bytes):
            yield "capacity_bytes", ("must be a whole number of sets per partition: a multiple of partitions x ways x "
                                     "line_bytes")
        elif not L2_MIN_SETS <= self.sets < L2_MAX_SETS:
            yield "capacity_bytes", (f"capacity / (partitions x ways x line_bytes) must give {L2_MIN_SETS} .. 2^20 - 1 "
                                     "sets")
        if self.policy not in L2_POLICIES:
            yield "policy", f"one of {', '.join(L2_POLICIES)}"


SECTIONS: dict[str, type] = {
    "geometry": Geometry, "timing": Timing, "media": Media, "energy": Energy,
    "thermal": Thermal, "reliability": Reliability, "timing_model": TimingModel, "l2": L2,
}
OPTIONAL_SECTIONS = ("l2",)   # absent: the section's defaults
_NESTED: dict[tuple[type, str], type] = {
    (TimingModel, "fixed"): FixedTiming, (TimingModel, "curve"): CurveTiming,
}


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    geometry: Geometry
    timing: Timing
    media: Media
    energy: Energy
    thermal: Thermal
    reliability: Reliability
    timing_model: TimingModel
    l2: L2 = field(default_factory=L2)
    path: str = "<dict>"
    sha256: str = ""                       # of the exact file bytes
    text: str = field(default="", repr=False)
    provenance: Mapping[str, Provenance] = field(default_factory=dict, repr=False)

    @property
    def logical_pages(self) -> int:
        """Host-addressable pages: the geometry after the media's over-provisioning."""
        return self.geometry.logical_pages_with(self.media.over_provisioning)

    @property
    def capacity_bytes(self) -> int:
        """The usable capacity, after over-provisioning: what registered ranges may claim in total and
        what the media model serves (``geometry.raw_bytes`` is the raw media)."""
        return self.logical_pages * self.geometry.page_bytes

    def to_media_params(self) -> dict[str, Any]:
        """Values for ``hbf_media_params`` (hbf_ctl.h), field by field."""
        from hbfcommon import ctl
        g, t, tm = self.geometry, self.timing, self.timing_model
        curve = tm.curve
        pts = list(curve.points) if curve else []
        pad = MAX_CURVE_POINTS - len(pts)
        return {
            "timing_source": ctl.TIMING_SOURCE[tm.timing_source],
            "page_bytes": g.page_bytes,
            "read_granularity": g.read_granularity,
            "write_granularity": g.write_granularity,
            "channels": g.channels,
            "dies_per_channel": g.dies_per_channel,
            "planes_per_die": g.planes_per_die,
            "queue_depth": self.media.queue_depth,
            "t_read_ns": t.t_read_ns,
            "t_prog_ns": t.t_prog_ns,
            "t_erase_ns": t.t_erase_ns,
            "channel_bytes_per_s": g.channel_bytes_per_s,
            "fixed_read_ns": tm.fixed.read_ns,
            "fixed_write_ns": tm.fixed.write_ns,
            "interleave": self.media.interleave,
            "curve_points": len(pts),
            "curve_pages": [p for p, _ in pts] + [0] * pad,
            "curve_cum_ns": [ns for _, ns in pts] + [0] * pad,
            "curve_write_ns": curve.write_ns if curve else 0,
            "refresh_quantum_bytes": self.media.refresh_quantum_bytes,
            "page_buffers": g.page_buffers_per_plane,
            "t_cmd_ns": t.t_cmd_ns,
            "l2_bytes": self.l2.capacity_bytes,
            "l2_line_bytes": self.l2.line_bytes,
            "l2_ways": self.l2.ways,
            "l2_policy": L2_POLICIES[self.l2.policy],
            "l2_partitions": self.l2.partitions,
        }

    def summary_section(self) -> dict[str, Any]:
        g = self.geometry
        return {"name": self.name, "path": self.path, "sha256": self.sha256,
                "timing_source": self.timing_model.timing_source,
                "channel_bytes_per_s": g.channel_bytes_per_s,
                "aggregate_bytes_per_s": g.aggregate_bytes_per_s,
                "capacity_bytes": self.capacity_bytes, "raw_bytes": g.raw_bytes,
                "reliability_a_t": self.reliability.a_t}


# ---- loading -------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _validator():
    import jsonschema
    schema = json.loads(SCHEMA_PATH.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _dotted(path) -> str:
    return ".".join(str(p) for p in path) or "<root>"


def _find_key(obj: Any, key: str, path=()) -> tuple | None:
    if isinstance(obj, dict):
        if key in obj:
            return path + (key,)
        for k, v in obj.items():
            hit = _find_key(v, key, path + (k,))
            if hit:
                return hit
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            hit = _find_key(v, key, path + (i,))
            if hit:
                return hit
    return None


def _schema_error(err, where: str) -> ProfileError:
    path = list(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set(err.schema.get("properties", {}))
        extra = sorted(k for k in err.instance if k not in allowed)
        name = _dotted(path + extra[:1])
        return ProfileError(f"{where}: unknown key {name!r} (allowed here: {', '.join(sorted(allowed))})",
                            file=where, field=name)
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else "?"
        name = _dotted(path + [missing])
        return ProfileError(f"{where}: missing required field {name!r}", file=where, field=name)
    if path and path[-1] == "value":  # {value, provenance, source}: name the quantity
        path = path[:-1]
    name = _dotted(path)
    msg = err.message if len(err.message) <= 400 else err.message[:400] + " ..."   # it quotes the value
    return ProfileError(f"{where}: field {name!r}: {msg}", file=where, field=name)


def _unwrap(raw: Any, prefix: str, prov: dict[str, Provenance]) -> Any:
    """Replace every {value, provenance, source} by its value, recording the provenance."""
    if isinstance(raw, dict) and "value" in raw and "provenance" in raw:
        prov[prefix] = Provenance(raw["provenance"], raw.get("source", ""))
        return raw["value"]
    if isinstance(raw, dict):
        return {k: _unwrap(v, f"{prefix}.{k}" if prefix else k, prov) for k, v in raw.items()}
    return raw


# ---- ranges: what the C layout and the models hold ---------------------------------------------
# Integers bound by the field that carries them: hbf_media_params (hbf_ctl.h; hbfcommon.ctl) holds u32
# and u64 fields; times are int64 nanoseconds in the models (hbfd/media/engine.py: below 2^62, the
# engine's time horizon); every other count is an int64 in the models' numpy arrays.
U32_MAX = (1 << 32) - 1
NS_MAX = (1 << 62) - 1
I64_MAX = (1 << 63) - 1
U8_MAX = (1 << 8) - 1
_INT_MAX: dict[str, int] = {
    **{f"geometry.{k}": U32_MAX for k in ("page_bytes", "read_granularity", "write_granularity", "channels",
                                          "dies_per_channel", "planes_per_die")},
    "media.queue_depth": U32_MAX, "media.interleave": U32_MAX,
    **{f"timing.{k}": NS_MAX for k in ("t_read_ns", "t_prog_ns", "t_erase_ns")},
    "timing.t_cmd_ns": U32_MAX, "geometry.page_buffers_per_plane": U32_MAX,   # u32 in hbf_media_params
    "timing_model.fixed.read_ns": NS_MAX, "timing_model.fixed.write_ns": NS_MAX,
    "timing_model.curve.write_ns": NS_MAX, "thermal.min_dwell_ticks": NS_MAX,
    "l2.line_bytes": U32_MAX, "l2.ways": U32_MAX, "l2.partitions": U8_MAX,
}
_INT_WHY = {U32_MAX: "a u32 field of hbf_media_params (hbf_ctl.h)",
            U8_MAX: "a u8 field of hbf_media_params (hbf_ctl.h)",
            NS_MAX: "int64 nanoseconds below the models' 2^62 ns time horizon",
            I64_MAX: "an int64 in the models"}
# Derived sizes, bounded before any model allocates for them: hbfd's FTL keeps per-block state
# (hbfd/media/ftl.py), the media engine a queue_depth slot table per die, the hazard sweep one
# entry per activation energy.
MAX_BLOCKS = 1 << 22
MAX_DIE_QUEUE_SLOTS = 1 << 22
MAX_DEVICE_PLANES = 8192   # HBF_DEV_MAX_BANKS (runtime_cuda/include/hbf_device.h)
MAX_HAZARD_POINTS = 100_000
# telemetry_max_age_ms becomes whole nanoseconds (hbfd/thermal): at least 1 ns, below NS_MAX
MIN_TELEMETRY_AGE_MS = 1e-6


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:80] + " ..."


def _range_error(where: str, name: str, msg: str) -> ProfileError:
    return ProfileError(f"{where}: field {name!r}: {msg}", file=where, field=name)


def _check_int(v: Any, name: str, where: str, hi: int | None = None, what: str = "") -> int:
    if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
        raise ProfileError(f"{where}: field {name!r} must be an integer, got {_short(v)}", file=where, field=name)
    v = int(v)
    hi = _INT_MAX.get(name, I64_MAX) if hi is None else hi
    if not 0 <= v <= hi:
        raise _range_error(where, name, f"{what}{v} is out of range [0, {hi}] ({_INT_WHY[hi]})")
    return v


def _check_float(v: Any, name: str, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ProfileError(f"{where}: field {name!r} must be a number, got {_short(v)}", file=where, field=name)
    try:
        v = float(v)
    except OverflowError:
        v = math.inf
    if not math.isfinite(v):
        raise ProfileError(f"{where}: field {name!r} must be finite", file=where, field=name)
    return v


def _build(cls: type, data: dict[str, Any], prefix: str, where: str):
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        v, name = data[f.name], f"{prefix}.{f.name}"
        sub = _NESTED.get((cls, f.name))
        if sub is not None:
            v = _build(sub, v, name, where)
        elif f.type == "int":
            v = _check_int(v, name, where)
        elif f.type in ("float", "float | None"):
            v = _check_float(v, name, where)
        elif isinstance(v, list):   # curve points: [pages (u32 curve_pages), cumulative ns (curve_cum_ns)]
            pts = []
            for i, pt in enumerate(v):
                pname = f"{name}.{i}"
                if not isinstance(pt, list) or len(pt) != 2:
                    raise _range_error(where, pname, "a point is [pages, cumulative_ns]")
                pg = _check_int(pt[0], pname, where, U32_MAX, "pages ")        # u32 curve_pages
                ns = _check_int(pt[1], pname, where, NS_MAX, "cumulative_ns ")  # u64 curve_cum_ns
                pts.append((pg, ns))
            v = tuple(pts)
        kwargs[f.name] = v
    obj = cls(**kwargs)
    for fname, msg in obj._invariants():
        name = f"{prefix}.{fname}"
        raise ProfileError(f"{where}: field {name!r}: {msg}", file=where, field=name)
    return obj


def _check_derived(p: "Profile", where: str) -> None:
    """Bound what the models derive from the profile before anything is allocated or published."""
    g, m, th, r = p.geometry, p.media, p.thermal, p.reliability
    if g.blocks > MAX_BLOCKS:
        raise _range_error(where, "geometry.blocks_per_plane",
                           f"channels x dies_per_channel x planes_per_die x blocks_per_plane = {g.blocks} blocks; "
                           f"at most {MAX_BLOCKS} (hbfd's media model keeps state per block)")
    if g.dies * m.queue_depth > MAX_DIE_QUEUE_SLOTS:
        raise _range_error(where, "media.queue_depth",
                           f"dies x queue_depth = {g.dies * m.queue_depth}; at most {MAX_DIE_QUEUE_SLOTS} "
                           "(the media engine keeps a slot per outstanding command)")
    if g.raw_bytes > I64_MAX:
        raise _range_error(where, "geometry.pages_per_block",
                           f"raw media of {g.raw_bytes} B does not fit int64 media addresses")
    if g.planes > MAX_DEVICE_PLANES:
        raise _range_error(where, "geometry.planes_per_die",
                           f"channels x dies_per_channel x planes_per_die = {g.planes} planes; at most "
                           f"{MAX_DEVICE_PLANES} (the device fast model keeps one record per plane, "
                           "HBF_DEV_MAX_BANKS in hbf_device.h)")
    if g.blocks_per_plane * g.pages_per_block >= 1 << 24:
        raise _range_error(where, "geometry.pages_per_block",
                           f"blocks_per_plane x pages_per_block = {g.blocks_per_plane * g.pages_per_block} pages "
                           "per plane; at most 2^24 - 1 (the device fast model tags a page buffer with the "
                           "page's index in its plane in 24 bits)")
    lg = p.l2.line_bytes // g.read_granularity if g.read_granularity else 0
    if not (g.read_granularity <= p.l2.line_bytes and lg <= 8 and g.page_bytes <= 32 * p.l2.line_bytes
            and g.page_bytes <= 64 * g.read_granularity and p.l2.line_bytes <= g.page_bytes):
        raise _range_error(where, "l2.line_bytes",
                           f"the L2 model needs read_granularity <= line_bytes <= page_bytes, at most 8 granules "
                           f"per line, 32 lines and 64 granules per page (line {p.l2.line_bytes} B, granule "
                           f"{g.read_granularity} B, page {g.page_bytes} B)")
    if p.capacity_bytes // p.l2.line_bytes >= ((1 << 24) - 1) * p.l2.sets:
        raise _range_error(where, "l2.capacity_bytes",
                           f"the L2 model tags a line with line / sets in 24 bits: {p.capacity_bytes} B of media "
                           f"need more than {p.l2.sets} sets of {p.l2.line_bytes} B lines")
    gc = gc_victim_problem(g.blocks_per_plane, g.pages_per_block, m.over_provisioning, m.gc_start_free_fraction)
    if gc:
        raise _range_error(where, "media.over_provisioning", gc)
    if m.refresh_quantum_bytes > I64_MAX:
        raise _range_error(where, "media.refresh_quantum_bytes", f"at most {I64_MAX}")
    if th.telemetry_max_age_ms is not None and not (
            MIN_TELEMETRY_AGE_MS <= th.telemetry_max_age_ms <= NS_MAX / 1e6):
        raise _range_error(where, "thermal.telemetry_max_age_ms",
                           f"{th.telemetry_max_age_ms} ms must be in [{MIN_TELEMETRY_AGE_MS}, {NS_MAX / 1e6:.6g}] "
                           "(it is held as whole nanoseconds)")
    n = (r.ea_failure_ev_max - r.ea_failure_ev_min) / r.ea_failure_ev_step + 1
    if not n <= MAX_HAZARD_POINTS:
        raise _range_error(where, "reliability.ea_failure_ev_step",
                           f"the sweep ea_failure_ev_min..ea_failure_ev_max by ea_failure_ev_step has {n:.6g} "
                           f"points; at most {MAX_HAZARD_POINTS}")


def profile_from_dict(data: Mapping[str, Any], *, where: str = "<dict>", text: str = "",
                      sha256: str = "") -> Profile:
    """Validate a parsed profile (schema, then invariants) and build the typed Profile."""
    if not isinstance(data, Mapping):
        raise ProfileError(f"{where}: a profile is a JSON object", file=where, field="<root>")
    hit = _find_key(data, "time_scale")
    if hit:
        name = _dotted(hit)
        raise ProfileError(f"{where}: field {name!r} is not allowed: hbfsim has no time multiplier; "
                           "modeled time is device time, 1:1", file=where, field=name)
    errors = sorted(_validator().iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise _schema_error(errors[0], where)
    prov: dict[str, Provenance] = {}
    plain = _unwrap(dict(data), "", prov)
    sections = {name: _build(cls, plain[name] if name in plain or name not in OPTIONAL_SECTIONS else {}, name, where)
                for name, cls in SECTIONS.items()}
    p = Profile(name=plain["name"], description=plain.get("description", ""), path=where,
                sha256=sha256, text=text, provenance=prov, **sections)
    _check_derived(p, where)
    return p


def load_profile(path: str | Path) -> Profile:
    """Load, validate and type a profile file. ``path`` may also be a bare name in profiles/."""
    doc = read_json_document(path, what="profile", error=ProfileError, search_dir=PROFILE_DIR)
    return profile_from_dict(doc.data, where=doc.where, text=doc.text,
                             sha256=hashlib.sha256(doc.raw).hexdigest())


def derive_profile(base: str | Path, out: str | Path, *, t_read_ns: int | None = None,
                   timing_source: str | None = None, why: str = "derived") -> Profile:
    """The profile ``base`` (a bundled name or a path) with tR and/or the timing source replaced, written to
    ``out`` (atomic replace) and validated there, so an inconsistent derivation is refused before any hbfd
    starts. tR keeps the fixed read time consistent (``timing_model.fixed.read_ns`` moves with it) and is
    recorded as ``assumed`` with ``why`` as its source; the derived profile is named ``<name>-tr<tR>``.
    With nothing to replace, ``base`` itself is returned (validated) and nothing is written."""
    if t_read_ns is None and timing_source is None:
        return load_profile(base)
    d = read_json_document(base, what="profile", error=ProfileError, search_dir=PROFILE_DIR).data
    if t_read_ns is not None:
        if isinstance(t_read_ns, bool) or not isinstance(t_read_ns, int) or t_read_ns <= 0:
            raise ProfileError(f"profile {str(base)!r}: tR {t_read_ns!r} must be a positive whole number of ns",
                               field="timing.t_read_ns")
        try:
            old = int(d["timing"]["t_read_ns"]["value"])
        except (KeyError, TypeError, ValueError):
            raise ProfileError(f"profile {str(base)!r}: no timing.t_read_ns.value to replace",
                               field="timing.t_read_ns") from None
        d["timing"]["t_read_ns"] = {"value": t_read_ns, "provenance": "assumed",
                                    "source": f"{why} (the profile's {old} ns replaced)"}
        fx = d.get("timing_model", {}).get("fixed", {}).get("read_ns")
        if isinstance(fx, dict):
            fx["value"] = int(fx["value"]) - old + t_read_ns
            fx["source"] = f"{fx.get('source', '')} (tR {old} -> {t_read_ns} ns)"
        d["name"] = f"{d['name']}-tr{t_read_ns}"
    if timing_source is not None:
        if timing_source not in TIMING_SOURCES:
            raise ProfileError(f"timing source {timing_source!r} is not one of {TIMING_SOURCES}",
                               field="timing_model.timing_source")
        d.setdefault("timing_model", {})["timing_source"] = timing_source
    atomic_write_json(out, d, indent=1)
    return load_profile(out)


def as_profile(p: Profile | Mapping[str, Any] | str | Path) -> Profile:
    """Accept a Profile, a parsed dict, or a path."""
    if isinstance(p, Profile):
        return p
    if isinstance(p, Mapping):
        return profile_from_dict(p)
    return load_profile(p)
