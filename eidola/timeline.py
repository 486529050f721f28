"""Per-workgroup timelines (the paper's Figures 1-2): Chrome/Perfetto trace JSON and a PNG.

A segment is (gpu, block, kind, start_ns, end_ns) with times relative to the kernel start
(globaltimer). Kinds and colors follow the paper: tile compute (green), data write (brown), flag
write (blue), spin (red), reduce (dark green).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from hbfcommon.errors import TelemetryError
from hbfcommon.fsutil import atomic_output, atomic_write_bytes

KINDS = ("compute", "data_write", "flag_write", "spin", "reduce")   # mirrors HBF_EIDOLA_SEG_*
COLORS = {"compute": "#3a9a3a", "data_write": "#8b5a2b", "flag_write": "#1f5fbf",
          "spin": "#d62728", "reduce": "#145214"}


@dataclass(frozen=True)
class Segment:
    gpu: int
    block: int
    kind: str
    start_ns: int
    end_ns: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TelemetryError("unknown timeline segment kind", kind=self.kind)
        if self.end_ns < self.start_ns:
            raise TelemetryError("timeline segment ends before it starts", gpu=self.gpu,
                                 block=self.block, kind=self.kind, start_ns=self.start_ns,
                                 end_ns=self.end_ns)


def segments_from_marks(marks, gpu: int = 0, t0: int | None = None) -> list[Segment]:
    """``marks[block][i]`` are globaltimer stamps at the boundaries of the kernel's phases in
    order (len(KINDS)+1 stamps per block); ``t0`` defaults to the earliest first stamp."""
    rows = [list(map(int, r)) for r in marks]
    if not rows:
        return []
    if any(len(r) != len(KINDS) + 1 for r in rows):
        raise TelemetryError("each block needs len(KINDS)+1 stamps", expected=len(KINDS) + 1)
    base = min(r[0] for r in rows) if t0 is None else int(t0)
    out = []
    for b, r in enumerate(rows):
        for k, kind in enumerate(KINDS):
            out.append(Segment(gpu, b, kind, r[k] - base, r[k + 1] - base))
    return out


def chrome_trace(segments: Iterable[Segment], *, title: str = "gemv_allreduce") -> dict:
    """Chrome trace-event JSON (Perfetto opens it): one process per GPU, one thread per block,
    complete events ("ph": "X") in microseconds."""
    events = []
    gpus = set()
    for s in segments:
        gpus.add(s.gpu)
        events.append({"name": s.kind, "cat": "eidola", "ph": "X", "pid": s.gpu, "tid": s.block,
                       "ts": s.start_ns / 1000.0, "dur": (s.end_ns - s.start_ns) / 1000.0,
                       "args": {"start_ns": s.start_ns, "end_ns": s.end_ns}})
    for g in sorted(gpus):
        events.append({"name": "process_name", "ph": "M", "pid": g, "tid": 0,
                       "args": {"name": f"GPU {g}"}})
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"title": title}}


def validate_chrome_trace(obj: dict) -> None:
    """Schema check of what chrome_trace writes (raises TelemetryError)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("traceEvents"), list):
        raise TelemetryError("chrome trace needs a traceEvents list")
    for i, e in enumerate(obj["traceEvents"]):
        if not isinstance(e, dict) or e.get("ph") not in ("X", "M"):
            raise TelemetryError("bad trace event phase", index=i)
        for k in ("name", "pid", "tid"):
            if k not in e:
                raise TelemetryError("trace event misses a key", index=i, key=k)
        if e["ph"] == "X":
            if not (isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))):
                raise TelemetryError("complete event needs numeric ts and dur", index=i)
            if e["dur"] < 0:
                raise TelemetryError("negative duration", index=i)
            if e["name"] not in KINDS:
                raise TelemetryError("unknown segment kind", index=i, name=e["name"])


def write_chrome_trace(path: str | os.PathLike, segments: Sequence[Segment], **kw) -> Path:
    obj = chrome_trace(segments, **kw)
    validate_chrome_trace(obj)
    return atomic_write_bytes(path, json.dumps(obj).encode())


def plot_timeline(path: str | os.PathLike, segments: Sequence[Segment], *, title: str = "") -> Path:
    """PNG like the paper's Fig. 1-2: one panel per GPU, rows = workgroups, x = time (us)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    gpus = sorted({s.gpu for s in segments})
    if not gpus:
        raise TelemetryError("no segments to plot")
    fig, axes = plt.subplots(1, len(gpus), figsize=(5 * len(gpus), 4), squeeze=False)
    for ax, g in zip(axes[0], gpus):
        by_kind: dict[str, list[tuple[float, float, int]]] = {k: [] for k in KINDS}
        for s in segments:
            if s.gpu == g:
                by_kind[s.kind].append((s.start_ns / 1000.0, (s.end_ns - s.start_ns) / 1000.0, s.block))
        for kind, items in by_kind.items():
            for x, w, b in items:
                ax.broken_barh([(x, max(w, 1e-3))], (b - 0.4, 0.8), facecolors=COLORS[kind])
        ax.set_title(f"GPU {g}")
        ax.set_xlabel("time since kernel start (us)")
        ax.set_ylabel("workgroup")
    axes[0][0].legend(handles=[Patch(color=COLORS[k], label=k) for k in KINDS], loc="upper right",
                      fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    p = Path(path)
    try:
        with atomic_output(p, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)
    return p
