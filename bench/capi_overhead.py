#!/usr/bin/env python3
"""What the C/C++ host API costs on top of the Python session it wraps (issue 18 item 1; CPU, no CUDA).

libhbfsim runs runtime_cuda's session in an embedded interpreter (docs/design.md §3.11). This measures,
against a real hbfd (nominal profile, no thermal model), the C program tests/capi/c_prog (``capi_c timing``:
the first hbfsim_attach, i.e. interpreter start + import + Attach RPC; then per call hbfsim_counters_get,
hbfsim_register_timing_range + hbfsim_unregister_range, hbfsim_synchronize; hbfsim_detach), in ``--procs``
processes of ``--reps`` calls each, and the same calls made directly from Python (runtime_cuda.capi's
functions; its attach includes importing the session), each in a fresh Python process, the C and Python
processes interleaved (the daemon's state drifts with every registration). Every call is control plane (none
is on a kernel's path).

    python3 bench/capi_overhead.py [--reps 200] [--procs 5] [--out bench/results/capi_overhead.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

METRICS = ("counters_ns", "register_unregister_ns", "synchronize_ns")


def _stats(xs: list[int]) -> dict:
    s = sorted(xs)
    q = lambda f: s[min(len(s) - 1, int(f * len(s)))]  # noqa: E731
    return {"median": statistics.median(s), "p10": q(0.10), "p90": q(0.90), "n": len(s)}


def _env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    return e


def build(work: Path) -> Path:
    from runtime_cuda.capi import cmake_dir  # noqa: PLC0415
    b = work / "build"
    for argv in (["cmake", "-S", REPO / "tests" / "capi" / "c_prog", "-B", b, f"-Dhbfsim_DIR={cmake_dir()}",
                  f"-DPython3_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"],
                 ["cmake", "--build", b, "-j2"]):
        subprocess.run([str(a) for a in argv], check=True, capture_output=True, env=_env(), timeout=300)
    return b / "capi_c"


def c_proc(prog: Path, sock: str, reps: int, vals: dict[str, list[int]]) -> None:
    cp = subprocess.run([str(prog), "timing", sock, str(reps)], capture_output=True, text=True, env=_env(),
                        timeout=300, check=True)
    for line in cp.stdout.splitlines():
        k, _, v = line.partition(" ")
        if k in vals:
            vals[k].append(int(v))


def py_proc(sock: str, reps: int, vals: dict[str, list[int]]) -> None:
    code = (f"import json, sys; sys.path.insert(0, {str(REPO / 'bench')!r}); import capi_overhead as B; "
            f"print(json.dumps(B.py_side({sock!r}, {reps})))")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300,
                        check=True)
    for k, v in json.loads(cp.stdout.strip().splitlines()[-1]).items():
        vals.setdefault(k, []).extend(v)


def py_side(sock: str, reps: int) -> dict[str, list[int]]:
    from runtime_cuda import capi  # noqa: PLC0415
    buf = bytearray(4096)
    import ctypes  # noqa: PLC0415
    addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
    t = time.perf_counter_ns()
    s = capi.attach(sock, capi.ATTACH_NO_CUDA)
    out = {"attach_ns": [time.perf_counter_ns() - t]}
    calls = {"counters_ns": lambda: capi.counters(s),
             "register_unregister_ns": lambda: capi.unregister(s, capi.register_timing_range(s, addr, 4096, 0, "t")[0]),
             "synchronize_ns": lambda: capi.synchronize(s)}
    for k, fn in calls.items():
        out[k] = []
        for _ in range(reps):
            t = time.perf_counter_ns()
            fn()
            out[k].append(time.perf_counter_ns() - t)
    capi.detach(s)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200, help="calls of each kind per process")
    ap.add_argument("--procs", type=int, default=5, help="C processes (each one first attach)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "capi_overhead.json"))
    a = ap.parse_args(argv)
    if a.reps <= 0 or a.procs <= 0:
        ap.error("--reps and --procs must be > 0")
    if shutil.which("cmake") is None:
        ap.error("cmake is not installed")
    from hbfd.runner import start_daemon  # noqa: PLC0415
    work = Path(tempfile.mkdtemp(prefix="capi_overhead."))
    try:
        prog = build(work)
        with start_daemon("nominal", workdir=work / "hbfd", env={"HBFD_THERMAL": "none"}, pythonpath=[REPO],
                          timeout_s=120.0) as d:
            cv: dict[str, list[int]] = {k: [] for k in ("first_attach_ns", "detach_ns", *METRICS)}
            pv: dict[str, list[int]] = {}
            for _ in range(a.procs):
                c_proc(prog, str(d.socket), a.reps, cv)
                py_proc(str(d.socket), a.reps, pv)
        c = {k: _stats(v) for k, v in cv.items()}
        py = {k: _stats(v) for k, v in pv.items()}
        res = {"what": "C API call costs vs the same calls from Python (no CUDA)", "date": time.strftime("%Y-%m-%d"),
               "card": "CPU (this 2-core box)", "command": " ".join(["python3", *sys.argv]), "reps": a.reps,
               "procs": a.procs, "c": c, "python": py,
               "c_minus_python_median_ns": {k: c[k]["median"] - py[k]["median"] for k in METRICS}}
        atomic_write_json(a.out, res, indent=1, end="\n")
        for k in ("first_attach_ns", "detach_ns", *METRICS):
            print(f"{k:24s} C median {c[k]['median'] / 1e3:10.1f} us (p10 {c[k]['p10'] / 1e3:.1f}, p90 "
                  f"{c[k]['p90'] / 1e3:.1f})" + (f"   Python {py[k]['median'] / 1e3:10.1f} us" if k in py else ""))
        print(f"python attach (import + Attach RPC) {py['attach_ns']['median'] / 1e3:.1f} us; wrote {a.out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
