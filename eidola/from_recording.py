"""Real multi-GPU recordings → Write Tracking Table traces and "real" observations (pure).

A *recording* (format ``hbfsim.eidola.recording`` version 1, written by
``workloads/gemv_allreduce/record/``; documented in docs/eidola-record-replay.md) holds, for one
multi-GPU execution of the instrumented fused GEMV+AllReduce, every GPU's own ``%globaltimer`` stamps:

    {"format": "hbfsim.eidola.recording", "version": 1, "n_gpus": 4,
     "workload": {...shapes, grid...},
     "buffers": [{"name": "flags", "kind": "flag", "bytes": B}, {"name": "partials", ...}],
     "timer_resolution_ns": 32,
     "clock": {"method": "nvlink-pingpong", "samples": [{"a","b","t1","t2","t3"[,"t2s"]}...]},
     "env": {...}, "devices": [...],
     "runs": [{"index": 0,
               "ranks": [{"rank": r, "kernel_start_ns": t, "kernel_end_ns": t,   # rank r's clock
                          "output_sha256": "..", "flag_reads": n, "nonflag_reads": n,
                          "workgroups": [{"wg", "start_ns", "release_ns", "wait_start_ns",
                                          "wait_end_ns", "end_ns"}]}],
               "flags": [{"src", "dst", "buffer", "offset", "size", "value", "seq", "wg",
                          "release_ns",   # src's clock
                          "seen_ns",      # dst's clock (first poll that saw it)
                          "polls"}],
               "data": [{"src", "dst", "buffer", "offset", "size", "release_ns"}]}]}

``kernel_start_ns`` is the first workgroup start of that rank (the trace's time base).

The WTT for a target rank uses only the target's clock for the wakeups (Eidola notes §5 E4.3):
``wakeup = first-seen at the target − target kernel start``, which already contains the NVLink
latency. The clock alignment (clocksync) puts release stamps on the same axis so the trace carries
``release_ns`` and the recording's one-way latencies can be checked.

A flag seen on the consumer's *first* poll (``polls == 1``) was visible before the consumer looked:
its first-seen time is censored (it only bounds the arrival from above). Policy ``"seen"`` (default,
the notes' choice) keeps it; ``"hybrid"`` replaces a censored wakeup by
``min(seen, aligned release + median uncensored one-way latency of that link)`` (of all links
when that link has no uncensored flag).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import statistics
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from hbfcommon.errors import TraceError
from eidola.clocksync import ClockModel, PingSample, align
from eidola.trace import Trace, TraceWrite, make_trace, write_maybe_gzip

RECORDING_FORMAT = "hbfsim.eidola.recording"
RECORDING_VERSION = 1
OBSERVATION_FORMAT = "hbfsim.eidola.observation"
OBSERVATION_VERSION = 1
WAKEUP_POLICIES = ("seen", "hybrid")

_TOP_KEYS = {"format", "version", "n_gpus", "workload", "buffers", "timer_resolution_ns", "clock",
             "env", "devices", "runs", "meta"}
_TOP_REQUIRED = {"format", "version", "n_gpus", "buffers", "clock", "runs"}
_RANK_KEYS = {"rank", "kernel_start_ns", "kernel_end_ns", "output_sha256", "flag_reads",
              "nonflag_reads", "workgroups", "eidola_ctr"}
_WG_KEYS = {"wg", "start_ns", "release_ns", "wait_start_ns", "wait_end_ns", "end_ns"}
_FLAG_KEYS = {"src", "dst", "buffer", "offset", "size", "value", "seq", "wg", "release_ns",
              "seen_ns", "polls"}
_FLAG_REQUIRED = {"src", "dst", "buffer", "offset", "size", "value", "release_ns", "seen_ns", "polls"}
_DATA_KEYS = {"src", "dst", "buffer", "offset", "size", "release_ns"}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_keys(obj: Any, allowed: set[str], required: set[str], where: str) -> None:
    if not isinstance(obj, Mapping):
        raise TraceError(f"{where} must be an object", field=where)
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise TraceError(f"unknown keys in {where}", field=where, keys=unknown)
    missing = sorted(required - set(obj))
    if missing:
        raise TraceError(f"{where} is missing keys", field=where, keys=missing)


def validate_recording(rec: Mapping[str, Any]) -> None:
    """Raise TraceError naming the field that is wrong (structure and ranges, not timing sanity)."""
    _check_keys(rec, _TOP_KEYS, _TOP_REQUIRED, "recording")
    if rec["format"] != RECORDING_FORMAT:
        raise TraceError(f"not a recording: format must be {RECORDING_FORMAT!r}", field="format",
                         value=rec.get("format"))
    if rec["version"] != RECORDING_VERSION:
        raise TraceError(f"unsupported recording version (this reader knows {RECORDING_VERSION})",
                         field="version", value=rec["version"])
    n = rec["n_gpus"]
    if not _is_int(n) or n < 2:
        raise TraceError("n_gpus must be an integer >= 2", field="n_gpus", value=n)
    bufs = {b.get("name"): b for b in rec["buffers"]} if isinstance(rec["buffers"], list) else None
    if not bufs:
        raise TraceError("buffers must be a non-empty list", field="buffers")
    clock = rec["clock"]
    if not isinstance(clock, Mapping) or not isinstance(clock.get("samples"), list):
        raise TraceError("clock.samples must be a list of ping-pong samples", field="clock.samples")
    if not isinstance(rec["runs"], list) or not rec["runs"]:
        raise TraceError("runs must be a non-empty list", field="runs")
    for i, run in enumerate(rec["runs"]):
        where = f"runs[{i}]"
        _check_keys(run, {"index", "ranks", "flags", "data"}, {"ranks", "flags"}, where)
        ranks = run["ranks"]
        got = sorted(r.get("rank") for r in ranks) if isinstance(ranks, list) else None
        if got != list(range(n)):
            raise TraceError("each run needs exactly one entry per rank", field=f"{where}.ranks",
                             ranks=got, n_gpus=n)
        for r in ranks:
            _check_keys(r, _RANK_KEYS, {"rank", "kernel_start_ns", "kernel_end_ns", "workgroups"},
                        f"{where}.ranks[{r['rank']}]")
            if not (_is_int(r["kernel_start_ns"]) and _is_int(r["kernel_end_ns"])
                    and r["kernel_end_ns"] >= r["kernel_start_ns"]):
                raise TraceError("kernel_end_ns must be an integer >= kernel_start_ns",
                                 field=f"{where}.ranks[{r['rank']}].kernel_end_ns")
            for w in r["workgroups"]:
                _check_keys(w, _WG_KEYS, {"wg", "start_ns", "end_ns"},
                            f"{where}.ranks[{r['rank']}].workgroups")
        for j, f in enumerate(run["flags"]):
            fw = f"{where}.flags[{j}]"
            _check_keys(f, _FLAG_KEYS, _FLAG_REQUIRED, fw)
            for k in ("src", "dst", "offset", "size", "value", "release_ns", "seen_ns", "polls"):
                if not _is_int(f[k]):
                    raise TraceError(f"{k} must be an integer", field=f"{fw}.{k}", value=f[k])
            if not (0 <= f["src"] < n and 0 <= f["dst"] < n and f["src"] != f["dst"]):
                raise TraceError("flag src/dst must be distinct ranks", field=fw, src=f["src"],
                                 dst=f["dst"])
            if f["buffer"] not in bufs:
                raise TraceError("flag names an undeclared buffer", field=f"{fw}.buffer",
                                 value=f["buffer"])
            if f["polls"] < 1:
                raise TraceError("polls must be >= 1 (the read that saw the flag counts)",
                                 field=f"{fw}.polls", value=f["polls"])
        for j, d in enumerate(run.get("data", [])):
            _check_keys(d, _DATA_KEYS, _DATA_KEYS, f"{where}.data[{j}]")


def load_recording(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise TraceError(f"cannot read recording: {e.strerror}", path=str(p)) from e
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        rec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(f"recording is not JSON: {e}", path=str(p)) from e
    try:
        validate_recording(rec)
    except TraceError as e:
        e.fields.setdefault("path", str(p))
        raise
    return rec


def save_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Atomic JSON write (gzip when the name ends in .gz)."""
    return write_maybe_gzip(path, json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())


def clock_model(rec: Mapping[str, Any], ref: int) -> ClockModel:
    """Alignment of every rank's clock to ``ref`` from the recording's ping-pong samples."""
    samples = [PingSample.from_dict(s) for s in rec["clock"]["samples"]]
    return align(samples, ref=ref, ranks=range(rec["n_gpus"]),
                 resolution_ns=int(rec.get("timer_resolution_ns", 0) or 0))


def _run(rec: Mapping[str, Any], run: int) -> Mapping[str, Any]:
    runs = rec["runs"]
    if not (0 <= run < len(runs)):
        raise TraceError("run index out of range", field="run", value=run, runs=len(runs))
    return runs[run]


def link_latencies(rec: Mapping[str, Any], clock: ClockModel, run: int | None = None
                   ) -> dict[tuple[int, int], dict[str, float]]:
    """Per (src, dst): one-way flag latency ``seen − release`` on the aligned axis, from the flags
    whose first-seen is not censored (polls > 1). Median, min, max, count, and the clock bound of
    the pair (the latency is uncertain by at most that)."""
    runs = rec["runs"] if run is None else [_run(rec, run)]
    lat: dict[tuple[int, int], list[int]] = {}
    for r in runs:
        for f in r["flags"]:
            if f["polls"] <= 1:
                continue
            rel = clock.to_ref(f["src"], f["release_ns"])
            seen = clock.to_ref(f["dst"], f["seen_ns"])
            lat.setdefault((f["src"], f["dst"]), []).append(seen - rel)
    out = {}
    for k, v in sorted(lat.items()):
        out[k] = {"median_ns": float(statistics.median(v)), "min_ns": float(min(v)),
                  "max_ns": float(max(v)), "count": len(v),
                  "clock_bound_ns": clock.bound_ns[k[0]] + clock.bound_ns[k[1]]}
    return out


def build_trace(rec: Mapping[str, Any], target: int, run: int = 0, *, policy: str = "seen",
                include_data: bool = True) -> Trace:
    """The Write Tracking Table (issue 7's trace format) that replays ``run`` into ``target``."""
    if policy not in WAKEUP_POLICIES:
        raise TraceError(f"wakeup policy must be one of {WAKEUP_POLICIES}", field="policy",
                         value=policy)
    n = rec["n_gpus"]
    if not (_is_int(target) and 0 <= target < n):
        raise TraceError("target must be a rank of the recording", field="target", value=target,
                         n_gpus=n)
    r = _run(rec, run)
    clock = clock_model(rec, ref=target)
    t0 = next(x for x in r["ranks"] if x["rank"] == target)["kernel_start_ns"]
    lat = link_latencies(rec, clock) if policy == "hybrid" else {}
    # A link without uncensored flags falls back to the median over the links that have them.
    lat_all = statistics.median(v["median_ns"] for v in lat.values()) if lat else None
    writes: list[TraceWrite] = []
    clamped = censored = replaced = 0
    for f in r["flags"]:
        if f["dst"] != target:
            continue
        seen_rel = f["seen_ns"] - t0                       # target clock only
        rel_rel = clock.to_ref(f["src"], f["release_ns"]) - t0  # aligned onto the target clock
        wake = seen_rel
        if f["polls"] <= 1:
            censored += 1
            link = lat.get((f["src"], target), {}).get("median_ns", lat_all)
            if policy == "hybrid" and link is not None:
                est = rel_rel + int(round(link))
                if est < wake:
                    wake, replaced = est, replaced + 1
        if wake < 0:
            wake, clamped = 0, clamped + 1
        writes.append(TraceWrite(src=f["src"], dst=target, buffer=f["buffer"], offset=f["offset"],
                                 size=f["size"], value=f["value"], wakeup_ns=wake,
                                 seen_ns=seen_rel, release_ns=rel_rel, seq=f.get("seq"),
                                 polls=f["polls"]))
    if include_data:
        for d in r.get("data", []):
            if d["dst"] != target:
                continue
            rel = clock.to_ref(d["src"], d["release_ns"]) - t0
            writes.append(TraceWrite(src=d["src"], dst=target, buffer=d["buffer"], offset=d["offset"],
                                     size=d["size"], value=None, wakeup_ns=max(0, rel),
                                     release_ns=rel))
    writes.sort(key=lambda w: (w.wakeup_ns, w.buffer, w.offset, w.src))
    clock_json = clock.to_dict()
    clock_json["method"] = rec["clock"].get("method", "nvlink-pingpong")
    clock_json["timer_resolution_ns"] = rec.get("timer_resolution_ns", 0)
    clock_json["links_to_target"] = {f"{s}->{d}": v for (s, d), v in link_latencies(rec, clock, run).items()
                                     if d == target}
    meta = {"recording_run": run, "wakeup_policy": policy, "workload": rec.get("workload", {}),
            "flags_censored": censored, "flags_censored_replaced": replaced,
            "flags_clamped_to_zero": clamped, "target_kernel_start_ns": t0}
    return make_trace(n_gpus=n, target=target, source="recorded", buffers=rec["buffers"],
                      writes=writes, clock=clock_json, meta=meta)


def observation_from_recording(rec: Mapping[str, Any], target: int, run: int = 0) -> dict[str, Any]:
    """What the real target GPU saw in ``run``, as a compare.py observation (times relative to the
    target kernel start, target clock)."""
    r = _run(rec, run)
    me = next((x for x in r["ranks"] if x["rank"] == target), None)
    if me is None:
        raise TraceError("target rank not in the recording", field="target", value=target)
    t0 = me["kernel_start_ns"]
    flags = [{"src": f["src"], "buffer": f["buffer"], "offset": f["offset"], "seq": f.get("seq"),
              "seen_ns": f["seen_ns"] - t0, "polls": f["polls"]}
             for f in r["flags"] if f["dst"] == target]
    wgs = []
    for w in me["workgroups"]:
        wait = None
        if w.get("wait_start_ns") is not None and w.get("wait_end_ns") is not None:
            wait = w["wait_end_ns"] - w["wait_start_ns"]
        wgs.append({"wg": w["wg"], "start_ns": w["start_ns"] - t0, "end_ns": w["end_ns"] - t0,
                    "wait_ns": wait})
    return {"format": OBSERVATION_FORMAT, "version": OBSERVATION_VERSION, "source": "real",
            "engine": "nvlink", "target": target, "n_gpus": rec["n_gpus"], "run": run,
            "kernel_ns": me["kernel_end_ns"] - t0, "output_sha256": me.get("output_sha256"),
            "flag_reads": me.get("flag_reads"), "nonflag_reads": me.get("nonflag_reads"),
            "flags": flags, "workgroups": wgs, "meta": {"workload": rec.get("workload", {})}}


def observations_from_recording(rec: Mapping[str, Any], target: int,
                                runs: Iterable[int] | None = None) -> list[dict[str, Any]]:
    idx = range(len(rec["runs"])) if runs is None else runs
    return [observation_from_recording(rec, target, i) for i in idx]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m eidola.from_recording REC.json --target 0 [--run 0] -o TRACE.jsonl``."""
    import argparse
    import sys

    from hbfcommon.errors import HbfError
    from eidola.trace import write_trace

    ap = argparse.ArgumentParser(prog="python -m eidola.from_recording",
                                 description="Build the WTT trace (and the real observation) of one "
                                             "target rank from a multi-GPU recording.")
    ap.add_argument("recording")
    ap.add_argument("--target", type=int, default=0)
    ap.add_argument("--run", type=int, default=0)
    ap.add_argument("--policy", choices=WAKEUP_POLICIES, default="seen")
    ap.add_argument("-o", "--out", required=True, help="trace path (.jsonl or .jsonl.gz)")
    ap.add_argument("--observation", help="also write the real observation JSON here")
    a = ap.parse_args(argv)
    try:
        rec = load_recording(a.recording)
        tr = build_trace(rec, a.target, a.run, policy=a.policy)
        write_trace(a.out, tr)
        if a.observation:
            save_json(a.observation, observation_from_recording(rec, a.target, a.run))
    except HbfError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{a.out}: {len(tr.writes)} writes to rank {a.target} "
          f"(censored {tr.header.meta['flags_censored']}, clamped {tr.header.meta['flags_clamped_to_zero']})")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
