#!/usr/bin/env python3
"""Thermal q on the GPU, fixed and reference timing sources, driven through hbfd's thermal service.

    PYTHONUNBUFFERED=1 python3 bench/runtime_thermal_q.py [--out DIR]

hbfd runs with HBFD_THERMAL=hbfd.thermal.override:make_service (the operator/test override over no
thermal model; docs/runtime.md "Thermal q"), HBFD_ENGINE=fixed (the reference path then serves every
load in exactly the profile's fixed read_ns, so the scaling can be checked to the nanosecond),
HBFD_REFRESH=none (no refresh service added to a request), 2 ms control ticks. The override is set
with the Report RPC (kind thermal_override), i.e. what `hbfctl thermal-override Light --q-ppm Q` sends,
and the bench waits until hbfd has published it in the control region before it launches.

Kernel: rate_instr of workloads/microbench/hbf_microbench.cu (helpers called directly, linked with the
helper PTX): one load request per warp per iteration, each waited before the next.

Per source (its own process and hbfd):
* q in {1e6, 5e5, 2.5e5}: modeled_ns of the launch == requests x ceil(s x 1e6 / q), s = read_ns
  (device: the helper scales at issue; reference: q travels in hbf_request.thermal_q_ppm and the waiter
  scales hbfd's modeled_ns once); per-request ratio vs q = 1e6;
* Severe: a launch made while Severe is published does not complete (stream still busy after 150 ms,
  kernel counter thermal_waits > 0), then completes after the override is cleared;
* Shutdown (own process): Shutdown published while a long kernel runs -> the kernel ends with
  THERMAL_SHUTDOWN (device failure word), hbfd's summary terminal_status thermal_shutdown.

Writes <out>/runtime_thermal_q.json. Exit 0 when every check passed.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from runtime_triton import derived_profile, log, run_child, start_hbfd  # noqa: E402

QS = (1_000_000, 500_000, 250_000)
HBFD_ENV = {"HBFD_THERMAL": "hbfd.thermal.override:make_service", "HBFD_ENGINE": "fixed", "HBFD_REFRESH": "none",
            "HBFD_THERMAL_TICK_NS": "2000000"}


def ceil_scale(s: int, q: int) -> int:
    return -((-s * 1_000_000) // q)


def set_override(s, ov: dict, timeout: float = 5.0) -> float:
    """Send the override, wait until hbfd publishes it in the control region; returns the wait (s)."""
    from hbfcommon import ctl as C
    s.client.call("Report", s.client.pb.ReportRequest(kind="thermal_override", json=json.dumps(ov)))
    mode = {"Normal": C.HBF_TH_NORMAL, "Light": C.HBF_TH_LIGHT, "Severe": C.HBF_TH_SEVERE,
            "Shutdown": C.HBF_TH_SHUTDOWN}[ov.get("mode", "Normal")]
    th = s.ctl.ctl.thermal
    t = time.time()
    while time.time() - t < timeout:
        if int(th.mode) == mode and ("q_ppm" not in ov or int(th.q_ppm) == ov["q_ppm"]):
            time.sleep(0.005)   # > thermal_max_age_ns (1 ms): the device re-reads the snapshot
            return time.time() - t
        time.sleep(0.001)
    raise RuntimeError(f"override {ov} not published within {timeout} s (mode {int(th.mode)}, q {int(th.q_ppm)})")


def bind_microbench(s, cubin: str):
    from runtime_cuda import cudrv
    mod = cudrv.module_load_data(Path(cubin).read_bytes())
    names = ("stream_instr", "probe_instr", "sem_instr", "rate_instr")   # kernel index = ENTER<I>(i)
    art = {"kernels": [{"name": n, "admitted": True, "reasons": []} for n in names],
           "note": "hand-instrumented microbench kernels (helpers called directly), not an hbfcc artifact"}
    b = s.bind_module(mod, artifact=art)
    f = cudrv.module_function(mod, "rate_instr")
    s.note_function(f, b, "rate_instr")
    return f


def rate_args(buf: int, nwords: int, out: int, iters: int):
    return [ctypes.c_uint64(buf), ctypes.c_uint64(nwords), ctypes.c_uint64(out), ctypes.c_int32(iters)]


def timed_launch(s, f, grid, block, args) -> float:
    """Kernel time (ms) between two CUDA events (driver API) around the session's launch."""
    from runtime_cuda import cudrv
    d = cudrv.drv()
    e0 = cudrv.check(d.cuEventCreate(0), "cuEventCreate")
    e1 = cudrv.check(d.cuEventCreate(0), "cuEventCreate")
    cudrv.check(d.cuEventRecord(e0, d.CUstream(0)), "cuEventRecord")
    s.launch(f, grid, block, args, kernel="rate_instr")
    cudrv.check(d.cuEventRecord(e1, d.CUstream(0)), "cuEventRecord")
    s.synchronize()
    ms = float(cudrv.check(d.cuEventElapsedTime(e0, e1), "cuEventElapsedTime"))
    d.cuEventDestroy(e0)
    d.cuEventDestroy(e1)
    return ms


def kc(s) -> dict:
    return s.counters(publish=False)["kernels"]["rate_instr"]


def child_q(source: str) -> dict:
    import runtime_cuda
    from runtime_cuda import cudrv
    tmp = Path(tempfile.mkdtemp(prefix=f"hbf-thq-{source}-"))
    prof = derived_profile(tmp / "profile.json", source)
    hb = start_hbfd(tmp, prof, HBFD_ENV)
    res: dict = {"source": source}
    checks: dict = {}
    try:
        s = runtime_cuda.attach(socket=str(hb.socket))
        st = s.client.call("Status", s.client.pb.StatusRequest())
        res["hbfd"] = {"engine": st.engine, "timing_source": st.timing_source, "thermal_mode": st.thermal_mode}
        read_ns = int(json.loads(prof.read_text())["timing_model"]["fixed"]["read_ns"]["value"])
        res["read_ns"] = read_ns
        f = bind_microbench(s, os.environ["HBF_BENCH_CUBIN"])
        nwords = (16 << 20) // 4
        buf = cudrv.mem_alloc(nwords * 4)
        cudrv.check(cudrv.drv().cuMemsetD8(buf, 1, nwords * 4), "memset")
        s.register_timing_range(buf, nwords * 4, label="thermal-q")
        blocks, threads, iters = 66, 128, 8
        out = cudrv.mem_alloc(blocks * threads * 4)
        rows = []
        for q in QS:
            ov = {"mode": "Normal"} if q == 1_000_000 else {"mode": "Light", "q_ppm": q}
            w = set_override(s, ov)
            b0 = kc(s)
            t = time.perf_counter()
            ev_ms = timed_launch(s, f, (blocks,), (threads,), rate_args(buf, nwords, out, iters))
            el = time.perf_counter() - t
            b1 = kc(s)
            req = b1["ops"]["load"]["requests"] - b0["ops"]["load"]["requests"]
            mod = b1["ops"]["load"]["modeled_ns"] - b0["ops"]["load"]["modeled_ns"]
            wall = b1["wait_wall_ns"] - b0["wait_wall_ns"]
            calls = b1["wait_calls"] - b0["wait_calls"]
            exp = ceil_scale(read_ns, q)
            rows.append({"q_ppm": q, "mode": ov["mode"], "published_after_s": round(w, 4), "requests": req,
                         "expected_requests": blocks * threads // 32 * iters, "modeled_ns": mod,
                         "modeled_per_request": mod / req if req else None, "expected_per_request": exp,
                         "exact": mod == req * exp, "wait_wall_per_call_ns": wall / calls if calls else None,
                         "issue_overhead_per_request_ns": (b1["ops"]["load"]["overhead_ns"] - b0["ops"]["load"]["overhead_ns"]) / req if req else None,
                         "kernel_ms_events": ev_ms, "kernel_ms_floor": iters * exp / 1e6,
                         "wait_calls": calls, "thermal_waits": b1["thermal_waits"] - b0["thermal_waits"],
                         "kernel_s": round(el, 4)})
            log(f"{source} q={q}: {rows[-1]['modeled_per_request']} ns/request (expected {exp})")
        base = rows[0]["modeled_per_request"]
        for r in rows:
            r["ratio_vs_q1e6"] = r["modeled_per_request"] / base if base else None
            r["expected_ratio"] = ceil_scale(read_ns, r["q_ppm"]) / read_ns
        res["q_rows"] = rows
        checks["modeled_scales_exactly"] = all(r["exact"] and r["requests"] == r["expected_requests"] for r in rows)
        checks["no_admission_waits_normal_light"] = all(r["thermal_waits"] == 0 for r in rows)
        # Severe: admission withheld until the override is cleared
        set_override(s, {"mode": "Severe"})
        b0 = kc(s)
        s.launch(f, (blocks,), (threads,), rate_args(buf, nwords, out, 2), kernel="rate_instr")
        time.sleep(0.15)
        q = cudrv.drv().cuStreamQuery(cudrv.drv().CUstream(0))
        busy = int(q[0] if isinstance(q, tuple) else q) == int(cudrv.drv().CUresult.CUDA_ERROR_NOT_READY)
        t_clear = time.perf_counter()
        set_override(s, {"mode": "Normal"})
        s.synchronize()
        after_clear = time.perf_counter() - t_clear
        b1 = kc(s)
        req = b1["ops"]["load"]["requests"] - b0["ops"]["load"]["requests"]
        mod = b1["ops"]["load"]["modeled_ns"] - b0["ops"]["load"]["modeled_ns"]
        sev = {"busy_after_150ms": busy, "completed_after_clear_s": round(after_clear, 4),
               "thermal_waits": b1["thermal_waits"] - b0["thermal_waits"],
               "thermal_wait_ns_total": b1["thermal_wait_ns"] - b0["thermal_wait_ns"],
               "requests": req, "modeled_per_request": mod / req if req else None}
        res["severe"] = sev
        checks["severe_withholds_admission"] = busy and sev["thermal_waits"] > 0 and req == blocks * threads // 32 * 2
        checks["after_severe_full_rate"] = mod == req * read_ns
        s.close()
        with hb.client(timeout_s=40.0) as c:
            c.call("Shutdown", reason="bench done")
        hb.wait(30)
        doc = hb.read_summary()
        th = doc["services"]["thermal"]
        res["summary_thermal"] = {"service": th.get("service"), "history": th.get("operator_override", {}).get("history"),
                                  "terminal_status": doc.get("terminal_status")}
        checks["summary_names_override"] = th.get("service") == "operator-override(none)"
    finally:
        hb.stop()
    res["checks"] = checks
    res["ok"] = bool(checks) and all(checks.values())
    return res


def child_shutdown(source: str) -> dict:
    import runtime_cuda
    from runtime_cuda import cudrv
    from runtime_cuda import devstate as D
    tmp = Path(tempfile.mkdtemp(prefix=f"hbf-thsd-{source}-"))
    prof = derived_profile(tmp / "profile.json", source)
    hb = start_hbfd(tmp, prof, HBFD_ENV)
    res: dict = {"source": source}
    try:
        s = runtime_cuda.attach(socket=str(hb.socket))
        f = bind_microbench(s, os.environ["HBF_BENCH_CUBIN"])
        nwords = (16 << 20) // 4
        buf = cudrv.mem_alloc(nwords * 4)
        s.register_timing_range(buf, nwords * 4, label="thermal-shutdown")
        out = cudrv.mem_alloc(66 * 128 * 4)
        s.launch(f, (66,), (128,), rate_args(buf, nwords, out, 20_000), kernel="rate_instr")   # ~0.4 s
        time.sleep(0.05)
        q = cudrv.drv().cuStreamQuery(cudrv.drv().CUstream(0))
        res["running_before"] = int(q[0] if isinstance(q, tuple) else q) != 0
        t0 = time.monotonic_ns()
        s.client.call("Report", s.client.pb.ReportRequest(kind="thermal_override", json=json.dumps({"mode": "Shutdown"})))
        h = s.ctl.ctl.header
        seen = None
        while time.monotonic_ns() - t0 < 5_000_000_000:
            if int(h.device_failure) != 0:
                seen = time.monotonic_ns()
                break
        try:
            cudrv.ctx_synchronize()
            res["ended_with"] = "no error (WRONG)"
        except Exception as e:  # noqa: BLE001
            res["ended_with"] = str(e)
        f_ = s.device_failure()
        res["device_failure_status"] = D.C_STATUS_NAMES[f_[0]] if f_ else None
        res["failure_visible_ms"] = (seen - t0) / 1e6 if seen else None
        try:
            hb.wait(30)
        except subprocess.TimeoutExpired:
            pass
        doc = json.loads(hb.summary.read_text()) if hb.summary.exists() else {}
        res["summary_terminal_status"] = doc.get("terminal_status")
        res["summary_shutdown_reason"] = doc.get("shutdown_reason")
    finally:
        hb.stop()
    res["checks"] = {"thermal_shutdown": res.get("device_failure_status") == "THERMAL_SHUTDOWN"
                     and res.get("summary_terminal_status") == "thermal_shutdown" and res.get("running_before", False)}
    res["ok"] = all(res["checks"].values())
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--child", default="")
    ap.add_argument("--only", default="q_fixed,q_reference,shutdown_fixed,shutdown_reference")
    a = ap.parse_args()
    os.environ.setdefault("HBF_COMPLETION_TIMEOUT_NS", "5000000000")
    if a.child:
        kind, source = a.child.split("_", 1)
        try:
            r = child_q(source) if kind == "q" else child_shutdown(source)
        except BaseException as e:  # noqa: BLE001
            r = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:], "ok": False}
        print("CHILD-JSON " + json.dumps(r, default=str), flush=True)
        os._exit(0)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from runtime_cuda import linker
    cubin = str(linker.build_microbench()["cubin"])
    res: dict = {"what": "thermal q on the GPU (fixed + reference sources), Severe, Shutdown via hbfd's operator override",
                 "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                 "command": "python3 bench/runtime_thermal_q.py", "cubin": cubin, "hbfd_env": HBFD_ENV}
    try:
        res["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001
        res["gpu"] = f"nvidia-smi failed: {e}"
    parts = a.only.split(",")
    for w in parts:
        log(f"--- {w}")
        res[w] = run_child(__file__, w, {"HBF_BENCH_CUBIN": cubin}, timeout=90)
        log(f"{w}: ok={res[w].get('ok')} {json.dumps(res[w].get('checks') or res[w].get('error') or res[w].get('stderr_tail'), default=str)[:1200]}")
        (out / "runtime_thermal_q.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    res["ok"] = all(res[w].get("ok") for w in parts)
    (out / "runtime_thermal_q.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    log(f"ok={res['ok']}")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
