"""Which model is wrong against the geometry where the device-model twin and the media engine disagree
(issue 14 item 2: random and MoE p99 at 75-200 % load)? Their one difference there is the channel
service order: the device model reserves channel slots in arrival order at each transaction's no-wait
time and transfers at max(slot, data ready); the engine serves each channel FCFS by data-ready time
(work-conserving). A channel carries one transfer at a time at its rate: this bench records every
transfer interval of both models on the cross-check's streams (the twin's ``trace``, the engine's
``trace``) and measures, per case, how much transfer time overlaps other transfers of the same channel
(a channel carrying more than its rate over that window) and the most transfers in flight at once on
one channel, besides the p99 difference of bench/media_crosscheck.py.

    PYTHONPATH=$PWD .venv/bin/python bench/media_channel_order.py [--requests 60000] [--jobs 2]

Writes bench/results/media_channel_order.json (atomic replace) and prints the table.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from hbfd.media.crosscheck import metrics  # noqa: E402
from hbfd.media.engine import MediaEngine  # noqa: E402
from hbfd.media.streams import make_stream  # noqa: E402
from hbfd.media.twin import DeviceModelTwin  # noqa: E402
from media_crosscheck import geometries  # noqa: E402

LOADS = (0.5, 0.75, 1.0, 1.5, 2.0)
KINDS = ("random", "moe")


def overlap(ch: np.ndarray, s: np.ndarray, e: np.ndarray) -> dict[str, float]:
    """Transfer intervals [s, e) per channel: the share of transfer time that overlaps another transfer of
    its channel (sum of lengths less the union's length, over the sum) and the most in flight at once."""
    tot = int((e - s).sum())
    union = peak = 0
    for c in np.unique(ch).tolist():
        m = ch == c
        cs, ce = s[m], e[m]
        o = np.argsort(cs, kind="stable")
        cs, ce = cs[o], ce[o]
        prev = np.maximum.accumulate(ce)
        prev = np.r_[np.iinfo(np.int64).min, prev[:-1]]
        union += int(np.maximum(ce - np.maximum(cs, prev), 0).sum())
        t = np.concatenate([cs, ce])
        d = np.concatenate([np.ones(len(cs), np.int64), -np.ones(len(ce), np.int64)])
        k = np.lexsort((d, t))                  # at one instant, ends before starts
        peak = max(peak, int(np.cumsum(d[k]).max()))
    return {"overlap_share": (tot - union) / tot if tot else 0.0, "max_in_flight": peak,
            "transfer_ns": tot, "busy_ns": union}


def _case(args):
    gname, g, kind, load, arrivals, n, seed = args
    batch = make_stream(kind, g, n, load=load, arrivals=arrivals, seed=seed)
    tw = DeviceModelTwin(g, trace=True)
    done_t = tw.run_batch(batch)
    tt = [np.concatenate(x) for x in zip(*tw.transfers)]
    eng = MediaEngine(g, trace=True)
    order = np.argsort(batch["arrival_ns"], kind="stable")
    b = batch[order]
    outs = []
    for k in range(0, len(b), 16384):
        part = b[k:k + 16384]
        eng.submit(part)
        eng.advance(int(part["arrival_ns"].max()))
        outs.append(eng.collect())
    outs.append(eng.drain())
    c = np.concatenate(outs)
    lat = np.empty(len(batch), np.int64)
    lat[c["id"].astype(np.int64)] = c["modeled_ns"].astype(np.int64)
    done_e = batch["arrival_ns"].astype(np.int64) + lat
    chx = [(c_, s_, e_) for kind_, c_, s_, e_ in eng.trace if kind_ == "channel"]
    et = [np.concatenate(x) for x in zip(*chx)]
    mt, me = metrics(batch, done_t), metrics(batch, done_e)
    return {"geometry": gname, "stream": kind, "load": load, "arrivals": arrivals, "requests": n,
            "twin": {**overlap(*tt), "p50_ns": mt["p50_ns"], "p99_ns": mt["p99_ns"],
                     "bandwidth_bytes_per_s": mt["bandwidth_bytes_per_s"]},
            "engine": {**overlap(*et), "p50_ns": me["p50_ns"], "p99_ns": me["p99_ns"],
                       "bandwidth_bytes_per_s": me["bandwidth_bytes_per_s"]},
            "p99_rel_diff": mt["p99_ns"] / me["p99_ns"] - 1.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=60_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "media_channel_order.json"))
    args = ap.parse_args(argv)
    if args.requests < 100 or args.jobs < 1:
        print("media_channel_order: --requests must be >= 100 and --jobs >= 1", file=sys.stderr)
        return 2
    cases = [(gn, g, k, ld, ar, args.requests, args.seed) for gn, (g, _) in geometries().items()
             for k in KINDS for ld in LOADS for ar in ("poisson", "deterministic")]
    rows = []
    print(f"{'geometry':17s} {'stream':7s} {'load':4s} {'arr':4s} {'dp99':>7s} {'tw ovl':>7s} {'tw max':>6s} "
          f"{'en ovl':>7s} {'en max':>6s}")
    with ProcessPoolExecutor(args.jobs) as ex:
        for r in ex.map(_case, cases):
            rows.append(r)
            print(f"{r['geometry']:17s} {r['stream']:7s} {r['load']:4.2f} {r['arrivals'][:4]:4s} "
                  f"{r['p99_rel_diff'] * 100:+6.1f}% {r['twin']['overlap_share'] * 100:6.2f}% "
                  f"{r['twin']['max_in_flight']:6d} {r['engine']['overlap_share'] * 100:6.2f}% "
                  f"{r['engine']['max_in_flight']:6d}", flush=True)
    doc = {"what": "channel transfer overlap of the device-model twin and the media engine (issue 14 item 2)",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "card": "CPU (this 2-core box)",
           "command": "PYTHONPATH=$PWD .venv/bin/python bench/media_channel_order.py "
                      + " ".join(sys.argv[1:] if argv is None else argv),
           "cases": rows}
    atomic_write_json(args.out, doc, indent=1)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
