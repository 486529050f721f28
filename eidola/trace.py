"""Eidola trace format: timestamped peer writes, recorded on real multi-GPU runs or synthetic.

Format ``hbfsim.eidola.trace`` version 1 (documented in docs/eidola-trace.md): JSON lines,
optionally gzip-compressed (``.gz`` suffix). Line 1 is the header object, every following
non-empty line is one write object. Unknown keys are errors. Time is integer nanoseconds.

Header::

    {"format": "hbfsim.eidola.trace", "version": 1,
     "n_gpus": 4,                  # GPUs of the modeled system (target included), 2..4096
     "target": 0,                  # the rank replayed on the real GPU
     "source": "synthetic" | "recorded",
     "time_base": "target_kernel_start",   # the only base in v1: wakeup_ns is relative to it
     "buffers": [{"name": "flags", "kind": "flag", "bytes": 4096},
                 {"name": "partials", "kind": "data", "bytes": 1048576}],
     "clock": {...},               # optional: clock alignment facts (offsets, RTTs) for recorded
     "meta": {...}}                # optional: free-form provenance (workload, shapes, link model)

Write::

    {"src": 1, "dst": 0, "buffer": "flags", "offset": 128, "size": 4, "value": 7,
     "wakeup_ns": 12345,           # when the write becomes visible at dst (replay time)
     "seen_ns": 12377,             # optional: recorded first-seen time at dst (aligned clock)
     "release_ns": 11900,          # optional: recorded release time at src (aligned clock)
     "seq": 7, "polls": 80}        # optional: sequence number; polls the consumer made

Rules (TraceError names the line and the field on violation):
- ``buffer`` names a header buffer; ``offset`` + ``size`` lie inside it.
- flag writes: size in {1, 2, 4, 8}, offset aligned to size, value an unsigned integer that
  fits in ``size`` bytes.
- data writes: any size >= 1; ``value`` is null (the payload is pre-staged in a shadow buffer,
  values do not affect timing) or an unsigned integer when size <= 8.
- ``src != dst``; both in [0, n_gpus); ``wakeup_ns >= 0``.
- Two flag writes to the same (dst, buffer, offset) at the same wakeup_ns must agree on value
  (otherwise what is visible at that instant is undefined).
"""
from __future__ import annotations

import dataclasses
import gzip
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from hbfcommon.errors import TraceError
from hbfcommon.fsutil import atomic_write_bytes

TRACE_FORMAT = "hbfsim.eidola.trace"
TRACE_VERSION = 1
TIME_BASES = ("target_kernel_start",)
SOURCES = ("synthetic", "recorded")
BUFFER_KINDS = ("flag", "data")
FLAG_SIZES = (1, 2, 4, 8)
MAX_GPUS = 4096

_HEADER_KEYS = {"format", "version", "n_gpus", "target", "source", "time_base", "buffers",
                "clock", "meta"}
_HEADER_REQUIRED = {"format", "version", "n_gpus", "target", "source", "buffers"}
_BUFFER_KEYS = {"name", "kind", "bytes"}
_WRITE_KEYS = {"src", "dst", "buffer", "offset", "size", "value", "wakeup_ns", "seen_ns",
               "release_ns", "seq", "polls"}
_WRITE_REQUIRED = {"src", "dst", "buffer", "offset", "size", "wakeup_ns"}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class BufferSpec:
    """A named buffer of the target GPU that peers write into."""

    name: str
    kind: str  # "flag" | "data"
    bytes: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not self.name.isidentifier():
            raise TraceError("buffer name must be a non-empty identifier", field="buffers.name",
                             value=self.name)
        if self.kind not in BUFFER_KINDS:
            raise TraceError(f"buffer kind must be one of {BUFFER_KINDS}", field="buffers.kind",
                             buffer=self.name, value=self.kind)
        if not _is_int(self.bytes) or self.bytes <= 0:
            raise TraceError("buffer bytes must be a positive integer", field="buffers.bytes",
                             buffer=self.name, value=self.bytes)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "bytes": self.bytes}


@dataclass(frozen=True)
class TraceHeader:
    n_gpus: int
    target: int
    source: str
    buffers: tuple[BufferSpec, ...]
    time_base: str = "target_kernel_start"
    clock: Mapping[str, Any] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _is_int(self.n_gpus) or not (2 <= self.n_gpus <= MAX_GPUS):
            raise TraceError(f"n_gpus must be an integer in [2, {MAX_GPUS}]", field="n_gpus",
                             value=self.n_gpus)
        if not _is_int(self.target) or not (0 <= self.target < self.n_gpus):
            raise TraceError("target must be a rank in [0, n_gpus)", field="target",
                             value=self.target)
        if self.source not in SOURCES:
            raise TraceError(f"source must be one of {SOURCES}", field="source", value=self.source)
        if self.time_base not in TIME_BASES:
            raise TraceError(f"time_base must be one of {TIME_BASES}", field="time_base",
                             value=self.time_base)
        bufs = tuple(b if isinstance(b, BufferSpec) else _buffer_from_json(b, None)
                     for b in self.buffers)
        object.__setattr__(self, "buffers", bufs)
        if not bufs:
            raise TraceError("a trace needs at least one buffer", field="buffers")
        names = [b.name for b in bufs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise TraceError("duplicate buffer names", field="buffers", names=dup)
        if not isinstance(self.clock, Mapping):
            raise TraceError("clock must be an object", field="clock")
        if not isinstance(self.meta, Mapping):
            raise TraceError("meta must be an object", field="meta")

    def buffer(self, name: str) -> BufferSpec:
        for b in self.buffers:
            if b.name == name:
                return b
        raise TraceError("write names a buffer the header does not declare", field="buffer",
                         value=name, declared=[b.name for b in self.buffers])

    def to_json(self) -> dict[str, Any]:
        return {"format": TRACE_FORMAT, "version": TRACE_VERSION, "n_gpus": self.n_gpus,
                "target": self.target, "source": self.source, "time_base": self.time_base,
                "buffers": [b.to_json() for b in self.buffers],
                "clock": dict(self.clock), "meta": dict(self.meta)}


@dataclass(frozen=True)
class TraceWrite:
    """One peer write. ``wakeup_ns`` is relative to the target kernel's start."""

    src: int
    dst: int
    buffer: str
    offset: int
    size: int
    wakeup_ns: int
    value: int | None = None
    seen_ns: int | None = None
    release_ns: int | None = None
    seq: int | None = None
    polls: int | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"src": self.src, "dst": self.dst, "buffer": self.buffer,
                             "offset": self.offset, "size": self.size, "value": self.value,
                             "wakeup_ns": self.wakeup_ns}
        for k in ("seen_ns", "release_ns", "seq", "polls"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        return d


@dataclass(frozen=True)
class Trace:
    header: TraceHeader
    writes: tuple[TraceWrite, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "writes", tuple(self.writes))
        validate_writes(self.header, self.writes)

    # -- views -----------------------------------------------------------------------------
    def for_target(self, target: int | None = None) -> "Trace":
        """The writes whose destination is ``target`` (default: the header's target)."""
        t = self.header.target if target is None else target
        hdr = dataclasses.replace(self.header, target=t)
        return Trace(hdr, tuple(w for w in self.writes if w.dst == t))

    def flag_writes(self) -> tuple[TraceWrite, ...]:
        kinds = {b.name: b.kind for b in self.header.buffers}
        return tuple(w for w in self.writes if kinds[w.buffer] == "flag")

    def data_writes(self) -> tuple[TraceWrite, ...]:
        kinds = {b.name: b.kind for b in self.header.buffers}
        return tuple(w for w in self.writes if kinds[w.buffer] == "data")

    def shifted(self, delta_ns: int) -> "Trace":
        """Every wakeup moved by ``delta_ns`` (clamped at 0); used for controls and sweeps."""
        return Trace(self.header, tuple(dataclasses.replace(w, wakeup_ns=max(0, w.wakeup_ns + delta_ns))
                                        for w in self.writes))

    def span_ns(self) -> int:
        return max((w.wakeup_ns for w in self.writes), default=0)

    # -- serialization ---------------------------------------------------------------------
    def dumps(self) -> str:
        out = io.StringIO()
        out.write(json.dumps(self.header.to_json(), sort_keys=True, separators=(",", ":")) + "\n")
        for w in self.writes:
            out.write(json.dumps(w.to_json(), sort_keys=True, separators=(",", ":")) + "\n")
        return out.getvalue()


# ---------------------------------------------------------------------------------------------
def _buffer_from_json(obj: Any, line: int | None) -> BufferSpec:
    if not isinstance(obj, Mapping):
        raise TraceError("each buffer must be an object", field="buffers", line=line)
    unknown = sorted(set(obj) - _BUFFER_KEYS)
    if unknown:
        raise TraceError("unknown buffer keys", field="buffers", keys=unknown, line=line)
    missing = sorted(_BUFFER_KEYS - set(obj))
    if missing:
        raise TraceError("buffer is missing keys", field="buffers", keys=missing, line=line)
    return BufferSpec(name=obj["name"], kind=obj["kind"], bytes=obj["bytes"])


def header_from_json(obj: Any, line: int | None = 1) -> TraceHeader:
    if not isinstance(obj, Mapping):
        raise TraceError("trace header must be a JSON object", line=line)
    if obj.get("format") != TRACE_FORMAT:
        raise TraceError(f"not an eidola trace: format must be {TRACE_FORMAT!r}", field="format",
                         value=obj.get("format"), line=line)
    if obj.get("version") != TRACE_VERSION:
        raise TraceError(f"unsupported trace version (this reader knows {TRACE_VERSION})",
                         field="version", value=obj.get("version"), line=line)
    unknown = sorted(set(obj) - _HEADER_KEYS)
    if unknown:
        raise TraceError("unknown header keys", field="header", keys=unknown, line=line)
    missing = sorted(_HEADER_REQUIRED - set(obj))
    if missing:
        raise TraceError("header is missing keys", field="header", keys=missing, line=line)
    if not isinstance(obj["buffers"], list):
        raise TraceError("buffers must be a list", field="buffers", line=line)
    try:
        return TraceHeader(n_gpus=obj["n_gpus"], target=obj["target"], source=obj["source"],
                           buffers=tuple(_buffer_from_json(b, line) for b in obj["buffers"]),
                           time_base=obj.get("time_base", "target_kernel_start"),
                           clock=obj.get("clock") or {}, meta=obj.get("meta") or {})
    except TraceError as e:
        e.fields.setdefault("line", line)
        raise


def write_from_json(obj: Any, line: int | None = None) -> TraceWrite:
    if not isinstance(obj, Mapping):
        raise TraceError("each write must be a JSON object", line=line)
    unknown = sorted(set(obj) - _WRITE_KEYS)
    if unknown:
        raise TraceError("unknown write keys", keys=unknown, line=line)
    missing = sorted(_WRITE_REQUIRED - set(obj))
    if missing:
        raise TraceError("write is missing keys", keys=missing, line=line)
    return TraceWrite(src=obj["src"], dst=obj["dst"], buffer=obj["buffer"], offset=obj["offset"],
                      size=obj["size"], wakeup_ns=obj["wakeup_ns"], value=obj.get("value"),
                      seen_ns=obj.get("seen_ns"), release_ns=obj.get("release_ns"),
                      seq=obj.get("seq"), polls=obj.get("polls"))


def validate_write(header: TraceHeader, w: TraceWrite, line: int | None = None) -> None:
    """Raise TraceError naming the field (and line, when known) that is wrong."""
    def bad(msg: str, fld: str, value: Any, **kw: Any) -> TraceError:
        return TraceError(msg, field=fld, value=value, line=line, **kw)

    for k in ("src", "dst", "offset", "size", "wakeup_ns"):
        v = getattr(w, k)
        if not _is_int(v):
            raise bad(f"{k} must be an integer", k, v)
    if not (0 <= w.src < header.n_gpus):
        raise bad("src must be a rank in [0, n_gpus)", "src", w.src, n_gpus=header.n_gpus)
    if not (0 <= w.dst < header.n_gpus):
        raise bad("dst must be a rank in [0, n_gpus)", "dst", w.dst, n_gpus=header.n_gpus)
    if w.src == w.dst:
        raise bad("a peer write needs src != dst", "src", w.src, dst=w.dst)
    if w.wakeup_ns < 0:
        raise bad("wakeup_ns must be >= 0 (relative to the target kernel start)", "wakeup_ns",
                  w.wakeup_ns)
    if w.offset < 0:
        raise bad("offset must be >= 0", "offset", w.offset)
    if w.size < 1:
        raise bad("size must be >= 1", "size", w.size)
    try:
        buf = header.buffer(w.buffer)
    except TraceError as e:
        e.fields["line"] = line
        raise
    if w.offset + w.size > buf.bytes:
        raise bad("write extends past the end of its buffer", "offset", w.offset, size=w.size,
                  buffer=buf.name, buffer_bytes=buf.bytes)
    if buf.kind == "flag":
        if w.size not in FLAG_SIZES:
            raise bad(f"flag writes must have size in {FLAG_SIZES}", "size", w.size)
        if w.offset % w.size:
            raise bad("flag write offset must be aligned to its size", "offset", w.offset,
                      size=w.size)
        if w.value is None:
            raise bad("flag writes need a value", "value", None)
    if w.value is not None:
        if not _is_int(w.value) or w.value < 0:
            raise bad("value must be an unsigned integer or null", "value", w.value)
        if w.size > 8:
            raise bad("value must be null when size > 8 (payload is pre-staged)", "value",
                      w.value, size=w.size)
        if w.value >= (1 << (8 * w.size)):
            raise bad("value does not fit in size bytes", "value", w.value, size=w.size)
    for k in ("seen_ns", "release_ns", "seq", "polls"):
        v = getattr(w, k)
        if v is not None and not _is_int(v):
            raise bad(f"{k} must be an integer or absent", k, v)
    if w.polls is not None and w.polls < 0:
        raise bad("polls must be >= 0", "polls", w.polls)


def validate_writes(header: TraceHeader, writes: Sequence[TraceWrite],
                    first_line: int | None = None) -> None:
    seen: dict[tuple[int, str, int, int], int | None] = {}
    kinds = {b.name: b.kind for b in header.buffers}
    for i, w in enumerate(writes):
        line = None if first_line is None else first_line + i
        if not isinstance(w, TraceWrite):
            raise TraceError("writes must be TraceWrite objects", line=line, index=i)
        validate_write(header, w, line if line is not None else None)
        if kinds[w.buffer] == "flag":
            key = (w.dst, w.buffer, w.offset, w.wakeup_ns)
            if key in seen and seen[key] != w.value:
                raise TraceError("two flag writes to one address at the same wakeup_ns with "
                                 "different values", field="value", line=line, index=i,
                                 buffer=w.buffer, offset=w.offset, wakeup_ns=w.wakeup_ns,
                                 values=[seen[key], w.value])
            seen[key] = w.value


# ---------------------------------------------------------------------------------------------
def loads(text: str, *, path: str | None = None) -> Trace:
    lines = text.splitlines()
    header: TraceHeader | None = None
    writes: list[TraceWrite] = []
    for ln, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise TraceError(f"line is not valid JSON: {e.msg}", line=ln, path=path) from e
        try:
            if header is None:
                header = header_from_json(obj, ln)
            else:
                w = write_from_json(obj, ln)
                validate_write(header, w, ln)
                writes.append(w)
        except TraceError as e:
            if path is not None:
                e.fields.setdefault("path", path)
            raise
    if header is None:
        raise TraceError("empty trace: no header line", path=path)
    try:
        return Trace(header, tuple(writes))
    except TraceError as e:
        if path is not None:
            e.fields.setdefault("path", path)
        raise


def read_trace(path: str | os.PathLike[str]) -> Trace:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise TraceError(f"cannot read trace: {e.strerror}", path=str(p)) from e
    if p.suffix == ".gz" or raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except OSError as e:
            raise TraceError("corrupt gzip trace", path=str(p)) from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError("trace is not UTF-8", path=str(p)) from e
    return loads(text, path=str(p))


def write_maybe_gzip(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` atomically; gzip it (mtime 0: reproducible bytes) when the name ends in .gz."""
    p = Path(path)
    if p.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    return atomic_write_bytes(p, data)


def write_trace(path: str | os.PathLike[str], trace: Trace) -> Path:
    """Write atomically (tmp + os.replace); gzip when the name ends in .gz."""
    return write_maybe_gzip(path, trace.dumps().encode("utf-8"))


def make_trace(*, n_gpus: int, target: int, source: str, buffers: Iterable[BufferSpec | Mapping],
               writes: Iterable[TraceWrite | Mapping], clock: Mapping | None = None,
               meta: Mapping | None = None) -> Trace:
    """Convenience constructor accepting dicts (for recorders: issue 8 builds traces with this)."""
    hdr = TraceHeader(n_gpus=n_gpus, target=target, source=source,
                      buffers=tuple(b if isinstance(b, BufferSpec) else _buffer_from_json(b, None)
                                    for b in buffers),
                      clock=dict(clock or {}), meta=dict(meta or {}))
    ws = tuple(w if isinstance(w, TraceWrite) else write_from_json(w) for w in writes)
    return Trace(hdr, ws)


def iter_writes_sorted(trace: Trace) -> Iterator[TraceWrite]:
    """Writes in replay order: by wakeup_ns, then (dst, buffer, offset, src) for determinism."""
    return iter(sorted(trace.writes, key=lambda w: (w.wakeup_ns, w.dst, w.buffer, w.offset, w.src)))
