"""HBFCC_PTXAS_THREADS A/B (issue 18 item 3): the CUDA fixtures built through hbfcc with each knob value,
interleaved (the order flips every repetition), one fresh HBFCC_CACHE_DIR per value (its shadow toolkit built
before the timed builds), plus plain nvcc in the same rounds. Per fixture: the median wall time per variant, the
paired ratio (auto / 1 per repetition, median), and whether the variants' cubins have the same code (the objects'
embedded cubins compared section by section is left to tests/hbfcc/test_ptxas_threads.py; here the object sizes).

    PYTHONPATH=$PWD .venv/bin/python bench/hbfcc_ptxas_threads.py --reps 3 --out /tmp/pt/threads.json
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("hbfcc_ptxas_threads")
FIX = ROOT / "tests" / "fixtures" / "cuda"


def _hbfcc() -> str:
    exe = Path(sys.executable).with_name("hbfcc")
    return str(exe) if exe.exists() else (shutil.which("hbfcc") or "hbfcc")


def _timed(argv: list[str], env: dict, cwd: Path) -> float:
    t0 = time.perf_counter()
    cp = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    dt = time.perf_counter() - t0
    if cp.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({cp.returncode}): {cp.stderr[-1500:]}")
    return dt


def fixtures(ap: argparse.ArgumentParser, only: str) -> tuple[list[Path], str]:
    """(the CUDA fixtures: every tests/fixtures/cuda/*.cu, or the stems of ``only``'s comma list; nvcc); ``ap.error``
    where none matches or nvcc is not on PATH."""
    srcs = sorted(FIX.glob("*.cu"))
    if only:
        want = {x.strip() for x in only.split(",")}
        srcs = [s for s in srcs if s.stem in want]
        if not srcs:
            ap.error(f"--only {only}: no such fixture in {FIX}")
    nvcc = shutil.which("nvcc")
    if not nvcc:
        ap.error("no nvcc on PATH")
    return srcs, nvcc


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--values", default="1,auto", help="HBFCC_PTXAS_THREADS values, the first is the baseline")
    ap.add_argument("--only", default="", help="comma list of fixture stems (default: every tests/fixtures/cuda/*.cu)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    values = [v.strip() for v in a.values.split(",") if v.strip()]
    if len(values) < 2 or a.reps < 1:
        ap.error("--values needs two or more values, --reps >= 1")
    srcs, nvcc = fixtures(ap, a.only)
    hb = _hbfcc()
    res: dict = {"what": "hbfcc build wall time per HBFCC_PTXAS_THREADS value, interleaved, + plain nvcc",
                 "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "cpus": len(os.sched_getaffinity(0)),
                 "values": values, "reps": a.reps, "command": " ".join(["python3", "bench/hbfcc_ptxas_threads.py"]
                                                                      + sys.argv[1:]), "fixtures": {}}
    with tempfile.TemporaryDirectory(prefix="hbfcc-threads.") as d:
        work = Path(d)
        envs = {}
        for v in values:
            e = dict(os.environ, HBFCC_PTXAS_THREADS=v, HBFCC_CACHE_DIR=str(work / f"cache_{v}"))
            envs[v] = e
            _timed([hb, "-arch=sm_90a", "-c", str(srcs[0]), "-o", str(work / f"warm_{v}.o")], e, work)  # the shadow
        for src in srcs:
            times: dict = {v: [] for v in ["plain"] + values}
            sizes: dict = {}
            order = ["plain"] + values
            for r in range(a.reps):
                for v in (order if r % 2 == 0 else order[::-1]):
                    o = work / f"{src.stem}_{v}.o"
                    argv = [nvcc if v == "plain" else hb, "-arch=sm_90a", "-c", str(src), "-o", str(o)]
                    times[v].append(_timed(argv, envs.get(v, dict(os.environ)), work))
                    sizes[v] = o.stat().st_size
            base = values[0]
            row = {"wall_s": {v: round(statistics.median(t), 3) for v, t in times.items()}, "object_bytes": sizes,
                   "vs_plain": {v: round(statistics.median(t) / statistics.median(times["plain"]), 3) for v, t in
                                times.items() if v != "plain"},
                   "paired": {v: round(statistics.median(x / y for x, y in zip(times[v], times[base])), 3)
                              for v in values[1:]}}
            res["fixtures"][src.stem] = row
            log.info("%-16s %s", src.stem, row)
            atomic_write_json(Path(a.out), res, indent=1)
    tot = {v: sum(r["wall_s"][v] for r in res["fixtures"].values()) for v in ["plain"] + values}
    res["summary"] = {"total_wall_s": {v: round(t, 2) for v, t in tot.items()},
                      "total_vs_plain": {v: round(tot[v] / tot["plain"], 3) for v in values},
                      "median_vs_plain": {v: round(statistics.median(r["vs_plain"][v] for r in res["fixtures"].values()), 3)
                                          for v in values},
                      "median_paired": {v: round(statistics.median(r["paired"][v] for r in res["fixtures"].values()), 3)
                                        for v in values[1:]}}
    atomic_write_json(Path(a.out), res, indent=1)
    log.info("summary %s", res["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
