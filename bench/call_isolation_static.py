#!/usr/bin/env python3
"""The static effect of HBFCC_CALL_ISOLATION (the call_isolation stage, hbfcc/passes/call_isolation.py) on the CPU:
per entry of every module of tests/fixtures/triton, tests/fixtures/cuda (compiled by nvcc now) and, with
``--matrix-ptx DIR`` (bench/inline_multi_static.py --export-ptx DIR), the quick matrix's Triton kernels -- the
registers of the plain build, of the instrumented build with the knob off and on (real helpers) and with do-nothing
helpers (hbfcc.helpers.stub_helper_text: off and on), spills, stack frame, blocks per SM at the entry's block size
(hbfcc/occupancy.py ``blocks_per_sm``; entries that declare none: ``--default-threads``), SASS instructions of the
entry (cuobjdump -sass) and ptxas's CPU time, off vs on. No GPU.

    PYTHONPATH=$PWD python bench/call_isolation_static.py --out /tmp/call_isolation_static.json
    PYTHONPATH=$PWD python bench/inline_multi_static.py --export-ptx /tmp/ims_ptx     # needs triton, once
    PYTHONPATH=$PWD python bench/call_isolation_static.py --matrix-ptx /tmp/ims_ptx --only matrix/ --out X.json
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
sys.path.insert(0, str(ROOT / "bench"))

log = logging.getLogger("call_isolation_static")

BUILDS = ("off", "on", "stub_off", "stub_on")   # (knob, helper)


def corpus(matrix_dir: str, only: str) -> dict[str, Path]:
    import ptx_corpus
    out = {f"triton/{k}": v for k, v in ptx_corpus.triton_corpus().items()}
    if ptx_corpus.nvcc_path():
        cache = Path(tempfile.gettempdir()) / f"hbfcc-corpus-{os.getuid()}"
        out.update({f"cuda/{k}": v for k, v in ptx_corpus.build_cuda_corpus(cache).items()})
    if matrix_dir:
        out.update({f"matrix/{p.stem}": p for p in sorted(Path(matrix_dir).glob("*.ptx"))})
    return {k: v for k, v in out.items() if not only or any(k.startswith(o) for o in only.split(","))}


def parse_v(stderr: str) -> dict[str, dict]:
    """ptxas -v (hbfcc.toolchain.parse_ptxas_v): per entry, registers / stack / spill stores / spill loads."""
    from hbfcc.toolchain import parse_ptxas_v
    entries = set(re.findall(r"Compiling entry function '([^']+)'", stderr))
    return {n: {"registers": f.registers, "stack": f.stack_bytes, "spill_stores": f.spill_stores,
                "spill_loads": f.spill_loads} for n, f in parse_ptxas_v(stderr).functions.items() if n in entries}


def assemble(text: str, arch: str, cuobjdump: str, want_sass: bool) -> dict:
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    with tempfile.TemporaryDirectory() as d:
        src, cub = Path(d) / "m.ptx", Path(d) / "m.cubin"
        src.write_text(text)
        errf = Path(d) / "err.txt"
        t0 = time.perf_counter()
        with open(errf, "w") as ef:   # this child's own CPU time (wait4: other jobs' children not counted)
            pr = subprocess.Popen([ptxas, f"-arch={arch}", "-v", str(src), "-o", str(cub)], stdout=ef, stderr=ef)
            _, status, ru = os.wait4(pr.pid, 0)
            pr.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        err = errf.read_text()
        out = {"rc": pr.returncode, "wall_s": round(wall, 3), "cpu_s": round(ru.ru_utime + ru.ru_stime, 3)}
        if pr.returncode != 0:
            out["error"] = err[-1500:]
            return out
        out["entries"] = parse_v(err)
        if want_sass and cuobjdump:
            from inline_multi_static import _sass_counts
            s = _sass_counts(cub, cuobjdump)
            out["sass"] = {k: v for k, v in s.items() if k in out["entries"]}
    return out


def rewrite(text: str, name: str, isolate: bool, helper) -> tuple[str, dict]:
    from hbfcc.rewrite import rewrite_text
    old = os.environ.get("HBFCC_CALL_ISOLATION")
    os.environ["HBFCC_CALL_ISOLATION"] = "1" if isolate else "0"
    try:
        r = rewrite_text(text, filename=name, helper=helper)
    finally:
        if old is None:
            os.environ.pop("HBFCC_CALL_ISOLATION", None)
        else:
            os.environ["HBFCC_CALL_ISOLATION"] = old
    return r.text, r.meta


def threads_of(text: str, default: int) -> dict[str, tuple[int, bool]]:
    """Each entry's declared block size (.reqntid/.maxntid), else ``default`` (flagged False)."""
    from hbfcc.occupancy import _threads
    from hbfcc.ptx import parse_module
    out = {}
    for f in parse_module(text).entries():
        t = _threads(f)
        out[f.name] = (t, True) if t else (default, False)
    return out


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matrix-ptx", default="", help="the quick matrix's Triton PTX (inline_multi_static --export-ptx)")
    ap.add_argument("--only", default="", help="comma list of name prefixes (triton/, cuda/, matrix/, triton/argmax)")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--default-threads", type=int, default=256)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from hbfcc import helpers as H
    from hbfcc.occupancy import blocks_per_sm
    cuobjdump = shutil.which("cuobjdump") or next(   # else Triton's (bench/inline_multi_static.py)
        (str(p) for p in Path(sys.prefix).glob("lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump")), "")
    real, stub = H.load_helper(), H.stub_helper()
    mods = corpus(a.matrix_ptx, a.only)
    jobs: dict[tuple[str, str], cf.Future] = {}
    res: dict = {"arch": a.arch, "helper": real.path, "default_threads": a.default_threads, "modules": {}}
    t0 = time.time()
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        for name, path in mods.items():
            text = path.read_text()
            rec: dict = {"threads": threads_of(text, a.default_threads)}
            jobs[(name, "plain")] = ex.submit(assemble, text, a.arch, cuobjdump, True)
            for b in BUILDS:
                t, meta = rewrite(text, name, b.endswith("on"), stub if b.startswith("stub") else real)
                if b == "on":
                    rec["isolation"] = meta.get("call_isolation", {})
                jobs[(name, b)] = ex.submit(assemble, t, a.arch, cuobjdump, b in ("off", "on"))
            res["modules"][name] = rec
        for (name, b), fut in jobs.items():
            res["modules"][name][b] = fut.result()
            log.info("%s %s: %s", name, b, {k: v for k, v in res["modules"][name][b].items() if k != "sass"})
    res["seconds"] = round(time.time() - t0, 1)
    res["rows"] = rows(res, blocks_per_sm)
    res["summary"] = summary(res["rows"], res["modules"])
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    log.info("summary: %s", json.dumps(res["summary"], indent=1))
    return 0


def rows(res: dict, blocks_per_sm) -> list[dict]:
    out = []
    for name, m in res["modules"].items():
        for e, (threads, declared) in m["threads"].items():
            r = {"module": name, "entry": e, "threads": threads, "threads_declared": declared}
            for b in ("plain",) + BUILDS:
                st = (m.get(b) or {}).get("entries", {}).get(e)
                if not st:
                    r[b] = None
                    continue
                r[b] = {"registers": st.get("registers"), "stack": st.get("stack"),
                        "spill_stores": st.get("spill_stores"), "spill_loads": st.get("spill_loads"),
                        "blocks_per_sm": blocks_per_sm(st.get("registers") or 1, threads)}
                s = (m.get(b) or {}).get("sass", {}).get(e)
                if s is not None:
                    r[b]["sass"] = s
            iso = (m.get("isolation") or {}).get(e)
            r["isolation"] = iso
            out.append(r)
    return out


def summary(rs: list[dict], modules: dict) -> dict:
    ok = [r for r in rs if r["off"] and r["on"]]
    rose = [(r["module"], r["entry"], r["off"]["registers"], r["on"]["registers"]) for r in ok
            if r["on"]["registers"] > r["off"]["registers"]]
    fell = [r for r in ok if r["on"]["registers"] < r["off"]["registers"]]
    bl_up = [r for r in ok if r["on"]["blocks_per_sm"] > r["off"]["blocks_per_sm"]]
    bl_dn = [(r["module"], r["entry"]) for r in ok if r["on"]["blocks_per_sm"] < r["off"]["blocks_per_sm"]]
    failed = [f"{n}:{b}" for n, m in modules.items() for b in ("plain",) + BUILDS if (m.get(b) or {}).get("rc")]
    cpu_off = sum((m.get("off") or {}).get("cpu_s", 0) for m in modules.values())
    cpu_on = sum((m.get("on") or {}).get("cpu_s", 0) for m in modules.values())

    def med(k, b):
        v = [r[b][k] for r in ok if r.get(b) and r[b].get(k) is not None]
        return statistics.median(v) if v else None
    return {"entries": len(rs), "compared": len(ok), "registers_rose": rose, "registers_fell": len(fell),
            "blocks_per_sm_rose": len(bl_up), "blocks_per_sm_fell": bl_dn, "assembly_failed": failed,
            "median_registers": {b: med("registers", b) for b in ("plain",) + BUILDS},
            "sum_registers": {b: sum(r[b]["registers"] for r in ok if r.get(b)) for b in ("plain",) + BUILDS},
            "ptxas_cpu_s": {"off": round(cpu_off, 1), "on": round(cpu_on, 1)}}


if __name__ == "__main__":
    sys.exit(main())
