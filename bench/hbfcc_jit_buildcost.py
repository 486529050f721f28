"""What an HBFCC_JIT=1 build costs (issue 18 item 3: <= 1.3x plain build time, cubin growth <= 2x): every CUDA
fixture (tests/fixtures/cuda/*.cu) built plain (``nvcc -arch=sm_90a -c``), eager (``hbfcc -arch=sm_90a -c``: the
rewritten module assembled to SASS) and JIT (``HBFCC_JIT=1 hbfcc -arch=sm_90a -c``: the rewritten PTX only, the
driver assembles it at the first load), interleaved, the order flipped every repetition, one fresh HBFCC_CACHE_DIR
per hbfcc variant (its shadow toolkit built before the timed builds). Per fixture: the median wall time and CPU
time (user+sys of the build's processes) per variant, the ratios to plain, the object sizes and their ratio to
plain, and whether the JIT build was admitted and applied (its <out>.hbfcc.json). Summary: median and summed ratios.

    PYTHONPATH=$PWD .venv/bin/python bench/hbfcc_jit_buildcost.py --reps 3 --out /tmp/jit/buildcost.json
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from hbfcc_ptxas_threads import _hbfcc, _timed, fixtures  # noqa: E402

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("hbfcc_jit_buildcost")
VARIANTS = ("plain", "eager", "jit")


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _build(argv: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s of the build's processes)."""
    c0 = _children_cpu()
    wall = _timed(argv, env, cwd)
    return wall, _children_cpu() - c0


def _ratio(xs: dict, base: dict, v: str) -> float:
    return round(statistics.median(xs[v]) / statistics.median(xs[base]), 3)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--only", default="", help="comma list of fixture stems (default: every tests/fixtures/cuda/*.cu)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.reps < 1:
        ap.error("--reps >= 1")
    srcs, nvcc = fixtures(ap, a.only)
    hb = _hbfcc()
    res: dict = {"what": "nvcc -c build wall/CPU time and object size: plain, hbfcc eager (SASS), HBFCC_JIT=1 (PTX)",
                 "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "cpus": len(os.sched_getaffinity(0)),
                 "arch": a.arch, "reps": a.reps, "variants": list(VARIANTS),
                 # hbfcc's two Python processes per build (the wrapper, nvcc's ptxas shim) compile hbfcc's sources
                 # again on every start where bytecode is not written (~0.1 s each on the 2-core box)
                 "python_bytecode_written": not os.environ.get("PYTHONDONTWRITEBYTECODE"),
                 "pycache_prefix": os.environ.get("PYTHONPYCACHEPREFIX"),
                 "command": " ".join(["python3", "bench/hbfcc_jit_buildcost.py"] + sys.argv[1:]), "fixtures": {}}
    with tempfile.TemporaryDirectory(prefix="hbfcc-jit.") as d:
        work = Path(d)
        envs = {"plain": dict(os.environ)}
        for v in ("eager", "jit"):
            e = dict(os.environ, HBFCC_CACHE_DIR=str(work / f"cache_{v}"),
                     HBFCC_ARTIFACT_DIR=str(work / f"store_{v}"))
            e.pop("HBFCC_JIT", None)
            if v == "jit":
                e["HBFCC_JIT"] = "1"
            envs[v] = e
            _timed([hb, f"-arch={a.arch}", "-c", str(srcs[0]), "-o", str(work / f"warm_{v}.o")], e, work)  # shadow
        for src in srcs:
            wall: dict = {v: [] for v in VARIANTS}
            cpu: dict = {v: [] for v in VARIANTS}
            sizes: dict = {}
            for r in range(a.reps):
                for v in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
                    o = work / f"{src.stem}_{v}.o"
                    argv = [nvcc if v == "plain" else hb, f"-arch={a.arch}", "-c", str(src), "-o", str(o)]
                    w, c = _build(argv, envs[v], work)
                    wall[v].append(w)
                    cpu[v].append(c)
                    sizes[v] = o.stat().st_size
            rec = json.loads((work / f"{src.stem}_jit.o.hbfcc.json").read_text())
            erec = json.loads((work / f"{src.stem}_eager.o.hbfcc.json").read_text())
            row = {"wall_s": {v: round(statistics.median(t), 3) for v, t in wall.items()},
                   "cpu_s": {v: round(statistics.median(t), 3) for v, t in cpu.items()},
                   "wall_vs_plain": {v: _ratio(wall, "plain", v) for v in VARIANTS[1:]},
                   "cpu_vs_plain": {v: _ratio(cpu, "plain", v) for v in VARIANTS[1:]},
                   "jit_vs_eager_wall": _ratio(wall, "eager", "jit"),
                   "object_bytes": sizes,
                   "object_vs_plain": {v: round(sizes[v] / sizes["plain"], 2) for v in VARIANTS[1:]},
                   "jit_record": {"admitted": rec["admitted"], "jit": rec.get("jit")},
                   "eager_admitted": erec["admitted"]}
            res["fixtures"][src.stem] = row
            log.info("%-16s wall %s x%s  obj %s", src.stem, row["wall_s"], row["wall_vs_plain"], row["object_vs_plain"])
            atomic_write_json(Path(a.out), res, indent=1)
    rows = res["fixtures"].values()
    tot = {v: sum(r["wall_s"][v] for r in rows) for v in VARIANTS}
    tcpu = {v: sum(r["cpu_s"][v] for r in rows) for v in VARIANTS}
    tsz = {v: sum(r["object_bytes"][v] for r in rows) for v in VARIANTS}
    res["summary"] = {
        "total_wall_s": {v: round(t, 2) for v, t in tot.items()},
        "total_wall_vs_plain": {v: round(tot[v] / tot["plain"], 3) for v in VARIANTS[1:]},
        "median_wall_vs_plain": {v: round(statistics.median(r["wall_vs_plain"][v] for r in rows), 3)
                                 for v in VARIANTS[1:]},
        "max_wall_vs_plain": {v: max(r["wall_vs_plain"][v] for r in rows) for v in VARIANTS[1:]},
        "total_cpu_vs_plain": {v: round(tcpu[v] / tcpu["plain"], 3) for v in VARIANTS[1:]},
        "median_cpu_vs_plain": {v: round(statistics.median(r["cpu_vs_plain"][v] for r in rows), 3)
                                for v in VARIANTS[1:]},
        "total_object_bytes": tsz,
        "total_object_vs_plain": {v: round(tsz[v] / tsz["plain"], 2) for v in VARIANTS[1:]},
        "median_object_vs_plain": {v: round(statistics.median(r["object_vs_plain"][v] for r in rows), 2)
                                   for v in VARIANTS[1:]},
        "jit_all_applied": all((r["jit_record"]["jit"] or {}).get("applied") for r in rows),
        "jit_admission_equals_eager": all(r["jit_record"]["admitted"] == r["eager_admitted"] for r in rows),
        "jit_not_admitted": sorted(n for n, r in res["fixtures"].items() if not r["jit_record"]["admitted"]),
    }
    atomic_write_json(Path(a.out), res, indent=1)
    log.info("summary %s", json.dumps(res["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
