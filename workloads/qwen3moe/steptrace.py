"""One decode step of the MoE decoder as a Perfetto/Chrome trace, and a PNG of its per-layer split.

The input is one record per kernel launch of one decode step, in launch order::

    {"name": str, "layer": int (-1: outside the layers: embedding, final norm, lm_head, argmax),
     "native_ns": int, "wall_ns": int, "modeled_ns": int, "exposed_wait_ns": int,
     "overhead_ns": int, "hbf_bytes": int, "requests": int}

``native_ns`` is the launch's wall time in the native run (CUDA events), ``wall_ns`` in the
instrumented run, ``modeled_ns`` the sum of the modeled HBF time of its requests, ``exposed_wait_ns``
the part of the wall time spent waiting on HBF, ``overhead_ns`` the helper's time. Other keys of a
record are carried into the trace's args when they are JSON scalars.

Trace layout (:func:`build_step_trace`; JSON object format, times in µs = ns / 1000):

* pid 1 ``instrumented (wall)``: tid 1 the launches end to end (``ts`` = the cumulative wall time,
  ``dur`` = ``wall_ns``, args = the record); tid 0 an enclosing ``layer N`` slice per run of launches
  of one layer; tid 2 (and 3.. when modeled time outlasts the next launch's start, so that slices of
  one thread never overlap) ``modeled HBF time``: a slice per launch at the launch's start, ``dur`` =
  ``modeled_ns``.
* pid 2 ``native (wall)``: tid 1 the native launches end to end, tid 0 the ``layer N`` slices.
"""
from __future__ import annotations

import io
import logging
import math
import numbers
from typing import Any, Mapping, Sequence

from hbfcommon.errors import ConfigError, TraceError
from hbfcommon.fsutil import atomic_write_bytes, atomic_write_json
from hbfd.runreport.trace import check_trace, us

log = logging.getLogger(__name__)

INT_FIELDS = ("layer", "native_ns", "wall_ns", "modeled_ns", "exposed_wait_ns", "overhead_ns", "hbf_bytes",
              "requests")
SUM_FIELDS = INT_FIELDS[1:]
PID_INST, PID_NATIVE = 1, 2
TID_LAYERS, TID_KERNELS, TID_MODELED = 0, 1, 2


def check_records(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The records as plain dicts with int fields; a ConfigError naming the index and field otherwise."""
    if not isinstance(records, Sequence) or isinstance(records, (str, bytes)) or not records:
        raise ConfigError("step records must be a non-empty list of launch records", field="records")
    out = []
    for i, r in enumerate(records):
        if not isinstance(r, Mapping):
            raise ConfigError(f"step record {i} is {type(r).__name__}, not an object", index=i)
        name = r.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"step record {i}: name must be a non-empty string, not {name!r}", index=i,
                              field="name")
        c: dict[str, Any] = {"name": name}
        for f in INT_FIELDS:
            if f not in r:
                raise ConfigError(f"step record {i} ({name}): missing {f!r}", index=i, field=f)
            v = r[f]
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise ConfigError(f"step record {i} ({name}): {f} must be an integer, not {type(v).__name__}",
                                  index=i, field=f)
            v = int(v)
            if v < (-1 if f == "layer" else 0):
                raise ConfigError(f"step record {i} ({name}): {f} = {v} is negative"
                                  + (" (-1 marks a kernel outside the layers)" if f == "layer" else ""),
                                  index=i, field=f)
            c[f] = v
        for k, v in r.items():
            if k not in c and isinstance(k, str) and (isinstance(v, (str, int, bool)) or v is None
                                                      or isinstance(v, float) and math.isfinite(v)):
                c[k] = v
        out.append(c)
    return out


def _x(name: str, pid: int, tid: int, start_ns: int, dur_ns: int, args: dict, cat: str) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": us(start_ns), "dur": us(dur_ns),
            "args": args}


def _meta(pid: int, tid: int, kind: str, value: Any) -> dict:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "ts": 0,
            "args": {"name" if kind.endswith("_name") else "sort_index": value}}


def _lanes(recs: list[dict], field: str, pid: int) -> list[dict]:
    """Launches end to end by ``field``, and an enclosing ``layer N`` slice per run of one layer."""
    ev, t, run = [], 0, None                       # run: [layer, start_ns, end_ns, launches]
    for r in recs:
        ev.append(_x(r["name"], pid, TID_KERNELS, t, r[field], dict(r), "kernel"))
        if run is not None and run[0] == r["layer"]:
            run[2], run[3] = t + r[field], run[3] + 1
        else:
            if run is not None and run[0] >= 0:
                ev.append(_x(f"layer {run[0]}", pid, TID_LAYERS, run[1], run[2] - run[1],
                             {"layer": run[0], "launches": run[3]}, "layer"))
            run = [r["layer"], t, t + r[field], 1]
        t += r[field]
    if run is not None and run[0] >= 0:
        ev.append(_x(f"layer {run[0]}", pid, TID_LAYERS, run[1], run[2] - run[1],
                     {"layer": run[0], "launches": run[3]}, "layer"))
    return ev


def build_step_trace(records: Sequence[Mapping[str, Any]], meta: Mapping[str, Any] | None = None) -> dict:
    """The trace-event JSON object of one decode step (layout: module docstring), format-checked."""
    recs = check_records(records)
    ev = [_meta(PID_INST, 0, "process_name", "instrumented (wall)"), _meta(PID_INST, 0, "process_sort_index", 1),
          _meta(PID_INST, TID_LAYERS, "thread_name", "layers"),
          _meta(PID_INST, TID_KERNELS, "thread_name", "kernels (wall)"),
          _meta(PID_NATIVE, 0, "process_name", "native (wall)"), _meta(PID_NATIVE, 0, "process_sort_index", 2),
          _meta(PID_NATIVE, TID_LAYERS, "thread_name", "layers"),
          _meta(PID_NATIVE, TID_KERNELS, "thread_name", "kernels (wall)")]
    ev += _lanes(recs, "wall_ns", PID_INST)
    ev += _lanes(recs, "native_ns", PID_NATIVE)
    lane_end: list[int] = []                       # per modeled lane: where its last slice ends (ns)
    t = 0
    for r in recs:
        lane = next((i for i, e in enumerate(lane_end) if e <= t), len(lane_end))
        if lane == len(lane_end):
            lane_end.append(0)
            ev.append(_meta(PID_INST, TID_MODELED + lane, "thread_name",
                            "modeled HBF time" + (f" (overlap lane {lane + 1})" if lane else "")))
        lane_end[lane] = t + r["modeled_ns"]
        ev.append(_x(r["name"], PID_INST, TID_MODELED + lane, t, r["modeled_ns"],
                     {"modeled_ns": r["modeled_ns"], "wall_ns": r["wall_ns"], "requests": r["requests"],
                      "hbf_bytes": r["hbf_bytes"], "layer": r["layer"]}, "modeled"))
        t += r["wall_ns"]
    doc = {"traceEvents": ev, "displayTimeUnit": "ns", "otherData": dict(meta or {})}
    bad = check_trace(doc)
    if bad:
        raise TraceError(f"the step trace breaks the trace-event format: {bad[0]}", problems=bad[:10])
    return doc


def write_step_trace(records: Sequence[Mapping[str, Any]], path, meta: Mapping[str, Any] | None = None) -> dict:
    """:func:`build_step_trace` written to ``path`` (atomic replace); returns the trace."""
    doc = build_step_trace(records, meta)
    atomic_write_json(path, doc, allow_nan=False)
    log.info("step trace: %d events -> %s", len(doc["traceEvents"]), path)
    return doc


def per_layer_split(records: Sequence[Mapping[str, Any]]) -> list[dict[str, int]]:
    """Per layer (ascending; the kernels outside the layers last, as layer -1) the sums of the
    records' times, bytes and requests, and the launch count."""
    acc: dict[int, dict[str, int]] = {}
    for r in check_records(records):
        a = acc.setdefault(r["layer"], {"layer": r["layer"], **{f: 0 for f in SUM_FIELDS}, "launches": 0})
        for f in SUM_FIELDS:
            a[f] += r[f]
        a["launches"] += 1
    return [acc[k] for k in sorted(acc, key=lambda n: (n < 0, n))]


def plot_layer_split(split: Sequence[Mapping[str, Any]], path, title: str = "",
                     link_bytes_per_s: float | None = None) -> None:
    """A PNG of :func:`per_layer_split`, two panels that never mix clocks:

    * top, wall time of the step's launches per layer (µs): native and instrumented side by side, and
      (with ``link_bytes_per_s``) the modeled device's floor, the layer's HBF bytes over the profile's
      link bandwidth -- what the layer could not beat on a real device of that profile;
    * bottom, sums over every warp's requests (ms, so larger than any wall time: requests overlap):
      modeled HBF time, exposed wait (time warps stood waiting for a modeled completion) and the
      helpers' own time (the simulator's cost)."""
    try:
        from matplotlib.figure import Figure      # no pyplot: no global figure state, no display needed
    except ImportError:
        raise ConfigError("the layer-split PNG needs matplotlib (pip install matplotlib; it is in the dev "
                          "extra)", field="matplotlib") from None
    if not split:
        raise ConfigError("nothing to plot: the layer split is empty", field="split")
    for i, s in enumerate(split):
        for f in ("layer", "wall_ns", "native_ns", "modeled_ns", "exposed_wait_ns", "overhead_ns"):
            if not isinstance(s.get(f), numbers.Integral) or isinstance(s.get(f), bool):
                raise ConfigError(f"layer split {i}: {f} must be an integer", index=i, field=f)
    x = list(range(len(split)))
    labels = [str(s["layer"]) if s["layer"] >= 0 else "other" for s in split]
    fig = Figure(figsize=(max(6.0, 0.22 * len(split) + 2), 6.0), dpi=110)
    top, bot = fig.subplots(2, 1, sharex=True)
    w = 0.4
    top.bar([i - w / 2 for i in x], [s["native_ns"] / 1e3 for s in split], w, color="#4c72b0", label="native wall")
    top.bar([i + w / 2 for i in x], [s["wall_ns"] / 1e3 for s in split], w, color="#c44e52",
            label="instrumented wall")
    if link_bytes_per_s:
        top.plot(x, [int(s.get("hbf_bytes", 0)) / link_bytes_per_s * 1e6 for s in split], "k_", ms=9, mew=1.5,
                 ls="none", label="device floor (HBF bytes / link bandwidth)")
    top.set_ylabel("wall µs")
    top.set_title(title or "one decode step, per layer")
    top.legend(fontsize=7, loc="upper right", frameon=False)
    for f, c, lab in (("modeled_ns", "#55a868", "modeled HBF time"), ("exposed_wait_ns", "#dd8452", "exposed wait"),
                      ("overhead_ns", "#8172b2", "helper time (simulator)")):
        bot.plot(x, [s[f] / 1e6 for s in split], "o-", color=c, ms=3, lw=1, label=lab)
    bot.set_ylabel("sum over warps, ms")
    bot.set_yscale("symlog", linthresh=1e-3)
    bot.legend(fontsize=7, loc="upper right", frameon=False, ncol=3)
    step = max(1, len(x) // 24)
    outer = {i for i in x if split[i]["layer"] < 0}
    ticks = sorted({i for i in x[::step] if step == 1 or i + 1 not in outer} | outer)
    bot.set_xticks(ticks, [labels[i] for i in ticks])
    bot.set_xlabel("layer")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    atomic_write_bytes(path, buf.getvalue())
    log.info("layer split plot -> %s", path)
