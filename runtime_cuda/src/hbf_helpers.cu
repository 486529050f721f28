// hbf_helpers.cu — the device helper library that hbfcc-rewritten PTX calls (ABI: hbf_abi.h).
//
// Compiled once at build time (make helpers-ptx: nvcc -arch=compute_90a -rdc=true -ptx) into
// build/runtime_cuda/hbf_helpers.ptx; the Makefile rewrites the linkage of the exported helpers
// and module globals to .weak so the module can be linked into several rewritten modules.
//
// Per-access cost model (what the native path pays): an inactive lane returns at once; an
// attached module reads __hb_state and one 16-byte line of the device state (lo, span) and
// returns 0 when addr - lo >= span. Everything else (binary search, aggregation, timing,
// counters) runs only for accesses that fall in (or next to) a registered range.
//
// Host-mapped memory (the control region) is read only with ld.acquire.sys / ld.volatile and
// written with st.release.sys (or GPU-only atomics on GPU-owned words), as measured on the H200.
#include <cstddef>
#include <cstdint>
#ifdef HB_DEBUG_ASKS
#include <cstdio>
#endif

#include "hbf_abi.h"
#include "hbf_ctl.h"
#include "hbf_curve.h"   // fixed/curve service + thermal scaling: the one definition (host-testable)
#include "hbf_device.h"
#include "hbf_thc.h"     // the packed thermal word and its validity rule (horizon): the one definition (host-testable)
#include "hbf_capacity.h"  // HBF_REQ_CAP_HINT: a hint's completion is never stolen (hbfd consumes it)

// Module globals (hbf_abi.h). Set by the runtime after the module loads; 0 = detached = native.
extern "C" {
__device__ unsigned long long __hb_state;
__device__ unsigned int __hb_kslot_base;
// The module's launch descriptor (hbf_device.h hbf_cdesc): .const space, written by the runtime with the
// context idle; all zero = no compact path.
__constant__ hbf_cdesc __hb_cdesc;
}

#define HB_DEV static __device__ __forceinline__

// Measurement build only (HBF_REF_TRACE=1, bench/refpath_rate.py): per-ticket timestamps of the
// reference path into a device buffer the bench installs in __hb_reftrace (8 u64 per ticket at
// (ticket & __hb_reftrace_mask) * 8): 0 ticket+1, 1 issue time (arrival), 2 published, 3 poll start,
// 4 completion seen, 5 polls, 6 arrival + modeled (unbiased deadline), 7 hbfd service_ns.
#ifndef HBF_REF_TRACE
#define HBF_REF_TRACE 0
#endif
#if HBF_REF_TRACE
extern "C" {
__device__ unsigned long long __hb_reftrace;
__device__ unsigned int __hb_reftrace_mask;
}
#define HB_TRACE(t, i, v)                                                                          \
    do {                                                                                          \
        unsigned long long* tp_ = (unsigned long long*)__hb_reftrace;                             \
        if (tp_) tp_[(((t) & __hb_reftrace_mask) << 3) + (i)] = (unsigned long long)(v);          \
    } while (0)
#else
#define HB_TRACE(t, i, v) ((void)0)
#endif
// Out-of-line pieces (lean build) are defined with HB_OOL_FN / HB_SPLIT_FN and called only through
// HB_OOL (below); in the direct build both are inlined.
// Two builds of this file (Makefile helpers-ptx): build/runtime_cuda/hbf_helpers.ptx is the DIRECT
// build (HBF_OOL_OPAQUE=0, the default: every internal piece inlined into the exported function);
// hbf_helpers_lean.ptx is the LEAN build (HBF_OOL_OPAQUE=1: out-of-line pieces called through an
// opaque pointer, i.e. with the ABI calling convention). Lean lowers the registers of kernels
// without tensor-core MMA (streaming 16-register kernel: 84 -> 56; direct: 78) but an ABI call makes ptxas
// serialize wgmma (C7510) and forces caller saves in register-heavy kernels (Triton matmul: 768 B
// of spills); see bench/helper_registers.py and docs/runtime.md. Select with HBFCC_HELPER_PTX /
// HBF_HELPER_PTX (or `hbfcc rewrite --helper`); the ABI (hbf_abi.h) is identical in both.
#ifndef HBF_OOL_OPAQUE
#define HBF_OOL_OPAQUE 0
#endif
#if HBF_OOL_OPAQUE
#define HB_OOL_FN static __device__ __noinline__
#define HB_SPLIT_FN static __device__ __noinline__
#else
// Direct build: everything inlined into the exported function that uses it (a chain of direct
// calls only stacks registers; measured: streaming kernel 84 -> 78, softmax 110 -> 96, wgmma
// matmul 218 -> 204, bench/helper_registers.py).
#define HB_OOL_FN static __device__ __forceinline__
#define HB_SPLIT_FN static __device__ __forceinline__
#endif

// Register budget (the native-path cost). A kernel's register count is the maximum over its call
// graph, and for a DIRECT call ptxas (whole-program mode, which is how hbfcc-linked modules are
// assembled) allocates the callee's registers disjoint from the caller's values that live across
// the call: the register needs of a call chain ADD UP, so one heavy function anywhere below
// __hb_issue raised a 16-register streaming kernel to 84. In the lean build HB_OOL(fn)(args) calls
// fn through a pointer that ptxas cannot see through (an empty asm on it): an indirect call uses
// the ABI calling convention, so the heavy pieces no longer stack on the kernel's live values;
// the exported __hb_* functions hbfcc calls directly are kept tiny (inactive lane / detached /
// fast reject, then one HB_OOL call). In the direct build HB_OOL(fn) is a plain call.
// Definitions must precede their uses: hbfcc's textual linker renames the helper module's
// internal functions and does not rename PTX forward declarations.
template <typename F>
static __device__ __forceinline__ F* hb_ool(F* f) {
#if HBF_OOL_OPAQUE
    asm volatile("" : "+l"(f));
#endif
    return f;
}
#define HB_OOL(fn) (*hb_ool(&(fn)))
// HBF_MAX_WAIT_NS (hbf_device.h): a single modeled wait longer than that is a model bug: TIMEOUT, not a hang.

// ------------------------------------------------------------------------------------------
// PTX primitives
// ------------------------------------------------------------------------------------------
#include "hbf_ptx.cuh"   // hb_now, hb_laneid, acquire/volatile/release loads and stores
HB_DEV void hb_sleep(uint32_t ns) { __nanosleep(ns); }

// Counter updates whose old value nobody reads: fire-and-forget reductions on the GLOBAL window. A
// plain atomicAdd through a generic pointer compiles to ATOM with a return value plus a shared-window
// CAS loop (the compiler cannot prove the address global): ~25 SASS instructions per counter.
HB_DEV void hb_red_add(void* p, uint64_t v) {
    asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "l"(v) : "memory");
}
HB_DEV void hb_red_max(void* p, uint64_t v) {
    asm volatile("red.relaxed.gpu.global.max.u64 [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "l"(v) : "memory");
}

HB_DEV uint64_t hb_ceil_div(uint64_t a, uint64_t b) { return b ? (a + b - 1) / b : a; }

// Thermal: s_T = ceil(s * 1e6 / q), applied exactly once per reservation.
HB_DEV uint64_t hb_thermal_scale(uint64_t s, uint32_t q_ppm) { return hbf_thermal_scale(s, q_ppm); }

HB_DEV uint32_t hb_smid() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}

// The counter slot of the calling warp: the kernel's slot, in the shard of this warp's SM (kshards,
// hbf_device.h): every warp of a kernel adds to its counters, and one word shared by all of them
// serializes those atomics in one L2 slice and backs up the memory system; by SM they spread over
// HBF_KSHARDS words. The runtime sums the shards.
HB_DEV hbf_kernel_counters* hb_kslot_of(hbf_device_state* st, uint32_t kbase, uint64_t ks, uint32_t site,
                                        uint32_t smid) {
    uint32_t k = kbase + (site >> 16);
    if (k >= HBF_MAX_KERNEL_SLOTS) k = HBF_MAX_KERNEL_SLOTS - 1u;  // overflow bucket
    if (ks != 0ull)
        return (hbf_kernel_counters*)ks + ((uint64_t)k * HBF_KSHARDS + (smid & (HBF_KSHARDS - 1u)));
    return &st->kslots[k];
}
// st->kshards: a host-owned run parameter, constant while kernels run
HB_DEV hbf_kernel_counters* hb_kslot(hbf_device_state* st, uint32_t site) {
    return hb_kslot_of(st, __hb_kslot_base, st->kshards, site, hb_smid());
}

// ------------------------------------------------------------------------------------------
// Failure: record (device state + control-region header.device_failure), then end the warp.
// ------------------------------------------------------------------------------------------
// Terminal failures (UNSUPPORTED, DAEMON_LOST, TIMEOUT, THERMAL_SHUTDOWN, any non-READY completion)
// are RECORDED by the lane that sees them (hb_fail: first failure word wins, counted per kernel,
// header.device_failure, system fence), and that lane's call returns a failure sentinel up to the
// warp-level point of the exported helper (HB_FAILED below). There the warp votes (__any_sync over the
// lanes that are in the call together) and every one of those lanes ends with PTX `exit` (hb_end)
// BEFORE the access is performed (fail-closed: __hb_issue never returns to a failing access, __hb_wait
// never returns to the consumer). `exit` instead of `trap`: the kernel ends as soon as its threads have
// exited or finished (exited threads release bar.sync/barrier.sync waits on all CTA threads, PTX ISA
// "exit"), the context survives, and the runtime raises the recorded failure (runtime_cuda/session.py
// synchronize / launch gate; DeviceFailure with the status code). After a failure is recorded, every
// reference-path step of every warp (issue, completion poll) checks the device failure word and ends
// its warp too, so a dead daemon ends the kernel within heartbeat_timeout_ns + one poll.
// Hang risk: threads that never call the helpers and wait for an exited warp through an mbarrier, a
// counted named barrier or a memory flag would wait forever; the runtime's synchronize() backstop ends
// such a kernel by trapping the context (docs/runtime.md "Failure"). HBF_FAIL_TRAP=1 builds the old
// behaviour (trap at once).
#ifndef HBF_FAIL_TRAP
#define HBF_FAIL_TRAP 0
#endif
#define HB_FAILED (~0ull)   // failure sentinel (a future/deadline no real request produces)

HB_DEV void hb_end() {
#if HBF_FAIL_TRAP
    __trap();
#else
    asm volatile("exit;" ::: "memory");
#endif
    __builtin_unreachable();
}

HB_OOL_FN void hb_fail(hbf_device_state* st, uint32_t status, uint32_t site,
                                            uint64_t addr) {
    const unsigned long long word = ((unsigned long long)status << 32) | site;
    if (atomicCAS((unsigned long long*)&st->failure, 0ull, word) == 0ull) {
        hb_st_vol(&st->failure_addr, addr);
    }
    hb_red_add(&hb_kslot(st, site)->status[status & (HBF_N_STATUS - 1u)], 1ull);
    hbf_ctl* c = (hbf_ctl*)st->ctl;
    if (c != nullptr) {
        // GPU-owned word of the control region: GPU-only atomics, the host only reads it.
        atomicCAS((unsigned long long*)&c->header.device_failure, 0ull, word);
    }
    __threadfence_system();
}

// The run has a recorded terminal failure (device memory, so a cheap check on the reference path).
HB_DEV bool hb_failed(const hbf_device_state* st) { return hb_ld_vol(&st->failure) != 0ull; }

// The group guard (HBF_GROUP_GUARD, on with HBF_GROUP_SYNC by default; hbf_ptx.cuh, docs/design.md §3.8 "The group's
// mask"): a collective over the group's mask m that ran with other lanes than m's -- lanes of another group of the
// warp, or without some of its own -- gives values no lane can trust, so every lane that sees it records
// WARP_GROUP (the failure address holds the lanes seen << 32 | m) and the warp ends before any access, as a terminal
// failure does. With the checked collectives of HBF_GROUP_SYNC it cannot fire; it is what turns a compiler that
// proves the mask uniform again (or a hardware merge not foreseen) into a loud failure instead of a wrong deadline.
HB_DEV void hb_group_guard(hbf_device_state* st, uint32_t m, uint32_t site) {
#if HBF_GROUP_GUARD
    const uint32_t seen = hb_group_seen(m);
    if (seen != m) {
        HB_OOL(hb_fail)(st, HBF_ST_WARP_GROUP, site, ((uint64_t)seen << 32) | m);
        hb_end();
    }
#else
    (void)st, (void)m, (void)site;
#endif
}
// The group's failure vote (a lane's recorded terminal failure ends all its lanes), behind the guard.
HB_DEV bool hb_group_any(hbf_device_state* st, uint32_t m, bool pred, uint32_t site) {
    hb_group_guard(st, m, site);
    return __any_sync(m, pred);
}

// ------------------------------------------------------------------------------------------
// Liveness: judged from the heartbeat VALUE and this GPU's own %globaltimer only.
// ------------------------------------------------------------------------------------------
struct hb_live {
    uint64_t last_hb;
    uint64_t last_change;
    uint64_t started;
};

// The heartbeat is first read by the first check (every 8th poll), not at init: one host read less
// per request; the timeout then runs from that first check (a few polls later).
HB_DEV void hb_live_init(hb_live& lv, const hbf_ctl* c, uint64_t now) {
    (void)c;
    lv.last_hb = ~0ull;          // "not read yet": the first check adopts the value it reads
    lv.last_change = now;
    lv.started = now;
}

// hb_live_check result: the run already has a recorded failure (another warp's): end without recording.
#define HB_ST_ENDED 0xFFFFu

// Returns 0 while the daemon is alive and no terminal state is published; else a terminal status
// (or HB_ST_ENDED when the device failure word is already set).
HB_SPLIT_FN uint32_t hb_live_check(const hbf_device_state* st, hb_live& lv, const hbf_ctl* c,
                              uint64_t now) {
    if (hb_failed(st)) return HB_ST_ENDED;
    const uint64_t f = hb_ld_acq_sys(&c->header.failure);
    if (f != HBF_FAIL_NONE) {
        uint32_t s = (uint32_t)(f >> 32);
        return (s == HBF_ST_PENDING || s == HBF_ST_READY || s >= HBF_N_STATUS) ? HBF_ST_DAEMON_LOST : s;
    }
    const uint64_t hb = hb_ld_acq_sys(&c->header.heartbeat);
    if (hb != lv.last_hb) {
        lv.last_hb = hb;
        lv.last_change = now;
    } else if (now - lv.last_change > st->heartbeat_timeout_ns) {
        return HBF_ST_DAEMON_LOST;
    }
    if (st->completion_timeout_ns != 0 && now - lv.started > st->completion_timeout_ns)
        return HBF_ST_TIMEOUT;
    return 0u;
}

// Record a live-check failure (unless another warp already did); the caller returns its sentinel.
HB_DEV void hb_fail_live(hbf_device_state* st, uint32_t s, uint32_t site, uint64_t addr) {
    if (s != HB_ST_ENDED) HB_OOL(hb_fail)(st, s, site, addr);
}

// ------------------------------------------------------------------------------------------
// Thermal + refresh-debt snapshot (host seqlock), cached in device memory for at most
// thermal_max_age_ns so that the per-request path does not pay a host round trip each time.
// ------------------------------------------------------------------------------------------
// Single-flight refresh (HBF_THERMAL_SF, default on): the first thread that finds the cached word
// stale replaces it, with one CAS, by a claim marker (valid bit clear, stamped now, the old values
// kept) and reads the host snapshot; the others wait on the device word (nanosleep) for at most
// HBF_THC_CLAIM_WAIT_NS: an idle host answers in a few us, so every request of a launch that follows
// a q change sees the new q (H200: without the wait, every warp's first request used the old one).
// When the host is slow (the ring saturated, PCIe busy with completion polls) the waiters then go on
// with the old values instead of stalling: a snapshot is used at most thermal_max_age_ns +
// HBF_THC_CLAIM_WAIT_NS after it was read (a stall of every warp per refresh halved the reference
// rate). Only the very first snapshot (nothing cached) makes a waiter read the host itself.
// Without it every warp that found the cache stale read the host seqlock itself (4-5 host reads and a
// system fence each): under load, when issues take longer than thermal_max_age_ns, that was every issue.
#ifndef HBF_THERMAL_SF
#define HBF_THERMAL_SF 1
#endif
#define HBF_THC_CLAIM_WAIT_NS 20000ull
HB_DEV uint64_t hb_pack_thermal(uint32_t q, uint32_t adm, uint32_t mode, uint64_t now) {
    return hbf_thc_pack(q, adm, mode, now);
}

// Thermal replicas (hbf_device.h thc_replica): what the compact issue path reads instead of the one
// thermal word. Published as the word itself while no refresh debt is outstanding, with the valid bit
// clear while some is (those requests must claim it: the general path). Written, fenced, then the debt
// checked again: a refresh that raised debt_seen after our first check and published before our
// write is caught by the second check (and a later one publishes after its own raise), so a replica
// never stays valid while debt is outstanding.
HB_DEV bool hb_debt_pending(const hbf_device_state* st) {
    return st->refresh_quantum != 0ull && hb_ld_vol(&st->debt_claimed) < hb_ld_vol(&st->debt_seen);
}
HB_DEV void hb_publish_replicas_as(hbf_device_state* st, uint64_t w) {
#pragma unroll 4
    for (uint32_t i = 0; i < HBF_KSHARDS; ++i) hb_st_vol(&st->thc_replica[i * HBF_THC_REPLICA_STRIDE], w);
    __threadfence();
}
HB_DEV void hb_publish_replicas(hbf_device_state* st, uint64_t w) {
    const uint64_t invalid = w & ~(1ull << 23);
    if (!HBF_THC_VALID(w) || hb_debt_pending(st)) {
        hb_publish_replicas_as(st, invalid);
        return;
    }
    hb_publish_replicas_as(st, w);
    if (hb_debt_pending(st)) hb_publish_replicas_as(st, invalid);
}

// ------------------------------------------------------------------------------------------
// Live media activity (hbf_ctl.h hbf_activity; issue 17): the device's running totals of the accesses it
// modeled, published into the control region while kernels run, so hbfd's 10 ms energy bins see a long
// kernel's HBF activity as it happens (counters.device is written by the runtime at sync points only).
// Nothing on the per-access path: the accesses are already counted in device memory (the per-kernel counter
// shards); the thread that refreshed the thermal snapshot (hb_thermal_snapshot, hb_inline_refresh: about
// every thermal_max_age_ns) also publishes, at most once per HBF_ACT_PERIOD_NS, single flight (one CAS on
// act_stamp), and only once the latest launched kernel has run HBF_ACT_MIN_RUN_NS (act_launch_ns: a short
// kernel never pays for a publication). Bounded cost per publication: HBF_ACT_SLOTS_PER_FLUSH launched slots
// x HBF_KSHARDS shards x 2 x HBF_N_OPS 8-byte device loads (1,024, 8 in flight), up to 4 x HBF_N_OPS device
// stores per slot, 14 host-mapped stores and 2 system fences, by one thread; not in the Severe admission loop
// (nothing new is admitted there).
// ------------------------------------------------------------------------------------------
// 16-byte volatile stores/loads (the ring's payload; the address must be 16-byte aligned)
HB_DEV void hb_st_vol_v2(void* p, uint64_t a, uint64_t b) {
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
HB_DEV void hb_ld_vol_v2(const void* p, uint64_t& a, uint64_t& b) {
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
// __hb_kernel_enter (block 0, thread 0): mark the launching kernel's slot for the publisher (one atomic per
// launch; the word is read first so a kernel launched again costs a load) and stamp the launch (the
// publisher waits until the latest launch is HBF_ACT_MIN_RUN_NS old: short kernels never publish)
HB_DEV void hb_act_mark(hbf_device_state* st, uint32_t k, uint64_t now) {
    hb_st_vol(&st->act_launch_ns, now);
    const uint64_t bit = 1ull << (k & 63u);
    if ((hb_ld_vol(&st->act_mask[k >> 6]) & bit) == 0ull)
        atomicOr((unsigned long long*)&st->act_mask[k >> 6], (unsigned long long)bit);
}

// Add kernel slot k's growth since its last visit to act_total (only the publisher, which holds the
// act_stamp claim, writes act_seen / act_total). Counters only grow; a sum below the one seen is ignored.
// The shards are read HB_ACT_LOADS at a time (independent loads in flight): with one load in flight a publication
// (4 slots x 8 words x 32 shards = 1,024 dependent device loads by one thread) took ~270 us on the H200, added to
// the end of every short kernel that published (quick stress matrix, 2026-12-05: fixed0 median x15 vs x6.8 before
// the publisher existed). Out of line (noinline): it runs at most once per HBF_ACT_PERIOD_NS, so the call costs
// nothing and its registers do not add to the inlined issue paths.
#ifndef HB_ACT_LOADS
#define HB_ACT_LOADS 8u
#endif
static __device__ __noinline__ void hb_act_visit(hbf_device_state* st, uint32_t k) {
    const uint64_t ksp = st->kshards;
    const uint64_t* base = ksp != 0ull ? (const uint64_t*)((const hbf_kernel_counters*)ksp + (uint64_t)k * HBF_KSHARDS)
                                       : (const uint64_t*)&st->kslots[k];
    const uint32_t nsh = ksp != 0ull ? HBF_KSHARDS : 1u;
    constexpr uint32_t kstride = sizeof(hbf_kernel_counters) / 8u, ostride = sizeof(hbf_op_counters) / 8u;
#pragma unroll 1
    for (uint32_t i = 0; i < 2u * HBF_N_OPS; ++i) {         // i = 2 op + (0: requests, 1: bytes)
        const uint64_t* p = base + (i >> 1) * ostride + (i & 1u);
        uint64_t sum = 0ull;
#pragma unroll 1
        for (uint32_t sh = 0; sh < nsh; sh += HB_ACT_LOADS) {
            uint64_t v[HB_ACT_LOADS];
#pragma unroll
            for (uint32_t j = 0; j < HB_ACT_LOADS; ++j) v[j] = sh + j < nsh ? hb_ld_vol(p + (sh + j) * kstride) : 0ull;
#pragma unroll
            for (uint32_t j = 0; j < HB_ACT_LOADS; ++j) sum += v[j];
        }
        uint64_t* seen = &st->act_seen[(uint64_t)k * (2u * HBF_N_OPS) + i];
        const uint64_t old = hb_ld_vol(seen);
        if (sum > old) {
            hb_st_vol(seen, sum);
            hb_st_vol(&st->act_total[i], hb_ld_vol(&st->act_total[i]) + (sum - old));
        }
    }
}

// Publish if due and nobody else is: visit up to HBF_ACT_SLOTS_PER_FLUSH marked slots from the cursor, then
// write the totals under the section's seqlock (odd, system fence, payload, system fence, even).
HB_DEV void hb_act_flush(hbf_device_state* st, hbf_ctl* c, uint64_t now) {
    const uint64_t s = hb_ld_vol(&st->act_stamp);
    if ((s & 1ull) != 0ull || now - s < HBF_ACT_PERIOD_NS) return;
    // not before the latest launched kernel has run HBF_ACT_MIN_RUN_NS (signed: a launch stamped by another
    // SM a little after `now` is young too)
    if ((int64_t)(now - hb_ld_vol(&st->act_launch_ns)) < (int64_t)HBF_ACT_MIN_RUN_NS) return;
    if (atomicCAS((unsigned long long*)&st->act_stamp, (unsigned long long)s, (unsigned long long)(now | 1ull)) !=
        (unsigned long long)s)
        return;
    uint32_t k = (uint32_t)hb_ld_vol(&st->act_cursor) & (HBF_MAX_KERNEL_SLOTS - 1u);
    uint32_t scanned = 0u, visited = 0u;
    while (scanned < HBF_MAX_KERNEL_SLOTS && visited < HBF_ACT_SLOTS_PER_FLUSH) {
        const uint64_t m = hb_ld_vol(&st->act_mask[k >> 6]) >> (k & 63u);
        if (m == 0ull) {                                   // nothing launched in the rest of this word
            const uint32_t skip = 64u - (k & 63u);
            k = (k + skip) & (HBF_MAX_KERNEL_SLOTS - 1u);
            scanned += skip;
            continue;
        }
        const uint32_t z = (uint32_t)(__ffsll((long long)m) - 1);
        k += z;                                            // stays in this word
        scanned += z + 1u;
        hb_act_visit(st, k);
        ++visited;
        k = (k + 1u) & (HBF_MAX_KERNEL_SLOTS - 1u);
    }
    hbf_activity* a = &c->activity;
    const uint64_t q = hb_ld_vol(&st->act_pub_seq) + 2ull;   // the even value this publication ends with
    hb_st_vol(&a->seq, q - 1ull);                         // odd: a reader retries
    __threadfence_system();
#pragma unroll 1
    for (uint32_t i = 0; i < 2u * HBF_N_OPS; ++i) hb_st_vol(&a->ops[0].requests + i, hb_ld_vol(&st->act_total[i]));
    const uint64_t fl = hb_ld_vol(&st->act_flushes) + 1ull, vis = hb_ld_vol(&st->act_visits) + visited;
    // scalar stores: flushes/gpu_ns and slot_visits/state_ptr sit at offsets 8 and 24 of the section, not
    // 16-byte aligned (a v2.u64 store there faulted MISALIGNED_ADDRESS on the H200, 2026-12-05)
    hb_st_vol(&a->flushes, fl);
    hb_st_vol(&a->gpu_ns, now);
    hb_st_vol(&a->slot_visits, vis);
    hb_st_vol(&a->state_ptr, (uint64_t)st);
    __threadfence_system();                               // the payload before the even seq (a release;
    hb_st_vol(&a->seq, q);                                // fence + volatile: no st.release.sys in the tagged build)
    hb_st_vol(&st->act_pub_seq, q);
    hb_st_vol(&st->act_flushes, fl);
    hb_st_vol(&st->act_visits, vis);
    hb_st_vol(&st->act_cursor, k);
    __threadfence();
    hb_st_vol(&st->act_stamp, now & ~1ull);               // release the claim (even)
}

// Returns the packed word (valid bit set), or 0 after recording DAEMON_LOST (seqlock writer died).
HB_OOL_FN uint64_t hb_thermal_read(hbf_device_state* st, const hbf_ctl* c,
                                                        uint64_t now) {
    uint32_t q = 1000000u, adm = 1u, mode = HBF_TH_NORMAL;
    uint64_t until = 0ull;   // the snapshot's validity horizon (GPU clock; 0: none): read with the payload,
                             // an independent load in the same round trip (docs/design.md §3.3)
    if (c != nullptr) {
        // the GPU clock echo (hbf_activity.clock_echo_ns): one posted store, no fence, no round trip; hbfd
        // bounds the GPU clock from below with it when it expresses a horizon in the GPU's clock
        hb_st_vol(&((hbf_ctl*)c)->activity.clock_echo_ns, now);
        for (uint32_t tries = 0;; ++tries) {
            const uint64_t s0 = hb_ld_acq_sys(&c->thermal.seq);
            if ((s0 & 1ull) == 0ull) {
                mode = hb_ld_vol32(&c->thermal.mode);
                q = hb_ld_vol32(&c->thermal.q_ppm);
                adm = hb_ld_vol32(&c->thermal.admission_open);
                until = hb_ld_vol(&c->thermal.valid_until_gpu_ns);
                __threadfence_system();
                if (hb_ld_acq_sys(&c->thermal.seq) == s0) break;
            }
            // a writer that never finishes (hbfd died inside the seqlock): never use torn values
            if (tries > 1000000u) {
                HB_OOL(hb_fail)(st, HBF_ST_DAEMON_LOST, 0u, s0);
                return 0ull;
            }
            hb_sleep(64);
        }
        if (q == 0u) q = 1u;
        if (q > 1000000u) q = 1000000u;
        if (st->refresh_quantum != 0ull) {
            const uint64_t debt = hb_ld_acq_sys(&c->refresh.debt_total_bytes);
            atomicMax((unsigned long long*)&st->debt_seen, (unsigned long long)debt);
        }
    }
    // a horizon (hbfd: these words and the debt do not change before GPU time `until`) stamps the word ahead
    // (hbf_thc.h): valid while age <= max_age OR now < until; none (0) or a short one: stamped now, as before
    const uint64_t w = hb_pack_thermal(q, adm, mode, hbf_thc_stamp_time(now, until, st->thermal_max_age_ns));
    hb_st_vol(&st->thermal_cache, w);
    if (st->thermal_max_age_ns != 0ull) hb_publish_replicas(st, w);   // 0: every request reads (general path)
    return w;
}

// The age validity is decided on (hbf_thc.h): a word stamped ahead (a validity horizon in force) is age 0.
HB_DEV uint64_t hb_thc_age_ns(uint64_t w, uint64_t now) {
    return hbf_thc_age(w, now);
}

// Live activity while a horizon keeps the snapshot valid (no refresh, so no flush piggybacks on one): when the
// next publication is due (hb_act_flush: at most once per HBF_ACT_PERIOD_NS, single flight, only in kernels that
// have run HBF_ACT_MIN_RUN_NS), the general path and the inline path take the flush WITHOUT the refresh, at the
// one place each already flushes after a refresh (no new call site, no register cost: bench/helper_registers.py);
// the compact path sends about one request in 256 there (hb_cd_thermal_word). So issue 17's live activity keeps
// its period. Without a horizon the word is never stamped ahead and none of this runs.
HB_DEV uint64_t hb_act_due(const hbf_device_state* st) {
    const uint64_t s = hb_ld_vol(&st->act_stamp) & ~1ull;
    const uint64_t a = s + HBF_ACT_PERIOD_NS, b = hb_ld_vol(&st->act_launch_ns) + HBF_ACT_MIN_RUN_NS;
    return (int64_t)(a - b) >= 0 ? a : b;
}

HB_DEV uint64_t hb_thermal_snapshot(hbf_device_state* st, const hbf_ctl* c, uint64_t now) {
    uint64_t w = hb_ld_vol(&st->thermal_cache);
    bool read = true;                               // false: a horizon holds, only the activity flush is due
    if (st->thermal_max_age_ns != 0ull) {
        for (;;) {
            if (HBF_THC_VALID(w)) {
                const int64_t sage = hbf_thc_sage(w, now);
                if (sage < 0) {                     // a validity horizon in force (hbf_thc.h)
                    if (c == nullptr || (int64_t)(now - hb_act_due(st)) < 0) return w;
                    read = false;
                    break;
                }
                if ((uint64_t)sage <= st->thermal_max_age_ns) return w;
#if HBF_THERMAL_SF
                // stale: claim the refresh (marker = valid bit clear, stamped now); a lost CAS means
                // the word changed (another claim or a fresh snapshot): look again
                const uint64_t claim = hb_pack_thermal(HBF_THC_Q(w), HBF_THC_ADM(w), HBF_THC_MODE(w), now)
                                       & ~(1ull << 23);
                const unsigned long long prev = atomicCAS((unsigned long long*)&st->thermal_cache,
                                                          (unsigned long long)w, (unsigned long long)claim);
                if (prev == (unsigned long long)w) break;          // this thread refreshes
                w = prev;
                continue;
#else
                break;
#endif
            }
#if HBF_THERMAL_SF
            if (w == 0ull) {   // no snapshot yet (first use after attach): claim the first read too
                const uint64_t claim = hb_pack_thermal(0u, 0u, 0u, now) & ~(1ull << 23);
                const unsigned long long prev = atomicCAS((unsigned long long*)&st->thermal_cache, 0ull,
                                                          (unsigned long long)claim);
                if (prev == 0ull) break;
                w = prev;
                continue;
            }
            // a claim in progress: wait for its snapshot (device memory only) for a bounded time,
            // then use the values the claim kept (none on the very first snapshot: read the host)
            if (hb_thc_age_ns(w, now) < HBF_THC_CLAIM_WAIT_NS) {
                hb_sleep(128);
                now = hb_now();
                w = hb_ld_vol(&st->thermal_cache);
                continue;
            }
            if (HBF_THC_Q(w) != 0u) return w | (1ull << 23);
#endif
            break;
        }
    }
    const uint64_t r = read ? HB_OOL(hb_thermal_read)(st, c, now) : w;
    // live activity, at most once per HBF_ACT_PERIOD_NS, by the thread that refreshed the snapshot (or found
    // the flush due under a horizon)
    if (c != nullptr) hb_act_flush(st, (hbf_ctl*)c, now);
    return r;
}

// Admission: Normal/Light admit; Severe withholds (spin-wait with backoff until it reopens,
// counted); Shutdown -> THERMAL_SHUTDOWN (terminal). Returns the snapshot used for the reservation,
// or 0 after a terminal failure (recorded; the caller ends the warp).
HB_SPLIT_FN uint64_t hb_admit_withheld(hbf_device_state* st, const hbf_ctl* c, uint64_t now,
                                     uint32_t site, uint64_t addr) {
    uint64_t w;
    hbf_kernel_counters* ks = hb_kslot(st, site);
    hb_red_add(&ks->thermal_waits, 1ull);
    const uint64_t t0 = now;
    uint32_t backoff = 256;
    hb_live lv;
    if (c != nullptr) hb_live_init(lv, c, now);
#pragma unroll 1
    for (;;) {
        hb_sleep(backoff);
        backoff = backoff < 65536u ? backoff * 2u : 65536u;
        const uint64_t t = hb_now();
        if (c != nullptr) {
            const uint32_t s = HB_OOL(hb_live_check)(st, lv, c, t);
            if (s != 0u && s != HBF_ST_TIMEOUT) {
                hb_fail_live(st, s, site, addr);
                return 0ull;
            }
        }
        w = HB_OOL(hb_thermal_read)(st, c, t);
        if (w == 0ull) return 0ull;
        if (HBF_THC_MODE(w) == HBF_TH_SHUTDOWN) {
            HB_OOL(hb_fail)(st, HBF_ST_THERMAL_SHUTDOWN, site, addr);
            return 0ull;
        }
        if (HBF_THC_ADM(w)) {
            hb_red_add(&ks->thermal_wait_ns, (unsigned long long)(t - t0));
            return w;
        }
    }
}

HB_OOL_FN uint64_t hb_admit(hbf_device_state* st, const hbf_ctl* c, uint64_t now, uint32_t site,
                            uint64_t addr) {
    const uint64_t w = hb_thermal_snapshot(st, c, now);
    if (w == 0ull) return 0ull;
    if (HBF_THC_MODE(w) == HBF_TH_SHUTDOWN) {
        HB_OOL(hb_fail)(st, HBF_ST_THERMAL_SHUTDOWN, site, addr);
        return 0ull;
    }
    if (HBF_THC_ADM(w)) return w;
    return HB_OOL(hb_admit_withheld)(st, c, now, site, addr);
}

// Refresh debt: one quantum per admission, claimed as soon as the published debt exceeds what
// has been claimed. Returns the bytes this admission must also serve.
HB_DEV uint64_t hb_claim_refresh(hbf_device_state* st, uint32_t site) {
    const uint64_t quantum = st->refresh_quantum;
    if (quantum == 0ull) return 0ull;
    const uint64_t seen = hb_ld_vol(&st->debt_seen);
    uint64_t claimed = hb_ld_vol(&st->debt_claimed);
    while (claimed < seen) {
        const uint64_t amt = (seen - claimed) < quantum ? (seen - claimed) : quantum;
        const uint64_t prev = atomicCAS((unsigned long long*)&st->debt_claimed,
                                        (unsigned long long)claimed, (unsigned long long)(claimed + amt));
        if (prev == claimed) {
            hbf_kernel_counters* ks = hb_kslot(st, site);
            hb_red_add(&ks->refresh_claims, 1ull);
            hb_red_add(&ks->refresh_bytes, (unsigned long long)amt);
            // the last outstanding debt is paid: the compact path may serve again (replicas valid)
            if (claimed + amt >= seen) hb_publish_replicas(st, hb_ld_vol(&st->thermal_cache));
            return amt;
        }
        claimed = prev;
    }
    return 0ull;
}

// Measurement build only (HBF_ISSUE_PROFILE=1, bench/issue_path_profile.py): lane 0 of the calling warp
// stamps %clock64 at the checkpoints of the compact path into __hb_prof[i], each stamp taken once the
// value named at that checkpoint is available (it is consumed first), so a step's cost is the difference
// of two consecutive stamps.
#ifndef HBF_ISSUE_PROFILE
#define HBF_ISSUE_PROFILE 0
#endif
#if HBF_ISSUE_PROFILE
#define HBF_PROF_WARPS 4096u
extern "C" {
__device__ unsigned long long __hb_prof[HBF_PROF_WARPS * 16u];   // [global warp % HBF_PROF_WARPS][checkpoint]
}
HB_DEV void hb_prof(uint32_t i, uint64_t dep) {
    uint64_t t;
    asm volatile("{ .reg .u64 x; xor.b64 x, %1, %1; mov.u64 %0, %%clock64; add.u64 %0, %0, x; }"
                 : "=l"(t) : "l"(dep) : "memory");
    const uint32_t tpb = blockDim.x * blockDim.y * blockDim.z;
    const uint32_t tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const uint32_t blk = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const uint32_t warp = (blk * ((tpb + 31u) / 32u) + tid / 32u) % HBF_PROF_WARPS;
    if (hb_laneid() == 0u) __hb_prof[warp * 16u + i] = t;
}
#define HB_PROF(i, dep) hb_prof((i), (uint64_t)(dep))
#else
#define HB_PROF(i, dep) ((void)0)
#endif

// start = max(earliest, tail); tail = start + dur, first come first served in the order of the
// atomics, with two atomics and no retry loop (a CAS loop on a tail that every warp of a stream
// shares retries O(warps) times under contention): lift an idle tail to `earliest`, then take `dur`.
// The value before the add is >= earliest (the tail only grows) and is this request's start.
// Both on the global window (a generic atomic is a shared-window check + CAS loop on sm_90), the max as
// a fire-and-forget red: one round trip. Same thread, same address, relaxed.gpu: the add is after the
// max in the word's coherence order.
HB_DEV uint64_t hb_reserve(uint64_t* tail, uint64_t earliest, uint64_t dur) {
    uint64_t old;
    asm volatile("red.relaxed.gpu.global.max.u64 [%1], %2;\n\tatom.relaxed.gpu.global.add.u64 %0, [%1], %3;"
                 : "=l"(old) : "l"(__cvta_generic_to_global(tail)), "l"(earliest), "l"(dur) : "memory");
    return old;
}

// ------------------------------------------------------------------------------------------
// Timing sources. Each returns the deadline (GPU ns) and sets *modeled = deadline - now.
// ------------------------------------------------------------------------------------------
// ceil(n / d), exact, for n < 2^53 (the model's transfer times: bytes * 1e9 <= 2^42): an FP64 estimate corrected
// in integers instead of a 64-bit integer division (~150 cycles on sm_90); larger n: the integer division.
HB_DEV uint64_t hb_ceil_div_f(uint64_t n, uint64_t d) {
    if (d == 0ull) return 0ull;
    if (n >> 53) return hb_ceil_div(n, d);
    uint64_t qf = (uint64_t)((double)n / (double)d);          // within 1 of floor(n / d)
    if (qf * d > n) --qf;
    else if ((qf + 1ull) * d <= n) ++qf;
    return qf + (qf * d < n ? 1ull : 0ull);
}

HB_DEV uint64_t hb_refresh_service(const hbf_media_params& m, uint64_t rbytes) {
    if (rbytes == 0ull) return 0ull;
    const uint64_t pages = hb_ceil_div(rbytes, m.page_bytes ? m.page_bytes : 4096u);
    return pages * (m.t_read_ns + m.t_prog_ns);
}

// ---- the fast model: HBF media semantics (docs/design.md §3.9), one page transaction per call ----
// Plane (OCP bank) record: bank_buf[2 * b] = MRU buffer word, [2 * b + 1] = LRU (hbf_device.h).
#define HB_RDY_MASK ((1ull << HBF_BUF_READY_BITS) - 1ull)
HB_DEV uint32_t hb_buf_tag(uint64_t w) { return (uint32_t)(w >> HBF_BUF_READY_BITS); }
// The sense end of a buffer word, expanded to the 64-bit GPU ns nearest `now` (+-2^39 ns); 0: never used.
HB_DEV uint64_t hb_buf_ready(uint64_t w, uint64_t now) {
    if (w == 0ull) return 0ull;
    const uint64_t d = ((w & HB_RDY_MASK) - (now & HB_RDY_MASK)) & HB_RDY_MASK;
    return (d >> (HBF_BUF_READY_BITS - 1u)) ? now - ((HB_RDY_MASK + 1ull) - d) : now + d;
}
HB_DEV uint64_t hb_buf_word(uint32_t tag, uint64_t ready) {
    return ((uint64_t)tag << HBF_BUF_READY_BITS) | (ready & HB_RDY_MASK);
}

// One 128-bit compare-and-swap of a plane record (sm_90: atom.global.cas.b128). Returns the record as
// found (== expected on success).
HB_DEV ulonglong2 hb_cas128(uint64_t* p, ulonglong2 expect, ulonglong2 desired) {
    ulonglong2 old;
    asm volatile("{\n\t.reg .b128 e, n, o;\n\t"
                 "mov.b128 e, {%2, %3};\n\tmov.b128 n, {%4, %5};\n\t"
                 "atom.global.cas.b128 o, [%6], e, n;\n\tmov.b128 {%0, %1}, o;\n\t}"
                 : "=l"(old.x), "=l"(old.y)
                 : "l"(expect.x), "l"(expect.y), "l"(desired.x), "l"(desired.y), "l"(__cvta_generic_to_global(p))
                 : "memory");
    return old;
}
HB_DEV ulonglong2 hb_ld_rec(const uint64_t* p) {   // one 16-byte load (the CAS checks what it saw)
    ulonglong2 r;
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(r.x), "=l"(r.y)
                 : "l"(__cvta_generic_to_global(p)) : "memory");
    return r;
}
HB_DEV uint64_t hb_max(uint64_t a, uint64_t b) { return a > b ? a : b; }

// The page transaction's memory operations (hb_fast_model and the plane records), by who performs them:
// hb_mem_solo, the calling lane alone (every caller by default); hb_mem_lock (HBF_FAST_LOCKSTEP=1, a measurement
// build for the 48-layer sg2 stall of stop 45, bench/gpu_calls/stop46_sg2hang.sh), every lane of a group in lockstep:
// the leader performs each operation, the group receives its result, so every lane takes the same branches and
// retries and no lane waits in a shuffle while the leader loops alone.
struct hb_mem_solo {
    __device__ __forceinline__ ulonglong2 rec(const uint64_t* p) const { return hb_ld_rec(p); }
    __device__ __forceinline__ uint64_t ld(const uint64_t* p) const { return hb_ld_vol(p); }
    __device__ __forceinline__ ulonglong2 cas(uint64_t* p, ulonglong2 e, ulonglong2 d) const { return hb_cas128(p, e, d); }
    __device__ __forceinline__ void add(uint64_t* p, uint64_t v) const { atomicAdd((unsigned long long*)p, (unsigned long long)v); }
    __device__ __forceinline__ uint64_t reserve(uint64_t* t, uint64_t e, uint64_t d) const { return hb_reserve(t, e, d); }
};
#ifndef HBF_FAST_LOCKSTEP
#define HBF_FAST_LOCKSTEP 0
#endif
#if HBF_FAST_LOCKSTEP
struct hb_mem_lock {
    uint32_t m, leader;
    bool me;                                        // this lane is the leader
    __device__ __forceinline__ uint64_t bc(uint64_t v) const { return __shfl_sync(m, v, (int)leader); }
    __device__ __forceinline__ ulonglong2 rec(const uint64_t* p) const {
        ulonglong2 r = make_ulonglong2(0ull, 0ull);
        if (me) r = hb_ld_rec(p);
        return make_ulonglong2(bc(r.x), bc(r.y));
    }
    __device__ __forceinline__ uint64_t ld(const uint64_t* p) const { uint64_t v = 0ull; if (me) v = hb_ld_vol(p); return bc(v); }
    __device__ __forceinline__ ulonglong2 cas(uint64_t* p, ulonglong2 e, ulonglong2 d) const {
        ulonglong2 r = make_ulonglong2(0ull, 0ull);
        if (me) r = hb_cas128(p, e, d);
        return make_ulonglong2(bc(r.x), bc(r.y));
    }
    __device__ __forceinline__ void add(uint64_t* p, uint64_t v) const {
        if (me) atomicAdd((unsigned long long*)p, (unsigned long long)v);
        __syncwarp(m);
    }
    __device__ __forceinline__ uint64_t reserve(uint64_t* t, uint64_t e, uint64_t d) const {
        uint64_t v = 0ull;
        if (me) v = hb_reserve(t, e, d);
        return bc(v);
    }
};
#endif

// The read half: the plane's buffers, then a sense only on a miss. Returns when the page's data is in a
// page buffer (data ready); `tr` is the (thermally scaled) tR, `nb` the plane's buffers (1 or 2), `tprog` tPROG.
// Reads have priority over programs (non-preemptive, docs/design.md §3.9): a sense waits for the senses ahead
// of it and for the program running at `cmd` (the queued programs end at bank_busy - k tPROG), not for the
// programs queued behind that one, which move back by its tR (bank_busy += tr).
// *nowait: when the data would be ready on an idle plane (a sense: cmd + tR; a hit: its ready, at most cmd + tR:
// a hit waiting for a sense the busy plane delayed does not hold the channel later than its own sense would).
template <class M>
HB_DEV uint64_t hb_plane_read(const M& mem, hbf_device_state* st, uint32_t b, uint32_t tag, uint64_t cmd, uint64_t tr,
                              uint64_t tprog, uint32_t nb, uint64_t now, uint64_t* nowait) {
    uint64_t* rec = &st->bank_buf[2u * b];
    ulonglong2 cur = mem.rec(rec);
    HB_PROF(11, cur.x + cur.y);
#pragma unroll 1
    for (;;) {
        if (hb_buf_tag(cur.x) == tag) {                       // MRU hit (or its sense in flight): no write
            const uint64_t r = hb_max(hb_buf_ready(cur.x, now), cmd);
            *nowait = r < cmd + tr ? r : cmd + tr;
            return r;
        }
        ulonglong2 want;
        uint64_t ready;
        bool displace = false;
        if (nb > 1u && hb_buf_tag(cur.y) == tag) {             // LRU hit: it becomes MRU
            ready = hb_buf_ready(cur.y, now);
            if (ready < cmd) ready = cmd;
            *nowait = ready < cmd + tr ? ready : cmd + tr;
            want.x = cur.y; want.y = cur.x;
        } else {                                              // miss: one sense on the plane's engine
            const uint64_t busy = mem.ld(&st->bank_busy[b]);
            const uint64_t sf = hb_max(hb_buf_ready(cur.x, now), hb_buf_ready(cur.y, now));   // senses' end
            uint64_t start = hb_max(cmd, sf);
            if (busy > start) {                               // programs queued past cmd: the read goes first
                displace = true;
                if (sf < cmd) {                               // after the program running at cmd
                    const uint64_t ahead = busy - cmd;
                    start = tprog == 0ull ? busy
                          : busy - (((ahead | tprog) >> 32) ? ahead / tprog
                                                              : (uint64_t)((uint32_t)ahead / (uint32_t)tprog)) * tprog;
                }
            }
            ready = start + tr;
            *nowait = cmd + tr;
            want.x = hb_buf_word(tag, ready);
            // an empty LRU slot is filled first; with one buffer the record keeps the latest sense end in y
            want.y = nb > 1u ? cur.x : hb_buf_word(0u, ready);
        }
        const ulonglong2 old = mem.cas(rec, cur, want);
        if (old.x == cur.x && old.y == cur.y) {
            if (displace) mem.add(&st->bank_busy[b], tr);
            return ready;
        }
        cur = old;                                            // raced: decide again on what is there now
    }
}

// A store's buffer invalidation: the buffer holding the page (if any) becomes empty and LRU; it keeps
// its time (the plane's latest sense end stays in the record). Returns the plane's sense-engine free time.
template <class M>
HB_DEV uint64_t hb_plane_invalidate(const M& mem, hbf_device_state* st, uint32_t b, uint32_t tag, uint64_t now) {
    uint64_t* rec = &st->bank_buf[2u * b];
    ulonglong2 cur = mem.rec(rec);
#pragma unroll 1
    for (;;) {
        const uint64_t pf = hb_max(hb_buf_ready(cur.x, now), hb_buf_ready(cur.y, now));
        ulonglong2 want;
        if (hb_buf_tag(cur.x) == tag) { want.x = cur.y; want.y = cur.x & HB_RDY_MASK; }
        else if (hb_buf_tag(cur.y) == tag) { want.x = cur.x; want.y = cur.y & HB_RDY_MASK; }
        else return pf;
        const ulonglong2 old = mem.cas(rec, cur, want);
        if (old.x == cur.x && old.y == cur.y) return pf;
        cur = old;
    }
}

template <class M>
HB_DEV uint64_t hb_fast_model_by(const M& mem, hbf_device_state* st, uint64_t media_addr, uint64_t bytes, uint32_t op,
                                   uint32_t q, uint64_t rbytes, uint64_t now) {
    const hbf_media_params& m = st->media;
    // run parameters (constant while kernels run): read-only cache, loaded together
    const uint32_t C0 = __ldg(&m.channels), D0 = __ldg(&m.dies_per_channel), P0 = __ldg(&m.planes_per_die);
    const uint32_t nb = __ldg(&m.page_buffers) == 1u ? 1u : 2u;
    const uint64_t tc = __ldg(&m.t_cmd_ns), cmd = now + tc;
    const uint64_t t_read = __ldg(&m.t_read_ns), cbps = __ldg(&m.channel_bytes_per_s);
    const uint32_t C = C0 ? C0 : 1u, CD = C * (D0 ? D0 : 1u), P = P0 ? P0 : 1u;
    const uint64_t page = media_addr >> 12;                   // 4 KiB pages (profile-validated)
    // the page map: channel page % C, plane (page % CD) + CD * ((page / CD) % P) (< HBF_DEV_MAX_BANKS,
    // validated), tag = page / (CD * P) + 1 (< 2^24, validated); shifts for power-of-two geometries (the OCP
    // grades), 32-bit divisions below 2^32 pages, 64-bit ones otherwise (a 64-bit division is ~150 cycles)
    uint32_t ch, b, tag;
    if (((C & (C - 1u)) | (CD & (CD - 1u)) | (P & (P - 1u))) == 0u) {
        const uint32_t lcd = (uint32_t)__ffs((int)CD) - 1u, lp = (uint32_t)__ffs((int)P) - 1u;
        ch = (uint32_t)page & (C - 1u);
        b = ((uint32_t)page & (CD - 1u)) | (((uint32_t)(page >> lcd) & (P - 1u)) << lcd);
        tag = (uint32_t)((page >> (lcd + lp)) + 1ull) & 0xFFFFFFu;
    } else if ((page >> 32) == 0ull) {
        const uint32_t pg = (uint32_t)page, pcd = pg / CD;
        ch = pg % C;
        b = pg % CD + CD * (pcd % P);
        tag = (pcd / P + 1u) & 0xFFFFFFu;
    } else {
        const uint64_t pcd = page / CD;
        ch = (uint32_t)(page % C);
        b = (uint32_t)(page % CD) + CD * (uint32_t)(pcd % P);
        tag = (uint32_t)((pcd / P + 1ull) & 0xFFFFFFull);
    }
    // only the 64 B sectors the request touches cross the channel: loads arrive sector-rounded (their granule);
    // a store's bytes are counted exactly by the caller, its sectors are those of [addr, addr + bytes)
    const uint64_t off = media_addr & 63ull;
    const uint64_t xbytes = (op == HBF_OP_STORE) ? ((off + bytes + 63ull) & ~63ull) : bytes;
    const uint64_t xfer = hb_thermal_scale(hb_ceil_div_f(xbytes * 1000000000ull, cbps), q);
    HB_PROF(10, xfer + b + tag);
    if (rbytes != 0ull)                                       // a refresh quantum claimed by this request
        mem.reserve(&st->bank_busy[b], now, hb_refresh_service(m, rbytes));
    uint64_t done = 0ull, slot = 0ull;
    if (op != HBF_OP_STORE) {                                 // load, cp.async, the read half of an atomic
        // the channel slot is reserved (arrival order) at the no-wait ready time; the transfer runs at
        // max(slot, data ready): a read waiting for a busy plane does not hold the channel for the reads
        // behind it (docs/design.md §3.9), and no slot is ever used twice (completions never outrun the channel)
        uint64_t nowait;
        const uint64_t ready = hb_plane_read(mem, st, b, tag, cmd, hb_thermal_scale(t_read, q), __ldg(&m.t_prog_ns),
                                             nb, now, &nowait);
        HB_PROF(12, ready);
        slot = mem.reserve(&st->chan_tail[ch], nowait, xfer);
        done = hb_max(slot, ready) + xfer;
        HB_PROF(13, done);
        if (op != HBF_OP_ATOMIC) return done;
    }
    // store (or an atomic's write at its read's completion): data-in, acknowledged when it has crossed the
    // channel; the 4 KiB program it is part of occupies the plane tPROG * sector bytes / 4096 after it. An
    // atomic's data-in has its slot right after its read's slot (+ t_cmd) and runs at its read's completion.
    // A store's data-in needs a free page buffer of its plane: the nb buffers hold the running and queued
    // programs' data (they end at bank_busy - k tPROG), one is free from bank_busy - (nb - 1) tPROG. Its slot
    // is reserved in the senses' frame at its no-wait time (now + t_cmd + tR, where the reads' slots are) and
    // its data-in runs at max(slot - tR, buffer free): it does not wait behind the slots of senses still in
    // flight, and a store waiting for a buffer does not hold the channel for the reads behind it.
    const uint64_t a = (op == HBF_OP_STORE) ? now : done;
    const uint64_t pf = hb_plane_invalidate(mem, st, b, tag, a);
    const uint64_t sh = (op == HBF_OP_STORE) ? hb_thermal_scale(t_read, q) : 0ull;
    uint64_t rdy = now + tc;
    if (op == HBF_OP_STORE) {
        const uint64_t hold = (uint64_t)(nb - 1u) * __ldg(&m.t_prog_ns), busy = mem.ld(&st->bank_busy[b]);
        if (busy > hold) rdy = hb_max(rdy, busy - hold);
    }
    const uint64_t xs = mem.reserve(&st->chan_tail[ch], (op == HBF_OP_STORE) ? now + tc + sh : slot + xfer + tc, xfer);
    const uint64_t xe = ((op == HBF_OP_STORE) ? hb_max(xs - sh, rdy) : hb_max(xs, done + tc)) + xfer;
    const uint64_t wg = m.write_granularity ? m.write_granularity : 4096u;
    mem.reserve(&st->bank_busy[b], hb_max(xe, pf), hb_ceil_div(__ldg(&m.t_prog_ns) * xbytes, wg));
    return hb_max(xe, done);
}
// the page transaction by the calling lane alone (every caller but the lockstep build's compact path)
HB_OOL_FN uint64_t hb_fast_model(hbf_device_state* st, uint64_t media_addr, uint64_t bytes, uint32_t op, uint32_t q,
                                 uint64_t rbytes, uint64_t now) {
    return hb_fast_model_by(hb_mem_solo{}, st, media_addr, bytes, op, q, rbytes, now);
}

// ------------------------------------------------------------------------------------------
// The reference ring's slot stealing (docs/runtime.md "ring"; hbf_device.h ref_claim / hbf_ref_ovf; its CPU
// model: hbfd/hostring.py). A ticket's completion is consumed at the value's first use, so a warp may hold
// unconsumed tickets while it issues more; with more tickets held than ring slots, an issuer waiting for a
// slot whose occupant belongs to a warp that itself waits for a slot would wait forever. Instead the issuer
// takes the occupant's POSTED completion into the overflow table (device memory) and writes consumed itself:
// a slot wait depends only on hbfd's service. Exactly one of owner and stealer takes a completion: each claims
// it first on the slot's claim word (owner 2 (t + 1) by atomicMax, stealer 2 (t + 1) + 1 by CAS while below 2 (t + 1)).
// ------------------------------------------------------------------------------------------
// The waiter's release of a consumed completion slot (the issuer of ticket + HBF_RING_SLOTS, a GPU
// thread, acquires it before it rewrites the request slot; hbfd writes that slot's next completion
// only after it has seen the next request, so the chain is waiter -> issuer (gpu scope) -> hbfd (the
// issuer's st.release.sys)). HBF_REF_CONSUMED_SYS=1: st.release.sys (MEMBAR.ALL.SYS) as before.
// A stealer is that issuer itself: the same store, then its own request's st.release.sys.
#ifndef HBF_REF_CONSUMED_SYS
#define HBF_REF_CONSUMED_SYS 0
#endif
HB_DEV void hb_st_consumed(hbf_completion* cp, uint64_t v) {
#if HBF_REF_CONSUMED_SYS
    hb_st_rel_sys(&cp->consumed, v);
#else
    hb_st_rel_gpu(&cp->consumed, v);
#endif
}

// A completion as read (from its ring slot or from the overflow table).
struct hb_cpl {
    uint64_t arrival, modeled, service, w6, w7;   // w6: site | flags << 32; w7: q | tag << 32 (the request's)
    uint32_t status;
};
// The four 16-byte host loads of a completion record (its payload and its request's words); seq and consumed
// are read with them and dropped.
HB_DEV void hb_cpl_load(const hbf_completion* cp, hb_cpl& o) {
    uint64_t seq_, stw, consumed_;
    hb_ld_vol_v2(&cp->seq, seq_, o.arrival);
    hb_ld_vol_v2(&cp->modeled_ns, o.modeled, o.service);
    hb_ld_vol_v2(&cp->status, stw, consumed_);
    hb_ld_vol_v2(&cp->req_site_flags, o.w6, o.w7);
    (void)seq_; (void)consumed_;
    o.status = (uint32_t)stw;
}
#define HB_STEAL_NONE 0u       // not stolen (not posted yet, a hint hbfd consumes, or its owner claimed it)
#define HB_STEAL_DONE 1u       // stolen: in the overflow table, consumed written
#define HB_STEAL_FAILED 2u     // the run failed (recorded: RING_OVERFLOW)

// The issuer of ticket need - 1 + HBF_RING_SLOTS, its slot still unconsumed: steal ticket need - 1's completion
// if it is posted. Its payload is stable while we read it: hbfd rewrites the slot only after consumed >= need
// AND the slot's next request, which is ours.
HB_SPLIT_FN uint32_t hb_ref_steal(hbf_device_state* st, hbf_ctl* c, uint32_t slot, uint64_t need, uint32_t site) {
    hbf_completion* cp = &c->completions[slot];
    if (hb_ld_acq_sys(&cp->seq) != need) return HB_STEAL_NONE;
    hb_cpl o;
    hb_cpl_load(cp, o);
    if (((o.w6 >> 32) & HBF_REQ_CAP_HINT) != 0u) return HB_STEAL_NONE;   // hbfd consumes a hint's completion
    // The claim is a compare-and-swap, not an atomicMax: a stealer that finds its owner's claim (2 need) must leave
    // the word as it is. An atomicMax raised it to 2 need + 1 even then, so every LATER take of the same ticket (a
    // second path: another lane of the warp, a join of a future with itself) read "a stealer has it" and waited for
    // an overflow entry nobody would write -- the stop 44/45 hang of the reference-source Qwen3 run (cuda-gdb: one
    // lane in hb_ref_ovf_take, its warp at the join's vote). hbfd/hostring.py and bench/ring_driver model this CAS.
    unsigned long long* cw = (unsigned long long*)&st->ref_claim[slot];
    unsigned long long cur = (unsigned long long)hb_ld_vol(&st->ref_claim[slot]);
#pragma unroll 1
    for (;;) {                                   // the word only grows: a lost CAS saw a later claim
        if (cur >= 2ull * need) return HB_STEAL_NONE;                    // its owner claimed it: it writes consumed
        const unsigned long long prev = atomicCAS(cw, cur, (unsigned long long)(2ull * need + 1ull));
        if (prev == cur) break;
        cur = prev;
    }
    hbf_ref_ovf* e = (hbf_ref_ovf*)st->ref_ovf + ((need - 1ull) & st->ref_ovf_mask);
#pragma unroll 1
    for (;;) {   // take the entry: free (never used, taken, or below the floor), else the run fails
        const uint64_t occ = hb_ld_acq_gpu(&e->tick1);
        if (occ == HBF_REF_OVF_BUSY) { hb_sleep(32); continue; }        // another stealer writes it (bounded)
        if (occ != 0ull && hb_ld_vol(&e->taken) != occ && occ - 1ull >= hb_ld_vol(&st->ref_floor)) {
            HB_OOL(hb_fail)(st, HBF_ST_RING_OVERFLOW, site, occ - 1ull);   // never overwritten
            return HB_STEAL_FAILED;
        }
        if (atomicCAS((unsigned long long*)&e->tick1, occ, HBF_REF_OVF_BUSY) == occ) break;
    }
    hb_st_vol_v2(&e->arrival_ns, o.arrival, o.modeled);
    hb_st_vol_v2(&e->service_ns, o.service, (uint64_t)o.status);
    hb_st_vol_v2(&e->req_site_flags, o.w6, o.w7);
    hb_st_vol(&e->taken, 0ull);
    hb_st_rel_gpu(&e->tick1, need);                                      // the entry, then its ticket
    hb_st_consumed(cp, need);                                            // the value the owner would write
    hb_red_add(&st->ref_steals, 1ull);
    return HB_STEAL_DONE;
}

// The ring is full: wait until the slot's previous ticket has been consumed, stealing its completion once it is
// posted (st->ref_ovf != 0; daemon liveness checked). Returns 0, or a terminal status after recording it
// (HB_ST_ENDED: another warp's failure).
HB_SPLIT_FN uint32_t hb_ref_slot_wait(hbf_device_state* st, hbf_ctl* c, uint32_t slot, uint64_t need,
                                uint32_t site, uint64_t addr, uint64_t now) {
    uint32_t backoff = 32;
    hb_live lv;
    hb_live_init(lv, c, now);
    uint32_t it = 0;
    const bool steal = st->ref_ovf != 0ull;
#pragma unroll 1
    while (hb_ld_acq_sys(&c->completions[slot].consumed) < need) {
        if (steal) {
            const uint32_t r = HB_OOL(hb_ref_steal)(st, c, slot, need, site);
            if (r == HB_STEAL_DONE) break;
            if (r == HB_STEAL_FAILED) return HBF_ST_RING_OVERFLOW;
        }
        hb_sleep(backoff);
        backoff = backoff < (uint32_t)st->backoff_max_ns ? backoff * 2u : (uint32_t)st->backoff_max_ns;
        if ((++it & 7u) == 0u) {
            const uint32_t s = HB_OOL(hb_live_check)(st, lv, c, hb_now());
            if (s != 0u) {
                hb_fail_live(st, s, site, addr);
                return s;
            }
        }
    }
    return 0u;
}

// Request publication. The payload goes out in 4 stores (one 8-byte, three 16-byte vector stores of
// the 64-byte slot) instead of 11 scalar ones, then seq = ticket + 1 with st.release.sys (one system
// fence per request: MEMBAR.ALL.SYS on sm_90).
// Every request carries a 32-bit tag of (seq, payload) under the run's ring key (st->ring_key, from hbfd's
// AttachReply; not in the control region) in thermal_q_ppm bits 32..63: hbfd takes a record only when its
// tag matches (hbfcommon/ctl.py request_tag), so a writer that only maps the region cannot make hbfd
// answer a ticket nobody of this run asked for.
// HBF_REF_TAGGED (measurement variant, default off): no fence; a record whose tag does not match yet is a
// payload store not visible yet, and hbfd retries it later (HBFD_RING_TAGS=1).
#ifndef HBF_REF_TAGGED
#define HBF_REF_TAGGED 0
#endif
#define HB_TAG_K 0x9E3779B97F4A7C15ull
HB_DEV uint32_t hb_req_tag(uint64_t key, uint64_t seq, uint64_t w1, uint64_t w2, uint64_t w3, uint64_t w4,
                           uint64_t w5, uint64_t w6, uint64_t q) {
    uint64_t h = (seq ^ key) * HB_TAG_K;
    h = (h ^ w1) * HB_TAG_K; h = (h ^ w2) * HB_TAG_K; h = (h ^ w3) * HB_TAG_K;
    h = (h ^ w4) * HB_TAG_K; h = (h ^ w5) * HB_TAG_K; h = (h ^ w6) * HB_TAG_K;
    h = (h ^ q) * HB_TAG_K;
    h ^= h >> 29;
    return (uint32_t)(h >> 32) | 1u;
}

// Reference path: ticket from an atomicAdd on st->ref_next_ticket (DEVICE memory: atomics on the
// host-mapped header.ring_head from hundreds of warps serialize over PCIe, 1-5 ms per issue measured on
// the H200; the runtime seeds the counter from the region and copies it back into ring_head while no
// kernel runs, hbf_ctl.h), slot reuse gated by `consumed`, payload written, then seq = ticket + 1 with
// st.release.sys. Returns the future, or HB_FAILED (recorded, or the run already failed: then no ticket
// is reserved).
HB_OOL_FN uint64_t hb_ref_issue(hbf_device_state* st, hbf_ctl* c, uint64_t addr,
                                                     uint64_t media_addr, uint32_t bytes, uint32_t op,
                                                     uint32_t range_id, uint32_t site, uint32_t flags,
                                                     uint32_t q, uint64_t now) {
    if (hb_failed(st)) return HB_FAILED;   // the run already failed: reserve no ticket (no hole in the ring)
    const uint64_t ticket = atomicAdd((unsigned long long*)&st->ref_next_ticket, 1ull);
    HB_TRACE(ticket, 1, now);
    const uint32_t slot = (uint32_t)(ticket & (HBF_RING_SLOTS - 1u));
    if (ticket >= HBF_RING_SLOTS &&
        HB_OOL(hb_ref_slot_wait)(st, c, slot, ticket - HBF_RING_SLOTS + 1ull, site, addr, now) != 0u)
        return HB_FAILED;
    hbf_request* r = &c->ring[slot];
    const uint64_t w4 = (uint64_t)bytes | ((uint64_t)op << 32);
    const uint64_t w5 = (uint64_t)range_id | ((uint64_t)(__hb_kslot_base + (site >> 16)) << 32);
    const uint64_t w6 = (uint64_t)site | ((uint64_t)flags << 32);
    const uint64_t w7 = (uint64_t)q | ((uint64_t)hb_req_tag(__ldg(&st->ring_key), ticket + 1ull, now, addr,
                                                            media_addr, w4, w5, w6, q) << 32);
    hb_st_vol(&r->arrival_ns, now);
    hb_st_vol_v2(&r->address, addr, media_addr);
    hb_st_vol_v2(&r->bytes, w4, w5);
    hb_st_vol_v2(&r->site, w6, w7);
#if HBF_REF_TAGGED
    hb_st_vol(&r->seq, ticket + 1ull);
#else
    hb_st_rel_sys(&r->seq, ticket + 1ull);
#endif
    HB_TRACE(ticket, 2, hb_now());
    return HBF_FUTURE_TICKET_BIT | ticket;
}

// ------------------------------------------------------------------------------------------
// Classification against the device copy of the range snapshot.
// ------------------------------------------------------------------------------------------
enum { HB_NATIVE = 0, HB_HIT = 1, HB_PARTIAL = 2 };

// One range entry through the read-only data cache (two 16-byte loads).
HB_DEV hbf_dev_range hb_ld_range(const hbf_dev_range* p) {
    const ulonglong2 a = __ldg((const ulonglong2*)p);
    const ulonglong2 b = __ldg((const ulonglong2*)p + 1);
    hbf_dev_range r;
    r.base = a.x;
    r.end = a.y;
    r.media_offset = b.x;
    r.range_id = (uint32_t)b.y;
    r.mode = (uint8_t)(b.y >> 32);
    r.perms = (uint8_t)(b.y >> 40);
    r.page_shift = (uint8_t)(b.y >> 48);
    r.reserved = 0;
    return r;
}

// The range table is immutable while any kernel runs: the runtime synchronizes the context before it
// rewrites the table (runtime_cuda/session.py), so the entries are read through the read-only data
// cache (L1, invalidated at each launch) with no seqlock round trips to L2.
HB_SPLIT_FN int hb_classify(const hbf_device_state* st, uint64_t addr, uint64_t bytes, hbf_dev_range& out) {
    const uint64_t last = addr + (bytes ? bytes : 1ull);  // exclusive end
    const uint32_t n = __ldg(&st->n_ranges);
    uint32_t lo = 0, hi = n;
    while (lo < hi) {  // first range with base > addr
        const uint32_t mid = (lo + hi) >> 1;
        if (__ldg(&st->ranges[mid].base) <= addr) lo = mid + 1; else hi = mid;
    }
    int res = HB_NATIVE;
    if (lo > 0) {
        out = hb_ld_range(&st->ranges[lo - 1]);
        if (addr < out.end) res = (last <= out.end) ? HB_HIT : HB_PARTIAL;
    }
    if (res == HB_NATIVE && lo < n && last > __ldg(&st->ranges[lo].base)) {
        out = hb_ld_range(&st->ranges[lo]);
        res = HB_PARTIAL;  // starts outside, ends inside
    }
    return res;
}

HB_DEV uint32_t hb_perm_needed(uint32_t op) {
    return op == HBF_OP_STORE ? HBF_PERM_WRITE : (op == HBF_OP_ATOMIC ? HBF_PERM_ATOMIC : HBF_PERM_READ);
}

// Warp sum of a u64 that fits in 48 bits per lane (two 32-bit reductions).
HB_DEV uint64_t hb_warp_sum(uint32_t mask, uint64_t v) {
    const uint32_t lo = __reduce_add_sync(mask, (uint32_t)(v & 0xFFFFu));
    const uint32_t hi = __reduce_add_sync(mask, (uint32_t)(v >> 16));
    return ((uint64_t)hi << 16) + lo;
}
HB_DEV uint32_t hb_sat32(uint64_t v) { return v > 0xFFFFFFFFull ? 0xFFFFFFFFu : (uint32_t)v; }

// The measured deadline bias (hbf_device_state.deadline_bias_ns, runtime_cuda/calibrate.py): the helpers'
// own fixed cost between the issue timestamp and the consumer's first use (entry work, the final spin
// exit, call/return), measured on the GPU, subtracted ONCE from each modeled deadline when it is created
// (device sources in hb_group_request, the reference path in hb_ticket_deadline; a join or a wait never
// re-applies it). A modeled delay shorter than the bias is clamped to the issue time t0 (never before it:
// the access then costs just the helper time), counted in the kernel's bias_clamps.
HB_DEV uint64_t hb_apply_bias(hbf_device_state* st, uint64_t deadline, uint64_t t0, uint32_t site) {
    const uint64_t bias = st->deadline_bias_ns;
    if (bias == 0ull) return deadline;
    if (deadline > t0 + bias) return deadline - bias;
    hb_red_add(&hb_kslot(st, site)->bias_clamps, 1ull);
    return t0 ? t0 : 1ull;  // a future is nonzero
}

// Device-side timing sources (fixed, curve, fast queue) + refresh claim: the modeled (unbiased)
// deadline (> t0); the fast model's queue tails stay in modeled time.
HB_SPLIT_FN uint64_t hb_device_deadline(hbf_device_state* st, uint64_t gaddr, uint64_t req_bytes, uint32_t op,
                                        uint32_t q, uint32_t site, uint64_t t0) {
    const uint32_t src = st->timing_source;
    const uint64_t rbytes = hb_claim_refresh(st, site);
    uint64_t deadline;
    if (src == HBF_SRC_FAST) {
        deadline = HB_OOL(hb_fast_model)(st, gaddr, req_bytes, op, q, rbytes, t0);
    } else {
        // hbf_curve.h: loads/cp.async read, stores write (posted), atomics read + write
        uint64_t s = (src == HBF_SRC_CURVE) ? hbf_curve_service_ns(&st->media, op, req_bytes)
                                            : hbf_fixed_service_ns(&st->media, op);   // HBF_SRC_FIXED
        s += hb_refresh_service(st->media, rbytes);
        deadline = t0 + hb_thermal_scale(s, q);
    }
    if (deadline <= t0) deadline = t0 + 1ull;  // a zero service still yields a valid future
    return deadline;
}

// The L2 in front of HBF (issue 14, docs/design.md §3.12): only the L2 build (-DHBF_L2_MODEL=1,
// runtime_cuda/ptx/hbf_helpers_l2.ptx) has its hooks. They cost registers in every kernel that contains the helpers
// (whole-program allocation: bench/results/l2_registers.json), so the default builds carry none: with them
// nothing changes. __hb_l2_hooks tells the runtime a module has them (HBF_L2_MODEL=1 refuses one without).
#ifndef HBF_L2_MODEL
#define HBF_L2_MODEL 0
#endif
#if HBF_L2_MODEL
#include "hbf_l2.cuh"
extern "C" {
__device__ unsigned int __hb_l2_hooks = 1u;
}
#endif

// One definition of a page group's request bytes (the general and the compact path both use it).
// The granule: 1 B for stores, the read granularity (a power of two, profile-validated: 64 B) for loads.
HB_DEV uint32_t hb_granule_shift(uint32_t op, uint64_t read_granularity) {
    return op == HBF_OP_STORE ? 0u : (uint32_t)(__ffsll((long long)(read_granularity ? read_granularity : 64ull)) - 1);
}
// What the first lane of the group on a granule counts: the granules its access [off, off + nb) spans,
// from its own (a lane straddling into a granule another lane starts may count it twice: never above the span).
HB_DEV uint32_t hb_lane_granule_bytes(uint32_t off, uint32_t nb, uint32_t gsh) {
    return (((off + nb - 1u) >> gsh) - (off >> gsh) + 1u) << gsh;
}
// The request: [gmin, gmax) rounded out to granules (b0: its first byte in the page), at most the
// granules the lanes touch (uniq), so a strided warp in one page is not charged for the bytes between them.
HB_DEV uint64_t hb_group_bytes(uint32_t gmin, uint32_t gmax, uint32_t uniq, uint32_t gsh, uint64_t& b0) {
    const uint64_t g = 1ull << gsh;
    b0 = (uint64_t)gmin & ~(g - 1ull);
    uint64_t req = (((uint64_t)gmax + g - 1ull) & ~(g - 1ull)) - b0;
    if (uniq != 0u && (uint64_t)uniq < req) req = uniq;
    return req;
}

// The group leader's request: admission (thermal snapshot before the reservation), timing source,
// refresh claim. Returns the future (HB_FAILED after a recorded terminal failure); out[0] = request
// bytes, out[1] = modeled ns (0 for a ticket). The request starts at the group's first granule and
// moves the granules its lanes touch (uniq: at most the span [gmin, gmax) rounded to granules), so a
// strided warp in one page is not charged for the bytes between its lanes.
HB_SPLIT_FN unsigned long long hb_group_request(hbf_device_state* st, const hbf_dev_range* r, uint64_t media,
                                              uint32_t off, uint32_t gmin, uint32_t gmax, uint32_t uniq,
                                              uint32_t flags, uint32_t site, uint64_t addr, uint64_t t0,
                                              uint64_t* out) {
    const uint32_t op = flags & HBF_F_OP_MASK;
    unsigned long long fut = 0ull;
    out[1] = 0ull;
    hbf_ctl* c = (hbf_ctl*)st->ctl;
    // a power-of-two granule: the rounding is a mask, not two 64-bit divisions on every request
    uint64_t b0;
    const uint64_t req_bytes = hb_group_bytes(gmin, gmax, uniq, hb_granule_shift(op, st->media.read_granularity), b0);
    const uint64_t gaddr = media - off + b0;  // media address of the group's first granule
    const uint64_t w = HB_OOL(hb_admit)(st, c, t0, site, addr);   // thermal snapshot before the reservation
    if (w == 0ull) return HB_FAILED;                                // recorded (Shutdown, daemon lost)
    const uint32_t q = HBF_THC_Q(w);
    const uint32_t src = st->timing_source;
    if (src == HBF_SRC_REFERENCE) {
        if (c == nullptr) {
            HB_OOL(hb_fail)(st, HBF_ST_UNSUPPORTED, site, addr);
            return HB_FAILED;
        }
        // refresh is served by hbfd's media model; the thermal fraction q snapshotted here travels
        // in the request and is applied once by the waiter (hb_ticket_deadline)
        fut = HB_OOL(hb_ref_issue)(st, c, r->base + (gaddr - r->media_offset), gaddr, (uint32_t)req_bytes, op,
                           r->range_id, site, flags, q, t0);
    } else {
        const uint64_t dl = HB_OOL(hb_device_deadline)(st, gaddr, req_bytes, op, q, site, t0);
        out[1] = dl - t0;                          // modeled ns as the model says (counters)
        fut = hb_apply_bias(st, dl, t0, site);     // the deadline the consumer waits for
    }
    out[0] = req_bytes;
    return fut;
}

// The in-range path. All hitting lanes of the warp reach the aggregation together.
HB_OOL_FN unsigned long long hb_issue_slow(hbf_device_state* st, uint64_t addr,
                                                                uint32_t bytes, uint32_t flags,
                                                                uint32_t site, uint64_t t0) {
    const uint32_t op = flags & HBF_F_OP_MASK;
    hbf_dev_range r;
    const int cls = HB_OOL(hb_classify)(st, addr, bytes, r);
    // Fail closed: a partial overlap, a missing permission or a range that is not a timing range
    // (capacity) is UNSUPPORTED; every lane of the call that sees one records it, and the whole warp
    // (the lanes in this call) ends before any of them performs its access. Flag ranges are not in
    // this table (runtime_cuda/devstate.py device_ranges): eidola's state classifies flag loads.
    uint32_t bad = 0u;
    if (cls == HB_PARTIAL) bad = 1u;
    else if (cls == HB_HIT && ((r.perms & hb_perm_needed(op)) == 0u || r.mode != HBF_MODE_TIMING)) bad = 1u;
    if (hb_group_any(st, hb_group_mask(), bad, site)) {
        if (bad) HB_OOL(hb_fail)(st, HBF_ST_UNSUPPORTED, site, addr);
        hb_end();
    }
    if (cls == HB_NATIVE) return 0ull;

    // --- warp aggregation: one request per page group, made by the group's leader ---
    const uint32_t mask = hb_group_mask();
    const uint64_t media = r.media_offset + (addr - r.base);
    const uint32_t pshift = r.page_shift ? r.page_shift : 12u;
    const uint64_t page = media >> pshift;
    const uint32_t grp = __match_any_sync(mask, (unsigned long long)page);
    const uint32_t lane = hb_laneid();
    const uint32_t leader = (uint32_t)(__ffs(grp) - 1);
    const uint32_t off = (uint32_t)(media & ((1ull << pshift) - 1ull));
    const uint32_t nb = bytes ? bytes : 1u;
    const uint32_t gmin = __reduce_min_sync(grp, off);
    const uint32_t gmax = __reduce_max_sync(grp, off + nb);
    // granules the group touches: the first lane on each granule counts (hb_lane_granule_bytes)
    const uint32_t gsh = hb_granule_shift(op, st->media.read_granularity);
    const uint32_t gk = off >> gsh;
    const uint32_t same = __match_any_sync(grp, gk);
    const uint32_t mine = (lane == (uint32_t)(__ffs(same) - 1)) ? hb_lane_granule_bytes(off, nb, gsh) : 0u;
    uint32_t uniq = __reduce_add_sync(grp, mine);
    bool l2_all = false;                                        // the L2 model serves the whole group (§3.12)
#if HBF_L2_MODEL
    if ((op == HBF_OP_LOAD || op == HBF_OP_CPASYNC) && __ldg(&st->l2_tags) != 0ull) {
        uniq = hb_l2_group(st, grp, media - off, off, nb, gsh, pshift, uniq, __shfl_sync(grp, t0, leader),
                           hb_kslot(st, site));
        l2_all = uniq == 0u;
    }
#endif
    unsigned long long fut = 0ull;
    uint64_t req_bytes = 0, modeled = 0;
    if (lane == leader && !l2_all) {
        uint64_t out[2];
        fut = HB_OOL(hb_group_request)(st, &r, media, off, gmin, gmax, uniq, flags, site, addr, t0, out);
        req_bytes = out[0];
        modeled = out[1];
    }
    fut = hb_from_leader(grp, fut, leader);
    // a leader's terminal failure (recorded) ends the whole warp before any lane performs its access
    if (hb_group_any(st, mask, fut == HB_FAILED, site)) hb_end();

    // --- counters: one atomic per warp ---
    const uint64_t t1 = hb_now();
    const uint32_t nreq = __reduce_add_sync(mask, lane == leader && !l2_all ? 1u : 0u);
    const uint32_t nbytes = __reduce_add_sync(mask, (uint32_t)req_bytes);   // media bytes (granules)
    const uint32_t pbytes = __reduce_add_sync(mask, nb);                    // program bytes (lanes)
    const uint64_t msum = hb_warp_sum(mask, modeled);
    const uint32_t helper = __reduce_max_sync(mask, hb_sat32(t1 - t0));
    if (lane == (uint32_t)(__ffs(mask) - 1)) {
        hbf_op_counters* oc = &hb_kslot(st, site)->ops[op];
        hb_red_add(&oc->requests, (unsigned long long)nreq);
        hb_red_add(&oc->bytes, (unsigned long long)nbytes);
        hb_red_add(&oc->program_bytes, (unsigned long long)pbytes);
        if (msum) hb_red_add(&oc->modeled_ns, (unsigned long long)msum);
        hb_red_add(&oc->overhead_ns, (unsigned long long)helper);
    }
    return fut;
}

// ------------------------------------------------------------------------------------------
// The common path, compact (HBF_FAST_ISSUE, default on; issue 13)
// ------------------------------------------------------------------------------------------
// What a registered stream asks for at every warp access: the FIXED or FAST source, no refresh debt to
// claim, a fresh thermal snapshot at full rate with admission open, every lane of the call a hit on one
// media page of a timing range it may access. That case is served here with straight-line code: no
// divisions, no 64-bit match over pages, no admission/refresh machinery (which made the general path ~1000
// SASS instructions per warp request and its cost per access microseconds, bench/results/devpath_cost_r2.json);
// the FAST source's one call is the leader lane's page transaction in hb_fast_model. Everything else goes,
// warp-uniformly, to hb_issue_slow, which stays the one general definition; for the case served here both
// produce the SAME future and the SAME counter updates (request = the granules the lanes touch on the page,
// modeled = the source's service, the measured deadline bias applied once, helper time max over the lanes,
// one atomic per counter per warp).
#ifndef HBF_FAST_ISSUE
#define HBF_FAST_ISSUE 1
#endif
enum { HB_FAST_DONE = 0, HB_FAST_SLOW = 1 };


// hb_kslot_of from the descriptor: the calling warp's counter slot (kernel = site >> 16, clamped to the
// overflow bucket), in its SM's shard.
HB_DEV hbf_kernel_counters* hb_cd_kslot(uint32_t site, uint32_t smid) {
    const hbf_cdesc& d = __hb_cdesc;
    uint32_t k = site >> 16;
    if (k > d.kmax) k = d.kmax;
    return (hbf_kernel_counters*)(d.kslot + (uint64_t)k * d.kslot_stride +
                                  (uint64_t)(smid & (HBF_KSHARDS - 1u)) * d.kshard_stride);
}

// The lane's range in a table of several (HBF_CD_MULTI): {media address, class | page shift << 8 | perms
// << 16 (0 unless the range is a TIMING range)}. A real call (noinline): its search's registers are not
// part of the compact path's footprint, only of this call's (few values are live across it).
static __device__ __noinline__ ulonglong2 hb_cd_classify(uint64_t addr, uint32_t nb) {
    hbf_dev_range r = {};
    const int cls = hb_classify((const hbf_device_state*)__hb_cdesc.st, addr, nb, r);
    const uint32_t pshift = r.page_shift ? r.page_shift : 12u;
    const uint32_t perms = r.mode == HBF_MODE_TIMING ? r.perms : 0u;
    return make_ulonglong2(cls == HB_NATIVE ? 0ull : r.media_offset + (addr - r.base),
                           (unsigned long long)((uint32_t)cls | (pshift << 8) | (perms << 16)));
}

// This SM shard's thermal replica through L1 (hb_ld_l1): every warp-request of the SM touches the line, so
// it stays there; a copy another SM replaced is used at most until its snapshot's age passes max_age (the
// caller checks), the bound every snapshot has. The SM that refreshes writes the replicas (its L1 follows).
HB_DEV uint64_t hb_cd_thermal_word(uint32_t smid, uint64_t t0, bool compact = true) {
    const hbf_cdesc& d = __hb_cdesc;
    uint64_t* const rp = (uint64_t*)(d.replica + (uint64_t)(smid & (HBF_KSHARDS - 1u)) * (HBF_THC_REPLICA_STRIDE * 8u));
    uint64_t w = hb_ld_l1(rp);
    // a validity horizon in force (the word stamped ahead, hbf_thc.h): no refresh comes to publish live activity,
    // so about one compact-path request in 256 (by its issue time's 1 us slot) reads the word as invalid and takes
    // the general path, whose snapshot flushes the activity when it is due (hb_thermal_snapshot). Not the inline
    // path's ask (compact = false): __hb_inline_until flushes the activity itself when it is due (act_only), and an
    // invalid word there answered "ask again at once" -- the group then ran alone through the general path and the
    // warp asked again at its next group (stop 54)
    if (compact && ((t0 >> 10) & 255ull) == 0ull && HBF_THC_VALID(w) && hbf_thc_sage(w, t0) < 0)
        return w & ~(1ull << 23);
    if (!(HBF_THC_VALID(w) && hb_thc_age_ns(w, t0) <= d.max_age)) {
        // this SM's copy aged (or was never valid): the replica itself; when that is current, an atomic that
        // changes nothing drops the stale line from this SM's L1 (atomics are performed at L2 and invalidate
        // the local copy), so the next requests read the current one there again
        w = hb_ld_vol(rp);
        if (HBF_THC_VALID(w) && hb_thc_age_ns(w, t0) <= d.max_age)
            asm volatile("red.relaxed.gpu.global.or.b64 [%0], 0;" ::"l"(rp) : "memory");
    }
    return w;
}

// A lane's range as the compact path sees it: from hb_cd_classify's answer (several ranges) or the
// descriptor's one range (hb_classify_one).
struct hb_cd_lane { uint64_t media; uint32_t pshift, perms; bool hit, partial; };
HB_DEV hb_cd_lane hb_cd_lane_of(ulonglong2 c) {
    const uint32_t cls = (uint32_t)c.y & 0xFFu;
    return {c.x, (uint32_t)(c.y >> 8) & 0xFFu, (uint32_t)(c.y >> 16) & 0xFFu, cls == HB_HIT, cls == HB_PARTIAL};
}
HB_DEV hb_cd_lane hb_cd_lane_one(uint64_t addr, uint32_t nb) {
    const hbf_cdesc& d = __hb_cdesc;
    const uint64_t rel = addr - d.r0_base;
    const uint64_t len = d.r0_end - d.r0_base;
    const bool inside = rel < len;
    const bool hit = inside && rel + nb <= len;
    return {d.r0_media + rel, d.r0_page_shift, d.r0_perms, hit,
            inside ? !hit : (addr < d.r0_base && addr + nb > d.r0_base)};
}
// The compact path serves the call: attached to the descriptor's state, a fresh full-rate thermal snapshot with
// admission open (this SM's replica word w).
HB_DEV bool hb_cd_snapshot_ok(unsigned long long sp, uint64_t w, uint64_t t0) {
    return sp == __hb_cdesc.st && HBF_THC_VALID(w) && HBF_THC_Q(w) >= 1000000u && HBF_THC_ADM(w) &&
           HBF_THC_MODE(w) != HBF_TH_SHUTDOWN && hb_thc_age_ns(w, t0) <= __hb_cdesc.max_age;
}
// A request's future from its modeled deadline dl (issued at t0): never t0 itself, the measured bias applied
// once (clamped to t0 when the service is shorter: *clamp); *modeled = the unbiased service.
HB_DEV uint64_t hb_cd_future(uint64_t dl, uint64_t t0, uint64_t* modeled, bool* clamp) {
    if (dl <= t0) dl = t0 + 1ull;                               // a zero service still yields a valid future
    *modeled = dl - t0;
    *clamp = false;
    const uint64_t bias = __hb_cdesc.bias;
    if (bias != 0ull) {
        if (dl > t0 + bias) dl -= bias;
        else { dl = t0 ? t0 : 1ull; *clamp = true; }
    }
    return dl;
}

// The compact path reads nothing but the descriptor (constant bank: instruction operands), __hb_state (the
// attach switch, in flight with the rest) and this SM shard's thermal replica (through L1): no pointer
// chase through the state block, no run parameters in registers. Its register footprint
// is what the kernel pays at every call site (whole-program allocation stacks it on the caller's live
// values), so values are 32-bit wherever they fit and nothing is computed before it is needed.
#if HBF_L2_MODEL
// A request the L2 model served whole: no media request (future 0); the lanes' program bytes and the helper time
// are counted as for any request (hb_issue_fast's counters, without requests/bytes/modeled).
static __device__ __noinline__ uint32_t hb_l2_served(uint32_t mask, bool leader, uint32_t nb, uint64_t t0,
                                                     uint32_t site, uint32_t smid, uint32_t op) {
    const uint64_t t1 = hb_now();
    const uint32_t pbytes = __reduce_add_sync(mask, nb);
    const uint32_t helper = __reduce_max_sync(mask, hb_sat32(t1 - t0));
    if (leader) {
        hbf_op_counters* oc = &hb_cd_kslot(site, smid)->ops[op];
        hb_red_add(&oc->program_bytes, (unsigned long long)pbytes);
        hb_red_add(&oc->overhead_ns, (unsigned long long)helper);
    }
    return HB_FAST_DONE;
}
#endif
HB_DEV uint32_t hb_issue_fast(uint64_t addr, uint32_t bytes, uint32_t flags, uint32_t site, uint64_t t0,
                              unsigned long long& fut) {
    HB_PROF(8, addr);
    const hbf_cdesc& d = __hb_cdesc;
    const unsigned long long sp = __hb_state;                  // attached to the descriptor's state (the ABI's
    const uint32_t mask = hb_group_mask();                     // switch; a load in flight with the replica's)
    const uint32_t op = flags & HBF_F_OP_MASK;
    const uint32_t nb = bytes ? bytes : 1u;
    // the lane's range: the descriptor's one range, or (HBF_CD_MULTI) a search of the table (hb_classify)
    const hb_cd_lane L = (d.flags & HBF_CD_MULTI) ? hb_cd_lane_of(hb_cd_classify(addr, nb)) : hb_cd_lane_one(addr, nb);
    const uint64_t media = L.media;
    const uint32_t pshift = L.pshift, perms = L.perms;
    const bool hit = L.hit, partial = L.partial;
    HB_PROF(2, media + (hit ? 1u : 0u));
    const uint32_t smid = hb_smid();
    const uint64_t w = hb_cd_thermal_word(smid, t0);
    const bool ok = !partial && (!hit || (perms & hb_perm_needed(op)) != 0u) && hb_cd_snapshot_ok(sp, w, t0);
    HB_PROF(1, ok);
    if (!__all_sync(mask, ok)) return HB_FAST_SLOW;            // the general path decides (and fails closed)
    const uint32_t hits = __ballot_sync(mask, hit);
    HB_PROF(3, hits);
    if (hits == 0u) {                                           // in band, no range: native
        fut = 0ull;
        return HB_FAST_DONE;
    }
    if (hits != mask) return HB_FAST_SLOW;                      // mixed native/hit lanes
    int one_page = 0;
    (void)__match_all_sync(mask, (unsigned long long)(media >> pshift), &one_page);
    if (!one_page) return HB_FAST_SLOW;                         // several page groups
    HB_PROF(4, one_page);
    // one group = the whole call: what hb_issue_slow computes for it, step for step
    const uint32_t lane = hb_laneid();
    const uint32_t leader = (uint32_t)(__ffs(mask) - 1);
    const uint32_t off = (uint32_t)media & ((1u << pshift) - 1u);
    const uint32_t gsh = op == HBF_OP_STORE ? 0u : d.read_gshift;
    const uint32_t gk = off >> gsh;
    // "the first lane on each granule" (hb_issue_slow: the lowest lane of its __match_any_sync group)
    // without MATCH (a shared unit: 531 -> 5152 cycles per request under load): when the lanes' offsets
    // do not decrease with the lane index (a coalesced access, masked tails included), equal granules
    // are contiguous in lane order and the first lane of a granule is the one whose active predecessor
    // is on another granule (or that has none). Any other order goes to the general path.
    const uint32_t below = mask & ((1u << lane) - 1u);          // active lanes below this one
    const uint32_t pred = below ? 31u - (uint32_t)__clz(below) : lane;
    const uint32_t prev_off = __shfl_sync(mask, off, pred);
    if (!__all_sync(mask, below == 0u || prev_off <= off)) return HB_FAST_SLOW;
    const bool first = below == 0u || (prev_off >> gsh) != gk;
    const uint32_t uniq = __reduce_add_sync(mask, first ? hb_lane_granule_bytes(off, nb, gsh) : 0u);
    const uint32_t gmin = __reduce_min_sync(mask, off);
    const uint32_t gmax = __reduce_max_sync(mask, off + nb);
    uint64_t b0;
    uint64_t req_bytes = hb_group_bytes(gmin, gmax, uniq, gsh, b0);
    HB_PROF(5, req_bytes);
    const uint64_t tl = __shfl_sync(mask, t0, leader);          // the request's issue time (the leader's)
#if HBF_L2_MODEL
    if ((d.flags & HBF_CD_L2) && (op == HBF_OP_LOAD || op == HBF_OP_CPASYNC)) {   // the L2 model (§3.12)
        req_bytes = hb_l2_group((const hbf_device_state*)d.st, mask, media - off, off, nb, gsh, pshift,
                                (uint32_t)req_bytes, tl, hb_cd_kslot(site, smid));
        if (req_bytes == 0u) { fut = 0ull; return hb_l2_served(mask, lane == leader, nb, t0, site, smid, op); }
    }
#endif
    uint64_t dl;                                                // q = 1e6: no thermal scaling; no refresh debt
    if (d.flags & HBF_CD_FAST) {                                // the leader's page transaction (hb_group_request)
#if HBF_FAST_LOCKSTEP
        dl = hb_fast_model_by(hb_mem_lock{mask, leader, lane == leader}, (hbf_device_state*)d.st, media - off + b0,
                              req_bytes, op, 1000000u, 0ull, tl);      // every lane, the leader's operations
#else
        uint64_t dd = 0ull;
        if (lane == leader)
            dd = HB_OOL(hb_fast_model)((hbf_device_state*)d.st, media - off + b0, req_bytes, op, 1000000u, 0ull, tl);
        dl = hb_from_leader(mask, dd, leader);
#endif
    } else {
        hbf_media_params fx;                                    // the two fields the FIXED source reads
        fx.fixed_read_ns = d.fixed_read_ns;
        fx.fixed_write_ns = d.fixed_write_ns;
        dl = tl + hbf_fixed_service_ns(&fx, op);
    }
    uint64_t modeled;
    bool clamp;
    fut = hb_cd_future(dl, tl, &modeled, &clamp);
    HB_PROF(6, dl);
    hb_group_guard((hbf_device_state*)d.st, mask, site);       // before the deadline reaches any lane's access
    // counters: one atomic per counter per warp (the same fields hb_issue_slow updates)
    const uint64_t t1 = hb_now();
    const uint32_t pbytes = __reduce_add_sync(mask, nb);
    const uint32_t helper = __reduce_max_sync(mask, hb_sat32(t1 - t0));
    if (lane == leader) {
        hbf_kernel_counters* ks = hb_cd_kslot(site, smid);
        hbf_op_counters* oc = &ks->ops[op];
        hb_red_add(&oc->requests, 1ull);
        hb_red_add(&oc->bytes, (unsigned long long)req_bytes);
        hb_red_add(&oc->program_bytes, (unsigned long long)pbytes);
        hb_red_add(&oc->modeled_ns, (unsigned long long)modeled);
        hb_red_add(&oc->overhead_ns, (unsigned long long)helper);
        if (clamp) hb_red_add(&ks->bias_clamps, 1ull);
    }
    HB_PROF(7, helper);
    return HB_FAST_DONE;
}

// ------------------------------------------------------------------------------------------
// The fast source's issue group (hbf_abi.h "__hb_issue_group"; hbfcc emits the call where an issue group is
// not served inline and the descriptor allows it, HBF_CDI_GROUP)
// ------------------------------------------------------------------------------------------
// A group's hoisted load issues served in ONE call: per site the compact path's decision (hb_issue_fast: the
// lanes' range, one page, ascending offsets, the granules they touch, the request), then the page
// transactions of all the group's requests at once -- site j's on lane j -- so their model round trips
// (plane record, its CAS on a miss, the channel reservation) overlap instead of running one call after
// another (~2 us each under load, bench/results/hbf_bandwidth_r2.json). Lanes of one instruction racing on a
// plane record or a channel tail are ordered by the atomics as two warps are; every request's arithmetic is
// hb_fast_model's, unchanged. Nothing is written before the whole group is decided: any site the compact
// path would not serve (a lane outside the range or partial, missing permission, several pages, a
// non-ascending order, mixed native and hit lanes, a stale snapshot, not a full warp) returns HB_GROUP_SLOW
// on every lane and each site runs alone (__hb_issue). Counters: one request per served site, its granule
// bytes and program bytes, its modeled service; the helper time once for the group (the warp's time in the
// call, not once per request).
//
// The decided group's requests: site j's page transaction on lane j (lanes 0..n-1 together), the deadlines
// (bias applied once, as hb_issue_fast does), the counters (one atomic per counter per warp). A call of its
// own in tail position: nothing of the caller is live across it, so its model call adds no registers there.
static __device__ __noinline__ unsigned long long hb_group_serve(bool my_has, uint64_t my_media, uint64_t my_bytes,
                                                                 uint64_t t0, uint32_t nreq, uint64_t tot_bytes,
                                                                 uint64_t tot_pbytes, uint32_t site) {
    uint64_t fut = 0ull, modeled = 0ull;
    bool clamp = false;
    if (my_has)
        fut = hb_cd_future(HB_OOL(hb_fast_model)((hbf_device_state*)__hb_cdesc.st, my_media, my_bytes, HBF_OP_LOAD,
                                                 1000000u, 0ull, t0), t0, &modeled, &clamp);
    const uint32_t mask = 0xFFFFFFFFu;
    const uint64_t t1 = hb_now();
    const uint64_t msum = hb_warp_sum(mask, modeled);
    const uint32_t clamps = __popc(__ballot_sync(mask, clamp));
    if (hb_laneid() == 0u && nreq != 0u) {
        hbf_kernel_counters* ks = hb_cd_kslot(site, hb_smid());
        hbf_op_counters* oc = &ks->ops[HBF_OP_LOAD];
        hb_red_add(&oc->requests, (unsigned long long)nreq);
        hb_red_add(&oc->bytes, (unsigned long long)tot_bytes);
        hb_red_add(&oc->program_bytes, (unsigned long long)tot_pbytes);
        hb_red_add(&oc->modeled_ns, (unsigned long long)msum);
        hb_red_add(&oc->overhead_ns, (unsigned long long)(t1 - t0));
        if (clamps) hb_red_add(&ks->bias_clamps, (unsigned long long)clamps);
    }
    return fut;
}
#define HB_GROUP_MAX 8u
#define HB_GROUP_SLOW 0xFFFFFFFFFFFFFFFFull
extern "C" __device__ __noinline__ unsigned long long __hb_issue_group(unsigned long long addrs, unsigned int pmask,
                                                                       unsigned long long nbpack, unsigned int site) {
    const uint64_t t0 = hb_now();
    const hbf_cdesc& d = __hb_cdesc;
    const uint32_t mask = hb_group_mask();
    if (mask != 0xFFFFFFFFu || (d.flags & (HBF_CD_ON | HBF_CD_FAST)) != (HBF_CD_ON | HBF_CD_FAST))
        return HB_GROUP_SLOW;                                   // warp-uniform: the sites run alone
    bool ok = hb_cd_snapshot_ok(__hb_state, hb_cd_thermal_word(hb_smid(), t0), t0);
    const uint32_t lane = hb_laneid();
    const uint32_t lmlt = (1u << lane) - 1u;
    const uint32_t gsh = d.read_gshift;
    // the sites one after another (not unrolled: the helper's registers are what every kernel that calls it
    // pays, whole-program allocation stacks them on the caller's live values); the addresses from the caller's
    // local array (four parameters, as __hb_issue's, instead of eleven)
    const uint64_t* const ap = (const uint64_t*)addrs;
    // several ranges: every site's search first, few values live across its call (a call inside the loop
    // below would keep the loop's values in registers across it: +46 registers for every caller)
    ulonglong2 cls[HB_GROUP_MAX];
    if (d.flags & HBF_CD_MULTI) {
#pragma unroll 1
        for (uint32_t j = 0; j < HB_GROUP_MAX; ++j) {
            const uint32_t nb = (uint32_t)(nbpack >> (8u * j)) & 0xFFu;
            cls[j] = (nb != 0u && ((pmask >> j) & 1u)) ? hb_cd_classify(ap[j], nb) : make_ulonglong2(0ull, 0ull);
        }
    }
    uint64_t my_media = 0ull, my_bytes = 0ull;                  // this lane's request (site == lane)
    bool my_has = false;
    uint32_t nreq = 0u;
    uint64_t tot_bytes = 0ull, tot_pbytes = 0ull;
#pragma unroll 1
    for (uint32_t j = 0; j < HB_GROUP_MAX; ++j) {
        const uint32_t nb = (uint32_t)(nbpack >> (8u * j)) & 0xFFu;
        if (nb == 0u) continue;                                 // no site j (uniform)
        const bool P = (pmask >> j) & 1u;                       // this lane accesses at site j
        hb_cd_lane L = {0ull, 12u, 0u, false, false};          // a lane that does not access: no range
        if (P) L = (d.flags & HBF_CD_MULTI) ? hb_cd_lane_of(cls[j]) : hb_cd_lane_one(ap[j], nb);
        const uint64_t media = L.media;
        const uint32_t pshift = L.pshift, perms = L.perms;
        const bool hit = L.hit, partial = L.partial;
        ok = ok && !partial && (!hit || (perms & HBF_PERM_READ) != 0u);
        const uint32_t m = __ballot_sync(mask, P);
        const uint32_t hits = __ballot_sync(mask, P && hit);
        if (hits == 0u) continue;                               // no lane, or in band without a range: native
        if (hits != m) ok = false;                              // mixed native / hit lanes
        const uint32_t leader = (uint32_t)(__ffs(m) - 1);
        const uint64_t page = media >> pshift;
        const uint64_t lpage = __shfl_sync(mask, page, leader);
        const uint32_t lshift = __shfl_sync(mask, pshift, leader);
        if (P && (page != lpage || pshift != lshift)) ok = false;   // several page groups
        const uint32_t off = (uint32_t)media & ((1u << lshift) - 1u);
        const uint32_t below = m & lmlt;
        const uint32_t pred = below ? 31u - (uint32_t)__clz(below) : lane;
        const uint32_t prev_off = __shfl_sync(mask, off, pred);
        if (P && below != 0u && prev_off > off) ok = false;    // not ascending: the general path
        const bool first = P && (below == 0u || (prev_off >> gsh) != (off >> gsh));
        const uint32_t uniq = __reduce_add_sync(mask, first ? hb_lane_granule_bytes(off, nb, gsh) : 0u);
        const uint32_t gmin = __reduce_min_sync(mask, P ? off : 0xFFFFFFFFu);
        const uint32_t gmax = __reduce_max_sync(mask, P ? off + nb : 0u);
        uint64_t b0;
        const uint64_t req_bytes = hb_group_bytes(gmin, gmax, uniq, gsh, b0);
        const uint64_t rq = __shfl_sync(mask, media - off, leader) + b0;   // the request's first granule
        if (lane == j) { my_has = true; my_media = rq; my_bytes = req_bytes; }
        nreq += 1u;
        tot_bytes += req_bytes;
        tot_pbytes += (uint64_t)__popc(m) * nb;
    }
    if (!__all_sync(mask, ok)) return HB_GROUP_SLOW;            // decided before anything is written
    hb_group_guard((hbf_device_state*)d.st, mask, site);
    return hb_group_serve(my_has, my_media, my_bytes, t0, nreq, tot_bytes, tot_pbytes, site);
}

// ------------------------------------------------------------------------------------------
// The inline issue path (hbf_abi.h "Inline issue"; hbfcc emits it, these two helpers serve it)
// ------------------------------------------------------------------------------------------
#define HB_INLINE_NEVER (-0x7FFFFFFFFFFFFFFFll)

// A refresh of the thermal snapshot claimed ahead of its expiry (at half its age) by the first inline thread
// that asks: the same claim as hb_thermal_snapshot's (the marker: the word with its valid bit clear, stamped
// now; general-path readers wait for it as for any claim), but nobody waits here -- the losers, and the
// winner once it has published, keep using the snapshot they hold until it ages. So the snapshot every
// inline thread holds is replaced before it expires, and the threads do not all ask at its expiry.
// act_only (a validity horizon holds the snapshot and the activity flush is due): the flush alone.
HB_DEV void hb_inline_refresh(hbf_device_state* st, uint64_t held, uint64_t now, bool act_only) {
    if (!act_only) {
        const uint64_t cur = hb_ld_vol(&st->thermal_cache);
        if (!HBF_THC_VALID(cur) || HBF_THC_STAMP(cur) != HBF_THC_STAMP(held)) return;   // claimed or replaced
        const uint64_t claim = hb_pack_thermal(HBF_THC_Q(cur), HBF_THC_ADM(cur), HBF_THC_MODE(cur), now) & ~(1ull << 23);
        if (atomicCAS((unsigned long long*)&st->thermal_cache, (unsigned long long)cur, (unsigned long long)claim) !=
            (unsigned long long)cur)
            return;
        (void)HB_OOL(hb_thermal_read)(st, (const hbf_ctl*)st->ctl, now);
    }
    if (st->ctl != 0ull) hb_act_flush(st, (hbf_ctl*)st->ctl, now);   // live activity (as hb_thermal_snapshot)
}

// Until when this thread may serve `op` inline: a fresh full-rate thermal snapshot with admission open and
// no refresh debt (this SM's replica, as the compact path reads it), as long as the descriptor allows the op
// (devstate.cdesc_for: the FIXED source, 1..4 TIMING ranges, each with the op's permission). Positive: inline until
// then -- half the snapshot's age, or its expiry once a refresh has been claimed (hb_inline_refresh).
// Negative: not inline; ask again at -value (a stale or invalid replica: at once, the general path the site
// takes meanwhile refreshes it or claims the debt; a snapshot below full rate: when it ages; the descriptor:
// never, it does not change while a kernel runs).
extern "C" __device__ __noinline__ long long __hb_inline_until(unsigned int op) {
    const hbf_cdesc& d = __hb_cdesc;
    const uint32_t bit = op == HBF_OP_LOAD ? HBF_CDI_READ : (op == HBF_OP_STORE ? HBF_CDI_WRITE : 0u);
    if (bit == 0u || (d.flags & HBF_CD_ON) == 0u || (d.inl_flags & bit) == 0u || __hb_state != d.st)
        return HB_INLINE_NEVER;
    const uint64_t now = hb_now();
    const uint64_t w = hb_cd_thermal_word(hb_smid(), now, false);
    if (!HBF_THC_VALID(w)) return -(long long)now;
    // signed: < 0 while a validity horizon is in force (the word stamped ahead, hbf_thc.h); then the expiry and
    // the half-age refresh below fall in the horizon's last max_age, as for an ordinary snapshot
    const int64_t sage = hbf_thc_sage(w, now);
    if (sage > (int64_t)d.max_age) return -(long long)now;
    const uint64_t expiry = now - (uint64_t)sage + d.max_age;
    if (HBF_THC_Q(w) < 1000000u || !HBF_THC_ADM(w) || HBF_THC_MODE(w) == HBF_TH_SHUTDOWN) return -(long long)expiry;
    const uint64_t half = d.max_age >> 1;
    hbf_device_state* const st = (hbf_device_state*)d.st;
    uint64_t ret = expiry;
    bool act_only = false;
    if (sage < (int64_t)half) {
        const uint64_t until = now - (uint64_t)sage + half;
        if (sage >= 0) return (long long)until;
        // a horizon: no refresh for a while, so live activity (issue 17) is published from here at its period:
        // inline until min(the refresh point, the next activity flush due); when it is due, the flush alone
        const uint64_t due = hb_act_due(st);
        if ((int64_t)(now - due) < 0) return (long long)((int64_t)(due - until) < 0 ? due : until);
        const uint64_t next = now + HBF_ACT_PERIOD_NS;
        ret = (int64_t)(next - until) < 0 ? next : until;
        act_only = true;
    }
    hb_inline_refresh(st, w, now, act_only);
    return (long long)ret;
}

// The thread's inline counters into the kernel's (before __hb_kernel_exit at every exit of an entry): warp
// sums, one atomic per counter per warp into the SM's shard, the same fields the compact path updates for
// the same requests (requests, media bytes, program bytes, modeled_ns = requests x the FIXED service, bias
// clamps), plus inline_requests. Ready waits tested inline: the lowest lane's count and slack, as hb_wait_ready
// counts them. inline_ns (ABI 8): the inline path's own time, what the served paths measured on their leader lane
// (hbfcc HBFCC_INLINE_TIME; 0 without it: the path's time is then measured by nothing but the kernel's
// instrumented/native time), warp-summed like slack_ns into the kernel's inline_ns.
extern "C" __device__ __noinline__ void __hb_kernel_flush(unsigned int kernel_index, unsigned int rd_req,
                                                          unsigned int rd_granules, unsigned long long rd_bytes,
                                                          unsigned int wr_req, unsigned long long wr_bytes,
                                                          unsigned int ready_waits, unsigned long long slack_ns,
                                                          unsigned long long inline_ns) {
    const unsigned long long sp = __hb_state;
    if (sp == 0ull) return;
    const uint32_t mask = hb_group_mask();
    // bit 0: something counted; bit 1: a timed inline path (only HBFCC_INLINE_TIME builds pay its warp sum)
    const uint32_t any = __reduce_or_sync(mask, ((rd_req | wr_req | ready_waits) != 0u ? 1u : 0u) |
                                                    (inline_ns != 0ull ? 2u : 0u));
    if (any == 0u) return;
    hb_group_guard((hbf_device_state*)sp, mask, kernel_index << 16);
    const uint64_t rq = hb_warp_sum(mask, rd_req), rg = hb_warp_sum(mask, rd_granules);
    const uint64_t rb = hb_warp_sum(mask, rd_bytes), wq = hb_warp_sum(mask, wr_req);
    const uint64_t wb = hb_warp_sum(mask, wr_bytes), rw = hb_warp_sum(mask, ready_waits);
    const uint64_t sl = hb_warp_sum(mask, slack_ns), ins = (any & 2u) ? hb_warp_sum(mask, inline_ns) : 0ull;
    if (hb_laneid() != (uint32_t)(__ffs(mask) - 1)) return;
    const hbf_cdesc& d = __hb_cdesc;
    const uint32_t site = kernel_index << 16;
    hbf_kernel_counters* ks = (d.flags & HBF_CD_ON) ? hb_cd_kslot(site, hb_smid())
                                                    : hb_kslot((hbf_device_state*)sp, site);
    if (rq | wq) {   // inline requests exist only under a descriptor (cdesc ON)
        const uint64_t sr = d.fixed_read_ns ? d.fixed_read_ns : 1ull, sw = d.fixed_write_ns ? d.fixed_write_ns : 1ull;
        if (rq) {
            hbf_op_counters* oc = &ks->ops[HBF_OP_LOAD];
            hb_red_add(&oc->requests, rq);
            hb_red_add(&oc->bytes, rg << d.read_gshift);
            hb_red_add(&oc->program_bytes, rb);
            hb_red_add(&oc->modeled_ns, rq * sr);
        }
        if (wq) {
            hbf_op_counters* oc = &ks->ops[HBF_OP_STORE];
            hb_red_add(&oc->requests, wq);
            hb_red_add(&oc->bytes, wb);
            hb_red_add(&oc->program_bytes, wb);
            hb_red_add(&oc->modeled_ns, wq * sw);
        }
        const uint64_t clamps = (d.bias != 0ull && sr <= d.bias ? rq : 0ull) + (d.bias != 0ull && sw <= d.bias ? wq : 0ull);
        if (clamps) hb_red_add(&ks->bias_clamps, clamps);
        hb_red_add(&ks->inline_requests, rq + wq);
    }
    if (rw) {
        hb_red_add(&ks->ready_waits, rw);
        hb_red_add(&ks->slack_ns, sl);
    }
    if (ins) hb_red_add(&ks->inline_ns, ins);
}

// Where a long-lived inline thread asks for its next until (HBFCC_INLINE_LIVE, ABI 7; issue 17 item 2): its
// inline counters into the kernel's shards first (what __hb_kernel_flush does at exit: warp sums over the lanes
// asking together, one atomic per counter per warp; nothing when the warp counted nothing since), then the until.
// The caller zeroes its counters after the call, so the exit flush adds only what came after: the kernel's totals
// are what they were, and the live activity (hb_act_flush, which this very call may run) sees the thread's inline
// requests at most one until period late -- about HBF_ACT_PERIOD_NS under a validity horizon, half the snapshot's
// age without. One call where the thread already called one (no new call site in the kernel, and the counters
// are dead across it): the flush and the until are two calls INSIDE this helper, whose registers stack on this
// helper's few live values, not on the kernel's.
extern "C" __device__ __noinline__ long long __hb_inline_until_live(unsigned int op, unsigned int kernel_index,
                                                                   unsigned int rd_req, unsigned int rd_granules,
                                                                   unsigned long long rd_bytes, unsigned int wr_req,
                                                                   unsigned long long wr_bytes,
                                                                   unsigned int ready_waits,
                                                                   unsigned long long slack_ns,
                                                                   unsigned long long inline_ns) {
    __hb_kernel_flush(kernel_index, rd_req, rd_granules, rd_bytes, wr_req, wr_bytes, ready_waits, slack_ns,
                      inline_ns);
#ifdef HB_DEBUG_ASKS
    // A debug build only (nvcc -DHB_DEBUG_ASKS; bench/gpu_calls/stop54_asks.sh): what the asks are answered, on the
    // asking group's lowest lane, for EVERY ask of the blocks whose index is a multiple of 1024 (so a warp's asks
    // can be counted per life: bench/gpu_calls/stop54_asks.sh groups them by block, warp and time) -- stop 53 found
    // the stream reduce's threads asking 2.2 times in ~10 us lives, where every answer path reads as >= 0.5 ms
    // (docs/design.md, issue 13)
    // (stop 54, H100: 1.02 asks per warp life; the 2.2 was ncu's replay)
    const long long r = __hb_inline_until(op);
    const uint64_t t = hb_now();
    const uint32_t am = __activemask();                      // the lanes asking together (before the branch below)
    if ((blockIdx.x & 1023u) == 0u && blockIdx.y == 0u && blockIdx.z == 0u &&
        hb_laneid() == (uint32_t)(__ffs(am) - 1))
        printf("hb-ask sm=%u op=%u now=%llu ret=%lld in=%lld blk=%u w=%u m=%x\n", hb_smid(), op,
               (unsigned long long)t, r, r > 0 ? r - (long long)t : r, blockIdx.x, threadIdx.x >> 5, am);
    return r;
#elif defined(HB_DEBUG_UNTIL_FOREVER)
    // A debug build only (stop54_asks.sh): every positive answer holds for a second, so a thread asks once per life
    // unless refused -- what the re-asks cost, measured against the package's build (NOT a model: refreshes and the
    // live activity then wait for the next launch)
    const long long r = __hb_inline_until(op);
    return r > 0 ? (long long)(hb_now() + 1000000000ull) : r;
#else
    return __hb_inline_until(op);
#endif
}

// ------------------------------------------------------------------------------------------
// Waiting
// ------------------------------------------------------------------------------------------
// Sleep with backoff while far from the deadline; spin on %globaltimer for the final approach.
HB_DEV uint64_t hb_wait_until(uint64_t deadline) {
    uint64_t t = hb_now();
    while (t < deadline) {
        const uint64_t rem = deadline - t;
        if (rem > 4096ull) {
            uint64_t sl = (rem - 3072ull) >> 1;  // __nanosleep overshoots: sleep at most half
            hb_sleep(sl > 2048ull ? 2048u : (uint32_t)sl);
        }
        t = hb_now();
    }
    return t;
}

// Polls until the completion of `want - 1` is posted (returns the number of polls, >= 1), or finds the
// slot already reused by a later ticket (returns 0); a dead daemon / terminal state without a posted
// completion is recorded and returns HB_POLL_FAILED (also when another warp already failed the run).
#define HB_POLL_FAILED 0xFFFFFFFFu
HB_SPLIT_FN uint32_t hb_ticket_poll(hbf_device_state* st, hbf_ctl* c, hbf_completion* cp, uint64_t want,
                                  uint32_t site) {
    const uint32_t cap = st->backoff_max_ns ? (uint32_t)st->backoff_max_ns : 8192u;
    uint32_t backoff = cap < 512u ? cap : 512u;   // a host round trip is several us: no faster first poll
    hb_live lv;
    hb_live_init(lv, c, hb_now());
    uint32_t it = 0;
#pragma unroll 1
    for (;;) {
        const uint64_t sq = hb_ld_acq_sys(&cp->seq);
        if (sq == want) return it + 1u;
        // A later ticket already reuses the slot: this completion was consumed by an earlier wait on
        // the same future (a wait on several paths), or stolen into the overflow table (hb_ref_take looks).
        if (sq > want) return 0u;
        hb_sleep(backoff);
        backoff = backoff < cap ? backoff * 2u : cap;
        if ((++it & 7u) == 0u) {
            const uint32_t s = HB_OOL(hb_live_check)(st, lv, c, hb_now());
            if (s != 0u) {
                if (s != HB_ST_ENDED && hb_ld_acq_sys(&cp->seq) == want) return it + 1u;  // posted terminal completion wins
                hb_fail_live(st, s, site, want - 1ull);
                return HB_POLL_FAILED;
            }
        }
    }
}

// The owner's completion from the overflow table (a stealer took it): 1 (o filled, the entry marked taken), 0 (no
// entry of this ticket: it was waited on another path before), HB_POLL_FAILED (the run failed while we waited for
// the stealer's entry). `wait`: the claim word says a stealer has it, so its entry is being written (bounded).
#define HB_OVF_ENTRY_WAIT_NS 1000000000ull   // a stealer writes its entry in a few stores: 1 s without it is a bug
HB_SPLIT_FN uint32_t hb_ref_ovf_take(hbf_device_state* st, uint64_t ticket, bool wait, hb_cpl& o) {
    if (st->ref_ovf == 0ull) return 0u;
    hbf_ref_ovf* e = (hbf_ref_ovf*)st->ref_ovf + (ticket & st->ref_ovf_mask);
    const uint64_t want = ticket + 1ull;
    hb_live lv;
    uint32_t it = 0;
    hb_live_init(lv, (const hbf_ctl*)st->ctl, wait ? hb_now() : 0ull);
#pragma unroll 1
    for (;;) {
        if (hb_ld_acq_gpu(&e->tick1) == want) {
            uint64_t stw;
            hb_ld_vol_v2(&e->arrival_ns, o.arrival, o.modeled);
            hb_ld_vol_v2(&e->service_ns, o.service, stw);
            hb_ld_vol_v2(&e->req_site_flags, o.w6, o.w7);
            o.status = (uint32_t)stw;
            __threadfence();                                   // the payload loads before the re-check
            if (hb_ld_vol(&e->tick1) != want) return 0u;      // reused after a take on another path
            hb_st_vol(&e->taken, want);
            hb_red_add(&st->ref_ovf_takes, 1ull);
            return 1u;
        }
        if (!wait) return 0u;
        if (hb_failed(st)) return HB_POLL_FAILED;              // the stealer failed the run (RING_OVERFLOW)
        hb_sleep(64);
        // bounded by the stealer's few stores; should it never come (a protocol bug), the run fails loudly at the
        // live checks (completion timeout, daemon lost) instead of hanging
        if ((++it & 63u) == 0u) {
            const uint64_t t = hb_now();
            uint32_t s = HB_OOL(hb_live_check)(st, lv, (const hbf_ctl*)st->ctl, t);
            if (s == 0u && t - lv.started > HB_OVF_ENTRY_WAIT_NS) s = HBF_ST_TIMEOUT;
            if (s != 0u) {
                hb_fail_live(st, s, 0xFFFFu, ticket);
                return HB_POLL_FAILED;
            }
        }
    }
}

// The owner's claim of its posted completion (one device-memory atomicMax on the slot's claim word), issued
// together with the four 16-byte host loads of the self-contained completion, so its latency hides under theirs.
// Returns the previous claim: below 2 (t + 1), the completion is ours (nobody can make hbfd rewrite it before our
// consumed store) and `o` holds it; otherwise hb_ref_take_slow decides.
HB_DEV uint64_t hb_ref_claim_read(hbf_device_state* st, hbf_completion* cp, uint32_t slot, uint64_t want, hb_cpl& o) {
    const uint64_t old = atomicMax((unsigned long long*)&st->ref_claim[slot], (unsigned long long)(2ull * want));
    hb_cpl_load(cp, o);
    return old;
}

// The owner's take when its claim was not the first (or the slot had moved on: polls == 0): another path of the
// same ticket claimed it first (a wait on several paths: the slot may be in reuse, so the payload is read under
// the completion seqlock: seq == want, payload, system fence, seq == want again), a stealer has it (its overflow
// entry, waited for: it is being written), or the slot moved on (the overflow entry if there is one). Returns 1
// (o filled), 0 (waited before: nothing left to wait) or HB_POLL_FAILED.
HB_SPLIT_FN uint32_t hb_ref_take_slow(hbf_device_state* st, hbf_ctl* c, uint64_t ticket, uint32_t polls, uint64_t old,
                                      hb_cpl& o) {
    const uint64_t want = ticket + 1ull;
    hbf_completion* cp = &c->completions[ticket & (HBF_RING_SLOTS - 1u)];
    if (polls != 0u && old == 2ull * want && hb_ld_acq_sys(&cp->seq) == want) {
        hb_cpl_load(cp, o);
        __threadfence_system();                  // the payload loads before the re-read
        if (hb_ld_acq_sys(&cp->seq) == want) return 1u;   // consumed: written by the first claimer (never again
                                                            // here: the slot may have moved on since, and a late
                                                            // store would lower its next ticket's consumed)
    }
    return HB_OOL(hb_ref_ovf_take)(st, ticket, polls != 0u && old == 2ull * want + 1ull, o);
}

// The owner's take of ticket `ticket` (the capacity miss path): polls its completion until posted, claims and
// reads it, writes consumed. Returns the polls (>= 1) with o filled; 0 when the ticket was already waited on
// another path; HB_POLL_FAILED after a recorded terminal failure.
HB_DEV uint32_t hb_ref_take(hbf_device_state* st, hbf_ctl* c, uint64_t ticket, uint32_t site, hb_cpl& o) {
    const uint32_t slot = (uint32_t)(ticket & (HBF_RING_SLOTS - 1u));
    hbf_completion* cp = &c->completions[slot];
    const uint64_t want = ticket + 1ull;
    const uint32_t polls = HB_OOL(hb_ticket_poll)(st, c, cp, want, site);
    if (polls == HB_POLL_FAILED) return polls;
    uint64_t old = 0ull;
    if (polls != 0u) {
        old = hb_ref_claim_read(st, cp, slot, want, o);
        if (old < 2ull * want) {
            hb_st_consumed(cp, want);
            return polls;
        }
    }
    const uint32_t r = HB_OOL(hb_ref_take_slow)(st, c, ticket, polls, old, o);
    return r == 1u ? (polls ? polls : 1u) : r;
}

// A taken READY completion's deadline: arrival + modeled_ns (thermal applied once, with the request's own q),
// less the measured deadline bias (clamped to arrival, the issue time), applied here once; HB_FAILED after a
// recorded terminal status.
HB_DEV uint64_t hb_cpl_deadline(hbf_device_state* st, uint64_t ticket, uint32_t site, const hb_cpl& o,
                                uint32_t polls) {
    const uint32_t status = o.status;
    const uint32_t op = (uint32_t)(o.w6 >> 32) & HBF_F_OP_MASK;
    uint64_t q = o.w7 & 0xFFFFFFFFull;                     // our own snapshot, written at issue
    if (q == 0ull || q > 1000000ull) q = 1000000ull;
    hbf_kernel_counters* ks = hb_kslot(st, site);
    hb_red_add(&ks->status[status & (HBF_N_STATUS - 1u)], 1ull);
    if (status != HBF_ST_READY) {
        HB_OOL(hb_fail)(st, status, site, ticket);
        return HB_FAILED;
    }
    const uint64_t modeled_t = hb_thermal_scale(o.modeled, (uint32_t)q);  // thermal applied exactly once
    hb_red_add(&ks->ops[op].modeled_ns, (unsigned long long)modeled_t);
    hb_red_add(&ks->ops[op].service_ns, (unsigned long long)o.service);
    HB_TRACE(ticket, 5, polls);
    HB_TRACE(ticket, 6, o.arrival + modeled_t);
    HB_TRACE(ticket, 7, o.service);
    HB_TRACE(ticket, 0, ticket + 1ull);
    (void)polls;
    return hb_apply_bias(st, o.arrival + modeled_t, o.arrival, site);
}

// hb_ticket_deadline's rare path (its own function: the fast path keeps the completion in registers).
HB_SPLIT_FN uint64_t hb_ticket_deadline_slow(hbf_device_state* st, uint64_t ticket, uint32_t site, uint32_t polls,
                                             uint64_t old) {
    hb_cpl o;
    const uint32_t r = HB_OOL(hb_ref_take_slow)(st, (hbf_ctl*)st->ctl, ticket, polls, old, o);
    if (r == HB_POLL_FAILED) return HB_FAILED;
    if (r == 0u) return 0ull;
    return hb_cpl_deadline(st, ticket, site, o, polls ? polls : 1u);
}

// Poll the ticket's completion slot; returns its deadline (hb_cpl_deadline); 0 when the ticket was already
// waited on another path; HB_FAILED after a recorded terminal failure. The completion is self-contained (its
// request's site | flags and q | tag words): 4 host reads after the acquire of seq, as before control-region
// ABI 4 (3 of the completion + 1 of our own request), plus the claim's device atomic beside them.
HB_OOL_FN uint64_t hb_ticket_deadline(hbf_device_state* st, uint64_t ticket, uint32_t site) {
    hbf_ctl* c = (hbf_ctl*)st->ctl;
    const uint32_t slot = (uint32_t)(ticket & (HBF_RING_SLOTS - 1u));
    hbf_completion* cp = &c->completions[slot];
    const uint64_t want = ticket + 1ull;
    HB_TRACE(ticket, 3, hb_now());
    const uint32_t polls = HB_OOL(hb_ticket_poll)(st, c, cp, want, site);
    if (polls == HB_POLL_FAILED) return HB_FAILED;
    uint64_t old = 0ull;
    if (polls != 0u) {
        hb_cpl o;
        old = hb_ref_claim_read(st, cp, slot, want, o);
        if (old < 2ull * want) {                           // the fast path: ours
            hb_st_consumed(cp, want);
            HB_TRACE(ticket, 4, hb_now());
            return hb_cpl_deadline(st, ticket, site, o, polls);
        }
    }
    return HB_OOL(hb_ticket_deadline_slow)(st, ticket, site, polls, old);
}

// ------------------------------------------------------------------------------------------
// The ABI (hbf_abi.h)
// ------------------------------------------------------------------------------------------

// The waiting side of __hb_wait (a nonzero future of an attached module).
HB_SPLIT_FN void hb_wait_slow(hbf_device_state* st, unsigned long long fut, unsigned int site,
                            uint64_t t_in) {
    uint64_t deadline = fut;
    const uint32_t m = hb_group_mask();
    // one poller per ticket in the warp; the others receive the deadline. The match runs in every lane of the group
    // (wt/grp13: it ran only in the lanes holding a ticket, a collective over m that m's lanes holding a deadline
    // never executed -- undefined by the PTX ISA); the lanes of g hold one future, so the branch is uniform over g.
    const uint32_t g = __match_any_sync(m, fut);
    if (fut & HBF_FUTURE_TICKET_BIT) {
        const uint32_t leader = (uint32_t)(__ffs(g) - 1);
        uint64_t d = 0;
        if (hb_laneid() == leader) d = HB_OOL(hb_ticket_deadline)(st, fut & ~HBF_FUTURE_TICKET_BIT, site);
        deadline = hb_from_leader(g, d, leader);
    }
    // A terminal failure (recorded by the polling lane), or a modeled wait that would hang: the whole
    // warp ends here, before the consumer reads the value.
    uint32_t bad = deadline == HB_FAILED ? 1u : 0u;
    if (!bad && deadline > t_in + HBF_MAX_WAIT_NS) {
        HB_OOL(hb_fail)(st, HBF_ST_TIMEOUT, site, deadline);  // never hang
        bad = 1u;
    }
    if (hb_group_any(st, m, bad, site)) hb_end();
    const uint64_t t_out = hb_wait_until(deadline);
    // wall: the consumer's time in the wait; late: the part of it past the deadline (or past the entry
    // when the value was already due: the poll's host round trip); slack: how long the value was ready
    // before the consumer asked (a value due before entry is slack, never lateness).
    const uint64_t due = deadline > t_in ? deadline : t_in;
    const uint32_t mask = hb_group_mask();
    const uint32_t wall = __reduce_max_sync(mask, hb_sat32(t_out - t_in));
    const uint32_t late = __reduce_max_sync(mask, hb_sat32(t_out - due));
    const uint32_t slack = __reduce_min_sync(mask, hb_sat32(deadline < t_in ? t_in - deadline : 0ull));
    if (hb_laneid() == (uint32_t)(__ffs(mask) - 1)) {
        hbf_kernel_counters* ks = hb_kslot(st, site);
        hb_red_add(&ks->wait_calls, 1ull);
        hb_red_add(&ks->wait_wall_ns, (unsigned long long)wall);
        hb_red_add(&ks->wait_overhead_ns, (unsigned long long)late);
        if (slack) {
            hb_red_add(&ks->ready_waits, 1ull);
            hb_red_add(&ks->slack_ns, (unsigned long long)slack);
        }
    }
}

// A deadline future that is already due when the consumer asks: no wait, only the slack (how long the
// value was ready before its use, the warp's lowest active lane's) is counted, one atomic pair per warp.
// `slot()` gives the warp's counter slot (called by the leader lane only).
template <class Slot>
HB_DEV void hb_wait_ready(uint64_t deadline, uint64_t t_in, Slot slot) {
    const uint32_t mask = hb_group_mask();
    if (hb_laneid() == (uint32_t)(__ffs(mask) - 1)) {       // the lowest lane's slack (as the inline wait counts)
        hbf_kernel_counters* ks = slot();
        hb_red_add(&ks->ready_waits, 1ull);
        hb_red_add(&ks->slack_ns, (unsigned long long)(t_in - deadline));
    }
}

// One future of a join, resolved once per warp: the lanes holding the same ticket (a coalesced request is one
// ticket for all its lanes) elect one poller and receive its deadline, as hb_wait_slow does; every lane taking
// the ticket itself cost a claim and four host loads per lane, and made each lane after the first a second path.
HB_DEV uint64_t hb_join_one(hbf_device_state* st, uint32_t m, unsigned long long f) {
    const uint32_t g = __match_any_sync(m, f);
    const uint32_t leader = (uint32_t)(__ffs(g) - 1);
    uint64_t d = f;
    if ((f & HBF_FUTURE_TICKET_BIT) != 0ull && hb_laneid() == leader)
        d = HB_OOL(hb_ticket_deadline)(st, f & ~HBF_FUTURE_TICKET_BIT, 0xFFFFu);
    return hb_from_leader(g, d, leader);
}

// A ticket involved in a join: resolve the tickets now (their deadlines are then plain deadlines).
HB_SPLIT_FN unsigned long long hb_join_slow(hbf_device_state* st, unsigned long long a,
                                          unsigned long long b) {
    const uint32_t m = hb_group_mask();
    const uint64_t da = hb_join_one(st, m, a);
    const uint64_t db = hb_join_one(st, m, b);
    if (hb_group_any(st, m, da == HB_FAILED || db == HB_FAILED, 0xFFFFu)) hb_end();   // recorded by the poller
    const uint64_t d = da > db ? da : db;
    return d ? d : 1ull;
}

extern "C" __device__ __noinline__ unsigned long long __hb_issue(unsigned long long addr, unsigned int bytes,
                                                                 unsigned int flags, unsigned int site) {
    if ((flags & HBF_F_ACTIVE) == 0u) return 0ull;
    // The issue time is taken before any memory access of the helper: the modeled service starts at issue.
    const uint64_t t0 = hb_now();
    HB_PROF(0, t0);
#if HBF_FAST_ISSUE
    if (__hb_cdesc.flags & HBF_CD_ON) {                         // the descriptor: no load before the path
        unsigned long long fut;
        if (hb_issue_fast(addr, bytes, flags, site, t0, fut) == HB_FAST_DONE) return fut;
    }
#endif
    const unsigned long long sp = __hb_state;
    if (sp == 0ull) return 0ull;
    const ulonglong2 b = __ldg((const ulonglong2*)sp);  // {lo, span}
    if (addr - b.x >= b.y && bytes <= HBF_DEV_GUARD_BYTES) return 0ull;
    return HB_OOL(hb_issue_slow)((hbf_device_state*)sp, addr, bytes, flags, site, t0);
}

extern "C" __device__ __noinline__ void __hb_wait(unsigned long long fut, unsigned int site) {
    if (fut == 0ull) return;
#if HBF_FAST_ISSUE
    if ((fut & HBF_FUTURE_TICKET_BIT) == 0ull && (__hb_cdesc.flags & HBF_CD_ON)) {
        const uint64_t t_in = hb_now();
        if (fut <= t_in && __hb_state == __hb_cdesc.st) {      // due already: counters by the descriptor
            hb_wait_ready(fut, t_in, [&] { return hb_cd_kslot(site, hb_smid()); });
            return;
        }
    }
#endif
    const unsigned long long sp = __hb_state;
    if (sp == 0ull) return;
    const uint64_t t_in = hb_now();
    if ((fut & HBF_FUTURE_TICKET_BIT) == 0ull && fut <= t_in) {   // due already: ready before use
        hb_wait_ready(fut, t_in, [&] { return hb_kslot((hbf_device_state*)sp, site); });
        return;
    }
    HB_OOL(hb_wait_slow)((hbf_device_state*)sp, fut, site, t_in);
}

extern "C" __device__ __noinline__ unsigned long long __hb_future_join(unsigned long long a,
                                                                       unsigned long long b) {
    if (a == 0ull) return b;
    if (b == 0ull) return a;
    const unsigned long long mx = a > b ? a : b;
    if (((a | b) & HBF_FUTURE_TICKET_BIT) == 0ull) return mx;  // two deadlines: the later one
    const unsigned long long sp = __hb_state;
    if (sp == 0ull) return mx;
    return HB_OOL(hb_join_slow)((hbf_device_state*)sp, a, b);
}

extern "C" __device__ __noinline__ void __hb_kernel_enter(unsigned int kernel_index) {
    const unsigned long long sp = __hb_state;
    if (sp == 0ull) return;
    if ((threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0u) {
        hbf_kernel_counters* ks = hb_kslot((hbf_device_state*)sp, kernel_index << 16);
        hb_red_add(&ks->launches, 1ull);
        const uint64_t now = hb_now();
        hb_st_vol(&ks->kstart_ns, now);
        const uint32_t k = __hb_kslot_base + kernel_index;                       // hb_kslot_of's slot
        hb_act_mark((hbf_device_state*)sp, k < HBF_MAX_KERNEL_SLOTS ? k : HBF_MAX_KERNEL_SLOTS - 1u, now);
    }
}

extern "C" __device__ __noinline__ void __hb_kernel_exit(unsigned int kernel_index) {
    const unsigned long long sp = __hb_state;
    if (sp == 0ull) return;
    if ((threadIdx.x | threadIdx.y | threadIdx.z) == 0u) {
        hbf_kernel_counters* ks = hb_kslot((hbf_device_state*)sp, kernel_index << 16);
        hb_red_add(&ks->blocks_exited, 1ull);
        hb_red_max(&ks->kend_ns, (unsigned long long)hb_now());
    }
}

// ------------------------------------------------------------------------------------------
// TMA and the bulk async copies (ABI 5, hbf_abi.h "TMA"; the model in hbf_tma.cuh)
// ------------------------------------------------------------------------------------------
#include "hbf_tma.cuh"

extern "C" __device__ __noinline__ unsigned long long __hb_tma(unsigned long long gaddr, unsigned int c0,
                                                               unsigned int c1, unsigned int c2, unsigned int c3,
                                                               unsigned int c4, unsigned int nbytes,
                                                               unsigned int mbar, unsigned int kind,
                                                               unsigned int ctamask, unsigned int table,
                                                               unsigned int site) {
    if ((kind & HBF_TMA_F_ACTIVE) == 0u) return 0ull;
    const uint64_t t0 = hb_now();                       // the modeled service starts at issue
    const unsigned long long sp = __hb_state;
    if (sp == 0ull) return 0ull;
    const int32_t c[5] = {(int32_t)c0, (int32_t)c1, (int32_t)c2, (int32_t)c3, (int32_t)c4};
    return hb_tma_issue((hbf_device_state*)sp, gaddr, c, nbytes, mbar, kind, ctamask, table, site, t0);
}

extern "C" __device__ __noinline__ void __hb_mbar_note(unsigned int table, unsigned int mbar, unsigned long long fut,
                                                       unsigned int site) {
    const unsigned long long sp = __hb_state;
    if (sp == 0ull) return;
    hbf_device_state* st = (hbf_device_state*)sp;
    if (fut & HBF_FUTURE_TICKET_BIT) fut = HB_OOL(hb_join_slow)(st, fut, 0ull);  // resolved (a join with nothing)
    if (!hb_tw_record(st, table, mbar, fut ? fut : 1ull, false, 0u, site)) {
        HB_OOL(hb_fail)(st, HBF_ST_UNSUPPORTED, site, mbar);
        hb_end();
    }
}

extern "C" __device__ __noinline__ void __hb_mbar_wait(unsigned int table, unsigned int mbar, unsigned int parity,
                                                       unsigned int site) {
    if (__hb_state == 0ull) return;
    hb_mbar_wait(table, mbar, parity, site);
}

extern "C" __device__ __noinline__ void __hb_tma_enter(unsigned int table, unsigned int flags) {
    hb_tma_enter(table, flags);
}

extern "C" __device__ __noinline__ void __hb_tma_exit(unsigned int table, unsigned int kernel_index) {
    const unsigned long long sp = __hb_state;
    if (sp == 0ull) return;
    hb_tma_exit((hbf_device_state*)sp, table, kernel_index);
}

// ------------------------------------------------------------------------------------------
// Capacity mode's entry points (issue 16, docs/design.md §3.6; NOT GPU-verified): hbf_cap_helpers.cuh
// ------------------------------------------------------------------------------------------
#include "hbf_cap_helpers.cuh"
