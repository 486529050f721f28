"""Issue 16, device half: capacity misses through hbfd's request ring on the CPU -- miss-service throughput of the
whole host path as the GPU would drive it (ring post, hbfd's scan and dispatch, the service's fill into the shared
capacity region, the completion), against the service's own time.

    PYTHONPATH=$PWD .venv/bin/python bench/capacity_ring.py [--pages 4096] [--frames 256] [--reps 5]

A real hbfd (profile ocp-sg1, its ring served by the media model's capacity service); per rep one capacity range of
``pages`` generated read-only pages through ``frames`` frames (no prefetch: every page one demand miss), streamed
by ``width`` lanes in lockstep (hbfd.capacity.device.RingHost under CapacityDevice.run_wide: the lanes' misses
posted together, one ring scan), every served page's checksum against the store's (from the seed alone). Per rep:
pages/s and GB/s over the client's wall time of the stream (ring included), over the round trips alone (post to
completions: hbfd's scan, service and posting, what the GPU would wait for; the rest is the CPU stand-in's own
pinning and checksums), and over hbfd's service_ns (the service alone); modeled_ns vs the client wall per miss.
Medians and ranges over ``reps``. ``--policy`` is the range's prefetch policy, ``--workers`` hbfd's fill threads
($HBFD_CAPACITY_WORKERS). ``--rw-passes N``: read-write instead (a sparse file range; the lanes pin for stores
and update their page's words at ``--stride`` as bench/capacity_gpu.py's rw kernels do, ``--lanes-per-page`` lanes
splitting a page; dirty victims written back; after UnregisterRange the file is compared with the N passes computed
in numpy: ``checksum_equal``). Writes bench/results/capacity_ring.json. CPU only: a frame fill is a memcpy into
shared memory (no PCIe).
"""
from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbfcommon import ctl  # noqa: E402
from hbfcommon.capacity import HBF_CAP_PAGE_BYTES as PAGE  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from hbfd import accel  # noqa: E402
from hbfd.capacity.backing import GeneratedStore  # noqa: E402
from hbfd.capacity.device import CapacityDevice, RingHost  # noqa: E402
from hbfd.hostring import RingDriver  # noqa: E402
from hbfd.runner import start_daemon  # noqa: E402

BASE = 0x7B00_0000_0000


RMW_MUL = np.uint64(6364136223846793005)          # bench/capacity_gpu.py's cap_rmw / cap_rmw_pages


def rmw_reference(words: np.ndarray, stride: int, seed: int) -> None:
    """One pass of the GPU proof's read-modify-write over ``words`` (uint64, in place): every word whose index is
    a multiple of ``stride`` becomes w * 6364136223846793005 + (index ^ seed) (mod 2^64)."""
    idx = np.arange(0, len(words), stride, dtype=np.uint64)
    with np.errstate(over="ignore"):
        words[::stride] = words[::stride] * RMW_MUL + (idx ^ np.uint64(seed))


def rmw_touch(stream: np.ndarray, lanes_per_page: int, stride: int, seed: int):
    """The lanes' update while they hold their pins (CapacityDevice.run_wide's ``touch``): lane j of a page's
    ``lanes_per_page`` consecutive lanes updates the page's j-th, (j + L)-th, ... words at ``stride`` (as the
    kernel's lanes split a page), so every such word is updated once per pass: the final bytes are
    :func:`rmw_reference`'s."""
    cols = np.arange(0, 512, stride, dtype=np.int64).reshape(-1, lanes_per_page).T      # (L, slots / L)
    sd = np.uint64(seed)

    def touch(memory, frames, lanes):
        words = memory.data.view(np.uint64)                        # (n_frames, 512)
        cc = cols[lanes % lanes_per_page]                          # (k, slots / L)
        rows = frames[:, None]
        w = (stream[lanes].astype(np.uint64) * np.uint64(512))[:, None] + cc.astype(np.uint64)
        with np.errstate(over="ignore"):
            words[rows, cc] = words[rows, cc] * RMW_MUL + (w ^ sd)
    return touch


def one(pages: int, frames: int, width: int, seed: int, policy: str = "none", workers: int | None = None,
        lanes_per_page: int = 1, range_pages: int = 0, rw_passes: int = 0, stride: int = 64,
        no_verify: bool = False) -> dict:
    env = {"HBFD_THERMAL": "none"} | ({"HBFD_CAPACITY_WORKERS": str(workers)} if workers else {})
    with tempfile.TemporaryDirectory() as d, start_daemon("ocp-sg1", workdir=Path(d), pythonpath=[ROOT],
                                                         env=env, timeout_s=90.0) as h:
        with h.client() as c:
            rep = c.call("Attach", workload_pid=0, abi_version=ctl.HBF_CTL_ABI_VERSION)
            m = ctl.map_region(rep.ctl_path)
            if rw_passes:                          # a sparse file read and written (dirty frames written back)
                spec = c.pb.CapacitySpec(n_frames=frames, store="sparse", path=str(Path(d) / "rw.bin"),
                                         policy=policy, no_verify=no_verify)
            else:
                spec = c.pb.CapacitySpec(n_frames=frames, store="generated", seed=seed, policy=policy,
                                         no_verify=no_verify)
            r = c.call("RegisterRange", range=c.pb.Range(base=BASE, length=max(pages, range_pages) * PAGE,
                                                         mode=ctl.HBF_MODE_CAPACITY,
                                                         perms=ctl.HBF_PERM_READ | (ctl.HBF_PERM_WRITE if rw_passes
                                                                                    else 0)),
                       capacity=spec)
        host = RingHost(RingDriver(m, rep.ring_key), r.capacity_path, BASE)
        rt = [0]
        post_wait = host.miss_many_arrays

        def timed(requests, _f=post_wait):             # a round's misses posted, their completions waited for
            t = time.perf_counter_ns()
            try:
                return _f(requests)
            finally:
                rt[0] += time.perf_counter_ns() - t
        host.miss_many_arrays = timed
        dev = CapacityDevice(host)                 # loads the compiled checksum twin (HBFD_ACCEL) before the clock
        stream = np.repeat(np.arange(pages), lanes_per_page)
        t0 = time.perf_counter_ns()
        if rw_passes:
            now = 0
            for k in range(rw_passes):
                out = dev.run_wide(r.range.range_id, stream, width=width, gap_ns=1000, t0_ns=now,
                                   op=ctl.HBF_OP_STORE, touch=rmw_touch(stream, lanes_per_page, stride, seed + k))
                now = out["end_ns"]
        else:
            out = dev.run_wide(r.range.range_id, stream, width=width, gap_ns=1000, checksum=True)
        wall = time.perf_counter_ns() - t0
        if rw_passes:
            t1 = time.perf_counter_ns()
            with h.client() as c:
                c.call("UnregisterRange", range_id=r.range.range_id)   # every dirty frame written back first
            unreg = time.perf_counter_ns() - t1
            want = np.zeros(pages * 512, np.uint64)
            for k in range(rw_passes):
                rmw_reference(want, stride, seed + k)
            got = np.fromfile(Path(d) / "rw.bin", np.uint64)
            ok = bool(len(got) == len(want) and np.array_equal(got, want))
        else:
            ok = out["checksum"] == GeneratedStore(seed, pages).span_checksum(0, pages) * lanes_per_page % (1 << 64)
        m.close()
        h.stop()
        s = h.read_summary()
    cap = [x for x in s["capacity"]["ranges"] if x["range_id"] == r.range.range_id][0]
    n = cap["counters"]
    fills = n["fills"]
    return {"pages": pages, "frames": frames, "width": width, "policy": policy, "workers": cap["options"]["workers"],
            "lanes_per_page": lanes_per_page, "range_pages": max(pages, range_pages), "rw_passes": rw_passes,
            "writebacks": n.get("writebacks", 0), "unregister_ns": unreg if rw_passes else 0,
            "checksum_equal": ok, "hints": host.n["hints"], "misses": host.n["misses"],
            "fills": fills, "evictions": n["evictions"], "client_wall_ns": wall,
            "pages_per_s_ring": fills / (wall / 1e9), "GB_per_s_ring": fills * PAGE / wall,
            "pages_per_s_service": cap["miss_service"]["pages_per_s"], "GB_per_s_service": cap["miss_service"]["GB_per_s"],
            "service_ns": n["service_ns"], "modeled_ns": n["modeled_ns"],
            "ring_ns_per_miss": wall / max(1, host.n["misses"]),
            "round_trip_ns": rt[0], "pages_per_s_round_trip": fills / (rt[0] / 1e9),
            "client_ns_per_page": (wall - rt[0]) / max(1, fills),
            "modeled_ns_per_miss": n["modeled_ns"] / max(1, fills),
            "scans": s["capacity"]["dispatch"]["scans"], "status": cap["status"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=4096)
    ap.add_argument("--frames", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--widths", default="1,32")
    ap.add_argument("--policy", default="none", help="the range's prefetch policy (CapacitySpec.policy)")
    ap.add_argument("--range-gib", type=float, default=0, help="the range's logical size (its first --pages are "
                    "streamed; 0: --pages)")
    ap.add_argument("--lanes-per-page", type=int, default=1, help="consecutive lanes on one page (16: the word-per-"
                    "thread kernel's 16 warps per page, each posting its own miss)")
    ap.add_argument("--rw-passes", type=int, default=0, help="read-write (a sparse file): this many read-modify-"
                    "write passes of every lane's page (as bench/capacity_gpu.py's rw part, words at --stride), "
                    "dirty frames written back at eviction and at UnregisterRange; the file then compared with the "
                    "passes computed in numpy (checksum_equal); 0: generated read-only pages")
    ap.add_argument("--stride", type=int, default=64, help="rw: words between two updated words (a divisor of 512 "
                    "whose 512 / stride slots split evenly over --lanes-per-page)")
    ap.add_argument("--no-verify", action="store_true", help="the range's no_verify (no read-back checksum of "
                    "fills and write-backs)")
    ap.add_argument("--workers", type=int, default=0, help="hbfd's fill threads per range "
                    "($HBFD_CAPACITY_WORKERS; 0: its default, the host's cores)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/capacity_ring.json"))
    a = ap.parse_args()
    widths = [int(x) for x in a.widths.split(",")]
    # a bad plan: one line naming it (argparse's usage error, exit 2), not a traceback
    if a.pages < 1 or a.reps < 1 or a.frames < max(widths) or min(widths) < 1:
        ap.error(f"need --pages, --reps >= 1, --widths >= 1 and --frames >= the widest width (pages {a.pages}, "
                 f"frames {a.frames}, widths {a.widths})")
    if (a.rw_passes < 0 or a.stride < 1 or a.lanes_per_page < 1 or 512 % a.stride
            or (512 // a.stride) % a.lanes_per_page):
        ap.error(f"need --rw-passes >= 0, --lanes-per-page >= 1 and a --stride dividing 512 whose slots split over "
                 f"--lanes-per-page (rw-passes {a.rw_passes}, stride {a.stride}, lanes-per-page {a.lanes_per_page})")
    rows = []
    for rep in range(a.reps):
        for w in widths:
            r = one(a.pages, a.frames, w, 20261205 + rep, a.policy, a.workers or None,
                    a.lanes_per_page, int(a.range_gib * (1 << 30)) // PAGE, a.rw_passes, a.stride,
                    a.no_verify) | {"rep": rep}
            rows.append(r)
            print(f"rep {rep} width {w}: checksum equal {r['checksum_equal']}, ring {r['pages_per_s_ring']:.0f} "
                  f"pages/s (round trips alone {r['pages_per_s_round_trip']:.0f}) "
                  f"pages/s ({r['ring_ns_per_miss'] / 1e3:.1f} us/miss), service {r['pages_per_s_service']:.0f} "
                  f"pages/s, scans {r['scans']}, write-backs {r['writebacks']}", flush=True)
    summary = {}
    for w in widths:
        rs = [r for r in rows if r["width"] == w]
        summary[f"width{w}"] = {f: {"median": statistics.median(r[f] for r in rs), "min": min(r[f] for r in rs),
                                    "max": max(r[f] for r in rs)}
                                for f in ("pages_per_s_ring", "GB_per_s_ring", "pages_per_s_round_trip",
                                          "client_ns_per_page", "pages_per_s_service",
                                          "GB_per_s_service", "ring_ns_per_miss", "modeled_ns_per_miss", "scans")}
        summary[f"width{w}"]["checksums_equal"] = all(r["checksum_equal"] for r in rs)
    doc = {"what": "issue 16 device half: capacity misses through hbfd's ring on the CPU (RingHost), throughput "
                   "of the whole host path vs the service alone",
           "date": datetime.date.today().isoformat(), "card": "CPU (this 2-core box)", "host": platform.node(),
           "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip(),
           "command": " ".join(["bench/capacity_ring.py"] + sys.argv[1:]), "profile": "ocp-sg1",
           "note": "no GPU: a fill is a memcpy into the shared region, the ring is polled by Python on both sides",
           "accel": accel.describe()["accel"],
           "summary": summary, "rows": rows}
    atomic_write_json(a.out, doc, end="\n")
    print("->", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
