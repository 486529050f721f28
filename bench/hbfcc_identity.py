#!/usr/bin/env python3
"""Instrumented == uninstrumented, bit for bit, with no ranges registered (issue 3, done-criterion).

An nvcc-built CUDA program (vector/scalar/predicated/generic/volatile/acquire-release/atomic/
cp.async/pointer-chasing kernels) is built twice: plain ``nvcc`` and ``hbfcc`` (the drop-in nvcc);
a set of Triton 3.6 kernels (elementwise, softmax, cp.async-pipelined matmul, int atomics
histogram, layer norm) is compiled twice: ``TRITON_PTXAS_PATH=<CUDA's ptxas>`` and ``TRITON_PTXAS_PATH=hbfcc-ptxas`` (same real ptxas).
Both builds run on the same inputs; every output buffer is compared byte for byte. Nothing attaches
the runtime, so the module globals ``__hb_state`` stay 0 and the helpers take their native path:
an unbound module must compute exactly what the plain build computes. The instrumented builds are
checked to really be instrumented (``__hb_issue`` in the cubins, admission artifacts written).
Kernel times of both builds (helpers inactive) are recorded as a secondary number.

    python3 bench/hbfcc_identity.py [--out DIR]            # GPU
    python3 bench/hbfcc_identity.py --build-only           # CPU: builds and compiles only
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from hbfcommon import resources  # noqa: E402

CUDA_SRC = r"""
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>
#include <cuda_pipeline.h>
#include <algorithm>
#include <cstdlib>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(2);} } while (0)

__global__ void k_vec(const float4* __restrict__ a, const float* b, float* out, int n4, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n4) {
    float4 v = a[i];
    out[4 * i + 0] = v.x * 2.f + b[4 * i + 0];
    out[4 * i + 1] = v.y * 2.f + b[4 * i + 1];
    out[4 * i + 2] = v.z * 2.f + b[4 * i + 2];
    out[4 * i + 3] = v.w * 2.f + b[4 * i + 3];
  }
  int t = 4 * n4 + i;                              // predicated scalar tail
  if (i < n - 4 * n4) out[t] = ((const float*)a)[t] * 2.f + b[t];
}

__device__ __noinline__ float gen_load(const float* p, int i) { return p[i]; }  // generic ld

__global__ void k_gather(const long long* idx, const float* src, float* out, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = (i < n) ? src[i] : 0.f;
  __syncthreads();
  if (i < n) {
    long long j = idx[i];
    float g = gen_load(src, (int)j);                              // global through generic
    float s = gen_load(tile, (threadIdx.x + 1) % blockDim.x);     // shared through generic
    out[i] = g + 0.5f * s;
  }
}

__global__ void k_hist(const int* data, unsigned int* hist, int n, int bins) {
  __shared__ unsigned int sh[64];
  for (int b = threadIdx.x; b < bins; b += blockDim.x) sh[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&sh[(unsigned)data[i] % bins], 1u);
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) atomicAdd(&hist[b], sh[b]);
}

__global__ void k_flag(int* data, volatile int* flag, int* out) {
  if (threadIdx.x == 0) { data[blockIdx.x] = 1000 + blockIdx.x; __threadfence(); *flag = 1; }
  __syncthreads();
  int f = *flag;                                     // ld.volatile
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(data + blockIdx.x) : "memory");
  asm volatile("st.release.gpu.global.b32 [%0], %1;" :: "l"(out + blockIdx.x * blockDim.x + threadIdx.x),
               "r"(v + f + (int)threadIdx.x) : "memory");
}

__global__ void k_cpasync(const float* __restrict__ src, float* out, int n) {
  __shared__ __align__(16) float buf[2][256];
  int base = blockIdx.x * 512;
  int t = threadIdx.x;
  for (int s = 0; s < 2; ++s) {
    int g = base + s * 256 + t;
    if (g < n) __pipeline_memcpy_async(&buf[s][t], &src[g], sizeof(float));
    else buf[s][t] = 0.f;
    __pipeline_commit();
  }
  __pipeline_wait_prior(1);
  __syncthreads();
  float a = buf[0][(t + 3) % 256];
  __pipeline_wait_prior(0);
  __syncthreads();
  float b = buf[1][(t + 5) % 256];
  if (base + t < n) out[base + t] = a * 3.f - b;
}

__global__ void k_chase(const int* next, const float* val, float* out, int n, int steps) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int p = i;
  float acc = 0.f;
  for (int s = 0; s < steps; ++s) {
    float v = val[p];
    if (v > 0.5f) acc += v;                          // predicated use
    acc = acc * 0.5f + v;                            // unconditional use
    p = next[p];
  }
  out[i] = acc;
}

template <class T> static T* dev(const std::vector<T>& h) {
  T* d; CK(cudaMalloc(&d, h.size() * sizeof(T) + 16));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); return d;
}
template <class T> static void dump(FILE* f, const T* d, size_t n) {
  std::vector<T> h(n); CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  std::fwrite(h.data(), sizeof(T), n, f);
}

int main(int argc, char** argv) {
  if (argc < 2) { std::fprintf(stderr, "usage: prog OUT.bin\n"); return 1; }
  const int n = (1 << 20) + 3, n4 = n / 4, bins = 61, steps = 64, reps = 20;
  uint32_t s = 12345u; auto rnd = [&]() { s = s * 1664525u + 1013904223u; return s; };
  std::vector<float> a(n), b(n); std::vector<long long> idx(n); std::vector<int> data(n), next(n);
  for (int i = 0; i < n; ++i) { a[i] = (rnd() % 10000) / 7919.f; b[i] = (rnd() % 1000) / 997.f;
    idx[i] = rnd() % n; data[i] = (int)(rnd() % 100000); next[i] = (int)(rnd() % n); }
  float *da = dev(a), *db = dev(b), *o1, *o2, *o5, *o6; long long* di = dev(idx); int *dd = dev(data), *dn = dev(next);
  unsigned int* hist; int *fdata, *flag, *o4;
  CK(cudaMalloc(&o1, n * 4)); CK(cudaMalloc(&o2, n * 4)); CK(cudaMalloc(&o5, n * 4)); CK(cudaMalloc(&o6, n * 4));
  CK(cudaMalloc(&hist, bins * 4)); CK(cudaMalloc(&fdata, 64 * 4)); CK(cudaMalloc(&flag, 4)); CK(cudaMalloc(&o4, 64 * 128 * 4));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  const char* names[6] = {"vec", "gather", "hist", "flag", "cpasync", "chase"};
  std::vector<float> ms[6];
  for (int r = 0; r < reps; ++r) {
    CK(cudaMemset(hist, 0, bins * 4)); CK(cudaMemset(flag, 0, 4));
    for (int k = 0; k < 6; ++k) {
      CK(cudaEventRecord(e0));
      switch (k) {
        case 0: k_vec<<<(n4 + 255) / 256, 256>>>((const float4*)da, db, o1, n4, n); break;
        case 1: k_gather<<<(n + 255) / 256, 256>>>(di, da, o2, n); break;
        case 2: k_hist<<<264, 256>>>(dd, hist, n, bins); break;
        case 3: k_flag<<<64, 128>>>(fdata, flag, o4); break;
        case 4: k_cpasync<<<(n + 511) / 512, 256>>>(da, o5, n); break;
        case 5: k_chase<<<(n + 255) / 256, 256>>>(dn, da, o6, n, steps); break;
      }
      CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaGetLastError());
      float t; CK(cudaEventElapsedTime(&t, e0, e1)); ms[k].push_back(t);
    }
  }
  FILE* f = std::fopen(argv[1], "wb");
  dump(f, o1, n); dump(f, o2, n); dump(f, hist, bins); dump(f, o4, 64 * 128); dump(f, o5, n); dump(f, o6, n);
  std::fclose(f);
  std::printf("{");
  for (int k = 0; k < 6; ++k) {
    std::sort(ms[k].begin(), ms[k].end());
    std::printf("%s\"%s\": %.5f", k ? ", " : "", names[k], ms[k][ms[k].size() / 2]);
  }
  std::printf("}\n");
  return 0;
}
"""

TRITON_SRC = r'''
import json, os, sys, time
from pathlib import Path
import torch, triton
from workloads import triton_kernels

# the kernels (workloads/triton_kernels.py), written beside this script: Triton reads their source there
TK = triton_kernels.load(Path(__file__).with_name("tk_identity.py"),
                         {"k_add": "add", "k_softmax": "softmax", "k_matmul": "matmul", "k_hist": "hist",
                          "k_layernorm": "layernorm"})

def main(out_dir):
    torch.manual_seed(0)
    dev = "cuda"
    n = (1 << 20) + 7
    x = torch.rand(n, device=dev); y = torch.rand(n, device=dev)
    sm_in = torch.randn(512, 1000, device=dev)
    M = N = K = 512
    A = torch.randn(M, K, device=dev, dtype=torch.float16); Bm = torch.randn(K, N, device=dev, dtype=torch.float16)
    hx = torch.randint(0, 1 << 20, (n,), device=dev, dtype=torch.int32)
    ln_x = torch.randn(256, 768, device=dev); ln_w = torch.rand(768, device=dev); ln_b = torch.rand(768, device=dev)
    outs, times, kernels = {}, {}, []

    def timed(name, fn, reps=20):
        fn(); torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
        ts.sort(); times[name] = ts[len(ts) // 2]

    o = torch.empty_like(x)
    timed("add", lambda: kernels.append(TK.k_add[(triton.cdiv(n, 1024),)](x, y, o, n, B=1024)))
    outs["add"] = o
    so = torch.empty_like(sm_in)
    timed("softmax", lambda: kernels.append(TK.k_softmax[(512,)](sm_in, so, 1000, sm_in.stride(0), B=1024)))
    outs["softmax"] = so
    C = torch.empty(M, N, device=dev, dtype=torch.float16)
    timed("matmul", lambda: kernels.append(TK.k_matmul[(M // 64, N // 64)](A, Bm, C, M, N, K, A.stride(0), A.stride(1),
          Bm.stride(0), Bm.stride(1), C.stride(0), C.stride(1), BM=64, BN=64, BK=32, num_stages=3, num_warps=4)))
    outs["matmul"] = C
    H = torch.zeros(97, device=dev, dtype=torch.int32)
    def hist():
        H.zero_(); kernels.append(TK.k_hist[(triton.cdiv(n, 1024),)](hx, H, n, BINS=97, B=1024))
    timed("hist", hist)
    outs["hist"] = H
    lo = torch.empty_like(ln_x)
    timed("layernorm", lambda: kernels.append(TK.k_layernorm[(256,)](ln_x, ln_w, ln_b, lo, 768, 1e-5, B=1024)))
    outs["layernorm"] = lo
    torch.cuda.synchronize()
    seen, inst = set(), {}
    for k in kernels:
        nm = k.name if hasattr(k, "name") else str(k)
        if nm in seen:
            continue
        seen.add(nm)
        inst[nm] = {"cubin_has_hb_issue": b"__hb_issue" in k.asm["cubin"], "n_regs": k.n_regs,
                    "ptx_sha256": __import__("hashlib").sha256(k.asm["ptx"].encode()).hexdigest()}
    for name, t in outs.items():
        t.cpu().contiguous().numpy().tofile(os.path.join(out_dir, name + ".bin"))
    print(json.dumps({"times_ms": times, "kernels": inst, "ptxas": str(triton.knobs.nvidia.ptxas.path)}))

if __name__ == "__main__":
    main(sys.argv[1])
'''


def sh(argv, **kw) -> subprocess.CompletedProcess:
    cp = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)
    if cp.returncode != 0:
        raise SystemExit(f"failed ({cp.returncode}): {' '.join(map(str, argv))}\n{cp.stdout[-3000:]}\n{cp.stderr[-3000:]}")
    return cp


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


class _Skip(Exception):
    """A part of the run left out on purpose (its reason recorded)."""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "bench" / "results"))
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--jit", action="store_true",
                    help="the nvcc program only, its hbfcc build with HBFCC_JIT=1 (PTX only: the driver JIT-compiles "
                         "the rewritten PTX at the load, on an empty CUDA_CACHE_PATH); writes hbfcc_identity_jit.json")
    ns = ap.parse_args()
    out_dir = Path(ns.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="hbfcc-identity."))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["HBFCC_ARTIFACT_DIR"] = str(work / "artifacts")
    env["HBFCC_CACHE_DIR"] = str(work / "hbfcc-cache")
    helper = resources.helper_ptx_path("direct")
    if not helper.is_file() or helper.stat().st_mtime < (REPO / "runtime_cuda" / "src" / "hbf_helpers.cu").stat().st_mtime:
        sh([sys.executable, "setup.py", "helper-ptx", "direct", helper], cwd=REPO)   # = make helpers-ptx
    env["HBFCC_HELPER_PTX"] = str(helper)
    real_ptxas = shutil.which("ptxas") or os.path.join(os.path.dirname(os.path.realpath(shutil.which("nvcc") or "")), "ptxas")
    env["HBFCC_REAL_PTXAS"] = real_ptxas
    env.pop("HBFCC_JIT", None)
    if ns.jit:
        env["HBFCC_JIT"] = "1"
    py = sys.executable
    # hbfcc / hbfcc-ptxas as executables (works without an installed venv)
    for name, sub in (("hbfcc", ""), ("hbfcc-ptxas", "ptxas ")):
        p = work / "bin" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"#!/bin/sh\nexec {py} -m hbfcc.cli {sub}\"$@\"\n")
        p.chmod(0o755)
    hbfcc, hbfcc_ptxas = work / "bin" / "hbfcc", work / "bin" / "hbfcc-ptxas"
    t_start = time.time()
    res: dict = {"what": "hbfcc identity: instrumented (no ranges registered) vs plain build outputs",
                 "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                 "helper_sha256": sha(helper)}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except OSError:
        smi = ""
    res["gpu"] = smi
    res["real_ptxas"] = real_ptxas
    # ---- nvcc program ----------------------------------------------------------------------
    cu = work / "prog.cu"
    cu.write_text(CUDA_SRC)
    sh(["nvcc", "-arch=sm_90a", "-O3", "-std=c++17", cu, "-o", work / "prog_plain"])
    t0 = time.time()
    sh([hbfcc, "-arch=sm_90a", "-O3", "-std=c++17", cu, "-o", work / "prog_hbf"], env=env)
    res["nvcc_build_s_hbfcc"] = round(time.time() - t0, 2)
    art = json.loads((work / "prog_hbf.hbfcc.json").read_text())
    res["nvcc_artifact"] = {"admitted": art["admitted"], "modules": len(art["modules"]),
                            "kernels": {k["name"]: {"admitted": k["admitted"], "sites": k["sites"],
                                                    "waits": k["waits"], "reasons": k["not_admitted_reasons"]}
                                        for m in art["modules"] if m["ptxas"] and (m["ptxas"].get("target") or "").startswith(
                                            "compute_" if ns.jit else "sm_")
                                        for k in m["kernels"]}}
    if ns.jit:      # PTX only, compressed in the fatbin: the record says what was embedded (its rewritten modules)
        res["jit"] = art.get("jit")
        res["nvcc_hbf_binary_has_hb_issue"] = bool((art.get("jit") or {}).get("applied")) and all(
            m["input"]["transformed_sha256"] != m["input"]["original_sha256"] for m in art["modules"])
    else:
        res["nvcc_hbf_binary_has_hb_issue"] = b"__hb_issue" in (work / "prog_hbf").read_bytes()
    if ns.build_only:
        res["build_only"] = True
        print(json.dumps(res, indent=1))
        return 0
    # ---- run the nvcc programs -----------------------------------------------------------------
    try:
        cp_p = sh([work / "prog_plain", work / "plain.bin"])
        henv = None
        if ns.jit:          # an empty driver compute cache: this run JIT-compiles the rewritten PTX
            henv = dict(os.environ, CUDA_CACHE_PATH=str(work / "cuda_cache"))
            henv.pop("CUDA_CACHE_DISABLE", None)
        t0 = time.monotonic_ns()
        cp_h = sh([work / "prog_hbf", work / "hbf.bin"], env=henv)
        res["hbf_run_wall_ns"] = time.monotonic_ns() - t0
        tp, th = json.loads(cp_p.stdout.strip().splitlines()[-1]), json.loads(cp_h.stdout.strip().splitlines()[-1])
        res["nvcc"] = {"output_bytes": (work / "plain.bin").stat().st_size,
                       "identical": (work / "plain.bin").read_bytes() == (work / "hbf.bin").read_bytes(),
                       "plain_sha256": sha(work / "plain.bin"), "hbfcc_sha256": sha(work / "hbf.bin"),
                       "kernel_ms_median": {k: {"plain": tp[k], "hbfcc": th[k], "ratio": th[k] / tp[k]} for k in tp}}
    except BaseException as e:
        res["nvcc"] = {"error": f"{type(e).__name__}: {e}"[-3000:], "identical": False, "kernel_ms_median": {}}
    try:
        if ns.jit:
            raise _Skip("--jit: the nvcc program only (HBFCC_JIT is an nvcc build mode)")
        # ---- Triton ------------------------------------------------------------------------------
        tsrc = work / "triton_identity.py"
        tsrc.write_text(TRITON_SRC)
        outs = {}
        # both builds use the same real ptxas (CUDA's, not Triton's bundled one): the only difference
        # between them is the instrumentation
        for tag, extra in (("plain", {"TRITON_PTXAS_PATH": real_ptxas}),
                           ("hbfcc", {"TRITON_PTXAS_PATH": str(hbfcc_ptxas)})):
            d = work / f"triton_{tag}"
            d.mkdir()
            e = dict(env, TRITON_CACHE_DIR=str(work / f"tcache_{tag}"), **extra)
            cp = sh([py, tsrc, d], env=e)
            outs[tag] = json.loads(cp.stdout.strip().splitlines()[-1])
        tri = {"ptxas_plain": outs["plain"]["ptxas"], "ptxas_hbfcc": outs["hbfcc"]["ptxas"], "outputs": {}}
        all_tri = True
        for name in outs["plain"]["times_ms"]:
            a = (work / "triton_plain" / f"{name}.bin").read_bytes()
            b = (work / "triton_hbfcc" / f"{name}.bin").read_bytes()
            same = a == b
            all_tri &= same
            tri["outputs"][name] = {"bytes": len(a), "identical": same,
                                    "plain_ms_median": outs["plain"]["times_ms"][name],
                                    "hbfcc_ms_median": outs["hbfcc"]["times_ms"][name],
                                    "time_ratio": outs["hbfcc"]["times_ms"][name] / outs["plain"]["times_ms"][name]}
        tri["kernels_plain"] = outs["plain"]["kernels"]
        tri["kernels_hbfcc"] = outs["hbfcc"]["kernels"]
        tri["all_instrumented"] = all(v["cubin_has_hb_issue"] for v in outs["hbfcc"]["kernels"].values())
        arts = list((work / "artifacts").glob("*.hbfcc.json"))
        tri["artifacts"] = len(arts)
        tri["artifacts_found_by_ptx_sha"] = all((work / "artifacts" / f"{v['ptx_sha256']}.hbfcc.json").is_file()
                                                for v in outs["hbfcc"]["kernels"].values())
        tri["all_identical"] = all_tri
        res["triton"] = tri
    except _Skip as e:
        res["triton"] = tri = {"skipped": str(e), "all_identical": True, "all_instrumented": True, "outputs": {}}
    except BaseException as e:  # record and go on: the nvcc half still counts
        res["triton"] = {"error": f"{type(e).__name__}: {e}"[-3000:], "all_identical": False,
                         "all_instrumented": False, "outputs": {}}
        tri = res["triton"]
    res["identical_all"] = bool(res["nvcc"]["identical"] and tri["all_identical"])
    res["instrumented_all"] = tri["all_instrumented"] and res["nvcc_hbf_binary_has_hb_issue"]
    res["wall_s"] = round(time.time() - t_start, 1)
    res["command"] = "python3 bench/hbfcc_identity.py" + (" --jit" if ns.jit else "")
    p = out_dir / ("hbfcc_identity_jit.json" if ns.jit else "hbfcc_identity_h200.json")
    p.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({"identical_all": res["identical_all"], "instrumented_all": res["instrumented_all"],
                      "nvcc_identical": res["nvcc"]["identical"], "triton": {k: v["identical"] for k, v in tri["outputs"].items()},
                      "nvcc_ratios": {k: round(v["ratio"], 2) for k, v in res["nvcc"]["kernel_ms_median"].items()},
                      "triton_ratios": {k: round(v["time_ratio"], 2) for k, v in tri["outputs"].items()},
                      "wall_s": res["wall_s"]}, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if res["identical_all"] and res["instrumented_all"] else 1


if __name__ == "__main__":
    sys.exit(main())
