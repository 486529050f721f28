"""Cross-validation of media semantics v2 (issue 14): the device-model twin (the device fast model's
arithmetic, hbfd/media/twin.py) against the CPU media engine (hbfd/media/engine.py) on identical
request streams (hbfd/media/streams.py): sequential, strided, random, MoE-expert-like, mixed
read/write; offered load 10 %..200 % of each stream's bound; Poisson and deterministic arrivals.

    PYTHONPATH=$PWD .venv/bin/python bench/media_crosscheck.py [--requests 60000] [--jobs 2] [--quick]

Per case: delivered bandwidth (request bytes / (last completion - first arrival)), p50/p99 latency of
both models, their relative differences (goal: 5 % bandwidth, 10 % p50/p99) and both checked
against the geometry's bounds (hbfd.media.crosscheck). Geometries: ocp-sg1 (OCP HBF v0.7.0 SG1:
8 channels x 48 GB/s, 1 die per channel, 256 banks, 2 page buffers per bank, tR 4 us; built here
from those numbers while the bundled profile still says otherwise), ocp-sg1 with tR 2/8/20 us, and
nominal. Writes bench/results/media_crosscheck.json (atomic replace) and prints the table. The
engine is labelled "engine v2" when it has page buffers (a probe), else "before engine v2".
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from hbfcommon.profile import MAX_DIE_QUEUE_SLOTS, load_profile  # noqa: E402
from hbfd.media.chancal import CHANNEL_ORDERS, QUANTUM_NS, sector_quantum_ns  # noqa: E402
from hbfd.media.crosscheck import TOLERANCE, compare, engine_has_page_buffers  # noqa: E402
from hbfd.media.geometry import MediaGeometry  # noqa: E402
from hbfd.media.streams import ARRIVALS, KINDS, make_stream  # noqa: E402

LOADS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
SG1 = dict(channels=8, dies_per_channel=1, planes_per_die=256, channel_bytes_per_s=48_000_000_000,
           t_read_ns=4000, page_buffers_per_plane=2)
SG1_SOURCE = ("OCP HBF v0.7.0 SG1 as transcribed by FlashLab-MBZUAI/HBServe parameter-provenance.json: "
              "64 bit x 8 GT/s / 8 x 0.75 = 48 GB/s per channel, 8 channels; 1 die per channel, 256 banks "
              "per die, 2 decoded page buffers per bank, tR 4 us (FlashLab's assumption)")


def unbounded_queue(g: MediaGeometry) -> MediaGeometry:
    """``g`` with the largest die queue depth a profile may carry (dies x Q <= MAX_DIE_QUEUE_SLOTS): the die
    admission limit never binds in these streams, as in the one semantics (docs/design.md §3.9, which has
    none: the device model cannot keep a per-die order statistic of releases)."""
    return dataclasses.replace(g, queue_depth=MAX_DIE_QUEUE_SLOTS // g.dies)


def geometries(queue_depth: str = "unbounded") -> dict[str, tuple[MediaGeometry, str]]:
    out: dict[str, tuple[MediaGeometry, str]] = {}
    prof = load_profile("ocp-sg1")
    g = MediaGeometry.from_profile(prof)
    if all(getattr(g, k) == v for k, v in SG1.items()):
        src = f"profile ocp-sg1 ({prof.sha256[:12]})"
    else:
        g = dataclasses.replace(g, **SG1, queue_depth=max(g.queue_depth, SG1["planes_per_die"]))
        src = f"constructed ({SG1_SOURCE}); the rest from profile ocp-sg1 ({prof.sha256[:12]}), queue_depth >= banks"
    out["ocp-sg1"] = (g, src)
    for tr in (2000, 8000, 20000):
        out[f"ocp-sg1/tR{tr // 1000}us"] = (dataclasses.replace(g, t_read_ns=tr), src + f"; tR {tr} ns")
    prof = load_profile("nominal")
    out["nominal"] = (MediaGeometry.from_profile(prof), f"profile nominal ({prof.sha256[:12]})")
    if queue_depth == "unbounded":
        out = {k: (unbounded_queue(g), src + f"; queue_depth {unbounded_queue(g).queue_depth} (unbounded: "
                   f"the profile's {g.queue_depth} is the engine's alone)") for k, (g, src) in out.items()}
    return out


def _case(args):
    gname, g, kind, load, arrivals, n, seed, engine_batch, channel_order, quantum = args
    batch = make_stream(kind, g, n, load=load, arrivals=arrivals, seed=seed)
    kw = {}
    if channel_order == "calendar":
        kw["quantum_ns"] = sector_quantum_ns(g.channel_bytes_per_s) if quantum == "sector" else int(quantum)
    r = compare(g, batch, engine_batch=engine_batch, clock=time.process_time, channel_order=channel_order, **kw)
    r.update(geometry=gname, stream=kind, load=load, arrivals=arrivals, seed=seed, engine_batch=engine_batch,
             channel_order=channel_order, **kw)
    return r


def _fmt(r) -> str:
    t, e, d = r["twin"], r["engine"], r["rel_diff"]
    ok = "".join("y" if r["agree"][k] else "-" for k in ("bandwidth", "p50", "p99"))
    return (f"{r['geometry']:17s} {r['stream']:10s} {r['load']:4.2f} {r['arrivals'][:4]:4s} "
            f"{t['bandwidth_bytes_per_s'] / 1e9:7.1f} {e['bandwidth_bytes_per_s'] / 1e9:7.1f} {d['bandwidth'] * 100:+7.1f}% "
            f"{t['p50_ns'] / 1e3:9.1f} {e['p50_ns'] / 1e3:9.1f} {d['p50'] * 100:+7.1f}% "
            f"{t['p99_ns'] / 1e3:9.1f} {e['p99_ns'] / 1e3:9.1f} {d['p99'] * 100:+7.1f}%  {ok}  "
            f"{'ok' if r['bounds_ok'] else 'ABOVE'}"
            f"{'' if all(r['program_bound_ok'].values()) else ' prog:' + ','.join(m for m, v in r['program_bound_ok'].items() if not v)}")


HEADER = (f"{'geometry':17s} {'stream':10s} {'load':4s} {'arr':4s} {'twGB/s':>7s} {'enGB/s':>7s} {'dBW':>8s} "
          f"{'tw p50us':>9s} {'en p50us':>9s} {'dp50':>8s} {'tw p99us':>9s} {'en p99us':>9s} {'dp99':>8s}  "
          f"agree(bw,p50,p99) bounds")


def summarize(rows) -> dict:
    out: dict = {}
    for kind in KINDS:
        rs = [r for r in rows if r["stream"] == kind]
        if not rs:
            continue
        out[kind] = {
            "cases": len(rs),
            "agree_all": sum(all(r["agree"].values()) for r in rs),
            **{f"agree_{k}": sum(r["agree"][k] for r in rs) for k in TOLERANCE},
            **{f"max_abs_rel_diff_{k}": max(abs(r["rel_diff"][k]) for r in rs) for k in TOLERANCE},
            "bounds_ok": sum(r["bounds_ok"] for r in rs),
            **{f"program_bound_ok_{m}": sum(r["program_bound_ok"][m] for r in rs) for m in ("twin", "engine")},
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=60_000, help="requests per case (default 60000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    ap.add_argument("--quick", action="store_true", help="ocp-sg1 only, loads 0.1/0.5/1.0/2.0, Poisson")
    ap.add_argument("--queue-depth", choices=("unbounded", "profile"), default="unbounded",
                    help="die queue depth: unbounded (the one semantics, default) or each profile's (the "
                         "engine-only admission limit; its effect)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="stream kinds (comma-separated)")
    ap.add_argument("--channel-order", choices=CHANNEL_ORDERS, default="arrival",
                    help="the twin's channel order (docs/design.md §3.9): arrival (the device model's) or "
                         "calendar (first fit at data ready; the twin only)")
    ap.add_argument("--quantum", default=str(QUANTUM_NS),
                    help="the calendar's quantum: ns (default 1) or 'sector' (one 64 B sector's time, rounded up)")
    ap.add_argument("--engine-batch", type=int, default=16384,
                    help="requests per engine submit (the daemon's ring scans give small ones; default 16384)")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/media_crosscheck.json, "
                    "media_crosscheck_profile_qd.json with --queue-depth profile)")
    args = ap.parse_args(argv)
    if args.requests < 100 or args.jobs < 1:
        print("media_crosscheck: --requests must be >= 100 and --jobs >= 1", file=sys.stderr)
        return 2
    if args.out is None:
        args.out = str(ROOT / "bench" / "results" / ("media_crosscheck.json" if args.queue_depth == "unbounded"
                                                     else "media_crosscheck_profile_qd.json"))
    geos = geometries(args.queue_depth)
    kinds = [k for k in args.kinds.split(",") if k]
    if not kinds or any(k not in KINDS for k in kinds):
        print(f"media_crosscheck: --kinds must name some of {', '.join(KINDS)}", file=sys.stderr)
        return 2
    loads, arrivals = LOADS, ARRIVALS
    if args.quick:
        geos = {"ocp-sg1": geos["ocp-sg1"]}
        loads, arrivals = (0.1, 0.5, 1.0, 2.0), ("poisson",)
    label = "engine v2" if engine_has_page_buffers(geos["ocp-sg1"][0]) else "before engine v2"
    if args.engine_batch < 1:
        print("media_crosscheck: --engine-batch must be >= 1", file=sys.stderr)
        return 2
    if args.quantum != "sector" and not (args.quantum.isdigit() and int(args.quantum) >= 1):
        print("media_crosscheck: --quantum must be a whole number of ns >= 1 or 'sector'", file=sys.stderr)
        return 2
    cases = [(gn, g, k, ld, ar, args.requests, args.seed, args.engine_batch, args.channel_order, args.quantum)
             for gn, (g, _) in geos.items() for k in kinds for ld in loads for ar in arrivals]
    print(f"media cross-check ({label}, twin channel order {args.channel_order}): {len(cases)} cases x "
          f"{args.requests} requests, {args.jobs} jobs",
          file=sys.stderr)
    print(HEADER)
    rows = []
    with ProcessPoolExecutor(args.jobs) as ex:
        for r in ex.map(_case, cases):
            rows.append(r)
            print(_fmt(r), flush=True)
    summ = summarize(rows)
    print("\nsummary (cases agreeing within 5 % bandwidth / 10 % p50 / 10 % p99; bounds never exceeded):")
    for kind, s in summ.items():
        print(f"  {kind:10s} all {s['agree_all']:3d}/{s['cases']}  bw {s['agree_bandwidth']:3d}  p50 {s['agree_p50']:3d}  "
              f"p99 {s['agree_p99']:3d}  worst |d| bw {s['max_abs_rel_diff_bandwidth'] * 100:6.1f}%  "
              f"p50 {s['max_abs_rel_diff_p50'] * 100:7.1f}%  p99 {s['max_abs_rel_diff_p99'] * 100:7.1f}%  "
              f"bounds ok {s['bounds_ok']}/{s['cases']}  program bound twin {s['program_bound_ok_twin']} "
              f"engine {s['program_bound_ok_engine']}")
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    doc = {
        "what": "device-model twin vs CPU media engine on identical request streams (issue 14)",
        "engine_label": label, "commit": commit,
        "command": "PYTHONPATH=$PWD .venv/bin/python bench/media_crosscheck.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "tolerance": TOLERANCE, "requests_per_case": args.requests, "seed": args.seed,
        "queue_depth": args.queue_depth, "engine_batch": args.engine_batch, "channel_order": args.channel_order,
        "quantum": args.quantum if args.channel_order == "calendar" else None,
        "geometries": {gn: {"source": src, **g.to_dict(), "read_bound_bytes_per_s": g.read_bound_bytes_per_s}
                       for gn, (g, src) in geos.items()},
        "summary": summ, "cases": rows,
    }
    atomic_write_json(args.out, json.loads(json.dumps(doc, default=_np)))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _np(o):
    import numpy as np
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    raise TypeError(type(o))


if __name__ == "__main__":
    sys.exit(main())
