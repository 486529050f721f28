#!/usr/bin/env python3
"""Issue 17 item 2 for the inline issue path: does the live activity see a running kernel's INLINE requests?

The inline path (docs/design.md §3.3) counts each thread's requests in registers. Before helper ABI 7 they reached the
kernel's counter shards -- which the device's live-activity publisher sums (§3.1) -- only at the thread's exit, so a
persistent kernel served inline was invisible to hbfd's energy bins (and the thermal model) until it ended. Since
ABI 7 (``HBFCC_INLINE_LIVE=1``, the default) a thread also flushes them where it asks ``__hb_inline_until_live`` for
its next until (about once per activity period).

One FIXED-source persistent kernel (``live_gs``: one block per SM, every thread a grid-stride walk over a 64 MiB
registered TIMING range, ``--iters`` loads each waited at its use, ~``--target-s`` seconds at ``--read-ns``), built
by hbfcc as nvcc twice -- ``on`` (``HBFCC_INLINE_LIVE=1``) and ``off`` (``=0``, the code of before) -- and run under
one hbfd (fixed engine) and one session. While each kernel runs the host reads the control region's live activity
section (``hbfcommon.ctl.read_activity``, no CUDA call) every ~5 ms. Checks per build (from the record):

* ``inline_served``: the kernel's counters after it (synchronize): inline_requests >= 90 % of its load requests;
* ``on``: the live load requests at half the kernel's bulk time are >= 30 % of its final load requests (they grow
  during the kernel); ``off``: at 90 % of the bulk time they are <= 5 % (flat until exit: the gap this closes). The
  bulk time ends at the first sample holding 90 % of the final count (else at the end of the busy samples), so a
  tail of slow threads after the bulk's exit does not move the checks past it.

    python3 bench/live_inline.py --out $OUT/li                 # one device call, ~1-2 min (two hbfcc nvcc builds)
    python3 bench/live_inline.py --cpu-check --out DIR         # no GPU: both builds, what each calls, registers

Writes ``<out>/live_inline.json`` (atomic) after the builds, after each kernel and at the end (``status``).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from hbfcc import cubin  # noqa: E402
from hbfcc.toolchain import cli_wrapper  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

KERNEL = "live_gs"
SOURCE = r'''
// issue 17 item 2: a persistent grid-stride kernel, every load waited at its use (the inline path's case)
extern "C" __global__ void live_gs(const float* __restrict__ x, float* __restrict__ out, long long n, long long iters) {
    const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = tid % n;
    float s = 0.0f;
    for (long long k = 0; k < iters; ++k) {
        s += x[i];
        i += stride;
        if (i >= n) i -= n;
    }
    out[tid] = s;
}
'''
VARIANTS = {"off": "0", "on": "1"}          # HBFCC_INLINE_LIVE per build


def build(work: Path) -> dict:
    """hbfcc as nvcc, -cubin, once per HBFCC_INLINE_LIVE value; which until helper each build's kernel calls."""
    d = work / "build"
    d.mkdir(parents=True, exist_ok=True)
    src = d / "live_gs.cu"
    src.write_text(SOURCE)
    wrap = cli_wrapper(d / "hbfcc")
    out: dict = {}
    for v, knob in VARIANTS.items():
        cub = d / f"live_gs_{v}.cubin"
        env = dict(os.environ, HBFCC_INLINE_LIVE=knob, HBFCC_DUMP_DIR=str(d / f"dump_{v}"))
        for k in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"):
            env.pop(k, None)
        t = time.time()
        r = subprocess.run([str(wrap), "-arch=sm_90a", "-O3", "-cubin", str(src), "-o", str(cub)], cwd=d, env=env,
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0 or not cub.is_file():
            return {"error": f"{v} build failed (rc {r.returncode}): {(r.stderr or r.stdout)[-2000:]}"}
        raw = cub.read_bytes()
        art = Path(str(cub) + ".hbfcc.json")
        facts = cubin.function_facts(cub).get(KERNEL)
        out[v] = {"cubin": str(cub), "artifact": str(art) if art.is_file() else None, "seconds": round(time.time() - t, 1),
                  "calls_until_live": b"__hb_inline_until_live" in raw, "calls_issue": b"__hb_issue" in raw,
                  "registers": facts.registers if facts else None,
                  "frame_bytes": facts.frame_bytes if facts else None}
    return out


def _bind(s, v: dict):
    """The hbfcc cubin bound with its artifact (its sm_90a module document when the path binds nothing)."""
    from runtime_cuda import cudrv
    import devpath_common as DC
    mod = cudrv.module_load_data(Path(v["cubin"]).read_bytes())
    b = s.bind_module(mod, artifact=v["artifact"])
    if not b.kernels and v.get("artifact"):
        doc = DC.nvcc_module_doc(json.loads(Path(v["artifact"]).read_text()))
        if doc is not None:
            b = s.bind_module(mod, artifact=doc)
    f = cudrv.module_function(mod, KERNEL)
    s.note_function(f, b, KERNEL)
    return f, sorted(b.kernels)


def _kc(s) -> dict:
    k = s.counters(publish=False)["kernels"].get(KERNEL) or {}
    ld = (k.get("ops") or {}).get("load") or {}
    return {"load_requests": int(ld.get("requests", 0)), "load_bytes": int(ld.get("bytes", 0)),
            "inline_requests": int(k.get("inline_requests", 0))}


def run_one(s, f, args, x: int, out: int, n: int) -> dict:  # pragma: no cover - needs a GPU
    from hbfcommon import ctl as C
    from hbfcommon.errors import ControlRegionError
    from runtime_cuda import cudrv
    d = cudrv.drv()
    b0 = _kc(s)
    try:
        a0 = C.read_activity(s.ctl.ctl)
    except ControlRegionError:
        a0 = C.Activity.zero()
    rows, last = [], a0
    t0 = time.monotonic()
    s.launch(f, (args.blocks,), (args.threads,),
             [ctypes.c_uint64(x), ctypes.c_uint64(out), ctypes.c_int64(n), ctypes.c_int64(args.iters)], kernel=KERNEL)
    while True:
        q = d.cuStreamQuery(d.CUstream(0))
        busy = int(q[0] if isinstance(q, tuple) else q) == int(d.CUresult.CUDA_ERROR_NOT_READY)
        try:
            a, unsettled = C.read_activity(s.ctl.ctl), False
        except ControlRegionError:             # a publication in flight through the read (design §3.1): keep the last
            a, unsettled = last, True
        last = a
        rows.append({"t_s": round(time.monotonic() - t0, 4), "busy": busy,
                     "live_load_requests": a.requests[C.HBF_OP_LOAD] - a0.requests[C.HBF_OP_LOAD],
                     "live_load_bytes": a.bytes[C.HBF_OP_LOAD] - a0.bytes[C.HBF_OP_LOAD],
                     "live_flushes": a.flushes - a0.flushes, "unsettled": unsettled})
        if not busy or time.monotonic() - t0 > args.max_s:
            break
        time.sleep(0.005)
    s.synchronize()
    wall = time.monotonic() - t0
    b1 = _kc(s)
    return {"wall_s": round(wall, 3), "ended_by": "stream idle" if not rows[-1]["busy"] else f"--max-s {args.max_s}",
            "counters": {k: b1[k] - b0[k] for k in b1}, "trace": rows}


def evaluate(v: str, r: dict) -> dict:
    """The checks of one build's run, from its record alone."""
    c = r["counters"]
    busy = [x for x in r["trace"] if x["busy"]]
    fin = max(c["load_requests"], 1)
    checks = {"inline_served": {"ok": c["inline_requests"] >= 0.9 * c["load_requests"] > 0,
                                "why": f"inline {c['inline_requests']} of {c['load_requests']} load requests"}}
    if not busy:
        checks["live"] = {"ok": False, "why": "no sample while the kernel was busy"}
        return checks
    # the time base is the bulk's end: the first sample where the live count holds 90 % of the final (else the busy
    # end). A kernel whose bulk ends early and whose last threads run on (the H100's 2 us run of stop 45: a ~1 s tail
    # of 350 k general-path requests after the bulk's exit at ~1.0 s) would otherwise put "90 % of the busy time"
    # after the exit flush of the build without live counters.
    reach = next((x["t_s"] for x in busy if x["live_load_requests"] >= 0.9 * fin), None)
    t_end = reach if reach is not None else busy[-1]["t_s"]

    def at(frac: float) -> int:
        return max((x["live_load_requests"] for x in busy if x["t_s"] <= frac * t_end), default=0)
    half, late = at(0.5), at(0.9)
    if v == "on":
        checks["live"] = {"ok": half >= 0.3 * fin,
                          "why": f"live load requests at half the bulk time {half} = {half / fin:.3f} of the final {fin} "
                                 "(>= 0.3: the inline requests reach the live activity while the kernel runs)"}
    else:
        checks["live"] = {"ok": late <= 0.05 * fin,
                          "why": f"live load requests at 90 % of the bulk time {late} = {late / fin:.3f} of the final "
                                 f"{fin} (<= 0.05: without the flush the inline requests wait for the exit)"}
    return checks


def gpu_run(args, res: dict, save) -> None:  # pragma: no cover - needs a GPU
    import runtime_cuda
    from runtime_cuda import cudrv
    from runtime_triton import derived_profile, start_hbfd
    tmp = Path(tempfile.mkdtemp(prefix="hbf-liveinl-"))
    prof = derived_profile(tmp / "profile.json", "fixed")
    d = json.loads(prof.read_text())
    for k in ("read_ns", "write_ns"):
        d["timing_model"]["fixed"][k] = {"value": int(args.read_ns), "provenance": "assumed",
                                        "source": f"bench/live_inline.py: fixed {args.read_ns} ns"}
    prof.write_text(json.dumps(d, indent=1))
    hb = start_hbfd(tmp, prof)
    try:
        s = runtime_cuda.attach(socket=str(hb.socket))
        n = (64 << 20) // 4
        x = cudrv.mem_alloc(n * 4)
        cudrv.check(cudrv.drv().cuMemsetD8(x, 1, n * 4), "memset")
        s.register_timing_range(x, n * 4, label="live-inline")
        out = cudrv.mem_alloc(args.blocks * args.threads * 4)
        res["runs"] = {}
        for v in args.order.split(","):
            f, bound = _bind(s, res["build"][v])
            log(f"{v}: launching ({args.blocks} x {args.threads}, {args.iters} iterations at {args.read_ns} ns)")
            r = run_one(s, f, args, x, out, n)
            r["bound"] = bound
            r["checks"] = evaluate(v, r)
            res["runs"][v] = r
            log(f"{v}: {r['wall_s']} s, {r['counters']}, " + "; ".join(f"{k} {c['ok']}: {c['why']}"
                                                                         for k, c in r["checks"].items()))
            save(f"{v} done")
        s.close()
    finally:
        hb.stop()


_log = logging.getLogger("live_inline")


def log(msg: str) -> None:
    _log.info("%s", msg)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=None)
    ap.add_argument("--cpu-check", action="store_true", help="build both, say what each calls; no GPU")
    ap.add_argument("--read-ns", type=int, default=2000, help="the FIXED source's read service (ns)")
    ap.add_argument("--target-s", type=float, default=3.0, help="modeled kernel length: iters = target / read")
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--blocks", type=int, default=132, help="one block per SM (H100/H200 SXM: 132): persistent")
    ap.add_argument("--threads", type=int, default=256)
    ap.add_argument("--max-s", type=float, default=60.0, help="stop sampling after this (the kernel is not stopped)")
    ap.add_argument("--order", default="off,on")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[live_inline] %(message)s")
    if args.iters is None:
        args.iters = max(1, int(args.target_s * 1e9 / max(args.read_ns, 1)))
    if args.read_ns <= 0 or args.iters <= 0 or args.blocks <= 0 or args.threads <= 0:
        raise SystemExit("--read-ns, --iters, --blocks and --threads must be > 0")
    outd = Path(args.out)
    outd.mkdir(parents=True, exist_ok=True)
    path = outd / "live_inline.json"
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="hbf-liveinl-w."))
    res: dict = {"experiment": "live_inline", "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv),
                 "args": vars(args), "status": "building"}

    def save(status: str) -> None:
        res["status"] = status
        atomic_write_json(path, res, indent=1)
    save("building")
    res["build"] = build(work)
    if "error" in res["build"]:
        save("build failed")
        log(res["build"]["error"])
        return 2
    b = res["build"]
    res["build_checks"] = {"on_calls_until_live": b["on"]["calls_until_live"],
                           "off_calls_until_live": b["off"]["calls_until_live"]}
    log(f"built: {json.dumps(res['build_checks'])}")
    if args.cpu_check:
        res["card"] = "CPU"
        save("cpu check done")
        return 0 if b["on"]["calls_until_live"] and not b["off"]["calls_until_live"] else 1
    try:
        res["card"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                     capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        res["card"] = f"unknown ({type(e).__name__})"
    save("built")
    try:
        gpu_run(args, res, save)
    except Exception as e:  # noqa: BLE001
        res["error"] = f"{type(e).__name__}: {e}"
        save("failed")
        raise
    ok = all(c["ok"] for r in res["runs"].values() for c in r["checks"].values())
    res["verdict"] = "ok" if ok else "checks failed"
    save("done")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
