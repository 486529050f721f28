"""Issue 16: where the capacity service's time per page goes, split into what the fill threads do and what stays
serial on hbfd's ring thread -- the basis of the estimate for a host with more cores.

    PYTHONPATH=$PWD .venv/bin/python bench/capacity_split.py [--pages 262144] [--frames 16384] [--width 1024]

The service in process as hbfd builds it (a dense page table: the capacity region's view; the frames touched once
before the clock: an 8 GiB pool of the GPU proof is touched in its first 8 GiB), generated read-only pages streamed
by ``width`` lanes in lockstep (CapacityDevice.run_wide), policies none and next:``depth``, ``--workers`` fill
threads (a list). Per run, microseconds per filled page: the service (its service_ns), the fill jobs
(``CapacityService._fill``: store read + checksum, copy, read-back compare), the media model's calls
(``_media``), the CLOCK choice (``FramePool.take_frames``), the prefetch filter (``_prefetch_flat``) and the rest
of the service ("serial": service - fill). Wall-clock timers around those methods (no profiler). Medians and
ranges over ``reps``. Writes ``--out``. CPU only.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbfcommon import capacity as cap, ctl  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from hbfcommon.profile import load_profile  # noqa: E402
from hbfd import accel  # noqa: E402
from hbfd.capacity import frames as F, service as S  # noqa: E402
from hbfd.capacity.backing import GeneratedStore  # noqa: E402
from hbfd.capacity.device import CapacityDevice  # noqa: E402
from hbfd.capacity.prefetch import NextPages, NoPrefetch  # noqa: E402
from hbfd.media import MediaGeometry  # noqa: E402

T: collections.Counter = collections.Counter()


def _timed(cls, name: str) -> None:
    f = getattr(cls, name)

    def g(*a, **k):
        t = time.perf_counter_ns()
        try:
            return f(*a, **k)
        finally:
            T[name] += time.perf_counter_ns() - t
    setattr(cls, name, g)


def one(geom, pages: int, frames: int, width: int, policy, workers: int) -> dict:
    T.clear()
    store = GeneratedStore(seed=5, pages=pages)
    svc = S.CapacityService(geom, frames, policy, workers=workers)
    table = np.zeros(pages, cap.PTE_DTYPE)
    table["frame"] = cap.HBF_CAP_NO_FRAME
    svc.add_range(1, pages, 0, ctl.HBF_PERM_READ, store, table=table)
    svc.pool.memory.data[:] = 1
    out = CapacityDevice(svc).run_wide(1, np.arange(pages), width=width, gap_ns=1000, checksum=True)
    c = svc.report()["counters"]
    fl = c["fills"]
    us = {k: v / fl / 1e3 for k, v in T.items()}
    us["service"] = c["service_ns"] / fl / 1e3
    us["serial"] = us["service"] - us.get("_fill", 0.0)
    return {"policy": policy.name, "workers": workers, "width": width, "fills": fl, "modeled_ns": c["modeled_ns"],
            "checksum_equal": out["checksum"] == store.span_checksum(0, pages), **us}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=262144)
    ap.add_argument("--frames", type=int, default=16384)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench/results/capacity_split.json"))
    a = ap.parse_args()
    for n in ("_fill", "_media", "_prefetch_flat"):
        _timed(S.CapacityService, n)
    _timed(F.FramePool, "take_frames")
    geom = MediaGeometry.from_profile(load_profile("ocp-sg1"))
    rows = []
    for rep in range(a.reps):
        for w in [int(x) for x in a.workers.split(",")]:
            for pol in (NoPrefetch(), NextPages(a.depth)):
                r = one(geom, a.pages, a.frames, a.width, pol, w) | {"rep": rep}
                rows.append(r)
                print(f"rep {rep} {r['policy']} workers {w}: service {r['service']:.3f} us/page, fill "
                      f"{r.get('_fill', 0):.3f}, serial {r['serial']:.3f} (media {r.get('_media', 0):.3f}), "
                      f"checksum equal {r['checksum_equal']}", flush=True)
    summary = {}
    for key in sorted({(r["policy"], r["workers"]) for r in rows}):
        rs = [r for r in rows if (r["policy"], r["workers"]) == key]
        summary[f"{key[0]} workers {key[1]}"] = {
            f: {"median": statistics.median(r.get(f, 0.0) for r in rs), "min": min(r.get(f, 0.0) for r in rs),
                "max": max(r.get(f, 0.0) for r in rs)}
            for f in ("service", "_fill", "serial", "_media", "take_frames", "_prefetch_flat")} | {
            "checksums_equal": all(r["checksum_equal"] for r in rs),
            "modeled_ns_all_reps": sorted({r["modeled_ns"] for r in rs})}
    doc = {"what": "issue 16: the capacity service's time per page, fill jobs vs the rest (serial), hbfd's layout",
           "date": datetime.date.today().isoformat(), "card": "CPU (this 2-core box, shared)", "host": platform.node(),
           "cores": os.cpu_count(), "accel": accel.describe()["accel"],
           "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip(),
           "command": " ".join(["bench/capacity_split.py"] + sys.argv[1:]), "load_average": os.getloadavg(),
           "unit": "us per filled page", "summary": summary, "rows": rows}
    atomic_write_json(a.out, doc, end="\n")
    print("->", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
