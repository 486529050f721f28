"""Issue 16: where the capacity miss service's time goes, per page -- cProfile of the service in process (one
range of generated read-only pages streamed through a frame pool, ``width`` misses per call, no prefetch), self
time summed by category. Runs against any source tree (``PYTHONPATH=<tree>``), so the service before batching
and after can be compared.

    PYTHONPATH=$PWD .venv/bin/python bench/capacity_profile.py [--pages 8192] [--frames 256] [--widths 32,256]

Categories (by function): media model (hbfd/media), content generation + checksum fused (the compiled twin of
hbfd/capacity/kernels.py, HBFD_ACCEL), content generation (generated_pages, splitmix64 under it), checksums
(page_checksums and its twin), frame copies (FrameMemory, the read-back compare), eviction bookkeeping (CLOCK, unmap, complete/cancel),
fill and publication (begin_fill*, publish*, take_free), page tables (PageTable), per-request Python (everything
else: the service's own code, numpy calls it makes). cProfile's own cost is in every call, so the per-call-heavy
categories read high; the shares are what to compare. Prints JSON (``--out`` to write it).
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time

import numpy as np

from hbfcommon import ctl
from hbfcommon.profile import load_profile
from hbfd.capacity.backing import GeneratedStore
from hbfd.capacity.prefetch import NoPrefetch
from hbfd.capacity.service import CapacityService
from hbfd.media import MediaGeometry

CATS = (("media model", lambda f, n: "/hbfd/media/" in f),
        ("generated_with_checksums (on: the fused compiled pass; off: the copy into the batch)", lambda f, n: n in (
            "generated_with_checksums", "_generate_checksum_loop", "read_many_checksums")),
        ("content generation", lambda f, n: ("backing.py" in f or "kernels.py" in f) and n in (
            "generated_pages", "read_many", "read_pages", "_read_pages", "_pages")),
        ("checksums", lambda f, n: n in ("page_checksums", "span_checksum", "_checksum_loop", "frames_span_checksum",
                                         "generated_checksum_sum")),
        ("frame copies", lambda f, n: n in ("write", "read", "write_many", "read_many", "differing", "rows_differ",
                                            "_rows_differ_loop") and ("frames.py" in f or "kernels.py" in f)),
        ("eviction bookkeeping", lambda f, n: n in ("clock_select", "_clock_select_loop",
                                                     "begin_eviction", "begin_eviction_of", "complete_eviction",
                                                     "cancel_eviction", "take_frames", "_unmap", "complete_evictions",
                                                     "cancel_evictions", "_write_back", "_account_evictions",
                                                     "_take_frame")),
        ("fill and publication", lambda f, n: n in ("begin_fill", "begin_fill_many", "publish", "publish_many",
                                                     "take_free", "release_free")),
        ("page tables", lambda f, n: "frames.py" in f and n in ("__getitem__", "__setitem__", "frame_of", "frames_of",
                                                                 "set_many", "_chunk", "lookup", "lookup_many")))


def _own(key) -> str | None:
    """The category of a function's self time, None for one that inherits its callers' (numpy, built-ins,
    splitmix64: used by both generation and checksums)."""
    f, _line, n = key
    if f == "~" or "site-packages/numpy" in f or n == "splitmix64" or f.startswith("<") or f.endswith("hbfd/accel.py") \
            or n in ("compiled", "_words", "_seed_hi"):
        return None
    for name, test in CATS:
        if test(f, n):
            return name
    return "per-request Python and numpy glue"


def _resolve(st, key, memo, depth=0) -> dict[str, float]:
    """Fractions by category of a function's time: its own, else its callers' in proportion to their calls."""
    if key in memo:
        return memo[key]
    own = _own(key)
    if own is not None or depth > 20:
        memo[key] = {own or "per-request Python and numpy glue": 1.0}
        return memo[key]
    callers = st.stats[key][4]
    tot = sum(c[2] for c in callers.values())
    out: dict[str, float] = {}
    for ck, c in callers.items():
        w = c[2] / tot if tot else 1.0 / max(1, len(callers))
        for cat, fr in _resolve(st, ck, memo, depth + 1).items():
            out[cat] = out.get(cat, 0.0) + w * fr
    memo[key] = out or {"per-request Python and numpy glue": 1.0}
    return memo[key]


def one(pages: int, frames: int, width: int) -> dict:
    geom = MediaGeometry.from_profile(load_profile("ocp-sg1"))
    svc = CapacityService(geom, frames, NoPrefetch())
    svc.add_range(1, pages, 0, ctl.HBF_PERM_READ, GeneratedStore(seed=1, pages=pages))

    def run():
        now = 0
        for lo in range(0, pages, width):
            now += 1000
            svc.miss_many([(1, p, ctl.HBF_OP_LOAD, now) for p in range(lo, min(pages, lo + width))])

    t0 = time.thread_time_ns()
    prof = cProfile.Profile()
    prof.runcall(run)
    cpu = time.thread_time_ns() - t0
    st = pstats.Stats(prof)
    by: dict[str, float] = {}
    memo: dict = {}
    for key, (_cc, _nc, tt, _ct, _callers) in st.stats.items():
        for cat, fr in _resolve(st, key, memo).items():
            by[cat] = by.get(cat, 0.0) + tt * fr
    total = sum(by.values())
    return {"pages": pages, "frames": frames, "width": width, "cpu_s_profiled": cpu / 1e9,
            "us_per_page": {k: round(v / pages * 1e6, 2) for k, v in sorted(by.items(), key=lambda x: -x[1])},
            "share": {k: round(v / total, 3) for k, v in sorted(by.items(), key=lambda x: -x[1])},
            "fills": svc.n["fills"], "evictions": svc.n["evictions"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=8192)
    ap.add_argument("--frames", type=int, default=256)
    ap.add_argument("--widths", default="32,256")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    from hbfd import accel
    doc = {"command": " ".join(["bench/capacity_profile.py"] + sys.argv[1:]), "accel": accel.describe()["accel"],
           "runs": [one(a.pages, a.frames, int(w)) for w in a.widths.split(",")]}
    text = json.dumps(doc, indent=1)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
