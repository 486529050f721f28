"""A run as a Chrome/Perfetto trace: the JSON trace-event format that ui.perfetto.dev and
chrome://tracing open (the "JSON Object Format": ``{"traceEvents": [...], "displayTimeUnit": "ns",
"otherData": {...}}``).

Processes (tracks) and what is on them:

* pid 1 ``hbfd (run clock)``, times in µs since hbfd started. Counter tracks from the summary's
  ``timeline`` (one point per kept control tick): temperatures (hottest HBF layer, HBM, GPU), the
  service fraction q, the thermal mode (0 Normal .. 3 Shutdown) and admission (1 open), the refresh
  debt and background-drained bytes, and the completed bandwidth (reference path, and the device side
  as the runtime published it) over each interval between kept rows. Instant events: thermal mode
  transitions, refresh-debt increases (with their size in quanta), attaches, reports from the workload
  (unmodeled/refused launches, device failures, calibration) and the end of the run.
* pid 2 ``GPU kernels (%globaltimer)``: one thread per instrumented kernel with one complete (``X``)
  slice, the latest launch's wall span on the GPU's own clock (``kstart_ns`` .. ``kend_ns``, rebased
  to the earliest start; the device keeps only the latest launch's span per kernel, so earlier
  launches are counted in ``args.launches``, not drawn). The slice's args carry the kernel's counters:
  the modeled time (sum over its requests), exposed wait, lateness, helper time, slack. A counter track
  per kernel repeats modeled vs exposed wait so the two can be compared on the timeline.
  That clock is not hbfd's: the two processes are not aligned to each other.

Integer nanoseconds become float microseconds (``ns / 1000``, exact to the nanosecond for any
run shorter than ~100 days); times are rebased first, so no absolute clock value loses precision.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from .load import Run

PID_HBFD, PID_GPU = 1, 2
TID_THERMAL, TID_REFRESH, TID_TRAFFIC, TID_EVENTS = 1, 2, 3, 4
MODE_NAMES = ("Normal", "Light", "Severe", "Shutdown")
MAX_REFRESH_INSTANTS = 10_000
PHASES = {"X", "B", "E", "i", "I", "C", "M"}
METADATA_NAMES = {"process_name", "thread_name", "process_sort_index", "thread_sort_index", "process_labels"}


def us(ns: int | float) -> float:
    """Trace-event time (µs, float) of a time in integer ns."""
    return round(ns / 1000.0, 3)


def _meta(pid: int, tid: int, kind: str, value: Any) -> dict:
    key = "name" if kind.endswith("_name") else ("sort_index" if kind.endswith("sort_index") else "labels")
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "ts": 0, "args": {key: value}}


def _counter(name: str, t_ns: int, values: dict[str, float | None], pid: int = PID_HBFD, tid: int = 0) -> dict | None:
    args = {k: v for k, v in values.items() if v is not None and math.isfinite(v)}
    if not args:
        return None
    return {"ph": "C", "name": name, "pid": pid, "tid": tid, "ts": us(t_ns), "args": args}


def _instant(name: str, t_ns: int, args: dict | None = None, tid: int = TID_EVENTS, scope: str = "p") -> dict:
    return {"ph": "i", "s": scope, "name": name, "pid": PID_HBFD, "tid": tid, "ts": us(t_ns), "cat": "hbfd",
            "args": args or {}}


def _timeline_events(run: Run) -> Iterable[dict]:
    tl = run.timeline
    if tl is None:
        return
    c = tl["columns"]
    t = c.get("t_ns") or []
    prev = None
    for i, tn in enumerate(t):
        def col(name):
            v = c.get(name)
            return v[i] if v is not None and i < len(v) else None
        for ev in (
            _counter("temperature (C)", tn, {"hbf_max": col("hbf_max_c"), "hbm": col("hbm_c"), "gpu": col("gpu_c")}),
            _counter("service fraction q (%)", tn, {"q": None if col("q_ppm") is None else col("q_ppm") / 1e4}),
            _counter("thermal mode (0 Normal, 1 Light, 2 Severe, 3 Shutdown)", tn, {"mode": col("mode")}),
            _counter("admission open", tn, {"open": col("admission_open")}),
            _counter("refresh debt (bytes)", tn, {"debt": col("refresh_debt_bytes"),
                                                  "drained": col("refresh_drained_bytes")}),
        ):
            if ev is not None:
                yield ev
        if prev is not None and tn > t[prev]:
            dt = tn - t[prev]
            bw = {}
            for name, key in (("reference", "ref_bytes"), ("device", "dev_bytes")):
                v = c.get(key)
                if v is not None:
                    bw[name] = max(0, v[i] - v[prev]) / dt        # bytes/ns = GB/s
            ev = _counter("bandwidth (GB/s, completed)", t[prev], bw)   # the rate over [prev, this row)
            if ev is not None:
                yield ev
        prev = i
    # refresh-debt increases, in quanta
    debt = c.get("refresh_debt_bytes") or []
    q = tl.get("refresh_quantum_bytes") or 0
    n = 0
    for i in range(1, min(len(debt), len(t))):
        d = debt[i] - debt[i - 1]
        if d > 0 and n < MAX_REFRESH_INSTANTS:
            n += 1
            yield _instant(f"refresh debt +{d} B", t[i], {"bytes": d, "quantum_bytes": q,
                                                         "quanta": (d / q) if q else None}, tid=TID_REFRESH)


def _thermal_offset_ns(run: Run) -> int:
    """The thermal service's clock starts at hbfd's first control tick (the timeline's first row)."""
    tl = run.timeline
    t = (tl or {}).get("columns", {}).get("t_ns") or []
    return int(t[0]) if t else 0


def _thermal_events(run: Run) -> Iterable[dict]:
    th = run.thermal
    off = _thermal_offset_ns(run)
    for tr in th.get("transitions") or []:
        yield _instant(f"thermal {tr.get('from')} -> {tr.get('to')}", off + int(tr["t_ns"]),
                       {"hbf_max_c": tr.get("hbf_max_c"), "tick": tr.get("tick")}, tid=TID_THERMAL, scope="g")
    if run.timeline is None:          # an older summary: the thermal samples (every sample_period_ns) instead
        for s in th.get("samples") or []:
            ev = _counter("temperature (C)", off + int(s["t_ns"]), {"hbf_max": s.get("hbf_max_c"),
                                                                    **{k: v for k, v in (s.get("temps_c") or {}).items()}})
            if ev is not None:
                yield ev


def _run_events(run: Run) -> Iterable[dict]:
    s = run.hbfd
    for a in s.get("attaches") or []:
        yield _instant(f"attach (pid {a.get('workload_pid')})", int(a["at_ns"]), dict(a))
    for r in s.get("reports") or []:
        yield _instant(f"report: {r.get('kind')}", int(r["at_ns"]), {"data": r.get("data")})
    up = (s.get("daemon") or {}).get("uptime_ns")
    if isinstance(up, int):
        yield _instant(f"end of run ({s.get('terminal_status')})", up,
                       {"shutdown_reason": s.get("shutdown_reason"), "terminal_status": s.get("terminal_status")},
                       scope="g")


def kernel_rows(run: Run) -> list[dict[str, Any]]:
    """One row per kernel of the runtime's counters (the same numbers the report's table shows)."""
    if run.counters is None:
        return []
    rows = []
    for name, k in run.counters["kernels"].items():
        ops = k.get("ops") or {}
        tot = lambda f: sum(int((o or {}).get(f, 0)) for o in ops.values())   # noqa: E731
        rows.append({
            "kernel": name, "launches": int(k["launches"]), "requests": tot("requests"), "bytes": tot("bytes"),
            "program_bytes": tot("program_bytes"), "modeled_ns": tot("modeled_ns"),
            "helper_ns": tot("overhead_ns"), "wait_calls": int(k.get("wait_calls", 0)),
            "wait_wall_ns": int(k["wait_wall_ns"]), "wait_overhead_ns": int(k.get("wait_overhead_ns", 0)),
            "ready_waits": int(k.get("ready_waits", 0)), "slack_ns": int(k.get("slack_ns", 0)),
            "inline_requests": int(k.get("inline_requests", 0)), "inline_ns": int(k.get("inline_ns", 0)),
            "thermal_waits": int(k.get("thermal_waits", 0)), "thermal_wait_ns": int(k.get("thermal_wait_ns", 0)),
            "refresh_claims": int(k.get("refresh_claims", 0)), "refresh_bytes": int(k.get("refresh_bytes", 0)),
            "kstart_ns": int(k["kstart_ns"]), "kend_ns": int(k["kend_ns"]),
            "status": dict(k.get("status") or {}),
        })
    return rows


def _kernel_events(run: Run) -> Iterable[dict]:
    rows = [r for r in kernel_rows(run) if r["launches"] and r["kend_ns"] >= r["kstart_ns"] > 0]
    if not rows:
        return
    yield _meta(PID_GPU, 0, "process_name", "GPU kernels (%globaltimer, rebased; not hbfd's clock)")
    yield _meta(PID_GPU, 0, "process_sort_index", 2)
    base = min(r["kstart_ns"] for r in rows)
    for tid, r in enumerate(sorted(rows, key=lambda r: (r["kstart_ns"], r["kernel"])), start=1):
        yield _meta(PID_GPU, tid, "thread_name", r["kernel"])
        start, end = r["kstart_ns"] - base, r["kend_ns"] - base
        args = {k: v for k, v in r.items() if k not in ("kernel", "kstart_ns", "kend_ns")}
        args["span"] = ("the latest launch's wall span on the GPU (kstart_ns..kend_ns); "
                        f"{r['launches']} launch(es) counted, the latest drawn")
        yield {"ph": "X", "name": r["kernel"], "cat": "kernel", "pid": PID_GPU, "tid": tid, "ts": us(start),
               "dur": us(end - start), "args": args}
        for t_ns in (start, end):
            ev = _counter(f"{r['kernel']}: modeled vs exposed wait (ms, sums)", t_ns,
                          {"modeled": r["modeled_ns"] / 1e6, "exposed_wait": r["wait_wall_ns"] / 1e6},
                          pid=PID_GPU, tid=tid)
            if ev is not None:
                yield ev


def _calibration_kind(run: Run) -> str:
    """measured | synthetic | assumed (the package thermal model's boundary), or why there is none."""
    th = run.thermal
    if th.get("service") in (None, "none") or th.get("thermal") == "none":
        return "no thermal model"
    cal = th.get("calibration")
    return str(cal.get("in_force", "?")) if isinstance(cal, dict) else "unrecorded"


def build_trace(run: Run) -> dict[str, Any]:
    s = run.hbfd
    prof = s.get("profile") or {}
    ev: list[dict] = [
        _meta(PID_HBFD, 0, "process_name", f"hbfd (run clock) - profile {prof.get('name', '?')}"),
        _meta(PID_HBFD, 0, "process_sort_index", 1),
        _meta(PID_HBFD, TID_THERMAL, "thread_name", "thermal"),
        _meta(PID_HBFD, TID_REFRESH, "thread_name", "refresh"),
        _meta(PID_HBFD, TID_TRAFFIC, "thread_name", "traffic"),
        _meta(PID_HBFD, TID_EVENTS, "thread_name", "events"),
    ]
    ev += list(_timeline_events(run))
    ev += list(_thermal_events(run))
    ev += list(_run_events(run))
    ev += list(_kernel_events(run))
    tl = run.timeline
    other = {
        "source": run.path, "schema": run.schema, "profile": prof.get("name"), "profile_sha256": prof.get("sha256"),
        "engine": s.get("engine"), "timing_source": s.get("timing_source"),
        "terminal_status": s.get("terminal_status"), "hbfsim_version": s.get("hbfsim_version"),
        "started_unix_s": (s.get("daemon") or {}).get("started_unix_s"),
        "kernel_counters": run.counters_path,
        "thermal_calibration": (run.thermal.get("calibration") or {}).get("line") or _calibration_kind(run),
        "timeline": (f"{tl['points']} rows, every {tl['stride_ticks']} tick(s) of {tl['tick_ns']} ns" if tl else
                     "none in this summary (written before hbfd recorded one): no counter tracks over time"),
        "latency_cdf": (tl or {}).get("latency"),
    }
    return {"traceEvents": ev, "displayTimeUnit": "ns", "otherData": other}


def check_trace(doc: Any) -> list[str]:
    """What is wrong with ``doc`` as a JSON-object-format trace (empty: nothing). The rules of the
    Trace Event Format that the viewers rely on: every event has ``ph`` (a known phase), ``name``,
    integer ``pid``/``tid`` and a finite numeric ``ts`` (µs); ``X`` a ``dur`` >= 0; ``C`` numeric
    ``args``; ``i`` a scope g/p/t; ``M`` a known metadata name with its ``args``."""
    bad: list[str] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["not a JSON object with a 'traceEvents' list"]
    if doc.get("displayTimeUnit") not in (None, "ms", "ns"):
        bad.append(f"displayTimeUnit {doc.get('displayTimeUnit')!r} is not 'ms' or 'ns'")
    num = (int, float)
    for i, e in enumerate(doc["traceEvents"]):
        w = f"traceEvents[{i}]"
        if not isinstance(e, dict):
            bad.append(f"{w} is not an object")
            continue
        ph = e.get("ph")
        if ph not in PHASES:
            bad.append(f"{w}: ph {ph!r} is not one of {sorted(PHASES)}")
        if not isinstance(e.get("name"), str) or not e["name"]:
            bad.append(f"{w}: no name")
        for k in ("pid", "tid"):
            if not isinstance(e.get(k), int) or isinstance(e.get(k), bool):
                bad.append(f"{w}: {k} {e.get(k)!r} is not an integer")
        ts = e.get("ts")
        if not isinstance(ts, num) or isinstance(ts, bool) or not math.isfinite(ts) or ts < 0:
            bad.append(f"{w}: ts {ts!r} is not a finite number >= 0 (microseconds)")
        if ph == "X":
            d = e.get("dur")
            if not isinstance(d, num) or isinstance(d, bool) or not math.isfinite(d) or d < 0:
                bad.append(f"{w}: an X event needs dur >= 0, not {d!r}")
        if ph == "C":
            a = e.get("args")
            if not isinstance(a, dict) or not a or not all(
                    isinstance(v, num) and not isinstance(v, bool) and math.isfinite(v) for v in a.values()):
                bad.append(f"{w}: a C event needs args of finite numbers, not {a!r}")
        if ph in ("i", "I") and e.get("s", "t") not in ("g", "p", "t"):
            bad.append(f"{w}: instant scope {e.get('s')!r} is not g, p or t")
        if ph == "M":
            if e.get("name") not in METADATA_NAMES:
                bad.append(f"{w}: metadata name {e.get('name')!r} is not one of {sorted(METADATA_NAMES)}")
            if not isinstance(e.get("args"), dict):
                bad.append(f"{w}: a metadata event needs args")
        if "args" in e and not isinstance(e["args"], dict):
            bad.append(f"{w}: args is not an object")
    return bad
