#!/usr/bin/env python3
"""runtime_cuda proofs on the GPU, all in one run (each experiment degrades on its own).

    PYTHONUNBUFFERED=1 python3 bench/runtime_proofs.py [--out DIR] [--only a,b]

Kernels: workloads/microbench/hbf_microbench.cu — CUDA C++ test kernels that call the device
helpers (__hb_issue/__hb_wait) DIRECTLY, built with nvcc -rdc -ptx and linked with the helper PTX
(runtime_cuda/ptx/hbf_helpers.ptx) by ptxas -c + nvlink (runtime_cuda/linker.py). Each kernel
has a plain twin with no helper calls. hbfcc-built kernels are not used here.

Device-only experiments (semantic, fidelity, native overhead) use a control region created by
this script (anonymous shared mapping, header filled as hbfd would, registered with CUDA) and a
device state block filled by runtime_cuda.devstate: they exercise the helpers, not hbfd.
Daemon experiments (reference rate, daemon lost, partial overlap + summary, demo) start the real
hbfd (python3 -m hbfd.cli) and go through runtime_cuda.attach().

Writes <out>/runtime_proofs.json; prints one summary line per experiment.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from hbfcommon import ctl as C  # noqa: E402
from hbfd.runner import DaemonProcess, start_daemon  # noqa: E402
from runtime_cuda import cudrv, devstate as D, linker  # noqa: E402

F_LOAD, F_STORE, F_ATOMIC, F_ACTIVE = 0, 1, 2, 4
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------
# Build + device-only harness
# ------------------------------------------------------------------------------------------------
def build() -> dict:
    pre = ROOT / "build" / "microbench" / "hbf_microbench.cubin"
    try:
        info = linker.build_microbench()
        return {k: str(v) for k, v in info.items()} | {"built_here": True}
    except Exception as e:  # noqa: BLE001
        if pre.exists():
            log(f"build failed here ({e}); using the carried cubin")
            return {"cubin": str(pre), "built_here": False, "build_error": str(e)}
        raise


class Harness:
    """One CUDA context, the microbench module, a local control region and a device state block."""

    def __init__(self, cubin: str) -> None:
        self.d = cudrv.drv()
        self.dev, self.ctx = cudrv.init_context(0)
        self.mod = cudrv.module_load_data(Path(cubin).read_bytes())
        self.fn = {n: cudrv.module_function(self.mod, n) for n in
                   ("stream_plain", "stream_instr", "stream_guard", "stream_hoist", "probe_plain", "probe_instr", "sem_plain", "sem_instr",
                    "rate_plain", "rate_instr")}
        self.mm = mmap.mmap(-1, C.CTL_BYTES)
        self.ctl = C.hbf_ctl.from_buffer(self.mm)
        h = self.ctl.header
        h.magic, h.abi_version, h.header_bytes = C.HBF_CTL_MAGIC, C.HBF_CTL_ABI_VERSION, ctypes.sizeof(C.hbf_header)
        h.total_bytes = C.CTL_BYTES
        h.ring_slots, h.max_ranges = C.HBF_RING_SLOTS, C.HBF_MAX_RANGES
        h.heartbeat = 1
        self.set_thermal(C.HBF_TH_NORMAL, 1_000_000, 1)
        self.host = ctypes.addressof(self.ctl)
        self.ctl_dev = cudrv.host_register(self.host, C.CTL_BYTES)
        self.ptr_equal = self.ctl_dev == self.host
        self.media = C.hbf_media_params()
        m = self.media
        m.timing_source, m.page_bytes, m.read_granularity, m.write_granularity = C.HBF_SRC_FIXED, 4096, 64, 4096
        m.channels, m.dies_per_channel, m.planes_per_die = 16, 8, 4
        m.t_read_ns, m.t_prog_ns, m.channel_bytes_per_s = 20_000, 200_000, 3_200_000_000
        m.fixed_read_ns, m.fixed_write_ns = 2_000, 3_000
        self.params = D.RunParams()
        self.state = D.new_state(self.ctl_dev, m, self.params)
        self.sptr = cudrv.mem_alloc(D.STATE_BYTES)
        self.g_state = cudrv.module_global(self.mod, "__hb_state")[0]
        self.g_kslot = cudrv.module_global(self.mod, "__hb_kslot_base")[0]
        cudrv.htod(self.g_kslot, ctypes.c_uint32(0), 4)
        cd = cudrv.module_global(self.mod, "__hb_cdesc")
        self.g_cdesc = cd[0] if cd is not None and cd[1] >= D.CDESC_BYTES else 0
        self.extra_cdesc: list[tuple[int, int]] = []   # (descriptor address, counter slot base) of bind_cdesc
        self.upload()                            # the block and the module's descriptor
        self.attach(True)

    def calibrate(self, buf: int, delay_ns: int = 20_000, n: int = 256) -> dict:
        """Measure the deadline bias with this harness's probe: an independent run of n accesses at a
        fixed delay with bias 0, median of (first use - issue) - delay (runtime_cuda.calibrate.bias_from_rows,
        which refuses early completions). The caller applies it (set_bias). On the H200 (run 4)
        runtime_cuda.calibrate.measure_on_device read back an invalid request count, so the bench does
        not depend on it."""
        from runtime_cuda import calibrate as CAL
        self.set_bias(0)
        self.configure([rng(buf, 64 * 4096)], C.HBF_SRC_FIXED, fixed_read_ns=delay_ns)
        return CAL.bias_from_rows(probe(self, 0, n, buf), delay_ns).as_dict()

    def set_bias(self, bias_ns: int) -> None:
        """deadline_bias_ns for the following configure()/upload() (whole-block uploads)."""
        self.state.deadline_bias_ns = int(bias_ns)
        self.upload()

    def set_thermal(self, mode: int, q: int, adm: int) -> None:
        t = self.ctl.thermal

        def fill():
            t.mode, t.q_ppm, t.admission_open = mode, q, adm
        C.seqlock_write(t, fill)

    def attach(self, on: bool) -> None:
        cudrv.htod(self.g_state, ctypes.c_uint64(self.sptr if on else 0), 8)

    def upload(self) -> None:
        """Whole block: also zeroes counters, tails, the thermal cache and the failure word."""
        cudrv.ctx_synchronize()
        self.state.thermal_cache = 0
        cudrv.htod(self.sptr, self.state, D.STATE_BYTES)
        # every module's launch descriptor follows the block (as the runtime does)
        for addr, kbase in [(self.g_cdesc, 0)] + self.extra_cdesc:
            if addr:
                cudrv.htod(addr, D.cdesc_for(self.state, self.sptr, kbase), D.CDESC_BYTES)

    def bind_cdesc(self, module, kbase: int) -> None:
        """Another module bound to this state (counter slots from kbase): its descriptor is kept current."""
        cd = cudrv.module_global(module, "__hb_cdesc")
        if cd is not None and cd[1] >= D.CDESC_BYTES:
            self.extra_cdesc.append((cd[0], kbase))
            cudrv.htod(cd[0], D.cdesc_for(self.state, self.sptr, kbase), D.CDESC_BYTES)   # the block is unchanged

    def configure(self, ranges, source=C.HBF_SRC_FIXED, **media) -> None:
        for k, v in media.items():
            setattr(self.state.media, k, v)
        self.state.media.timing_source = source
        self.state.timing_source = source
        D.fill_ranges(self.state, ranges, self.state.generation + 1)
        self.upload()

    def counters(self) -> dict:
        cudrv.ctx_synchronize()
        arr = (D.hbf_kernel_counters * 16)()
        cudrv.dtoh(arr, self.sptr + D.KSLOTS_OFF, ctypes.sizeof(arr))
        tot = D.kernel_counters_dict(D.hbf_kernel_counters())
        from runtime_cuda.session import _accumulate
        for k in arr:
            _accumulate(tot, D.kernel_counters_dict(k))
        return tot

    # --- memory
    def alloc(self, nbytes: int) -> int:
        return cudrv.mem_alloc(nbytes)

    def put(self, dptr: int, arr: np.ndarray) -> None:
        cudrv.check(self.d.cuMemcpyHtoD(dptr, arr.ctypes.data, arr.nbytes), "cuMemcpyHtoD")

    def get(self, dptr: int, nbytes: int, dtype=np.uint8) -> np.ndarray:
        out = np.empty(nbytes // np.dtype(dtype).itemsize, dtype)
        cudrv.check(self.d.cuMemcpyDtoH(out.ctypes.data, dptr, nbytes), "cuMemcpyDtoH")
        return out

    def memset(self, dptr: int, nbytes: int) -> None:
        cudrv.check(self.d.cuMemsetD8(dptr, 0, nbytes), "cuMemsetD8")

    def launch(self, name, grid, block, args) -> None:
        cudrv.launch(self.fn[name], grid, block, args)

    def timed(self, name, grid, block, args) -> float:
        d = self.d
        e0 = cudrv.check(d.cuEventCreate(0), "cuEventCreate")
        e1 = cudrv.check(d.cuEventCreate(0), "cuEventCreate")
        cudrv.check(d.cuEventRecord(e0, d.CUstream(0)), "cuEventRecord")
        self.launch(name, grid, block, args)
        cudrv.check(d.cuEventRecord(e1, d.CUstream(0)), "cuEventRecord")
        cudrv.check(d.cuEventSynchronize(e1), "cuEventSynchronize")
        ms = cudrv.check(d.cuEventElapsedTime(e0, e1), "cuEventElapsedTime")
        d.cuEventDestroy(e0)
        d.cuEventDestroy(e1)
        return float(ms)


def rng(base: int, length: int, media: int = 0, rid: int = 1, perms: int = C.HBF_PERM_ALL) -> D.DevRange:
    return D.DevRange(base, length, media, rid, C.HBF_MODE_TIMING, perms, 4096)


def pct(a, q):
    return float(np.percentile(np.asarray(a, dtype=np.float64), q))


# ------------------------------------------------------------------------------------------------
# Experiments (device-only)
# ------------------------------------------------------------------------------------------------
SEM_CASES = ["u8", "u16", "u32", "u64", "f32", "f64", "v2.u32", "v4.u32", "predicated", "divergent", "loop",
             "predicated_use_counterexample", "store_reload", "atomics", "generic_global_and_shared",
             "cp.async", "barrier_reduction"]


def exp_semantic(H: Harness) -> dict:
    grid, block, nthr, stride = 4, 128, 512, 16
    nbytes, off = 1 << 20, 65536
    src, other = H.alloc(nbytes), H.alloc(nbytes)
    dst, tier = H.alloc(nthr * 32), H.alloc(nthr * 8)
    init = np.random.default_rng(7).integers(0, 256, nbytes, dtype=np.uint8)
    edge_base = src + off + 256 * stride
    configs = {
        "in_range": [rng(src, nbytes)],
        "out_of_range": [rng(other, nbytes)],
        "edge": [rng(edge_base, src + nbytes - edge_base)],
    }

    def inr(a, rs):
        return any(r.base <= a < r.end for r in rs)

    def expect_tier(k, rs):
        out = []
        for t in range(nthr):
            a = src + off + t * stride
            lane = t % block
            if k == 8:
                e = (lane & 1) == 0 and inr(a, rs)
            elif k == 9:
                e = inr(a if (lane & 4) else a + 12288, rs)
            elif k == 10:
                e = any(inr(a + j * 256, rs) for j in range(8))
            elif k == 13:
                e = inr(src + off, rs)
            else:
                e = inr(a, rs)
            out.append(1 if e else 0)
        return np.array(out, np.uint64)

    checks, failures = [], []

    def check(name, ok, **info):
        checks.append({"name": name, "ok": bool(ok), **info})
        if not ok:
            failures.append(name)

    def run(kname, k):
        H.put(src, init)
        H.memset(dst, nthr * 32)
        H.memset(tier, nthr * 8)
        H.launch(kname, (grid,), (block,), [ctypes.c_int32(k), ctypes.c_uint64(src), ctypes.c_uint64(dst),
                                            ctypes.c_uint64(tier), ctypes.c_int64(off), ctypes.c_int32(stride)])
        cudrv.ctx_synchronize()
        return H.get(dst, nthr * 32), H.get(src, nbytes), H.get(tier, nthr * 8, np.uint64)

    per_case_requests = {}
    for cname, rs in configs.items():
        H.configure(rs, C.HBF_SRC_FIXED, fixed_read_ns=2_000, fixed_write_ns=3_000)
        for k, kn in enumerate(SEM_CASES):
            before = H.counters()
            d0, s0, t0 = run("sem_plain", k)
            d1, s1, t1 = run("sem_instr", k)
            after = H.counters()
            exp = expect_tier(k, rs)
            check(f"{cname}/{kn}/values", np.array_equal(d0, d1))
            check(f"{cname}/{kn}/memory_after", np.array_equal(s0, s1))
            check(f"{cname}/{kn}/tiers", np.array_equal(t1, exp), in_range_threads=int(exp.sum()),
                  got=int((t1 & 1).sum()), shared_flagged=int(((t1 >> 1) & 1).sum()))
            nreq = sum(after["ops"][o]["requests"] - before["ops"][o]["requests"] for o in C.OP_NAMES)
            per_case_requests[f"{cname}/{kn}"] = nreq
            check(f"{cname}/{kn}/requests_iff_in_range", (nreq > 0) == bool(exp.sum()), requests=nreq)
    # warp aggregation: in_range/u32 (4 B/lane, stride 16 -> 512 B per warp = one page group per warp)
    n = per_case_requests.get("in_range/u32", -1)
    check("aggregation/u32_one_request_per_warp_page", n == nthr // 32, requests=n, warps=nthr // 32)
    return {"checks": len(checks), "passed": len(checks) - len(failures), "failed": failures,
            "detail": checks, "requests_per_case": per_case_requests,
            "note": "plain vs instrumented twin kernels (helpers called directly from CUDA C++), fixed 2/3 us"}


def probe(H: Harness, work_ns: int, reps: int, buf: int, name="probe_instr") -> np.ndarray:
    out = H.alloc(reps * 32)
    H.launch(name, (1,), (32,), [ctypes.c_uint64(buf), ctypes.c_uint64(out), ctypes.c_uint64(work_ns),
                                 ctypes.c_int32(reps)])
    cudrv.ctx_synchronize()
    r = H.get(out, reps * 32, np.uint64).reshape(reps, 4).astype(np.int64)
    cudrv.mem_free(out)
    return r


def _fid_b(H: Harness, buf: int) -> dict:
    """single 20 us read: error distribution (issue .. first use - 20 us), n = 1000."""
    H.configure([rng(buf, 64 * 4096)], C.HBF_SRC_FIXED, fixed_read_ns=20_000)
    r = probe(H, 0, 1000, buf)
    err = (r[:, 2] - r[:, 0]) - 20_000
    return {"n": int(err.size), "p50_ns": pct(err, 50), "p95_ns": pct(err, 95),
            "p99_ns": pct(err, 99), "min_ns": int(err.min()), "max_ns": int(err.max()),
            "p5_ns": pct(err, 5), "abs_p95_ns": pct(np.abs(err), 95), "goal_p95_ns": 100,
            "deadline_bias_ns": int(H.state.deadline_bias_ns),
            "clock": "%globaltimer (32 ns ticks) around issue..first use, inside the kernel"}


def _fid_c(H: Harness, buf: int) -> dict:
    """wait at the consumer: exposed wait vs max(0, L - W)."""
    L = 20_000
    H.configure([rng(buf, 64 * 4096)], C.HBF_SRC_FIXED, fixed_read_ns=L)
    rows = []
    plain = probe(H, 0, 50, buf, "probe_plain")
    native_exposed = float(np.median(plain[:, 2] - plain[:, 1]))
    for W in (0, 2_500, 5_000, 10_000, 15_000, 18_000, 19_000, 20_000, 21_000, 25_000, 30_000, 40_000):
        r = probe(H, W, 40, buf)
        exposed = r[:, 2] - r[:, 1]
        work = r[:, 1] - r[:, 0]
        expected = np.maximum(0, L - work)
        dev = exposed - expected
        rows.append({"W_ns": W, "work_median_ns": float(np.median(work)),
                     "exposed_median_ns": float(np.median(exposed)), "expected_median_ns": float(np.median(expected)),
                     "dev_median_ns": float(np.median(dev)), "dev_p95_abs_ns": pct(np.abs(dev), 95)})
    return {"L_ns": L, "rows": rows, "native_exposed_median_ns": native_exposed,
            "max_abs_dev_median_ns": max(abs(x["dev_median_ns"]) for x in rows),
            "deadline_bias_ns": int(H.state.deadline_bias_ns)}


def exp_fidelity(H: Harness) -> dict:
    buf = H.alloc(64 * 4096 + 4096)
    H.memset(buf, 64 * 4096 + 4096)
    res = {}
    # (a) increment: 1000 us vs 200 us, interleaved launches
    lat = {1_000_000: [], 200_000: []}
    for it in range(6):
        for L in (1_000_000, 200_000):
            H.configure([rng(buf, 64 * 4096)], C.HBF_SRC_FIXED, fixed_read_ns=L)
            r = probe(H, 0, 5, buf)
            lat[L] += (r[:, 2] - r[:, 0]).tolist()
    m1, m2 = statistics.median(lat[1_000_000]), statistics.median(lat[200_000])
    inc = m1 - m2
    res["a_increment"] = {"median_1000us_ns": m1, "median_200us_ns": m2, "increment_ns": inc,
                          "error_pct": abs(inc - 800_000) / 800_000 * 100, "goal_pct": 0.05,
                          "n_each": len(lat[200_000]),
                          "spread_1000us_ns": [min(lat[1_000_000]), max(lat[1_000_000])],
                          "spread_200us_ns": [min(lat[200_000]), max(lat[200_000])]}
    # (b) + (c) twice: uncalibrated (deadline_bias_ns = 0), then with the bias MEASURED in this run
    # (runtime_cuda.calibrate: probe n=256, L=20 us, median of (first use - issue) - L)
    H.set_bias(0)
    res["b_single_20us"] = _fid_b(H, buf)
    res["c_consumer"] = _fid_c(H, buf)
    try:
        cal = H.calibrate(buf)
        res["calibration"] = cal
        H.set_bias(cal["bias_ns"])
        res["b_single_20us_calibrated"] = _fid_b(H, buf) | {"deadline_bias_ns": cal["bias_ns"]}
        res["c_consumer_calibrated"] = _fid_c(H, buf) | {"deadline_bias_ns": cal["bias_ns"]}
        res["calibrated_counters"] = {"bias_clamps_during_c": H.counters()["bias_clamps"]}
        # a modeled delay shorter than the bias: the deadline is clamped to the issue time (counted)
        H.configure([rng(buf, 64 * 4096)], C.HBF_SRC_FIXED, fixed_read_ns=100)
        r = probe(H, 0, 50, buf)
        lat_s = r[:, 2] - r[:, 0]
        res["clamp_short_delay"] = {"fixed_read_ns": 100, "deadline_bias_ns": cal["bias_ns"], "n": int(lat_s.size),
                                    "latency_median_ns": float(np.median(lat_s)), "latency_min_ns": int(lat_s.min()),
                                    "bias_clamps": H.counters()["bias_clamps"], "expected_clamps": 50}
    finally:
        H.set_bias(0)   # the experiments below measure the uncalibrated helpers, as before
    # thermal applied once: q = 0.5 -> 20 us becomes 40 us
    H.set_thermal(C.HBF_TH_LIGHT, 500_000, 1)
    H.configure([rng(buf, 64 * 4096)], C.HBF_SRC_FIXED, fixed_read_ns=20_000)
    r = probe(H, 0, 50, buf)
    lat_q = r[:, 2] - r[:, 0]
    H.set_thermal(C.HBF_TH_NORMAL, 1_000_000, 1)
    res["thermal_q_half"] = {"expected_ns": 40_000, "median_ns": float(np.median(lat_q)),
                             "p95_ns": pct(lat_q, 95), "min_ns": int(lat_q.min())}
    # fast queue model: one 64 B read = tR + xfer (20 us + 20 ns at 3.2 GB/s)
    H.configure([rng(buf, 64 * 4096)], C.HBF_SRC_FAST)
    r = probe(H, 0, 64, buf)
    lat_f = r[:, 2] - r[:, 0]
    res["fast_model_single"] = {"expected_ns": 20_000 + 20, "median_ns": float(np.median(lat_f)),
                                "p95_ns": pct(lat_f, 95)}
    # Severe: admission withheld until the host reopens it (~3 ms later), then served at q
    H.set_thermal(C.HBF_TH_SEVERE, 500_000, 0)
    H.configure([rng(buf, 64 * 4096)], C.HBF_SRC_FIXED, fixed_read_ns=20_000)
    c0 = H.counters()
    outp = H.alloc(32)
    H.launch("probe_instr", (1,), (32,), [ctypes.c_uint64(buf), ctypes.c_uint64(outp), ctypes.c_uint64(0),
                                          ctypes.c_int32(1)])
    time.sleep(0.003)            # the host reopens admission from this thread; the GIL is never held by a wait
    H.set_thermal(C.HBF_TH_LIGHT, 500_000, 1)
    d = cudrv.drv()
    t_end = time.time() + 5
    while int(d.cuStreamQuery(d.CUstream(0))[0]) != 0 and time.time() < t_end:
        time.sleep(0.0005)
    r = H.get(outp, 32, np.uint64).reshape(1, 4).astype(np.int64)
    c1 = H.counters()
    H.set_thermal(C.HBF_TH_NORMAL, 1_000_000, 1)
    res["thermal_severe_withholds"] = {
        "issue_to_use_ns": int(r[0, 2] - r[0, 0]), "thermal_waits": c1["thermal_waits"] - c0["thermal_waits"],
        "thermal_wait_ns": c1["thermal_wait_ns"] - c0["thermal_wait_ns"],
        "note": "host reopens admission ~3 ms after the launch is queued (Light, q=0.5): expect >= ~3 ms + 40 us"}
    # refresh debt: 8 KiB published, quantum 4 KiB -> the first two admissions each serve one quantum
    H.state.refresh_quantum = 4096
    C.seqlock_write(H.ctl.refresh, lambda: (setattr(H.ctl.refresh, "debt_total_bytes", 8192),
                                            setattr(H.ctl.refresh, "quantum_bytes", 4096)))
    H.configure([rng(buf, 64 * 4096)], C.HBF_SRC_FIXED, fixed_read_ns=20_000)
    r = probe(H, 0, 4, buf)
    c2 = H.counters()
    H.state.refresh_quantum = 0
    H.configure([rng(buf, 64 * 4096)], C.HBF_SRC_FIXED, fixed_read_ns=20_000)
    res["refresh_debt"] = {"latencies_ns": (r[:, 2] - r[:, 0]).tolist(),
                           "expected_ns": [240_000, 240_000, 20_000, 20_000],
                           "refresh_claims": c2["refresh_claims"], "refresh_bytes": c2["refresh_bytes"],
                           "model": "extra service = pages x (tR + tPROG) = 20 us + 200 us per 4 KiB quantum"}
    res["counters"] = c2
    cudrv.mem_free(buf)
    return res


def exp_native_overhead(H: Harness) -> dict:
    out = {}
    # correctness of the three instrumented forms on a registered range (small), same values + requests
    n4s = 1 << 20
    a, b = H.alloc(n4s * 16), H.alloc(n4s * 16)
    H.put(a, np.random.default_rng(3).standard_normal(n4s * 4).astype(np.float32))
    H.configure([rng(a, n4s * 16, 0, 1), rng(b, n4s * 16, n4s * 16, 2)], C.HBF_SRC_FIXED,
                fixed_read_ns=1_000, fixed_write_ns=1_000)
    ref, reqs = None, {}
    for fn in ("stream_plain", "stream_instr", "stream_guard", "stream_hoist"):
        H.memset(b, n4s * 16)
        c0 = H.counters()
        H.launch(fn, (132,), (256,), [ctypes.c_uint64(a), ctypes.c_uint64(b), ctypes.c_uint64(n4s), ctypes.c_float(2.0)])
        c1 = H.counters()
        got = H.get(b, n4s * 16)
        ref = got if ref is None else ref
        reqs[fn] = {"same_values_as_plain": bool(np.array_equal(ref, got)),
                    "load_requests": c1["ops"]["load"]["requests"] - c0["ops"]["load"]["requests"],
                    "store_requests": c1["ops"]["store"]["requests"] - c0["ops"]["store"]["requests"]}
    out["in_range_check"] = reqs
    cudrv.mem_free(a)
    cudrv.mem_free(b)

    n4 = (1 << 30) // 16              # 1 GiB in, 1 GiB out
    a, b = H.alloc(n4 * 16), H.alloc(n4 * 16)
    far = H.alloc(1 << 20)
    H.memset(a, n4 * 16)
    grid, block = 132 * 8, 256
    args = [ctypes.c_uint64(a), ctypes.c_uint64(b), ctypes.c_uint64(n4), ctypes.c_float(2.0)]
    variants = {"plain": ("stream_plain", None)}
    for form in ("instr", "guard", "hoist"):
        variants[f"{form}_detached"] = (f"stream_{form}", "detached")
        variants[f"{form}_attached_nothing_registered"] = (f"stream_{form}", "empty")
        variants[f"{form}_range_elsewhere"] = (f"stream_{form}", "elsewhere")
    times = {k: [] for k in variants}
    for fn in ("stream_plain", "stream_instr", "stream_guard", "stream_hoist"):  # warm-up
        H.launch(fn, (grid,), (block,), args)
    cudrv.ctx_synchronize()
    for it in range(12):
        for k, (fn, mode) in variants.items():
            if mode == "detached":
                H.attach(False)
            elif mode == "empty":
                H.attach(True)
                H.configure([])
            elif mode == "elsewhere":
                H.attach(True)
                H.configure([rng(far, 1 << 20)])
            times[k].append(H.timed(fn, (grid,), (block,), args))
    H.attach(True)
    med = {k: statistics.median(v) for k, v in times.items()}
    out.update({"bytes_moved": 2 * n4 * 16, "median_ms": med,
                "spread_ms": {k: [min(v), max(v)] for k, v in times.items()},
                "ratio_vs_plain": {k: med[k] / med["plain"] for k in med},
                "GBps_plain": 2 * n4 * 16 / (med["plain"] * 1e-3) / 1e9, "goal_ratio": 1.10, "n": 12,
                "forms": {"instr": "helper called at every access (ABI as is)",
                          "guard": "inline fast reject at every site, call only in band, wait only on nonzero",
                          "hoist": "guard with __hb_state/{lo,span} loaded once at kernel entry"},
                "kernel": "float4 grid-stride b[i]=a[i]*2+1, 1 GiB in + 1 GiB out, 1056x256 threads"})
    for p in (a, b, far):
        cudrv.mem_free(p)
    return out


def exp_hbfcc(H: Harness) -> dict:
    """The plain twins rewritten by hbfcc (python3 -m hbfcc.cli rewrite), run against the plain build."""
    wd = Path(tempfile.mkdtemp(prefix="hbf-hbfcc-"))
    src = ROOT / "workloads" / "microbench" / "hbf_microbench.cu"
    plain_ptx = wd / "plain.ptx"
    linker.run([linker.tool("nvcc"), "-std=c++17", "-O3", "-arch=sm_90a", "-ptx", "-DHBF_PLAIN_ONLY", str(src),
                "-o", str(plain_ptx)])
    out_ptx = wd / "plain_hbfcc.ptx"
    r = subprocess.run([sys.executable, "-m", "hbfcc.cli", "rewrite", str(plain_ptx), "-o", str(out_ptx),
                        "--helper", str(linker.helper_ptx())], cwd=ROOT, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"hbfcc rewrite failed: {r.stderr[-2000:]}")
    art = json.loads(Path(str(out_ptx) + ".hbfcc.json").read_text())
    cub = wd / "plain_hbfcc.cubin"
    linker.run([linker.tool("ptxas"), "-arch=sm_90a", "-O3", str(out_ptx), "-o", str(cub)])
    plain_cub = wd / "plain.cubin"
    linker.run([linker.tool("ptxas"), "-arch=sm_90a", "-O3", str(plain_ptx), "-o", str(plain_cub)])
    mh = cudrv.module_load_data(cub.read_bytes())
    mp = cudrv.module_load_data(plain_cub.read_bytes())
    g = cudrv.module_global(mh, "__hb_state")
    kb = cudrv.module_global(mh, "__hb_kslot_base")
    cudrv.htod(g[0], ctypes.c_uint64(H.sptr), 8)
    if kb:
        cudrv.htod(kb[0], ctypes.c_uint32(8), 4)
    H.bind_cdesc(mh, 8)
    fh = {n: cudrv.module_function(mh, n) for n in ("stream_plain", "probe_plain", "sem_plain")}
    fp = {n: cudrv.module_function(mp, n) for n in ("stream_plain", "probe_plain", "sem_plain")}
    res = {"artifact_kernels": [{k: v for k, v in kk.items() if k in ("name", "admitted", "sites", "waits",
                                                                       "not_admitted_reasons")}
                                for kk in art.get("kernels", [])],
           "rewrite_stderr": r.stderr[-800:]}
    # semantic: values + memory identical, requests iff in range
    grid, block, nthr, stride = 4, 128, 512, 16
    nbytes, off = 1 << 20, 65536
    srcb, other = H.alloc(nbytes), H.alloc(nbytes)
    dst, tier = H.alloc(nthr * 32), H.alloc(nthr * 8)
    init = np.random.default_rng(11).integers(0, 256, nbytes, dtype=np.uint8)
    configs = {"in_range": [rng(srcb, nbytes)], "out_of_range": [rng(other, nbytes)]}
    checks, fails = 0, []
    for cname, rs in configs.items():
        H.configure(rs, C.HBF_SRC_FIXED, fixed_read_ns=2_000, fixed_write_ns=3_000)
        for k, kn in enumerate(SEM_CASES):
            outs = []
            for fn in (fp["sem_plain"], fh["sem_plain"]):
                H.put(srcb, init)
                H.memset(dst, nthr * 32)
                c0 = H.counters()
                cudrv.launch(fn, (grid,), (block,), [ctypes.c_int32(k), ctypes.c_uint64(srcb), ctypes.c_uint64(dst),
                                                     ctypes.c_uint64(tier), ctypes.c_int64(off), ctypes.c_int32(stride)])
                cudrv.ctx_synchronize()
                c1 = H.counters()
                nreq = sum(c1["ops"][o]["requests"] - c0["ops"][o]["requests"] for o in C.OP_NAMES)
                outs.append((H.get(dst, nthr * 32), H.get(srcb, nbytes), nreq))
            for nm, ok in ((f"{cname}/{kn}/values", np.array_equal(outs[0][0], outs[1][0])),
                           (f"{cname}/{kn}/memory_after", np.array_equal(outs[0][1], outs[1][1])),
                           (f"{cname}/{kn}/requests_iff_in_range", (outs[1][2] > 0) == (cname == "in_range"))):
                checks += 1
                if not ok:
                    fails.append(nm)
    res["semantic"] = {"checks": checks, "passed": checks - len(fails), "failed": fails}
    # fidelity: the probe (t0 before the load, t2 after the first use) with a fixed 20 us read
    buf = H.alloc(64 * 4096 + 4096)
    H.memset(buf, 64 * 4096 + 4096)
    H.configure([rng(buf, 64 * 4096)], C.HBF_SRC_FIXED, fixed_read_ns=20_000)
    outp = H.alloc(200 * 32)
    cudrv.launch(fh["probe_plain"], (1,), (32,), [ctypes.c_uint64(buf), ctypes.c_uint64(outp), ctypes.c_uint64(0),
                                                  ctypes.c_int32(200)])
    cudrv.ctx_synchronize()
    rr = H.get(outp, 200 * 32, np.uint64).reshape(200, 4).astype(np.int64)
    e = (rr[:, 2] - rr[:, 0]) - 20_000
    res["probe_20us"] = {"p50_err_ns": pct(e, 50), "p95_err_ns": pct(e, 95), "min_err_ns": int(e.min()),
                         "max_err_ns": int(e.max()), "deadline_bias_ns": int(H.state.deadline_bias_ns)}
    # the same with a deadline bias measured on this (hbfcc-built) probe in this run
    try:
        from runtime_cuda import calibrate as CAL
        kidx = next(int(k["kernel_index"]) for k in art.get("kernels", []) if k.get("name") == "probe_plain")
        cal = CAL.measure_on_device(mh, H.sptr, kslot_base=8, kernel="probe_plain", kernel_index=kidx).as_dict()
        H.set_bias(cal["bias_ns"])
        H.configure([rng(buf, 64 * 4096)], C.HBF_SRC_FIXED, fixed_read_ns=20_000)
        cudrv.launch(fh["probe_plain"], (1,), (32,), [ctypes.c_uint64(buf), ctypes.c_uint64(outp),
                                                      ctypes.c_uint64(0), ctypes.c_int32(200)])
        cudrv.ctx_synchronize()
        rr = H.get(outp, 200 * 32, np.uint64).reshape(200, 4).astype(np.int64)
        e = (rr[:, 2] - rr[:, 0]) - 20_000
        res["probe_20us_calibrated"] = {"p50_err_ns": pct(e, 50), "p95_err_ns": pct(e, 95),
                                        "min_err_ns": int(e.min()), "max_err_ns": int(e.max()),
                                        "deadline_bias_ns": cal["bias_ns"], "calibration": cal}
    except Exception as ex:  # noqa: BLE001
        res["probe_20us_calibrated"] = {"error": f"{type(ex).__name__}: {ex}"}
    finally:
        H.set_bias(0)
    # native overhead: hbfcc-built stream vs plain stream, nothing registered / detached
    n4 = (1 << 30) // 16
    a, b = H.alloc(n4 * 16), H.alloc(n4 * 16)
    H.memset(a, n4 * 16)
    args = [ctypes.c_uint64(a), ctypes.c_uint64(b), ctypes.c_uint64(n4), ctypes.c_float(2.0)]
    H.configure([])
    times = {"plain": [], "hbfcc_attached_nothing_registered": [], "hbfcc_detached": []}
    for _ in range(2):
        for fn in (fp["stream_plain"], fh["stream_plain"]):
            cudrv.launch(fn, (1056,), (256,), args)
    cudrv.ctx_synchronize()
    for _ in range(12):
        for k in times:
            cudrv.htod(g[0], ctypes.c_uint64(0 if k == "hbfcc_detached" else H.sptr), 8)
            fn = fp["stream_plain"] if k == "plain" else fh["stream_plain"]
            H.fn["_tmp"] = fn
            times[k].append(H.timed("_tmp", (1056,), (256,), args))
    cudrv.htod(g[0], ctypes.c_uint64(H.sptr), 8)
    med = {k: statistics.median(v) for k, v in times.items()}
    res["native_overhead"] = {"median_ms": med, "ratio_vs_plain": {k: med[k] / med["plain"] for k in med},
                              "spread_ms": {k: [min(v), max(v)] for k, v in times.items()}}
    for p_ in (srcb, other, dst, tier, buf, outp, a, b):
        cudrv.mem_free(p_)
    return res


# ------------------------------------------------------------------------------------------------
# Daemon experiments
# ------------------------------------------------------------------------------------------------
def start_hbfd(tmp: Path, profile: str = "nominal", extra_env: dict | None = None) -> DaemonProcess:
    """hbfd for the daemon experiments, ready (hbfd.runner): thermal $HBF_BENCH_HBFD_THERMAL (default none)."""
    env = {"HBFD_THERMAL": os.environ.get("HBF_BENCH_HBFD_THERMAL", "none"), **(extra_env or {})}
    return start_daemon(profile, workdir=tmp, summary=tmp / "summary.json", env=env, cwd=ROOT, timeout_s=60.0)


def session_module(s, cubin: str):
    mod = cudrv.module_load_data(Path(cubin).read_bytes())
    art = {"kernels": [{"name": n, "admitted": n.endswith("_instr"),
                        "reasons": [] if n.endswith("_instr") else ["plain twin: accesses not instrumented"]}
                       for n in ("stream_instr", "probe_instr", "sem_instr", "rate_instr",
                                 "stream_plain", "probe_plain", "sem_plain", "rate_plain")],
           "note": "hand-instrumented test kernels (helpers called directly), not an hbfcc artifact"}
    b = s.bind_module(mod, artifact=art)
    fns = {}
    for n in ("rate_instr", "rate_plain", "stream_instr", "sem_instr"):
        f = cudrv.module_function(mod, n)
        s.note_function(f, b, n)
        fns[n] = f
    return mod, b, fns


REF_PLAN = [(4, 132, 20, 8192), (4, 264, 40, 8192), (4, 528, 40, 8192), (4, 1024, 30, 8192),
            (4, 1024, 30, 2048), (4, 1024, 30, 32768), (4, 132, 20, 2048), (4, 132, 20, 32768)]
TRACE_MASK = (1 << 18) - 1     # per-ticket trace records (8 u64) in a 16 MiB device buffer


def _trace_stats(tr: np.ndarray) -> dict:
    """Per-request reference-path timeline from the helpers' trace build (HBF_REF_TRACE=1), GPU clock:
    issue = published - issue time; poll = completion seen - poll start; visible = seen - published;
    late = seen - (arrival + modeled) (how far past its modeled deadline the completion became visible);
    modeled = deadline - arrival; polls per request; hbfd service_ns."""
    v = tr[tr[:, 0] != 0]
    if len(v) == 0:
        return {"n": 0}
    i64 = v.astype(np.int64)
    cols = {"issue_ns": i64[:, 2] - i64[:, 1], "poll_ns": i64[:, 4] - i64[:, 3],
            "visible_ns": i64[:, 4] - i64[:, 2], "late_ns": i64[:, 4] - i64[:, 6],
            "modeled_ns": i64[:, 6] - i64[:, 1], "polls": i64[:, 5], "service_ns": i64[:, 7]}
    out = {"n": int(len(v))}
    for k, x in cols.items():
        out[k] = {"p10": float(np.percentile(x, 10)), "p50": float(np.percentile(x, 50)),
                  "p90": float(np.percentile(x, 90)), "p99": float(np.percentile(x, 99)), "mean": float(x.mean())}
    return out


def exp_reference_rate(cubin: str, plan=None, extra_env: dict | None = None) -> dict:
    """Reference-path request rate through the real hbfd: `rate_instr`, one request per warp per
    iteration, each waited before the next. With a helper trace build (module global __hb_reftrace)
    also the per-request timeline (_trace_stats) and hbfd's ring-service batch statistics."""
    import runtime_cuda
    with tempfile.TemporaryDirectory(prefix="hbf-ref-") as td:
        if extra_env is None and os.environ.get("HBF_BENCH_HBFD_ENV"):
            extra_env = json.loads(os.environ["HBF_BENCH_HBFD_ENV"])
        hb = start_hbfd(Path(td), extra_env=extra_env)
        try:
            s = runtime_cuda.attach(socket=str(hb.socket))
            d = cudrv.drv()
            nwords = (64 << 20) // 4
            buf = cudrv.mem_alloc(nwords * 4)
            cudrv.check(d.cuMemsetD8(buf, 1, nwords * 4), "memset")
            s.register_timing_range(buf, nwords * 4)
            mod, b, fns = session_module(s, cubin)
            g_tr = cudrv.module_global(mod, "__hb_reftrace")
            trbuf = 0
            if g_tr:
                trbuf = cudrv.mem_alloc((TRACE_MASK + 1) * 64)
                cudrv.htod(g_tr[0], ctypes.c_uint64(trbuf), 8)
                cudrv.htod(cudrv.module_global(mod, "__hb_reftrace_mask")[0], ctypes.c_uint32(TRACE_MASK), 4)
            rows = []
            plan = plan or (json.loads(os.environ["HBF_BENCH_REF_PLAN"]) if os.environ.get("HBF_BENCH_REF_PLAN")
                            else REF_PLAN)
            for warps_per_block, blocks, iters, cap in plan:
                s.set_run_params(backoff_max_ns=cap)
                nthr = blocks * warps_per_block * 32
                out = cudrv.mem_alloc(nthr * 4)
                if trbuf:
                    cudrv.check(d.cuMemsetD8(trbuf, 0, (TRACE_MASK + 1) * 64), "memset trace")
                before = s.counters(publish=False)["totals"]
                t = time.perf_counter()
                s.launch(fns["rate_instr"], (blocks,), (warps_per_block * 32,),
                         [ctypes.c_uint64(buf), ctypes.c_uint64(nwords), ctypes.c_uint64(out), ctypes.c_int32(iters)],
                         kernel="rate_instr")
                s.synchronize()
                el = time.perf_counter() - t
                after = s.counters(publish=False)["totals"]
                req = after["ops"]["load"]["requests"] - before["ops"]["load"]["requests"]
                mod_ns = after["ops"]["load"]["modeled_ns"] - before["ops"]["load"]["modeled_ns"]
                wall = after["wait_wall_ns"] - before["wait_wall_ns"]
                late = after["wait_overhead_ns"] - before["wait_overhead_ns"]
                helper = after["ops"]["load"]["overhead_ns"] - before["ops"]["load"]["overhead_ns"]
                svc = after["ops"]["load"]["service_ns"] - before["ops"]["load"]["service_ns"]
                row = {"warps": blocks * warps_per_block, "iters": iters, "backoff_max_ns": cap, "requests": req,
                       "expected_requests": blocks * warps_per_block * iters, "seconds": el,
                       "req_per_s": req / el, "modeled_ns": mod_ns, "wall_ns": wall, "service_ns": svc,
                       "lateness_ns": late, "helper_ns": helper,
                       "overhead_over_modeled": (late + helper) / mod_ns if mod_ns else None,
                       "mean_modeled_ns": mod_ns / req if req else None}
                if trbuf:
                    arr = np.zeros((TRACE_MASK + 1) * 8, np.uint64)
                    cudrv.dtoh(arr.ctypes.data, trbuf, arr.nbytes)
                    row["trace"] = _trace_stats(arr.reshape(-1, 8))
                rows.append(row)
                cudrv.mem_free(out)
                tl = row.get("trace", {})
                log(f"reference: {row['req_per_s']:.0f} req/s ({req} requests, {row['warps']} warps, cap {cap})"
                    + (f" issue p50 {tl['issue_ns']['p50']:.0f} ns, visible p50 {tl['visible_ns']['p50']:.0f} ns,"
                       f" late p50 {tl['late_ns']['p50']:.0f} ns, polls p50 {tl['polls']['p50']:.0f},"
                       f" modeled p50 {tl['modeled_ns']['p50']:.0f} ns" if tl.get("n") else ""))
            c = s.counters()
            st = s.client.call("Status", s.client.pb.StatusRequest())
            ring = None
            try:
                sm = json.loads(s.client.call("GetSummary", s.client.pb.GetSummaryRequest()).summary_json)
                ring = sm.get("ring_service")
            except Exception as e:  # noqa: BLE001
                ring = {"error": str(e)}
            s.close()
            return {"rows": rows, "best_req_per_s": max(r["req_per_s"] for r in rows), "goal_req_per_s": 500_000,
                    "engine": st.engine, "timing_source": st.timing_source, "status_totals": c["totals"]["status"],
                    "ring_service": ring, "hbfd_env": extra_env or {},
                    "note": "one request per warp per iteration (32 lanes of a warp hit one page group)"}
        finally:
            hb.stop()


def child_daemon_lost(cubin: str) -> dict:
    """SIGKILL hbfd while rate_instr (132 x 4 warps, each polling its reference completion) runs:
    when does the GPU record DAEMON_LOST (host poll of header.device_failure), when does the kernel end
    (cuStreamQuery polled on the host, no synchronize call in between), what does Session.synchronize()
    raise, and is the context still usable afterwards (a small memcpy)."""
    import runtime_cuda
    td = tempfile.mkdtemp(prefix="hbf-lost-")
    hb = start_hbfd(Path(td))
    s = runtime_cuda.attach(socket=str(hb.socket))
    nwords = (16 << 20) // 4
    buf = cudrv.mem_alloc(nwords * 4)
    s.register_timing_range(buf, nwords * 4)
    _, b, fns = session_module(s, cubin)
    out = cudrv.mem_alloc(132 * 128 * 4)
    s.launch(fns["rate_instr"], (132,), (128,), [ctypes.c_uint64(buf), ctypes.c_uint64(nwords), ctypes.c_uint64(out),
                                                  ctypes.c_int32(10_000_000)], kernel="rate_instr")
    time.sleep(0.5)
    d = cudrv.drv()
    running = int(d.cuStreamQuery(d.CUstream(0))[0]) != 0
    t_kill = time.monotonic_ns()
    os.kill(hb.pid, signal.SIGKILL)
    h = s.ctl.ctl.header
    t_seen = t_end = None
    q_end = None
    while time.monotonic_ns() - t_kill < 5_000_000_000:
        if t_seen is None and int(h.device_failure) != 0:
            t_seen = time.monotonic_ns()
        r = int(d.cuStreamQuery(d.CUstream(0))[0])
        if r != int(d.CUresult.CUDA_ERROR_NOT_READY):
            t_end, q_end = time.monotonic_ns(), r
            break
        time.sleep(20e-6)
    err = None
    try:
        s.synchronize()
        err = "no error (WRONG)"
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
        code = getattr(e, "code", None)
        err_code = str(code) if code is not None else None
    t_sync = time.monotonic_ns()
    ctx_ok = True
    try:
        x = ctypes.c_uint64(0)
        cudrv.dtoh(x, buf, 8)
        cudrv.ctx_synchronize()
    except Exception as e:  # noqa: BLE001
        ctx_ok = f"{type(e).__name__}: {e}"
    f = s.device_failure()
    return {"kernel_running_at_kill": running,
            "failure_visible_ms": (t_seen - t_kill) / 1e6 if t_seen else None,
            "kernel_end_ms": (t_end - t_kill) / 1e6 if t_end else None,
            "stream_query_at_end": q_end,
            "synchronize_returned_ms": (t_sync - t_kill) / 1e6,
            "synchronize_raised": err, "error_code": locals().get("err_code"),
            "context_usable_after": ctx_ok,
            "clock": "host monotonic from SIGKILL: header.device_failure set by the GPU (host poll) / the "
                     "kernel's stream idle (cuStreamQuery) / Session.synchronize() returned",
            "device_failure_status": D.C_STATUS_NAMES[f[0]] if f else None, "goal_ms": 100,
            "heartbeat_timeout_ns": s.params.heartbeat_timeout_ns}


def child_partial(cubin: str, with_daemon: bool) -> dict:
    """Local: thread 0's 4-byte load straddles the base of a (non page-aligned) range -> UNSUPPORTED, trap.
    Daemon: hbfd only takes page-aligned ranges, which a naturally aligned access <= 16 B cannot straddle,
    so the daemon variant uses the other UNSUPPORTED cause: a store to a read-only range; then the run
    summary must carry the device_failure report."""
    import runtime_cuda
    out = {}
    if with_daemon:
        td = Path(tempfile.mkdtemp(prefix="hbf-unsup-"))
        hb = start_hbfd(td)
        summary = hb.summary
        s = runtime_cuda.attach(socket=str(hb.socket))
        raw = cudrv.mem_alloc(2 << 20)
        src = (raw + 4095) & ~4095
        dst, tier = cudrv.mem_alloc(512 * 32), cudrv.mem_alloc(512 * 8)
        s.register_timing_range(src, 1 << 20, C.HBF_PERM_READ)
        _, b, fns = session_module(s, cubin)
        s.launch(fns["sem_instr"], (1,), (32,), [ctypes.c_int32(12), ctypes.c_uint64(src), ctypes.c_uint64(dst),
                                                  ctypes.c_uint64(tier), ctypes.c_int64(65536), ctypes.c_int32(16)],
                 kernel="sem_instr")
        try:
            s.synchronize()
            out["ended_with"] = "no error (WRONG)"
        except Exception as e:  # noqa: BLE001
            out["ended_with"] = f"{type(e).__name__}: {e}"
        f = s.device_failure()
        out["device_failure_status"] = D.C_STATUS_NAMES[f[0]] if f else None
        s.client.call("Shutdown", s.client.pb.ShutdownRequest(reason="unsupported-access proof"))
        hb.wait(30)
        out["summary_written"] = summary.exists()
        if summary.exists():
            doc = json.loads(summary.read_text())
            found = []

            def walk(x):
                if isinstance(x, dict):
                    if x.get("kind") == "device_failure":
                        found.append(x)
                    for v in x.values():
                        walk(v)
                elif isinstance(x, list):
                    for v in x:
                        walk(v)
            walk(doc)
            out["summary_device_failure_reports"] = found
        return out
    H = Harness(cubin)
    src = H.alloc(1 << 20)
    dst, tier = H.alloc(512 * 32), H.alloc(512 * 8)
    H.configure([rng(src + 65536 + 2, 4096)], C.HBF_SRC_FIXED)
    H.launch("sem_instr", (1,), (32,), [ctypes.c_int32(2), ctypes.c_uint64(src), ctypes.c_uint64(dst),
                                        ctypes.c_uint64(tier), ctypes.c_int64(65536), ctypes.c_int32(16)])
    try:
        cudrv.ctx_synchronize()
        out["ended_with"] = ("kernel ended (failing warps exited), failure recorded" if int(H.ctl.header.device_failure)
                            else "no error and no failure recorded (WRONG)")
    except Exception as e:  # noqa: BLE001
        out["ended_with"] = str(e)
    w = int(H.ctl.header.device_failure)
    out["device_failure_status"] = D.C_STATUS_NAMES[w >> 32] if w else None
    out["site"] = w & 0xFFFFFFFF
    return out


def child_missing_perm(cubin: str) -> dict:
    H = Harness(cubin)
    src = H.alloc(1 << 20)
    dst, tier = H.alloc(512 * 32), H.alloc(512 * 8)
    H.configure([rng(src, 1 << 20, perms=C.HBF_PERM_READ)], C.HBF_SRC_FIXED)
    H.launch("sem_instr", (1,), (32,), [ctypes.c_int32(12), ctypes.c_uint64(src), ctypes.c_uint64(dst),
                                        ctypes.c_uint64(tier), ctypes.c_int64(65536), ctypes.c_int32(16)])
    out = {}
    try:
        cudrv.ctx_synchronize()
        out["ended_with"] = ("kernel ended (failing warps exited), failure recorded" if int(H.ctl.header.device_failure)
                            else "no error and no failure recorded (WRONG)")
    except Exception as e:  # noqa: BLE001
        out["ended_with"] = str(e)
    w = int(H.ctl.header.device_failure)
    out["device_failure_status"] = D.C_STATUS_NAMES[w >> 32] if w else None
    return out


def child_thermal_shutdown(cubin: str) -> dict:
    H = Harness(cubin)
    buf = H.alloc(1 << 20)
    H.set_thermal(C.HBF_TH_SHUTDOWN, 1, 0)
    H.configure([rng(buf, 1 << 20)], C.HBF_SRC_FIXED, fixed_read_ns=20_000)
    out = {}
    try:
        probe(H, 0, 1, buf)
        out["ended_with"] = ("kernel ended (failing warps exited), failure recorded" if int(H.ctl.header.device_failure)
                            else "no error and no failure recorded (WRONG)")
    except Exception as e:  # noqa: BLE001
        out["ended_with"] = str(e)
    w = int(H.ctl.header.device_failure)
    out["device_failure_status"] = D.C_STATUS_NAMES[w >> 32] if w else None
    return out


def run_child(which: str, cubin: str, timeout: float = 60) -> dict:
    t = time.time()
    r = subprocess.run([sys.executable, __file__, "--child", which, "--cubin", cubin], capture_output=True,
                       text=True, timeout=timeout, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    last = [ln for ln in r.stdout.splitlines() if ln.startswith("CHILD-JSON ")]
    if not last:
        raise RuntimeError(f"child {which} rc={r.returncode}: {r.stdout[-1500:]} {r.stderr[-2500:]}")
    out = json.loads(last[-1][len("CHILD-JSON "):])
    out["child_seconds"] = time.time() - t
    out["child_rc"] = r.returncode
    return out


def exp_demo() -> dict:
    from workloads import demo_gpu as demo
    with tempfile.TemporaryDirectory(prefix="hbf-demo-") as td:
        with start_hbfd(Path(td)) as hb:
            return demo.microbench_demo(socket=str(hb.socket))


# ------------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--only", default="")
    ap.add_argument("--child", default="")
    ap.add_argument("--cubin", default="")
    a = ap.parse_args()
    os.environ.setdefault("HBF_COMPLETION_TIMEOUT_NS", "5000000000")   # a lost completion fails, never hangs
    if a.child:
        fn = {"daemon_lost": lambda: child_daemon_lost(a.cubin),
              "partial_local": lambda: child_partial(a.cubin, False),
              "partial_daemon": lambda: child_partial(a.cubin, True),
              "missing_perm": lambda: child_missing_perm(a.cubin),
              "thermal_shutdown": lambda: child_thermal_shutdown(a.cubin),
              "hbfcc": lambda: exp_hbfcc(Harness(a.cubin)),
              "reference_rate": lambda: exp_reference_rate(a.cubin),
              "demo": exp_demo}[a.child]
        try:
            res = fn()
        except Exception as e:  # noqa: BLE001
            res = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        print("CHILD-JSON " + json.dumps(res, default=str), flush=True)
        os._exit(0)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, a.only.split(",")))
    results: dict = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                     "command": " ".join([Path(sys.executable).name] + sys.argv)}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001
        smi = f"nvidia-smi failed: {e}"
    results["gpu"] = smi
    b = build()
    results["build"] = b
    try:
        ru = subprocess.run(["cuobjdump", "-res-usage", b["cubin"]], capture_output=True, text=True, timeout=60)
        results["resource_usage"] = [ln.strip() for ln in (ru.stdout + ru.stderr).splitlines()
                                     if "REG" in ln or "Function" in ln][:60]
    except Exception as e:  # noqa: BLE001
        results["resource_usage"] = f"cuobjdump failed: {e}"
    cubin = b["cubin"]
    H = None

    def run(name, fn):
        if only and name not in only:
            return
        log(f"--- {name}")
        t = time.time()
        try:
            results[name] = fn()
            results[name]["seconds"] = round(time.time() - t, 2)
        except Exception as e:  # noqa: BLE001
            results[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        log(f"{name}: {json.dumps(_brief(results[name]), default=str)[:600]}")
        (out / "runtime_proofs.json").write_text(json.dumps(results, indent=1, default=str))

    def harness():
        nonlocal H
        if H is None:
            H = Harness(cubin)
            results["control_region_ptr_equal"] = H.ptr_equal
        return H

    run("semantic", lambda: exp_semantic(harness()))
    run("fidelity", lambda: exp_fidelity(harness()))
    run("native_overhead", lambda: exp_native_overhead(harness()))
    # everything below runs in its own process: a trapped kernel ends that process's context only
    run("fault_partial_overlap_local", lambda: run_child("partial_local", cubin))
    run("fault_missing_permission", lambda: run_child("missing_perm", cubin))
    run("fault_thermal_shutdown", lambda: run_child("thermal_shutdown", cubin))
    run("reference_rate", lambda: run_child("reference_rate", cubin, timeout=120))
    run("fault_daemon_lost", lambda: run_child("daemon_lost", cubin))
    run("fault_unsupported_daemon_summary", lambda: run_child("partial_daemon", cubin))
    run("demo", lambda: run_child("demo", cubin))
    run("hbfcc_built", lambda: run_child("hbfcc", cubin, timeout=120))

    def gpu_pytest():
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
                            "tests/runtime/test_runtime_gpu.py"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
        return {"rc": r.returncode, "tail": (r.stdout + r.stderr)[-1500:]}
    run("gpu_pytest", gpu_pytest)
    (out / "runtime_proofs.json").write_text(json.dumps(results, indent=1, default=str))
    log("done")
    return 0


def _brief(r: dict) -> dict:
    if "error" in r:
        return {"error": r["error"]}
    keep = {}
    for k, v in r.items():
        if k in ("detail", "traceback", "requests_per_case", "counters", "status_totals", "summary_excerpt"):
            continue
        keep[k] = v
    return keep


if __name__ == "__main__":
    sys.exit(main())
