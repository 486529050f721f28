/*
 * eidola_kernels.cu — Eidola's device module: built by eidola/replay.py (build_module: nvcc -cubin),
 * loaded and launched through runtime_cuda's CUDA layer (runtime_cuda/cudrv.py, the driver API).
 * No host code: every kernel is extern "C" (its name is what eidola/replay.py EidolaKernels looks up),
 * and the facts the host mirrors are module globals (hbf_eidola_layout, hbf_eidolon_defaults).
 *
 * Kernels:
 *   hbf_eidolon_s<S>_l<L>   engine (a): persistent warps walk the time-sorted WTT and perform the real
 *                           stores at t0 + wakeup - lag, then serve the monitor log (store kind S =
 *                           HBF_EIDOLA_ST_*, layout L = HBF_EIDOLON_*).
 *   hbf_eidola_timer_probe  %globaltimer update granularity (E0).
 *   hbf_eidola_tprobe_k<K>_p<P>  timing-lab probe: load kind K, dependent (P=0) / pipelined (P=1)
 *                           polling, staggered pollers.
 *   hbf_eidola_probe        visibility probe: one thread polls each registered flag in wakeup order
 *                           and records when it first sees the value (lag calibration, enactment
 *                           error of engines a and b).
 *   hbf_eidola_probe_min    the same with replicas (minimum over replicas).
 *   hbf_eidola_setup        setup kernel: register_write() from the device (arrays in, staging out).
 *   hbf_eidola_corunner     FMA loop used to measure what freed issue slots buy (E2).
 */
#include <cstdint>

#include "hbf_eidola.cuh"

/* sizeof + offsets of hbf_eidola_state the Python mirror checks (HBF_EIDOLA_LAYOUT_VALUES) */
extern "C" __device__ unsigned long long hbf_eidola_layout[HBF_EIDOLA_LAYOUT_N] = HBF_EIDOLA_LAYOUT_VALUES;

/* ---------------------------------------------------------------------------------------------- */
/* Engine (a) eidolon layouts (E0 measures them side by side):
 *   LANE       one lane per entry, a warp takes 32 consecutive entries (entries due together are
 *              stored in the same loop iteration: batched); the entry is prefetched into registers
 *              before the spin, so the store issues right after the timer test passes.
 *   WARP       a warp takes 32 consecutive entries into registers (one per lane), then lane 0
 *              alone spins and stores them in wakeup order (no __all_sync in the spin loop; a
 *              burst of same-time entries is stored back to back).
 *   WARP_BURST a warp takes 32 consecutive entries into registers; lane 0 alone spins until the
 *              earliest pending one is due, broadcasts the timer value, and every lane whose entry
 *              is due stores at once (isolated entries as in WARP, bursts in one instruction).
 *   LANE_LATE  the pre-2026-11-29 kernel: lane per entry, the entry (addr/value/size) is loaded from
 *              global memory only once it is due (a cold load between the timer test and the store).
 * t_enacted[i] = the %globaltimer value (minus t0) that passed the wakeup test, read right before
 * the store issues (LANE_LATE: read after the late loads, right before the store), so that
 * t_enacted - (wakeup - lag) is the engine's own issue error. */
#define HBF_EIDOLON_LANE 0u
#define HBF_EIDOLON_WARP 1u
#define HBF_EIDOLON_LANE_LATE 2u
#define HBF_EIDOLON_WARP_BURST 3u
#define HBF_EIDOLON_LAYOUTS 4u

/* Wait for the target's start. Its blocks race on atomicMin(t0): a later-starting block can win
 * the race by a few hundred ns, so t0 is re-read once it has been set for 500 ns. */
static __device__ __forceinline__ uint64_t hbf_eidolon_wait_t0(hbf_eidola_state* st, uint64_t tmo) {
    const uint64_t start = hb_now();
    uint64_t t0;
    for (;;) {
        t0 = hb_ld_vol(&st->t0);
        if (t0 != ~0ull) break;
        if (hb_now() - start > tmo) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, 0xE1D0u);
        __nanosleep(32);
    }
    const uint64_t seen = hb_now();
    while (hb_now() - seen < 500) { }
    return hb_ld_vol(&st->t0);
}

template <uint32_t SK, uint32_t LAYOUT>
static __device__ __forceinline__ void hbf_eidolon_body(hbf_eidola_state* st) {
    const uint64_t n = st->n_entries;
    if (n == 0) return;
    const uint32_t lane = threadIdx.x & 31u;
    const uint64_t gwarp = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) >> 5;
    const uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    const uint64_t tmo = hbf_eidola_timeout(st);
    const uint64_t* wk = (const uint64_t*)st->t_wakeup;
    const uint64_t* ta = (const uint64_t*)st->t_addr;
    const uint64_t* tv = (const uint64_t*)st->t_value;
    const uint32_t* ts = (const uint32_t*)st->t_size;
    uint64_t* te = (uint64_t*)st->t_enacted;
    const int64_t lag = st->lag_ns;
    const uint64_t last_wk = wk[n - 1];             /* sorted by wakeup */
    const uint64_t t0 = hbf_eidolon_wait_t0(st, tmo);
    const uint64_t deadline = t0 + last_wk + tmo;
    uint32_t done_count = 0;
    if (LAYOUT == HBF_EIDOLON_WARP) {
        for (uint64_t c = gwarp; c * 32 < n; c += nwarps) {
            /* the warp's 32-entry chunk is prefetched into registers (lane j holds entry c*32+j);
             * lane 0 then enacts them in wakeup order, alone in its spin loop */
            const uint64_t i = c * 32 + lane;
            uint64_t addr = 0, value = 0, target = 0;
            uint32_t size = 4;
            if (i < n) {
                const int64_t t = (int64_t)wk[i] - lag;
                target = t0 + (uint64_t)(t > 0 ? t : 0);
                addr = ta[i]; value = tv[i]; size = ts[i];
            }
            const uint32_t cnt = (uint32_t)(n - c * 32 < 32 ? n - c * 32 : 32);
            for (uint32_t j = 0; j < cnt; ++j) {
                const uint64_t a = __shfl_sync(0xffffffffu, addr, j);
                const uint64_t v = __shfl_sync(0xffffffffu, value, j);
                const uint32_t sz = __shfl_sync(0xffffffffu, size, j);
                const uint64_t tg = __shfl_sync(0xffffffffu, target, j);
                if (lane == 0) {
                    uint64_t now;
                    while ((now = hb_now()) < tg)
                        if (now > deadline) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, 0xE1D1u);
                    hbf_eidola_store_kind(SK, a, v, sz);
                    if (te) te[c * 32 + j] = now - t0;
                    hbf_eidola_mon_service(st, a, v);
                    ++done_count;
                }
                __syncwarp();
            }
        }
    } else if (LAYOUT == HBF_EIDOLON_WARP_BURST) {
        for (uint64_t c = gwarp; c * 32 < n; c += nwarps) {
            const uint64_t i = c * 32 + lane;
            bool pending = i < n;
            uint64_t addr = 0, value = 0, target = ~0ull;
            uint32_t size = 4;
            if (pending) {
                const int64_t t = (int64_t)wk[i] - lag;
                target = t0 + (uint64_t)(t > 0 ? t : 0);
                addr = ta[i]; value = tv[i]; size = ts[i];
            }
            for (;;) {
                uint64_t mn = pending ? target : ~0ull;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) {
                    const uint64_t x = __shfl_xor_sync(0xffffffffu, mn, o);
                    mn = x < mn ? x : mn;
                }
                if (mn == ~0ull) break;
                uint64_t now = 0;
                if (lane == 0)
                    while ((now = hb_now()) < mn)
                        if (now > deadline) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, 0xE1D1u);
                now = __shfl_sync(0xffffffffu, now, 0);
                if (pending && target <= now) {
                    hbf_eidola_store_kind(SK, addr, value, size);
                    if (te) te[i] = now - t0;
                    hbf_eidola_mon_service(st, addr, value);
                    pending = false;
                    ++done_count;
                }
            }
        }
    } else {
        for (uint64_t c = gwarp; c * 32 < n; c += nwarps) {
            const uint64_t i = c * 32 + lane;
            bool done = i >= n;
            uint64_t target = 0, addr = 0, value = 0;
            uint32_t size = 4;
            if (!done) {
                const int64_t t = (int64_t)wk[i] - lag;
                target = t0 + (uint64_t)(t > 0 ? t : 0);
                if (LAYOUT == HBF_EIDOLON_LANE) { addr = ta[i]; value = tv[i]; size = ts[i]; }
            }
            for (;;) {
                uint64_t now = hb_now();
                if (!done && now >= target) {
                    if (LAYOUT == HBF_EIDOLON_LANE_LATE) {
                        addr = ta[i]; value = tv[i]; size = ts[i];
                        now = hb_now();
                    }
                    hbf_eidola_store_kind(SK, addr, value, size);
                    if (te) te[i] = now - t0;
                    hbf_eidola_mon_service(st, addr, value);
                    done = true;
                    ++done_count;
                }
                if (__all_sync(0xffffffffu, done)) break;
                if (now > deadline) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, 0xE1D1u);
            }
        }
    }
    if (done_count) atomicAdd((unsigned long long*)&st->eidolon_done, (unsigned long long)done_count);
}

/* One extern "C" kernel per (store kind, layout): hbf_eidolon_s<sk>_l<layout>. */
#define HBF_EIDOLON_KERNEL(sk, lay)                                                                 \
    extern "C" __global__ void hbf_eidolon_s##sk##_l##lay(hbf_eidola_state* st) {                    \
        hbf_eidolon_body<sk##u, lay##u>(st);                                                          \
    }
#define HBF_EIDOLON_ROW(sk) HBF_EIDOLON_KERNEL(sk, 0) HBF_EIDOLON_KERNEL(sk, 1) HBF_EIDOLON_KERNEL(sk, 2) \
                            HBF_EIDOLON_KERNEL(sk, 3)
HBF_EIDOLON_ROW(0) HBF_EIDOLON_ROW(1) HBF_EIDOLON_ROW(2) HBF_EIDOLON_ROW(3) HBF_EIDOLON_ROW(4)
static_assert(HBF_EIDOLA_ST_KINDS == 5u && HBF_EIDOLON_LAYOUTS == 4u, "one kernel per store kind x layout above");

/* ---------------------------------------------------------------------------------------------- */
/* Timing lab (E0): %globaltimer granularity, and a visibility probe with selectable load kind,
 * dependent or pipelined polling, and several pollers (one per block, so on different SMs) staggered
 * in phase. */
extern "C" __global__ void hbf_eidola_timer_probe(uint64_t* changes, uint32_t max_changes, uint64_t iters, uint64_t* summary) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const uint64_t w0 = hb_now();
    while (hb_now() - w0 < 2000000ull) { }   /* 2 ms: the SM clock ramps up from idle first */
    uint64_t last = hb_now();
    uint64_t c_last = clock64();
    const uint64_t t_begin = last, c_begin = c_last;
    uint32_t k = 0;
    for (uint64_t j = 0; j < iters; ++j) {
        const uint64_t t = hb_now();
        if (t != last) {
            const uint64_t c = clock64();
            if (k < max_changes) { changes[2 * k] = t - last; changes[2 * k + 1] = c - c_last; }
            ++k;
            last = t;
            c_last = c;
        }
    }
    summary[0] = k;                         /* distinct timer changes seen */
    summary[1] = iters;                     /* timer reads */
    summary[2] = last - t_begin;            /* ns spanned */
    summary[3] = clock64() - c_begin;       /* SM cycles spanned */
}

#define HBF_TL_LD_ACQ_SYS 0u
#define HBF_TL_LD_RELAXED_GPU 1u
#define HBF_TL_LD_VOLATILE 2u
#define HBF_TL_LD_ACQ_GPU 3u
#define HBF_TL_LD_KINDS 4u
#define HBF_TL_DEPTH 8

template <uint32_t LK>
static __device__ __forceinline__ uint32_t hbf_tl_ld(uint64_t p) {
    uint32_t v;
    if (LK == HBF_TL_LD_ACQ_SYS) asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else if (LK == HBF_TL_LD_RELAXED_GPU) asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else if (LK == HBF_TL_LD_VOLATILE) asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Poll p until it reads e, at most max_polls loads. Every load is stamped with %globaltimer read
 * right before it issues. On a hit: *hit = stamp of the first load that saw e, *miss = stamp of the
 * load issued just before it (0 when the very first load hit), *first = stamp of the first load.
 * PIPE: HBF_TL_DEPTH loads in flight (rolling; each step checks the oldest and re-issues it), so the
 * sampling interval is ~latency/depth instead of the whole round trip. */
template <uint32_t LK, uint32_t PIPE>
static __device__ __forceinline__ bool hbf_tl_poll(uint64_t p, uint32_t e, uint32_t max_polls, uint64_t* hit,
                                                   uint64_t* miss, uint64_t* first, uint32_t* polls) {
    uint64_t tmiss = 0;
    uint32_t k = 0;
    if constexpr (!PIPE) {
        *first = hb_now();
        uint64_t s = *first;
        for (;;) {
            const uint32_t v = hbf_tl_ld<LK>(p);
            ++k;
            if (v == e) { *hit = s; *miss = tmiss; *polls = k; return true; }
            if (k >= max_polls) { *polls = k; *miss = s; return false; }
            tmiss = s;
            s = hb_now();
        }
    } else {
    uint64_t s[HBF_TL_DEPTH];
    uint32_t v[HBF_TL_DEPTH];
#pragma unroll
    for (int j = 0; j < HBF_TL_DEPTH; ++j) { s[j] = hb_now(); v[j] = hbf_tl_ld<LK>(p); }
    *first = s[0];
    k = HBF_TL_DEPTH;
    for (;;) {
#pragma unroll
        for (int j = 0; j < HBF_TL_DEPTH; ++j) {
            if (v[j] == e) { *hit = s[j]; *miss = tmiss; *polls = k; return true; }
            tmiss = s[j];
            s[j] = hb_now();
            v[j] = hbf_tl_ld<LK>(p);
        }
        k += HBF_TL_DEPTH;
        if (k >= max_polls) { *polls = k; *miss = tmiss; return false; }
    }
    }
}

/* gridDim.x pollers (thread 0 of each block). Each polls every flag i from
 * t0 + wake[i] - pre_ns + (stagger ? k * period / P : 0) on, where period is the poller's own
 * sampling interval measured on a scratch word first (meta[k] = {smid, period_ns * 16, t0, polls}).
 * rec[(k * n + i) * 4 + {0,1,2,3}] = {hit, miss, first} - t0 (miss: 0 = none) and the load count. */
template <uint32_t LK, uint32_t PIPE>
static __device__ __forceinline__ void hbf_eidola_tprobe_body(hbf_eidola_state* st, const uint64_t* addrs,
                                                              const uint32_t* expect, const uint64_t* wake,
                                                              uint64_t n, int64_t pre_ns, uint32_t stagger,
                                                              const uint32_t* scratch, uint64_t* rec,
                                                              uint64_t* meta) {
    hbf_eidola_kernel_enter(st);
    if (threadIdx.x != 0) return;
    const uint32_t k = blockIdx.x, P = gridDim.x;
    const uint64_t tmo = hbf_eidola_timeout(st);
    /* settle t0: all pollers (and the eidolon) use the kernel-wide minimum */
    const uint64_t a0 = hb_now();
    while (hb_now() - a0 < 1000) { }
    const uint64_t t0 = hb_ld_vol(&st->t0);
    uint64_t h, m, f;
    uint32_t np = 0;
    const uint32_t W = 32;
    hbf_tl_poll<LK, PIPE>((uint64_t)scratch, 0xFFFFFFFFu, W, &h, &m, &f, &np);
    const uint64_t period16 = (hb_now() - f) * 16 / (np ? np : 1);
    uint32_t smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    uint64_t total = 0;
    const uint64_t max_polls = 1u << 30;
    for (uint64_t i = 0; i < n; ++i) {
        int64_t s = (int64_t)wake[i] - pre_ns + (stagger ? (int64_t)((k * period16) / (16ull * P)) : 0);
        const uint64_t start = t0 + (uint64_t)(s > 0 ? s : 0);
        uint64_t now;
        while ((now = hb_now()) < start)
            if (now - t0 > tmo) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, 0xB0B2u);
        uint32_t polls = 0;
        uint64_t hit = 0, miss = 0, first = 0;
        for (;;) {
            uint32_t q = 0;
            uint64_t hh = 0, mm = 0, ff = 0;
            const bool ok = hbf_tl_poll<LK, PIPE>(addrs[i], expect[i], 4096, &hh, &mm, &ff, &q);
            if (polls == 0) first = ff;
            polls += q;
            if (ok) { hit = hh; if (mm) miss = mm; break; }
            miss = mm;   /* the last load that missed (the bracket's lower end carries over) */
            if (hb_now() - t0 > tmo || polls > max_polls) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, 0xB0B3u);
        }
        uint64_t* r = rec + (k * n + i) * 4;
        r[0] = hit - t0;
        r[1] = miss ? miss - t0 : 0;
        r[2] = first - t0;
        r[3] = polls;
        total += polls;
    }
    meta[4 * k + 0] = smid;
    meta[4 * k + 1] = period16;
    meta[4 * k + 2] = t0;
    meta[4 * k + 3] = total;
}

/* One extern "C" kernel per (load kind, pipelined): hbf_eidola_tprobe_k<lk>_p<pipe>. */
#define HBF_TPROBE_KERNEL(lk, pipe)                                                                 \
    extern "C" __global__ void hbf_eidola_tprobe_k##lk##_p##pipe(                                   \
        hbf_eidola_state* st, const uint64_t* addrs, const uint32_t* expect, const uint64_t* wake,    \
        uint64_t n, int64_t pre_ns, uint32_t stagger, const uint32_t* scratch, uint64_t* rec,        \
        uint64_t* meta) {                                                                           \
        hbf_eidola_tprobe_body<lk##u, pipe##u>(st, addrs, expect, wake, n, pre_ns, stagger, scratch, rec, meta); \
    }
HBF_TPROBE_KERNEL(0, 0) HBF_TPROBE_KERNEL(0, 1) HBF_TPROBE_KERNEL(1, 0) HBF_TPROBE_KERNEL(1, 1)
HBF_TPROBE_KERNEL(2, 0) HBF_TPROBE_KERNEL(2, 1) HBF_TPROBE_KERNEL(3, 0) HBF_TPROBE_KERNEL(3, 1)
static_assert(HBF_TL_LD_KINDS == 4u, "one kernel per load kind above");

/* One thread per stream of addresses (sorted by wakeup): poll each until it equals expect[i],
 * record the first-seen time (relative to t0). Calls kernel_enter itself (it is the target). */
extern "C" __global__ void hbf_eidola_probe(hbf_eidola_state* st, const uint64_t* addrs, const uint64_t* expect,
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
extern "C" __global__ void hbf_eidola_probe_min(hbf_eidola_state* st, const uint64_t* addrs, const uint64_t* expect,
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

extern "C" __global__ void hbf_eidola_setup(hbf_eidola_state* st, const uint64_t* addr, const uint64_t* value,
                                 const uint32_t* size, const uint64_t* wakeup, uint64_t n) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        hbf_eidola_register_write(st, addr[i], value[i], size[i], wakeup[i]);
}

/* Issue-bound co-runner: 8 independent FMA chains per thread, so it competes for issue slots with
 * whatever else runs on the SM (a spinning poller, or nothing while the poller sleeps in mwait). */
extern "C" __global__ void hbf_eidola_corunner(float* out, uint64_t iters, uint64_t* span) {
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
/* The eidolon configuration used when the caller does not pick one. LANE + relaxed.gpu: measured in
 * E0 (|err| p95 72 ns) and, as lane/relaxed.sys (same E0 numbers), in E1's 384-flag bursts.
 * WARP has the smallest issue error for isolated entries but serializes bursts (E1 run 2: 2 warps,
 * 384 same-time flags land ~20 us late); WARP_BURST is as good as WARP in E0 and stores bursts in
 * one instruction by construction, but has not been through E1 yet
 * (bench/results/eidola_E0_timing_lab.json, docs/eidola-timing.md). */
#ifndef HBF_EIDOLON_DEFAULT_STORE
#define HBF_EIDOLON_DEFAULT_STORE HBF_EIDOLA_ST_RELAXED_GPU
#endif
#ifndef HBF_EIDOLON_DEFAULT_LAYOUT
#define HBF_EIDOLON_DEFAULT_LAYOUT HBF_EIDOLON_LANE
#endif

/* {store kind, layout} a launch without a choice uses (eidola/replay.py reads it from the module) */
extern "C" __device__ unsigned int hbf_eidolon_defaults[2] = {HBF_EIDOLON_DEFAULT_STORE, HBF_EIDOLON_DEFAULT_LAYOUT};
