"""Compare what the real target GPU saw (multi-GPU recording) with what the replay produced (pure).

Inputs are *observations* (format ``hbfsim.eidola.observation`` v1), one per kernel launch:

    {"format": "hbfsim.eidola.observation", "version": 1, "source": "real" | "replay",
     "engine": "nvlink" | "eidolon_kernel" | "virtual_loads", "target": 0, "n_gpus": 4, "run": 0,
     "kernel_ns": int,                       # target kernel time (first wg start → last wg end)
     "output_sha256": str | null,            # hash of the target's output bytes
     "flag_reads": int | null, "nonflag_reads": int | null,
     "flags": [{"src", "buffer", "offset", "seq", "seen_ns", "polls"}],   # seen_ns: from kernel start
     "workgroups": [{"wg", "start_ns", "end_ns", "wait_ns"}],
     "meta": {}}

Real observations come from ``eidola.from_recording.observation_from_recording``; replay
observations from the replay harness (issue 7's engines). A file may hold one observation, a JSON
list of them, or ``{"format": "hbfsim.eidola.observation_set", "runs": [...]}``.

Metrics (docs/eidola-record-replay.md):
- outputs bit-identical (sha256 equal; missing on either side is a failure, not a pass);
- kernel time error (replay − real; goal |rel| ≤ 2%);
- per-flag seen-time error, flags matched by (src, buffer, offset, seq): median and p99 of |error|
  (nearest-rank percentiles, so a constructed case has an exact answer), signed median;
- per-workgroup wait distributions: two-sample Kolmogorov–Smirnov distance (exact D; p-value from
  scipy when present);
- flag-read count error; non-flag reads must be exactly equal;
- variability over many runs: KS distance, medians, spreads of the kernel-time distributions;
- perturbation: :func:`predict_perturbation` models the closed-loop real system against the
  open-loop replay when the target is slowed by 5/10/20%.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from hbfcommon.errors import HbfError, TraceError
from hbfcommon.fsutil import atomic_write_text

OBSERVATION_FORMAT = "hbfsim.eidola.observation"
OBSERVATION_SET_FORMAT = "hbfsim.eidola.observation_set"
KERNEL_TIME_GOAL = 0.02
REPORT_FORMAT = "hbfsim.eidola.compare_report"

__all__ = ["ks_2samp", "percentile", "compare_observations", "compare_runs", "variability",
           "predict_perturbation", "load_observations", "report_markdown", "write_report", "main"]


# ---------------------------------------------------------------------------------------------
# statistics
def percentile(xs: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in [0, 100]): the smallest x with at least p% of the data ≤ x."""
    if not xs:
        raise TraceError("percentile of an empty sample")
    if not 0 <= p <= 100:
        raise TraceError("percentile p must be in [0, 100]", value=p)
    s = sorted(xs)
    k = max(1, math.ceil(p / 100 * len(s)))
    return float(s[k - 1])


def ks_2samp(a: Sequence[float], b: Sequence[float]) -> dict[str, float | None]:
    """Two-sample KS: D = sup |F_a − F_b| over the pooled sample (exact), plus scipy's p-value."""
    if not a or not b:
        raise TraceError("KS distance needs two non-empty samples", n_a=len(a), n_b=len(b))
    xa, xb = sorted(a), sorted(b)
    na, nb = len(xa), len(xb)
    i = j = 0
    d = 0.0
    for x in sorted(set(xa) | set(xb)):
        while i < na and xa[i] <= x:
            i += 1
        while j < nb and xb[j] <= x:
            j += 1
        d = max(d, abs(i / na - j / nb))
    p: float | None = None
    try:  # p-value only; the distance above is ours
        from scipy.stats import ks_2samp as _ks  # type: ignore

        p = float(_ks(xa, xb).pvalue)
    except Exception:  # noqa: BLE001 - scipy missing or too old: D alone is still exact
        p = None
    return {"d": d, "pvalue": p, "n_a": na, "n_b": nb}


def _spread(xs: Sequence[float]) -> dict[str, float]:
    return {"n": len(xs), "median": float(statistics.median(xs)), "min": float(min(xs)),
            "max": float(max(xs)), "p5": percentile(xs, 5), "p95": percentile(xs, 95),
            "iqr": percentile(xs, 75) - percentile(xs, 25),
            "stdev": float(statistics.pstdev(xs)) if len(xs) > 1 else 0.0}


def _err_summary(errs: Sequence[float]) -> dict[str, Any]:
    if not errs:
        return {"n": 0, "median_abs_ns": None, "p99_abs_ns": None, "median_signed_ns": None,
                "max_abs_ns": None}
    ab = [abs(e) for e in errs]
    return {"n": len(errs), "median_abs_ns": float(statistics.median(ab)),
            "p99_abs_ns": percentile(ab, 99), "median_signed_ns": float(statistics.median(errs)),
            "max_abs_ns": float(max(ab))}


# ---------------------------------------------------------------------------------------------
# observations
def _check_obs(o: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(o, Mapping) or o.get("format") != OBSERVATION_FORMAT:
        raise TraceError(f"{where}: not an observation (format must be {OBSERVATION_FORMAT!r})",
                         field="format", value=(o or {}).get("format") if isinstance(o, Mapping) else None)
    if o.get("version") != 1:
        raise TraceError(f"{where}: unsupported observation version", field="version",
                         value=o.get("version"))
    k = o.get("kernel_ns")
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise TraceError(f"{where}: kernel_ns must be a non-negative integer", field="kernel_ns",
                         value=k)
    for key in ("flags", "workgroups"):
        if not isinstance(o.get(key, []), list):
            raise TraceError(f"{where}: {key} must be a list", field=key)
    return o


def load_observations(path: str | os.PathLike[str]) -> list[Mapping[str, Any]]:
    p = Path(path)
    try:
        obj = json.loads(p.read_text())
    except OSError as e:
        raise TraceError(f"cannot read observations: {e.strerror}", path=str(p)) from e
    except json.JSONDecodeError as e:
        raise TraceError(f"observations file is not JSON: {e.msg}", path=str(p), line=e.lineno) from e
    if isinstance(obj, Mapping) and obj.get("format") == OBSERVATION_SET_FORMAT:
        obj = obj.get("runs")
    runs = obj if isinstance(obj, list) else [obj]
    if not runs:
        raise TraceError("observations file holds no runs", path=str(p))
    try:
        return [_check_obs(o, f"{p}[{i}]") for i, o in enumerate(runs)]
    except TraceError as e:
        e.fields.setdefault("path", str(p))
        raise


def _flag_key(f: Mapping[str, Any]) -> tuple:
    return (f.get("src"), f.get("buffer", "flags"), f.get("offset"), f.get("seq"))


def compare_observations(real: Mapping[str, Any], replay: Mapping[str, Any], *,
                         kernel_goal: float = KERNEL_TIME_GOAL) -> dict[str, Any]:
    """One real launch vs one replayed launch of the same target."""
    real, replay = _check_obs(real, "real"), _check_obs(replay, "replay")
    out: dict[str, Any] = {"target": real.get("target"), "engine": replay.get("engine"),
                           "run": real.get("run")}
    # outputs
    ra, rb = real.get("output_sha256"), replay.get("output_sha256")
    out["output"] = {"real_sha256": ra, "replay_sha256": rb,
                     "bit_identical": bool(ra) and ra == rb,
                     "status": "missing" if not (ra and rb) else ("equal" if ra == rb else "differ")}
    # kernel time
    kr, kp = real["kernel_ns"], replay["kernel_ns"]
    rel = (kp - kr) / kr if kr else math.inf
    out["kernel_time"] = {"real_ns": kr, "replay_ns": kp, "error_ns": kp - kr, "rel_error": rel,
                          "goal": kernel_goal, "pass": abs(rel) <= kernel_goal}
    # flags
    rf = {_flag_key(f): f for f in real.get("flags", [])}
    pf = {_flag_key(f): f for f in replay.get("flags", [])}
    common = sorted(set(rf) & set(pf), key=lambda k: tuple(str(x) for x in k))
    errs = [pf[k]["seen_ns"] - rf[k]["seen_ns"] for k in common]
    perr = [pf[k]["polls"] - rf[k]["polls"] for k in common
            if rf[k].get("polls") is not None and pf[k].get("polls") is not None]
    out["flag_seen"] = dict(_err_summary(errs), matched=len(common),
                            only_real=len(set(rf) - set(pf)), only_replay=len(set(pf) - set(rf)),
                            polls_error_median=float(statistics.median(perr)) if perr else None)
    # workgroup waits
    wr = [w["wait_ns"] for w in real.get("workgroups", []) if w.get("wait_ns") is not None]
    wp = [w["wait_ns"] for w in replay.get("workgroups", []) if w.get("wait_ns") is not None]
    if wr and wp:
        ks = ks_2samp(wr, wp)
        out["wg_wait"] = {"ks": ks, "real": _spread(wr), "replay": _spread(wp)}
    else:
        out["wg_wait"] = {"ks": None, "real_n": len(wr), "replay_n": len(wp)}
    # read counts
    fr, fp = real.get("flag_reads"), replay.get("flag_reads")
    out["flag_reads"] = {"real": fr, "replay": fp,
                         "error": None if fr is None or fp is None else fp - fr,
                         "rel_error": None if not fr or fp is None else (fp - fr) / fr}
    nr, np_ = real.get("nonflag_reads"), replay.get("nonflag_reads")
    out["nonflag_reads"] = {"real": nr, "replay": np_,
                            "equal": nr is not None and nr == np_}
    out["pass"] = {"bit_identical": out["output"]["bit_identical"],
                   "kernel_time": out["kernel_time"]["pass"],
                   "nonflag_reads_equal": out["nonflag_reads"]["equal"]}
    return out


def variability(real_kernel_ns: Sequence[float], replay_kernel_ns: Sequence[float]) -> dict[str, Any]:
    """Kernel-time distributions of many real vs many replayed launches."""
    if not real_kernel_ns or not replay_kernel_ns:
        raise TraceError("variability needs kernel times on both sides",
                         n_real=len(real_kernel_ns), n_replay=len(replay_kernel_ns))
    r, p = _spread(real_kernel_ns), _spread(replay_kernel_ns)
    return {"ks": ks_2samp(real_kernel_ns, replay_kernel_ns), "real": r, "replay": p,
            "median_rel_error": (p["median"] - r["median"]) / r["median"] if r["median"] else None,
            "iqr_ratio": p["iqr"] / r["iqr"] if r["iqr"] else None}


def compare_runs(reals: Sequence[Mapping[str, Any]], replays: Sequence[Mapping[str, Any]],
                 *, kernel_goal: float = KERNEL_TIME_GOAL) -> dict[str, Any]:
    """Pairwise comparison by ``run`` index (or position) plus the variability summary."""
    if not reals or not replays:
        raise TraceError("compare needs at least one real and one replayed observation")
    by_run = {o.get("run", i): o for i, o in enumerate(replays)}
    pairs = []
    for i, r in enumerate(reals):
        p = by_run.get(r.get("run", i))
        if p is not None:
            pairs.append(compare_observations(r, p, kernel_goal=kernel_goal))
    if not pairs:
        raise TraceError("no replayed observation has the run index of a real one",
                         real_runs=[r.get("run") for r in reals], replay_runs=sorted(by_run, key=str))
    kerr = [c["kernel_time"]["rel_error"] for c in pairs]
    seen_abs = [c["flag_seen"]["median_abs_ns"] for c in pairs if c["flag_seen"]["n"]]
    p99 = [c["flag_seen"]["p99_abs_ns"] for c in pairs if c["flag_seen"]["n"]]
    wks = [c["wg_wait"]["ks"]["d"] for c in pairs if c["wg_wait"]["ks"]]
    summary = {
        "pairs": len(pairs),
        "bit_identical_all": all(c["output"]["bit_identical"] for c in pairs),
        "nonflag_reads_equal_all": all(c["nonflag_reads"]["equal"] for c in pairs),
        "kernel_rel_error": {"median": float(statistics.median(kerr)),
                             "max_abs": float(max(abs(x) for x in kerr)),
                             "within_goal": sum(abs(x) <= kernel_goal for x in kerr)},
        "flag_seen_median_abs_ns": float(statistics.median(seen_abs)) if seen_abs else None,
        "flag_seen_p99_abs_ns_max": float(max(p99)) if p99 else None,
        "wg_wait_ks_median": float(statistics.median(wks)) if wks else None,
    }
    summary["pass"] = (summary["bit_identical_all"] and summary["nonflag_reads_equal_all"]
                       and summary["kernel_rel_error"]["within_goal"] == len(pairs))
    return {"format": REPORT_FORMAT, "version": 1, "summary": summary, "pairs": pairs,
            "variability": variability([o["kernel_ns"] for o in reals],
                                       [o["kernel_ns"] for o in replays])}


# ---------------------------------------------------------------------------------------------
# perturbation: closed-loop (real peers react) vs open-loop (replay) when the target is slowed
def _segments(rec: Mapping[str, Any], clock) -> list[dict[int, dict[str, Any]]]:
    """Per run, per rank: kernel start/end on the aligned axis and per-wg segment durations."""
    runs = []
    for run in rec["runs"]:
        per = {}
        for r in run["ranks"]:
            rank = r["rank"]
            ks = r["kernel_start_ns"]
            wgs = {}
            for w in r["workgroups"]:
                if any(w.get(k) is None for k in ("release_ns", "wait_start_ns", "wait_end_ns")):
                    raise TraceError("perturbation model needs release/wait stamps per workgroup",
                                     rank=rank, wg=w.get("wg"))
                wgs[w["wg"]] = {"d0": w["start_ns"] - ks, "c": w["release_ns"] - w["start_ns"],
                                "l": w["wait_start_ns"] - w["release_ns"],
                                "r": w["end_ns"] - w["wait_end_ns"]}
            per[rank] = {"start": clock.to_ref(rank, ks), "end": clock.to_ref(rank, r["kernel_end_ns"]),
                         "dur": r["kernel_end_ns"] - ks, "wgs": wgs}
        runs.append(per)
    return runs


def predict_perturbation(rec: Mapping[str, Any], target: int,
                         slowdowns: Sequence[float] = (0.0, 0.05, 0.10, 0.20)) -> dict[str, Any]:
    """Predicted divergence of open-loop replay when the target runs ``1+s`` times slower.

    Model (from the recording, per run k, rank r, workgroup b; aligned clock): dispatch offset d0,
    remote-tile compute c (start → flag release), local compute l (release → wait), reduce r (wait
    end → end); a flag from p arrives at ``release_p + latency`` (its recorded seen − release when
    uncensored, else the link's median); a wait ends at the latest arrival (or when it starts);
    rank r's launch k+1 starts its recorded gap after its launch k ends. Slowing the target scales
    its c, l and r by 1+s.

    Closed loop (the real system): peers wait on the slowed target's flags, finish later, and
    their next launch releases later. Open loop (replay): the target is slowed but the peer flags
    arrive at the recorded wakeups relative to the target's start. The divergence is the open-loop
    target kernel time minus the closed-loop one, per run; the model's own residual at s = 0
    against the recorded kernel times is reported as ``model_fit``.
    """
    from eidola.from_recording import clock_model, link_latencies

    n = rec["n_gpus"]
    clock = clock_model(rec, ref=target)
    links = link_latencies(rec, clock)
    seg = _segments(rec, clock)
    lat_all = statistics.median(v["median_ns"] for v in links.values()) if links else 0.0
    flag_lat: list[dict[tuple[int, int, int], float]] = []
    rec_wake: list[dict[tuple[int, int], int]] = []
    for k, run in enumerate(rec["runs"]):
        fl, wk = {}, {}
        t0 = seg[k][target]["start"]
        for f in run["flags"]:
            wg = f.get("wg")
            if wg is None:
                raise TraceError("perturbation model needs the workgroup of every flag", field="wg")
            rel = clock.to_ref(f["src"], f["release_ns"])
            seen = clock.to_ref(f["dst"], f["seen_ns"])
            link = links.get((f["src"], f["dst"]), {}).get("median_ns", lat_all)
            fl[(f["src"], f["dst"], wg)] = float(seen - rel) if f["polls"] > 1 else float(link)
            if f["dst"] == target:
                wk[(f["src"], wg)] = max(0, seen - t0)
        flag_lat.append(fl)
        rec_wake.append(wk)

    def simulate(s: float, closed: bool) -> list[dict[str, Any]]:
        fac = {r: (1.0 + s if r == target else 1.0) for r in range(n)}
        out = []
        prev_end: dict[int, float] | None = None
        for k in range(len(seg)):
            S = {}
            for r in range(n):
                if k == 0 or prev_end is None:
                    S[r] = float(seg[0][r]["start"])
                else:
                    gap = seg[k][r]["start"] - seg[k - 1][r]["end"]
                    S[r] = prev_end[r] + gap
            rel = {(r, b): S[r] + w["d0"] + w["c"] * fac[r]
                   for r in range(n) for b, w in seg[k][r]["wgs"].items()}
            end = {}
            for r in range(n):
                e_max = S[r]
                for b, w in seg[k][r]["wgs"].items():
                    ws = rel[(r, b)] + w["l"] * fac[r]
                    we = ws
                    for p in range(n):
                        if p == r or (p, b) not in rel:
                            continue
                        if r == target and not closed:
                            arr = S[r] + rec_wake[k].get((p, b), 0)
                        else:
                            arr = rel[(p, b)] + flag_lat[k].get((p, r, b), lat_all)
                        we = max(we, arr)
                    e_max = max(e_max, we + w["r"] * fac[r])
                end[r] = e_max
            out.append({"start": S, "end": end, "kernel_ns": end[target] - S[target]})
            prev_end = end
        return out

    base = simulate(0.0, True)
    fit = [b["kernel_ns"] - seg[k][target]["dur"] for k, b in enumerate(base)]
    rows = []
    for s in slowdowns:
        cl, op = simulate(s, True), simulate(s, False)
        div = [o["kernel_ns"] - c["kernel_ns"] for o, c in zip(op, cl)]
        reld = [d / c["kernel_ns"] if c["kernel_ns"] else 0.0 for d, c in zip(div, cl)]
        rows.append({"slowdown": s, "closed_kernel_ns": [c["kernel_ns"] for c in cl],
                     "open_kernel_ns": [o["kernel_ns"] for o in op], "divergence_ns": div,
                     "divergence_rel": reld, "max_abs_divergence_rel": max(abs(x) for x in reld)})
    mono = all(rows[i]["max_abs_divergence_rel"] <= rows[i + 1]["max_abs_divergence_rel"] + 1e-12
               for i in range(len(rows) - 1))
    return {"target": target, "runs": len(seg), "model_fit": {"residual_ns": fit,
            "max_abs_residual_ns": max(abs(x) for x in fit)},
            "rows": rows, "monotone_in_slowdown": mono}


# ---------------------------------------------------------------------------------------------
# reports
def _fmt(v: Any, nd: int = 1) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def report_markdown(rep: Mapping[str, Any]) -> str:
    s = rep["summary"]
    lines = ["| run | engine | bit-identical | kernel real ns | replay ns | error % | flag seen |err| median / p99 ns | wg-wait KS D | flag reads real / replay | non-flag equal |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in rep["pairs"]:
        ks = c["wg_wait"]["ks"]["d"] if c["wg_wait"]["ks"] else None
        fs = c["flag_seen"]
        lines.append(f"| {c.get('run')} | {c.get('engine')} | {_fmt(c['output']['bit_identical'])} | "
                     f"{c['kernel_time']['real_ns']} | {c['kernel_time']['replay_ns']} | "
                     f"{100 * c['kernel_time']['rel_error']:.2f} | {_fmt(fs['median_abs_ns'])} / "
                     f"{_fmt(fs['p99_abs_ns'])} | {_fmt(ks, 3)} | {_fmt(c['flag_reads']['real'])} / "
                     f"{_fmt(c['flag_reads']['replay'])} | {_fmt(c['nonflag_reads']['equal'])} |")
    v = rep["variability"]
    lines += ["", f"Summary: {s['pairs']} pairs, bit-identical all: {_fmt(s['bit_identical_all'])}, "
              f"kernel error median {100 * s['kernel_rel_error']['median']:.2f}% "
              f"(max |{100 * s['kernel_rel_error']['max_abs']:.2f}|%, "
              f"{s['kernel_rel_error']['within_goal']}/{s['pairs']} within goal), pass: {_fmt(s['pass'])}.",
              "", "| kernel time distribution | n | median ns | IQR ns | p5 ns | p95 ns |", "|---|---|---|---|---|---|"]
    for side in ("real", "replay"):
        d = v[side]
        lines.append(f"| {side} | {d['n']} | {d['median']:.0f} | {d['iqr']:.0f} | {d['p5']:.0f} | {d['p95']:.0f} |")
    lines.append(f"\nKS distance real vs replay kernel times: D = {v['ks']['d']:.3f}"
                 + (f" (p = {v['ks']['pvalue']:.3g})" if v['ks']['pvalue'] is not None else ""))
    pert = rep.get("perturbation")
    if pert:
        lines += ["", "| target slowdown | max |open−closed| / closed | divergence ns per run |", "|---|---|---|"]
        for r in pert["rows"]:
            lines.append(f"| {100 * r['slowdown']:.0f}% | {100 * r['max_abs_divergence_rel']:.2f}% | "
                         f"{', '.join(str(round(x)) for x in r['divergence_ns'])} |")
    return "\n".join(lines) + "\n"


def write_report(rep: Mapping[str, Any], json_path: str | os.PathLike[str] | None = None,
                 md_path: str | os.PathLike[str] | None = None) -> None:
    if json_path:
        atomic_write_text(json_path, json.dumps(rep, indent=1, sort_keys=True, default=str) + "\n")
    if md_path:
        atomic_write_text(md_path, report_markdown(rep))


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m eidola.compare",
                                 description="Compare real (recorded) and replayed observations of "
                                             "one target GPU.")
    ap.add_argument("real", help="observation(s) of the real multi-GPU runs")
    ap.add_argument("replay", help="observation(s) of the one-GPU replays")
    ap.add_argument("--json", action="store_true", help="print the full report as JSON")
    ap.add_argument("--out", help="write the JSON report here")
    ap.add_argument("--md", help="write the markdown table here")
    ap.add_argument("--goal", type=float, default=KERNEL_TIME_GOAL,
                    help="kernel time relative-error goal (default 0.02)")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a check fails (bit-identical, non-flag reads, kernel goal)")
    a = ap.parse_args(argv)
    try:
        rep = compare_runs(load_observations(a.real), load_observations(a.replay), kernel_goal=a.goal)
        write_report(rep, a.out, a.md)
    except HbfError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(rep, indent=1, sort_keys=True, default=str))
    else:
        print(report_markdown(rep), end="")
    return 1 if a.strict and not rep["summary"]["pass"] else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
