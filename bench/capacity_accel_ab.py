"""Issue 16: the capacity miss service with its compiled twins (hbfd/capacity/kernels.py) against the numpy
definitions, interleaved -- ``HBFD_ACCEL=off`` vs ``on`` side by side on one tree: the per-page floor (generated
content + checksum alone), the service in process (bench/capacity_service.py's streams) and through a real
hbfd's ring (bench/capacity_ring.py), one rep per invocation, the order flipped every rep, medians and ranges.

    PYTHONPATH=$PWD .venv/bin/python bench/capacity_accel_ab.py [--reps 3]

The modeled times must be identical off and on (the summary lists each stream's modeled_ns over every rep of
both modes), every served page's checksum equal to the CPU's from the seed. Writes
bench/results/capacity_accel.json. CPU only; the load average is recorded around every run (2 shared cores:
the ratios side by side are what count).

``--floor-only``: print the floor of this process's mode as JSON (what the A/B runs in each mode).
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
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

from hbfcommon.errors import ConfigError  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("capacity_accel_ab")
MODES = ("off", "on")


def floor(pages: int, chunk: int = 64, reps: int = 5) -> dict:
    """us per page of generated content + checksum as the service's fill does it (GeneratedStore
    .read_many_checksums in chunks of ``chunk`` pages), and of each alone; best of ``reps`` passes."""
    from hbfd import accel
    from hbfd.capacity import kernels
    from hbfd.capacity.backing import GeneratedStore
    g = GeneratedStore(seed=20261205, pages=1 << 40)
    warm_s = kernels.warm()
    p = np.arange(pages, dtype=np.int64) * 7 + 12345
    data = np.empty((pages, 4096), np.uint8)

    def best(fn) -> float:
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            for lo in range(0, pages, chunk):
                fn(lo, min(pages, lo + chunk))
            ts.append(time.perf_counter_ns() - t0)
        return min(ts) / pages / 1e3

    fused = best(lambda lo, hi: g.read_many_checksums(p[lo:hi], out=data[lo:hi]))
    gen = best(lambda lo, hi: g.read_many(p[lo:hi]))
    ck = best(lambda lo, hi: kernels.page_checksums(p[lo:hi].astype(np.uint64), data[lo:hi]))
    ref = kernels.generated_checksum_sum(g.seed, p.astype(np.uint64))
    return {"accel": accel.describe()["accel"], "pages": pages, "chunk": chunk, "warm_s": warm_s,
            "us_per_page_generation_plus_checksum": fused, "us_per_page_generation": gen,
            "us_per_page_checksum": ck, "span_checksum": ref}


def _run(mode: str, args: list[str], out: Path | None, timeout_s: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HBFD_ACCEL=mode)
    cmd = [sys.executable, str(ROOT / args[0]), *args[1:]] + (["--out", str(out)] if out else [])
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    if p.returncode != 0:
        raise RuntimeError(f"{args[0]} with HBFD_ACCEL={mode} failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(out.read_text()) if out else json.loads(p.stdout)


def _spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--floor-pages", type=int, default=2048)
    ap.add_argument("--ring-args", action="append", help="arguments of one capacity_ring run per rep and mode "
                    "(repeatable; default: 2048 pages at width 1, 16384 pages through 1024 frames at 256 and 1024)")
    ap.add_argument("--service-args", action="append", help="arguments of one capacity_service run per rep and "
                    "mode (repeatable; default: 4096 pages at width 1, 32768 at 64, 256 and 1024; 2048 frames)")
    ap.add_argument("--floor-only", action="store_true")
    ap.add_argument("--timeout-s", type=float, default=900)
    ap.add_argument("--out", default=str(ROOT / "bench/results/capacity_accel.json"))
    a = ap.parse_args()
    if a.floor_only:
        sys.stdout.write(json.dumps(floor(a.floor_pages)) + "\n")
        return 0
    if a.reps < 1:
        raise ConfigError("reps must be >= 1", reps=a.reps)
    ring_args = a.ring_args or ["--pages 2048 --frames 1024 --widths 1",
                                "--pages 16384 --frames 1024 --widths 256,1024"]
    service_args = a.service_args or ["--pages 4096 --frames 2048 --widths 1",
                                      "--pages 32768 --frames 2048 --widths 64,256,1024"]
    runs = [("bench/capacity_accel_ab.py", f"--floor-only --floor-pages {a.floor_pages}")]
    runs += [("bench/capacity_service.py", x + " --streams-only") for x in service_args]
    runs += [("bench/capacity_ring.py", x) for x in ring_args]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for rep in range(a.reps):
            order = list(MODES) if rep % 2 == 0 else list(MODES)[::-1]
            for mode in order:
                for i, (bench, extra) in enumerate(runs):
                    name = Path(bench).stem if "floor" not in extra else "floor"
                    out = None if name == "floor" else Path(d) / f"{mode}-{rep}-{i}-{name}.json"
                    load0 = os.getloadavg()[0]
                    doc = _run(mode, [bench, *extra.split()] + ([] if name == "floor" else ["--reps", "1"]), out,
                               a.timeout_s)
                    load = (load0, os.getloadavg()[0])
                    for r in ([doc] if name == "floor" else doc["rows"]):
                        rows.append(r | {"accel_mode": mode, "rep": rep, "bench": name, "load_average_1m": load})
                    log.info("rep %d HBFD_ACCEL=%s %s done (load %.2f-%.2f)", rep, mode, name, *load)
    summary: dict = {}
    for mode in MODES:
        s = summary[mode] = {}
        fl = [r for r in rows if r["accel_mode"] == mode and r["bench"] == "floor"]
        s["floor"] = {f: _spread([r[f] for r in fl]) for f in ("us_per_page_generation_plus_checksum",
                                                               "us_per_page_generation", "us_per_page_checksum")}
        s["floor"]["accel"] = sorted({r["accel"] for r in fl})
        s["floor"]["span_checksums"] = sorted({r["span_checksum"] for r in fl})
        ring = [r for r in rows if r["accel_mode"] == mode and r["bench"] == "capacity_ring"]
        for w in sorted({r["width"] for r in ring}):
            rs = [r for r in ring if r["width"] == w]
            s[f"ring_width{w}"] = {f: _spread([r[f] for r in rs]) for f in (
                "pages_per_s_ring", "pages_per_s_service", "ring_ns_per_miss", "scans")}
            s[f"ring_width{w}"]["checksums_equal"] = all(r["checksum_equal"] for r in rs)
            s[f"ring_width{w}"]["modeled_ns_all_reps"] = sorted({r["modeled_ns"] for r in rs})
        svc = [r for r in rows if r["accel_mode"] == mode and r["bench"] == "capacity_service"]
        for pol in sorted({r["policy"] for r in svc}):
            for w in sorted({r["width"] for r in svc if r["policy"] == pol}):
                rs = [r for r in svc if r["policy"] == pol and r["width"] == w]
                s[f"service_{pol}_width{w}"] = {f: _spread([r[f] for r in rs]) for f in (
                    "pages_per_s", "service_ns", "run_s")}
                s[f"service_{pol}_width{w}"]["checksums_equal"] = all(r["checksum_equal"] for r in rs)
                s[f"service_{pol}_width{w}"]["modeled_ns_all_reps"] = sorted({r["modeled_ns"] for r in rs})
    same = {k: summary["off"][k]["modeled_ns_all_reps"] == summary["on"][k]["modeled_ns_all_reps"]
            for k in summary["off"] if "modeled_ns_all_reps" in summary["off"][k]}
    ratio = {k: summary["on"][k][f]["median"] / summary["off"][k][f]["median"]
             for k in summary["off"] for f in ("pages_per_s", "pages_per_s_ring", "pages_per_s_service")
             if k != "floor" and f in summary["off"][k]}
    doc = {"what": "issue 16: capacity miss service, HBFD_ACCEL=off (numpy definitions) vs on (compiled twins), "
                   "interleaved: per-page floor, service in process, through hbfd's ring",
           "date": datetime.date.today().isoformat(), "card": "CPU (this 2-core box, shared)", "host": platform.node(),
           "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip(),
           "command": " ".join(["bench/capacity_accel_ab.py"] + sys.argv[1:]),
           "modeled_ns_identical_off_on": same, "median_ratio_on_over_off": ratio,
           "floor_span_checksum_identical": summary["off"]["floor"]["span_checksums"] ==
           summary["on"]["floor"]["span_checksums"],
           "load_average_end": os.getloadavg(), "summary": summary, "rows": rows}
    atomic_write_json(a.out, doc, end="\n")
    log.info("-> %s", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
