/*
 * eidola_kernels.cu — host launcher library for Eidola (loaded by runtime_cuda/eidola.py through
 * ctypes; built with `nvcc -shared` together with workloads/gemv_allreduce/gemv_allreduce.cu).
 *
 * Kernels:
 *   hbf_eidolon_kernel   engine (a): persistent warps walk the time-sorted WTT and perform the real
 *                        stores at t0 + wakeup - lag, then serve the monitor log.
 *   hbf_eidola_probe     visibility probe: one thread polls each registered flag in wakeup order
 *                        and records when it first sees the value (lag calibration, enactment
 *                        error of engines a and b).
 *   hbf_eidola_setup     setup kernel: register_write() from the device (arrays in, staging out).
 *   hbf_eidola_corunner  FMA loop used to measure what freed issue slots buy (E2).
 *
 * Every entry point returns 0 or a cudaError_t; hbe_last_error() names it.
 */
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstddef>

#include "hbf_eidola.cuh"

static thread_local char g_err[512];

static int hbe_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        snprintf(g_err, sizeof g_err, "%s: %s (%d)", what, cudaGetErrorString(e), (int)e);
        return (int)e;
    }
    return 0;
}
#define HBE_TRY(call) do { int _r = hbe_check((call), #call); if (_r) return _r; } while (0)

/* ---------------------------------------------------------------------------------------------- */
__global__ void hbf_eidolon_kernel(hbf_eidola_state* st) {
    const uint64_t n = st->n_entries;
    const uint32_t lane = threadIdx.x & 31u;
    const uint64_t gwarp = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) >> 5;
    const uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    const uint64_t tmo = hbf_eidola_timeout(st);
    const uint64_t start = hb_now();
    /* wait for the target kernel to start */
    uint64_t t0;
    for (;;) {
        t0 = hb_ld_vol(&st->t0);
        if (t0 != ~0ull) break;
        if (hb_now() - start > tmo) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, 0xE1D0u);
        __nanosleep(32);
    }
    const uint64_t* wk = (const uint64_t*)st->t_wakeup;
    const int64_t lag = st->lag_ns;
    uint32_t done_count = 0;
    for (uint64_t c = gwarp; c * 32 < n; c += nwarps) {
        uint64_t i = c * 32 + lane;
        bool done = i >= n;
        uint64_t target = 0;
        if (!done) {
            int64_t t = (int64_t)wk[i] - lag;
            target = t0 + (uint64_t)(t > 0 ? t : 0);
        }
        for (;;) {
            uint64_t now = hb_now();
            if (!done && now >= target) {
                hbf_eidola_enact(st, i, t0);
                done = true;
                ++done_count;
            }
            if (__all_sync(0xffffffffu, done)) break;
            if (now - t0 > tmo + wk[n - 1]) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, 0xE1D1u);
        }
    }
    if (done_count) atomicAdd((unsigned long long*)&st->eidolon_done, (unsigned long long)done_count);
}

/* One thread per stream of addresses (sorted by wakeup): poll each until it equals expect[i],
 * record the first-seen time (relative to t0). Calls kernel_enter itself (it is the target). */
__global__ void hbf_eidola_probe(hbf_eidola_state* st, const uint64_t* addrs, const uint64_t* expect,
                                 uint64_t n, uint64_t* seen_rel, uint32_t* polls, uint32_t streams) {
    uint64_t t0 = hbf_eidola_kernel_enter(st);
    uint32_t s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= streams) return;
    hbf_eidola_acct a;
    hbf_eidola_acct_init(&a, st);
    uint64_t tmo = hbf_eidola_timeout(st);
    for (uint64_t i = s; i < n; i += streams) {
        uint32_t k = 0;
        for (;;) {
            uint64_t v = hbf_eidola_ld_flag(st, &a, t0, (const void*)addrs[i], 4);
            ++k;
            if ((uint32_t)v == (uint32_t)expect[i]) break;
            if (hb_now() - t0 > tmo) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, 0xB0B0u);
        }
        seen_rel[i] = hb_now() - t0;
        polls[i] = k;
    }
    hbf_eidola_acct_flush(st, &a);
}

/* `replicas` blocks, one polling thread each, all poll every address in wakeup order; the
 * first-seen time is the minimum over replicas (atomicMin on seen_rel, pre-set to ~0): the poll
 * period's quantization of the visibility instant shrinks about as 1/replicas. */
__global__ void hbf_eidola_probe_min(hbf_eidola_state* st, const uint64_t* addrs, const uint64_t* expect,
                                     uint64_t n, unsigned long long* seen_rel) {
    uint64_t t0 = hbf_eidola_kernel_enter(st);
    if (threadIdx.x != 0) return;
    hbf_eidola_acct a;
    hbf_eidola_acct_init(&a, st);
    uint64_t tmo = hbf_eidola_timeout(st);
    for (uint64_t i = 0; i < n; ++i) {
        for (;;) {
            uint64_t v = hbf_eidola_ld_flag(st, &a, t0, (const void*)addrs[i], 4);
            if ((uint32_t)v == (uint32_t)expect[i]) break;
            if (hb_now() - t0 > tmo) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, 0xB0B1u);
        }
        atomicMin(&seen_rel[i], (unsigned long long)(hb_now() - t0));
    }
}

__global__ void hbf_eidola_setup(hbf_eidola_state* st, const uint64_t* addr, const uint64_t* value,
                                 const uint32_t* size, const uint64_t* wakeup, uint64_t n) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        hbf_eidola_register_write(st, addr[i], value[i], size[i], wakeup[i]);
}

/* Issue-bound co-runner: 8 independent FMA chains per thread, so it competes for issue slots with
 * whatever else runs on the SM (a spinning poller, or nothing while the poller sleeps in mwait). */
__global__ void hbf_eidola_corunner(float* out, uint64_t iters, uint64_t* span) {
    uint64_t t = hb_now();
    float a[8];
    const float b = 1.0001f, c = 0.9999f;
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] = threadIdx.x * 1e-3f + k;
    for (uint64_t i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < 8; ++k) a[k] = fmaf(a[k], b, c);
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) s += a[k];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        span[2 * blockIdx.x] = t;
        span[2 * blockIdx.x + 1] = hb_now();
    }
}

/* ---------------------------------------------------------------------------------------------- */
extern "C" {

const char* hbe_last_error() { return g_err; }

int hbe_layout(uint64_t* out, int n) {
    /* sizeof + offsets of the fields the Python mirror writes, in mirror order */
    uint64_t v[] = {
        sizeof(hbf_eidola_state), HBF_EIDOLA_LAYOUT_VERSION,
        offsetof(hbf_eidola_state, t0), offsetof(hbf_eidola_state, engine),
        offsetof(hbf_eidola_state, lag_ns), offsetof(hbf_eidola_state, flag_ranges),
        offsetof(hbf_eidola_state, n_entries), offsetof(hbf_eidola_state, n_vaddr),
        offsetof(hbf_eidola_state, mon_base), offsetof(hbf_eidola_state, s_addr),
        offsetof(hbf_eidola_state, ctr), sizeof(hbf_eidola_mon_entry),
    };
    int k = (int)(sizeof v / sizeof v[0]);
    for (int i = 0; i < n && i < k; ++i) out[i] = v[i];
    return k;
}

int hbe_device_count(int* n) { return hbe_check(cudaGetDeviceCount(n), "cudaGetDeviceCount"); }
int hbe_set_device(int d) { return hbe_check(cudaSetDevice(d), "cudaSetDevice"); }
int hbe_sm_count(int d, int* n) {
    return hbe_check(cudaDeviceGetAttribute(n, cudaDevAttrMultiProcessorCount, d), "sm count");
}
int hbe_malloc(void** p, size_t n) { return hbe_check(cudaMalloc(p, n), "cudaMalloc"); }
int hbe_free(void* p) { return hbe_check(cudaFree(p), "cudaFree"); }
int hbe_h2d(void* d, const void* h, size_t n) { return hbe_check(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice), "h2d"); }
int hbe_d2h(void* h, const void* d, size_t n) { return hbe_check(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost), "d2h"); }
int hbe_d2d(void* d, const void* s, size_t n) { return hbe_check(cudaMemcpy(d, s, n, cudaMemcpyDeviceToDevice), "d2d"); }
int hbe_memset(void* d, int v, size_t n) { return hbe_check(cudaMemset(d, v, n), "cudaMemset"); }
int hbe_sync() { return hbe_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
int hbe_peer_enable(int dev, int peer) {
    int can = 0;
    HBE_TRY(cudaDeviceCanAccessPeer(&can, dev, peer));
    if (!can) { snprintf(g_err, sizeof g_err, "device %d cannot access peer %d", dev, peer); return 1; }
    HBE_TRY(cudaSetDevice(dev));
    cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) { cudaGetLastError(); return 0; }
    return hbe_check(e, "cudaDeviceEnablePeerAccess");
}
int hbe_stream_create(void** s) {
    return hbe_check(cudaStreamCreateWithFlags((cudaStream_t*)s, cudaStreamNonBlocking), "stream");
}
int hbe_stream_sync(void* s) { return hbe_check(cudaStreamSynchronize((cudaStream_t)s), "stream sync"); }
int hbe_stream_destroy(void* s) { return hbe_check(cudaStreamDestroy((cudaStream_t)s), "stream destroy"); }

/* smem_bytes < 0: the opt-in maximum, so that no other block (which needs at least the 1 KB the
 * system reserves per block) fits beside an eidolon block: its SM is reserved. */
int hbe_launch_eidolon(hbf_eidola_state* st_dev, int blocks, int threads, int smem_bytes, void* stream) {
    if (smem_bytes < 0) {
        int dev = 0, optin = 0;
        HBE_TRY(cudaGetDevice(&dev));
        HBE_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        smem_bytes = optin;
    }
    if (smem_bytes > 48 * 1024)
        HBE_TRY(cudaFuncSetAttribute(hbf_eidolon_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    hbf_eidolon_kernel<<<blocks, threads, smem_bytes, (cudaStream_t)stream>>>(st_dev);
    return hbe_check(cudaGetLastError(), "launch hbf_eidolon_kernel");
}

int hbe_launch_probe(hbf_eidola_state* st_dev, const uint64_t* addrs, const uint64_t* expect, uint64_t n,
                     uint64_t* seen, uint32_t* polls, uint32_t streams, void* stream) {
    uint32_t threads = streams < 128 ? streams : 128;
    uint32_t blocks = (streams + threads - 1) / threads;
    hbf_eidola_probe<<<blocks, threads, 0, (cudaStream_t)stream>>>(st_dev, addrs, expect, n, seen, polls, streams);
    return hbe_check(cudaGetLastError(), "launch hbf_eidola_probe");
}

int hbe_launch_probe_min(hbf_eidola_state* st_dev, const uint64_t* addrs, const uint64_t* expect, uint64_t n,
                         uint64_t* seen, uint32_t replicas, void* stream) {
    hbf_eidola_probe_min<<<replicas, 32, 0, (cudaStream_t)stream>>>(st_dev, addrs, expect, n,
                                                                   (unsigned long long*)seen);
    return hbe_check(cudaGetLastError(), "launch hbf_eidola_probe_min");
}

int hbe_launch_setup(hbf_eidola_state* st_dev, const uint64_t* addr, const uint64_t* value,
                     const uint32_t* size, const uint64_t* wakeup, uint64_t n, void* stream) {
    hbf_eidola_setup<<<64, 128, 0, (cudaStream_t)stream>>>(st_dev, addr, value, size, wakeup, n);
    return hbe_check(cudaGetLastError(), "launch hbf_eidola_setup");
}

int hbe_launch_corunner(float* out, uint64_t iters, uint64_t* span, int blocks, int threads, void* stream) {
    hbf_eidola_corunner<<<blocks, threads, 0, (cudaStream_t)stream>>>(out, iters, span);
    return hbe_check(cudaGetLastError(), "launch hbf_eidola_corunner");
}

}  /* extern "C" */
