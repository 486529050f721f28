"""Issue 16: capacity mode's host service on the CPU -- miss-service throughput and the four times, generated
read-only data through a small frame pool checked against the CPU checksum, and a read-write workload under
eviction pressure whose final bytes must equal a native run's.

    PYTHONPATH=$PWD .venv/bin/python bench/capacity_service.py [--pages 32768] [--frames 2048] [--reps 3]

* stream: ``pages`` pages of a GeneratedStore streamed in order through ``frames`` frames (policies none and
  next-pages-8), by 1 warp (one miss per ring scan) and by ``width`` warps in lockstep (their misses served as
  one scan: one media batch); the served bytes' checksum against GeneratedStore.span_checksum (from the seed alone); per rep
  the host's miss-service throughput (pages and GB filled per second of service_ns) and modeled_ns / wall_ns /
  service_ns / overhead_ns. Medians and ranges over ``reps``.
* paper110: the paper's capacity check at its address-space scale (110 GiB logical on a sparse file, 512 frames
  = 2 MiB): the first and last 64 pages written through the frames, evicted, read back: 128 checksums vs native.
* rw: a sparse backing file of ``rw_pages`` pages through ``rw_frames`` frames, 4 warps with interleaved pins,
  50 % stores of 8 B, hot and spread pages; the final file equals a plain array updated the same way (native).
Media model: ocp-sg1. Writes bench/results/capacity_service.json. Host only: no GPU, no PCIe copies; a frame
copy here is a memcpy, so the throughput is the host path's bound without the GPU's copy engine.
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
from hbfcommon.capacity import span_checksum  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from hbfcommon.profile import load_profile  # noqa: E402
from hbfd import accel  # noqa: E402
from hbfd.capacity.backing import GeneratedStore, SparseFileStore  # noqa: E402
from hbfd.capacity.device import CapacityDevice  # noqa: E402
from hbfd.capacity.prefetch import NextPages, NoPrefetch  # noqa: E402
from hbfd.capacity.service import CapacityService  # noqa: E402
from hbfd.media import MediaGeometry  # noqa: E402


def stream(geom, pages, frames, policy, gap_ns, width, workers=1):
    store = GeneratedStore(seed=20261204, pages=pages)
    svc = CapacityService(geom, frames, policy, workers=workers)
    svc.add_range(1, pages, 0, ctl.HBF_PERM_READ, store)
    dev = CapacityDevice(svc)                     # loads the compiled checksum twin (HBFD_ACCEL) before the clock
    t0 = time.perf_counter_ns()
    out = dev.run_wide(1, np.arange(pages), width=width, gap_ns=gap_ns, checksum=True)
    run_ns = time.perf_counter_ns() - t0
    t1 = time.perf_counter_ns()
    cpu = store.span_checksum(0, pages)
    ck_ns = time.perf_counter_ns() - t1
    rep = svc.report()
    c = rep["counters"]
    return {"policy": policy.name, "pages": pages, "frames": frames, "width": width, "workers": workers,
            "checksum_equal": out["checksum"] == cpu,
            "checksum": out["checksum"], "no_wait": out["no_wait"], "demand_waits": out["demand_waits"],
            "late_prefetch_waits": out["late_prefetch_waits"], "fills": c["fills"], "evictions": c["evictions"],
            "modeled_ns": c["modeled_ns"], "wall_ns": c["wall_ns"], "service_ns": c["service_ns"],
            "overhead_ns": c["overhead_ns"], "pages_per_s": rep["miss_service"]["pages_per_s"],
            "GB_per_s": rep["miss_service"]["GB_per_s"], "run_s": run_ns / 1e9, "cpu_checksum_s": ck_ns / 1e9}


def rw(geom, pages, frames, steps, seed=7):
    with tempfile.TemporaryDirectory() as d:
        store = SparseFileStore(Path(d) / "rw.bin", pages)
        svc = CapacityService(geom, frames)
        svc.add_range(1, pages, 0, ctl.HBF_PERM_READ | ctl.HBF_PERM_WRITE, store)
        dev = CapacityDevice(svc)
        native = np.zeros((pages, 4096), np.uint8)
        rng = np.random.default_rng(seed)
        held: dict[int, tuple[int, int]] = {}
        t = 0
        mismatched_loads = 0
        for step in range(steps):
            t += 2000
            w = int(rng.integers(0, 4))
            if w in held:
                page, frame = held.pop(w)
                off = int(rng.integers(0, 4096 - 8))
                val = rng.integers(0, 256, 8, dtype=np.uint8)
                cur = svc.pool.memory.read(frame)
                cur[off:off + 8] = val
                svc.pool.memory.write(frame, cur)
                native[page, off:off + 8] = val
                dev.unpin(frame)
                continue
            page = int(rng.integers(0, 8)) if step % 3 == 0 else int(rng.integers(0, pages))
            if rng.random() < 0.5 and len(held) < 3:
                a = dev.pin(1, page, ctl.HBF_OP_STORE, t)
                held[w] = (page, a.frame)
            else:
                data, a = dev.load(1, page, t)
                mismatched_loads += int(not np.array_equal(data, native[page]))
            t += a.wait_ns
        for page, frame in held.values():
            dev.unpin(frame)
        rep = svc.close()
        back = SparseFileStore(Path(d) / "rw.bin", pages, create=False)
        equal = bool(np.array_equal(back.read_pages(0, pages), native))
        back.close()
    c = rep["counters"]
    return {"pages": pages, "frames": frames, "steps": steps, "final_bytes_equal_native": equal,
            "mismatched_loads": mismatched_loads, "evictions": c["evictions"], "writebacks": c["writebacks"],
            "media_programs": rep["media"]["programs"], "write_amplification": rep["media"]["write_amplification"]}


def paper110(geom, frames=512, region_pages=64, seed=11):
    """The paper's capacity check at its scale of address space, on the CPU: a 110 GiB logical range on a sparse
    file through ``frames`` frames; the first and last ``region_pages`` pages written through the frames (8 B
    stores at random offsets), everything evicted by a stream through the middle, then the 128 pages' checksums
    read back through the frames against a native array updated the same way."""
    pages = (110 << 30) // 4096
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as d:
        store = SparseFileStore(Path(d) / "cap110.bin", pages)
        svc = CapacityService(geom, frames)
        svc.add_range(1, pages, 0, ctl.HBF_PERM_READ | ctl.HBF_PERM_WRITE, store)
        dev = CapacityDevice(svc)
        regions = list(range(region_pages)) + list(range(pages - region_pages, pages))
        native = {p: np.zeros(4096, np.uint8) for p in regions}
        t = 0
        for _ in range(4):
            for p in regions:
                off = int(rng.integers(0, 4096 - 8))
                val = rng.integers(0, 256, 8, dtype=np.uint8)
                t += 1000
                t += dev.store(1, p, off, val, t).wait_ns
                native[p][off:off + 8] = val
        t = dev.run(1, np.arange(pages // 2, pages // 2 + 4 * frames), gap_ns=1000, t0_ns=t)["end_ns"]
        equal = 0
        for p in regions:
            t += 10**6
            data, _a = dev.load(1, p, t)
            pg = np.array([p], np.uint64)
            equal += int(span_checksum(pg, data[None, :]) == span_checksum(pg, native[p][None, :]))
        rep = svc.close()
        disk = Path(d, "cap110.bin").stat().st_blocks * 512
    c = rep["counters"]
    return {"logical_bytes": pages * 4096, "frames": frames, "frame_bytes": frames * 4096, "checksums": len(regions),
            "checksums_equal": equal, "writebacks": c["writebacks"], "evictions": c["evictions"],
            "sparse_file_disk_bytes": disk}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=32768)
    ap.add_argument("--frames", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gap-ns", type=int, default=2000)
    ap.add_argument("--widths", default="1,64", help="warps per ring scan (misses served together)")
    ap.add_argument("--workers", type=int, default=1, help="the service's fill threads")
    ap.add_argument("--next-depth", type=int, default=8, help="the next-pages policy's depth (the GPU proof: 64)")
    ap.add_argument("--rw-pages", type=int, default=4096)
    ap.add_argument("--rw-frames", type=int, default=256)
    ap.add_argument("--rw-steps", type=int, default=20000)
    ap.add_argument("--streams-only", action="store_true", help="only the streams (no rw, no paper110)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/capacity_service.json"))
    a = ap.parse_args()
    prof = load_profile("ocp-sg1")
    geom = MediaGeometry.from_profile(prof)
    rows = []
    for rep in range(a.reps):
        for w in [int(x) for x in a.widths.split(",")]:
          for pol in (NoPrefetch(), NextPages(a.next_depth)):
            r = stream(geom, a.pages, a.frames, pol, a.gap_ns, w, a.workers) | {"rep": rep}
            rows.append(r)
            print(f"rep {rep} width {w} {r['policy']:14s} checksum equal {r['checksum_equal']}, {r['pages_per_s']:.0f} pages/s "
                  f"{r['GB_per_s']:.3f} GB/s, modeled {r['modeled_ns']} wall {r['wall_ns']} overhead {r['overhead_ns']}")
    summary = {}
    for name in sorted({f"{r['policy']}@width{r['width']}" for r in rows}):
        rs = [r for r in rows if f"{r['policy']}@width{r['width']}" == name]
        summary[name] = {f: {"median": statistics.median(r[f] for r in rs), "min": min(r[f] for r in rs),
                             "max": max(r[f] for r in rs)}
                         for f in ("pages_per_s", "GB_per_s", "modeled_ns", "wall_ns", "service_ns", "overhead_ns")}
        summary[name]["checksums_equal"] = all(r["checksum_equal"] for r in rs)
    rwr = p110 = None
    if not a.streams_only:
        rwr = rw(geom, a.rw_pages, a.rw_frames, a.rw_steps)
        print("rw:", rwr)
        p110 = paper110(geom)
        print("paper110:", p110)
    doc = {"what": "issue 16: capacity-mode host service on the CPU: miss-service throughput, the four times, "
                   "generated data vs CPU checksum, read-write under eviction vs native",
           "date": datetime.date.today().isoformat(), "card": "CPU (this 2-core box)", "host": platform.node(),
           "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip(),
           "command": " ".join(["bench/capacity_service.py"] + sys.argv[1:]), "profile": f"ocp-sg1 ({prof.sha256[:12]})",
           "note": "host path only (no GPU, no PCIe copies): a frame copy is a memcpy",
           "accel": accel.describe()["accel"],
           "summary": summary, "rows": rows, "rw": rwr, "paper110": p110}
    atomic_write_json(a.out, doc, end="\n")
    print("->", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
