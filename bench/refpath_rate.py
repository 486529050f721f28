#!/usr/bin/env python3
"""Reference-path bottleneck and fail-fast experiments on the GPU (issue 4, runtime_cuda).

    PYTHONUNBUFFERED=1 python3 bench/refpath_rate.py --out DIR [--base-src OLD_HELPERS.cu] [--variants a,b]

Builds the device helpers (runtime_cuda/src/hbf_helpers.cu) in several variants (compile-time macros,
one helper PTX each, linked into the microbench cubin), then per variant, each in its own process
(bench/runtime_proofs.py children):
  rate      exp_reference_rate: rate_instr through the real hbfd (req/s, modeled/lateness/helper split);
            the trace builds (HBF_REF_TRACE=1) add per-request timelines (issue, completion visible,
            lateness past the modeled deadline, polls) and hbfd's ring-service batch sizes
  lost      child_daemon_lost: SIGKILL hbfd mid-kernel -> failure recorded / kernel end / what
            Session.synchronize() raises / context usable afterwards
  hang      a kernel whose second warp never calls the helpers and waits (shared-memory flag) for the
            first warp, whose reference load fails (hbfd killed before the launch): the exit policy
            leaves warp 1 waiting; Session.synchronize() must end it (backstop trap) and raise
Variant "base" builds --base-src (the helpers before this change) for the side-by-side baseline.
Writes DIR/refpath_rate.json.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import runtime_proofs as RP  # noqa: E402
from runtime_cuda import cudrv, linker  # noqa: E402

VARIANTS = {
    # name: (source: "new" | "base", macros)
    "base": ("base", []),
    "sys_trace": ("new", ["-DHBF_REF_TRACE=1", "-DHBF_REF_CONSUMED_SYS=1", "-DHBF_THERMAL_SF=0"]),
    "new_trace": ("new", ["-DHBF_REF_TRACE=1"]),
    "tagged_trace": ("new", ["-DHBF_REF_TRACE=1", "-DHBF_REF_TAGGED=1"]),
    "new": ("new", []),
    "tagged": ("new", ["-DHBF_REF_TAGGED=1"]),
    "lean": ("new", ["-DHBF_OOL_OPAQUE=1"]),
}

HANG_SRC = r'''
extern "C" __device__ unsigned long long __hb_issue(unsigned long long addr, unsigned int bytes,
                                                   unsigned int flags, unsigned int site);
extern "C" __device__ void __hb_wait(unsigned long long fut, unsigned int site);
// warp 0: one reference-path load, then it releases warp 1 through shared memory;
// warp 1 never calls the helpers and waits for warp 0.
extern "C" __global__ void hang_instr(const unsigned* src, unsigned* out) {
    __shared__ volatile unsigned flag;
    if (threadIdx.x == 0) flag = 0u;
    __syncthreads();
    if (threadIdx.x < 32) {
        const unsigned* p = src + threadIdx.x;
        unsigned long long f = __hb_issue((unsigned long long)p, 4u, 0u | 4u, 0u);
        unsigned v = *p;
        __hb_wait(f, 0u);
        out[threadIdx.x] = v;
        __threadfence_block();
        if (threadIdx.x == 0) flag = 1u;
    } else {
        while (flag == 0u) { }
        out[threadIdx.x] = 1u;
    }
}
'''


PCIE_SRC = r'''
// Host-mapped memory costs seen from the GPU (no helpers): lane 0 of every warp, `iters` times, on its
// own 64-byte line of a host-registered buffer. mode 0: ld.acquire.sys (a completion poll);
// 1: the request publication as the helpers do it (8 B + three 16 B st.volatile, then st.release.sys
// seq = MEMBAR.ALL.SYS + store); 2: the same without the fence (seq with st.volatile); 3: one
// st.release.gpu (the consumed mark, MEMBAR.ALL.GPU); 4: one st.release.sys.
extern "C" __global__ void pcie_probe(unsigned long long* host, unsigned long long* out, int iters, int mode) {
    if ((threadIdx.x & 31u) != 0u) return;
    const unsigned w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    unsigned long long* a = host + (unsigned long long)(w & 4095u) * 8ull;
    unsigned long long acc = 0ull;
    for (int i = 0; i < iters; ++i) {
        const unsigned long long v = (unsigned long long)i + 1ull;
        if (mode == 0) {
            unsigned long long x;
            asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(x) : "l"(a) : "memory");
            acc += x;
        } else if (mode == 1 || mode == 2) {
            asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(a + 1), "l"(v) : "memory");
            asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(a + 2), "l"(v), "l"(v) : "memory");
            asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(a + 4), "l"(v), "l"(v) : "memory");
            asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(a + 6), "l"(v), "l"(v) : "memory");
            if (mode == 1) asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(a), "l"(v) : "memory");
            else asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(a), "l"(v) : "memory");
        } else if (mode == 3) {
            asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(a + 5), "l"(v) : "memory");
        } else {
            asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(a + 5), "l"(v) : "memory");
        }
    }
    out[w] = acc;
}
'''


def child_pcie() -> dict:
    """Throughput of host-mapped operations from W warps at once (ops/s = W * iters / kernel time)."""
    import mmap
    d = cudrv.drv()
    dev, ctx = cudrv.init_context(0)
    td = Path(tempfile.mkdtemp(prefix="hbf-pcie-"))
    (td / "p.cu").write_text(PCIE_SRC)
    linker.run([linker.tool("nvcc"), "-O3", "-arch=sm_90a", "-cubin", str(td / "p.cu"), "-o", str(td / "p.cubin")])
    mod = cudrv.module_load_data((td / "p.cubin").read_bytes())
    fn = cudrv.module_function(mod, "pcie_probe")
    mm = mmap.mmap(-1, 4096 * 64)
    host = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    hdev = cudrv.host_register(host, 4096 * 64)
    out = cudrv.mem_alloc(1 << 20)
    rows = []
    names = {0: "ld.acquire.sys", 1: "publish (4 stores + st.release.sys)", 2: "publish without fence",
             3: "st.release.gpu", 4: "st.release.sys"}
    for mode in (0, 1, 2, 3, 4):
        for warps in (1, 132, 528, 2048):
            iters = 200 if warps > 1 else 2000
            blocks = max(1, warps // 4)
            tpb = 128 if warps >= 4 else 32 * warps
            args = [ctypes.c_uint64(hdev), ctypes.c_uint64(out), ctypes.c_int32(iters), ctypes.c_int32(mode)]
            cudrv.launch(fn, (blocks,), (tpb,), args)
            cudrv.ctx_synchronize()
            ts = []
            for _ in range(3):
                t = time.perf_counter()
                cudrv.launch(fn, (blocks,), (tpb,), args)
                cudrv.ctx_synchronize()
                ts.append(time.perf_counter() - t)
            el = sorted(ts)[1]
            nw = blocks * tpb // 32
            rows.append({"op": names[mode], "warps": nw, "iters": iters, "seconds_median_of_3": el,
                         "ops_per_s": nw * iters / el, "ns_per_op_per_warp": el / iters * 1e9})
            RP.log(f"pcie {names[mode]} warps {nw}: {nw * iters / el / 1e6:.2f} M ops/s, {el / iters * 1e9:.0f} ns/op per warp")
    return {"rows": rows, "note": "lane 0 of each warp; own 64 B line per warp in a host-registered buffer"}


def log(msg: str) -> None:
    RP.log(msg)


def build_variant(name: str, src: Path, macros: list[str], outdir: Path) -> dict:
    outdir.mkdir(parents=True, exist_ok=True)
    ptx = outdir / "hbf_helpers.ptx"
    linker.run([linker.tool("nvcc"), "-std=c++17", "-O3", "-arch=compute_90a", "-rdc=true", "-ptx",
                f"-I{ROOT / 'runtime_cuda' / 'include'}", f"-I{ROOT / 'runtime_cuda' / 'src'}", *macros, str(src), "-o", str(ptx) + ".tmp"])
    ptx.write_text(Path(str(ptx) + ".tmp").read_text().replace("\n.visible .func", "\n.weak .func"))
    os.environ["HBFCC_HELPER_PTX"] = str(ptx)
    info = linker.build_microbench(outdir)
    (outdir / "hang.cu").write_text(HANG_SRC)
    hang_ptx = linker.cu_to_ptx(outdir / "hang.cu", outdir / "hang.ptx")
    hang = linker.link_cubin([hang_ptx], outdir / "hang.cubin")
    return {"helper_ptx": str(ptx), "cubin": str(info["cubin"]), "hang_cubin": str(hang), "macros": macros,
            "source": str(src), "ptx_exit": ptx.read_text().count("exit;"), "ptx_trap": ptx.read_text().count("trap;")}


def child_hang(cubin: str) -> dict:
    import runtime_cuda
    from runtime_cuda import devstate as D
    td = tempfile.mkdtemp(prefix="hbf-hang-")
    hb = RP.start_hbfd(Path(td))
    s = runtime_cuda.attach(socket=str(hb.socket))
    src = cudrv.mem_alloc(1 << 20)
    out = cudrv.mem_alloc(4096)
    s.register_timing_range(src, 1 << 20)
    mod = cudrv.module_load_data(Path(cubin).read_bytes())
    b = s.bind_module(mod, artifact={"kernels": [{"name": "hang_instr", "admitted": True, "reasons": []}],
                                     "note": "hand-instrumented hang probe"})
    fn = cudrv.module_function(mod, "hang_instr")
    s.note_function(fn, b, "hang_instr")
    os.kill(hb.pid, signal.SIGKILL)
    hb.wait()
    t0 = time.monotonic_ns()
    s.launch(fn, (1,), (64,), [ctypes.c_uint64(src), ctypes.c_uint64(out)], kernel="hang_instr")
    err = None
    try:
        s.synchronize()
        err = "no error (WRONG)"
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
        fields = getattr(e, "fields", {})
    t1 = time.monotonic_ns()
    f = s.device_failure()
    return {"synchronize_returned_ms": (t1 - t0) / 1e6, "raised": err,
            "backstop": getattr(s, "failure_backstop", None), "fields": {k: str(v) for k, v in (fields or {}).items()}
            if err and "WRONG" not in err else None,
            "device_failure_status": D.C_STATUS_NAMES[f[0]] if f else None,
            "clock": "host monotonic from the launch (hbfd already killed) to Session.synchronize() returning"}


def run_child(which: str, cubin: str, timeout: float = 90, env: dict | None = None) -> dict:
    t = time.time()
    try:
        r = subprocess.run([sys.executable, __file__, "--child", which, "--cubin", cubin], capture_output=True,
                           text=True, timeout=timeout, env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))
    except subprocess.TimeoutExpired as e:
        return {"error": f"child {which} timed out after {timeout} s (a hang)", "stdout": str(e.stdout)[-1500:]}
    last = [ln for ln in r.stdout.splitlines() if ln.startswith("CHILD-JSON ")]
    if not last:
        return {"error": f"child {which} rc={r.returncode}", "tail": (r.stdout + r.stderr)[-2500:]}
    out = json.loads(last[-1][len("CHILD-JSON "):])
    out["child_seconds"] = round(time.time() - t, 2)
    out["child_log"] = [ln for ln in r.stdout.splitlines() if ln.startswith("[")][-20:]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--base-src", default="")
    ap.add_argument("--variants", default="base,sys_trace,new_trace,tagged_trace")
    ap.add_argument("--exps", default="pcie,rate,lost,hang")
    ap.add_argument("--lost-variants", default="base,new_trace")
    ap.add_argument("--hang-variants", default="new_trace")
    ap.add_argument("--plan", default="")
    ap.add_argument("--child", default="")
    ap.add_argument("--cubin", default="")
    a = ap.parse_args()
    os.environ.setdefault("HBF_COMPLETION_TIMEOUT_NS", "5000000000")
    if a.child:
        fn = {"rate": lambda: RP.exp_reference_rate(a.cubin), "lost": lambda: RP.child_daemon_lost(a.cubin),
              "pcie": child_pcie,
              "hang": lambda: child_hang(a.cubin)}[a.child]
        try:
            res = fn()
        except Exception as e:  # noqa: BLE001
            res = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        print("CHILD-JSON " + json.dumps(res, default=str), flush=True)
        os._exit(0)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                 "command": " ".join([Path(sys.executable).name] + sys.argv), "variants": {}}
    try:
        res["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001
        res["gpu"] = str(e)
    exps = set(a.exps.split(","))
    names = [v for v in a.variants.split(",") if v]
    env = {"HBF_BENCH_REF_PLAN": a.plan} if a.plan else {}

    def save():
        (out / "refpath_rate.json").write_text(json.dumps(res, indent=1, default=str))

    if "pcie" in exps:
        log("--- pcie probe")
        res["pcie"] = run_child("pcie", "", timeout=90)
        save()
    for spec in names:
        name, _, opt = spec.partition("+")     # "new_trace+norefresh": hbfd with HBFD_REFRESH=none
        kind, macros = VARIANTS[name]
        src = Path(a.base_src) if kind == "base" else ROOT / "runtime_cuda" / "src" / "hbf_helpers.cu"
        if not src.exists():
            res["variants"][name] = {"error": f"no source {src}"}
            continue
        v: dict = {}
        res["variants"][spec] = v
        if opt and opt != "norefresh":
            v["error"] = f"unknown option {opt}"
            continue
        try:
            t = time.time()
            v["build"] = build_variant(name, src, macros, ROOT / "build" / "refpath" / name)
            v["build"]["seconds"] = round(time.time() - t, 1)
        except Exception as e:  # noqa: BLE001
            v["build_error"] = f"{type(e).__name__}: {e}"[-3000:]
            log(f"{name}: build failed: {v['build_error'][:400]}")
            save()
            continue
        cub = v["build"]["cubin"]
        if "rate" in exps:
            log(f"--- {name}: rate")
            henv = {"HBFD_REFRESH": "none"} if opt else {}
            if "-DHBF_REF_TAGGED=1" in macros:
                henv["HBFD_RING_TAGS"] = "1"     # hbfd validates the check tags (hbfd/knobs.py)
            renv = dict(env, HBF_BENCH_HBFD_ENV=json.dumps(henv)) if henv else env
            v["rate"] = run_child("rate", cub, timeout=120, env=renv)
            for r in v["rate"].get("rows", []):
                tl = r.get("trace", {})
                log(f"{spec}: {r['warps']} warps cap {r['backoff_max_ns']}: {r['req_per_s']:.0f} req/s"
                    + (f"; issue p50 {tl['issue_ns']['p50']:.0f} visible p50 {tl['visible_ns']['p50']:.0f}"
                       f" late p50 {tl['late_ns']['p50']:.0f} polls p50 {tl['polls']['p50']:.0f}" if tl.get("n") else ""))
            if "error" in v["rate"]:
                log(f"{name}: rate error {str(v['rate'])[:800]}")
            save()
        if opt:
            save()
            continue
        if "lost" in exps and name in a.lost_variants.split(","):
            log(f"--- {name}: daemon lost")
            v["lost"] = run_child("lost", cub, timeout=60)
            log(f"{name}: lost {json.dumps({k: v['lost'].get(k) for k in ('failure_visible_ms', 'kernel_end_ms', 'synchronize_returned_ms', 'synchronize_raised', 'context_usable_after', 'error')}, default=str)[:600]}")
            save()
        if "hang" in exps and name in a.hang_variants.split(","):
            log(f"--- {name}: hang backstop")
            v["hang"] = run_child("hang", v["build"]["hang_cubin"], timeout=60)
            log(f"{name}: hang {json.dumps({k: v['hang'].get(k) for k in ('synchronize_returned_ms', 'raised', 'backstop', 'error')}, default=str)[:600]}")
            save()
    save()
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
