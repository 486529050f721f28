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
        [--channel-orders arrival,calendar]

``--channel-orders``: the twin's channel orders to measure against one engine run per case (docs/design.md
§3.9; default arrival): row key ``twin`` (arrival) and ``twin_calendar``, with ``p99_rel_diff`` /
``p99_rel_diff_calendar``.

Writes bench/results/media_channel_order.json (atomic replace) and prints the table.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from hbfd.media.chancal import CHANNEL_ORDERS  # noqa: E402
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
    gname, g, kind, load, arrivals, n, seed, orders = args
    batch = make_stream(kind, g, n, load=load, arrivals=arrivals, seed=seed)
    twins = {}
    for co in orders:
        tw = DeviceModelTwin(g, trace=True, channel_order=co)
        t0 = time.process_time()
        done_t = tw.run_batch(batch)
        cpu = time.process_time() - t0
        twins[co] = (done_t, [np.concatenate(x) for x in zip(*tw.transfers)], cpu)
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
    me = metrics(batch, done_e)
    row = {"geometry": gname, "stream": kind, "load": load, "arrivals": arrivals, "requests": n,
           "engine": {**overlap(*et), "p50_ns": me["p50_ns"], "p99_ns": me["p99_ns"],
                      "bandwidth_bytes_per_s": me["bandwidth_bytes_per_s"]}}
    for co, (done_t, tt, cpu) in twins.items():
        mt = metrics(batch, done_t)
        sfx = "" if co == "arrival" else f"_{co}"
        row["twin" + sfx] = {**overlap(*tt), "p50_ns": mt["p50_ns"], "p99_ns": mt["p99_ns"],
                             "bandwidth_bytes_per_s": mt["bandwidth_bytes_per_s"], "cpu_s": cpu}
        row["p99_rel_diff" + sfx] = mt["p99_ns"] / me["p99_ns"] - 1.0
        row["p50_rel_diff" + sfx] = mt["p50_ns"] / me["p50_ns"] - 1.0
        row["bandwidth_rel_diff" + sfx] = mt["bandwidth_bytes_per_s"] / me["bandwidth_bytes_per_s"] - 1.0
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=60_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--channel-orders", default="arrival",
                    help=f"the twin's channel orders, comma-separated (of {', '.join(CHANNEL_ORDERS)})")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "media_channel_order.json"))
    args = ap.parse_args(argv)
    orders = tuple(o for o in args.channel_orders.split(",") if o)
    if args.requests < 100 or args.jobs < 1 or not orders or any(o not in CHANNEL_ORDERS for o in orders):
        print("media_channel_order: --requests must be >= 100, --jobs >= 1, --channel-orders some of "
              f"{', '.join(CHANNEL_ORDERS)}", file=sys.stderr)
        return 2
    cases = [(gn, g, k, ld, ar, args.requests, args.seed, orders) for gn, (g, _) in geometries().items()
             for k in KINDS for ld in LOADS for ar in ("poisson", "deterministic")]
    rows = []
    sfxs = ["" if o == "arrival" else f"_{o}" for o in orders]
    print(f"{'geometry':17s} {'stream':7s} {'load':4s} {'arr':4s} "
          + " ".join(f"{'dp99' + s:>14s} {'tw ovl' + s:>15s} {'tw max' + s:>15s}" for s in sfxs)
          + f" {'en ovl':>7s} {'en max':>6s}")
    with ProcessPoolExecutor(args.jobs) as ex:
        for r in ex.map(_case, cases):
            rows.append(r)
            print(f"{r['geometry']:17s} {r['stream']:7s} {r['load']:4.2f} {r['arrivals'][:4]:4s} "
                  + " ".join(f"{r['p99_rel_diff' + s] * 100:+13.1f}% {r['twin' + s]['overlap_share'] * 100:14.2f}% "
                             f"{r['twin' + s]['max_in_flight']:15d}" for s in sfxs)
                  + f" {r['engine']['overlap_share'] * 100:6.2f}% {r['engine']['max_in_flight']:6d}", flush=True)
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
