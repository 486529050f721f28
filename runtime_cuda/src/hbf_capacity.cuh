/*
 * hbf_capacity.cuh — capacity mode's device half: the translation of an access to a capacity range through the
 * page table (hit path, no host round trip) and the access loop around the miss request. Layout and protocol:
 * runtime_cuda/include/hbf_capacity.h, docs/design.md §3.6.
 *
 * STATUS: NOT GPU-VERIFIED. Checked on the CPU only: it compiles to PTX and assembles with ptxas for sm_90a
 * within a register budget (tests/capacity/test_device_ptx.py), and the hit path (hb_cap_pin / hb_cap_unpin)
 * is compiled as host code and driven against hbfd's frame pool in the shared capacity region
 * (tests/capacity/test_pin_host.py), and the access loop too, for one lane against hbfd's ring
 * (tests/capacity/test_access_loop_host.py). hbf_cap_helpers.cuh (the end of hbf_helpers.cu) includes it and
 * defines the miss and hint requests
 * (__hb_cap_miss / __hb_cap_hint: the reference path's ring, HBF_REQ_CAP_MISS / HBF_REQ_CAP_HINT) and the
 * rewritten accesses' entry points (__hb_cap_xlate / __hb_cap_release, hbfcc/passes/capacity.py).
 *
 * Where the words live. The frame records, the page table and the frame bytes of a range are hbfd's capacity
 * region (hbfcommon/capacity.py: a shared host mapping, registered with the device by the runtime), so every
 * word the host and the device share is accessed at SYSTEM scope here (relaxed sys loads/stores/atomics,
 * fence.sc.sys): the host's EVICTING store and the device's pin are ordered by the two sys fences.
 *
 * Compiled as plain C++ (no __CUDACC__: the CPU tests, g++) the hit path's words use the compiler's __atomic
 * builtins with sequentially consistent fences; the access loop too when the harness defines HBF_CAP_HOST_LOOP
 * and supplies the warp intrinsics for one lane.
 */
#ifndef HBF_CAPACITY_CUH
#define HBF_CAPACITY_CUH

#include <stdint.h>
#include "hbf_capacity.h"

#ifdef __CUDACC__
#include "hbf_ptx.cuh"
#define HB_CAP_DEV static __device__ __forceinline__
#else
#define HB_CAP_DEV static inline
// one lane on the host (the test harnesses): a leader's value is its own (hbf_ptx.cuh's hb_from_leader on the device)
template <class T> static inline T hb_from_leader(uint32_t, T v, uint32_t) { return v; }
static inline uint32_t hb_group_mask() { return 1u; }   // the harness runs one lane (lane 0)
#endif

enum { HB_CAP_MISS = 0u, HB_CAP_HIT = 1u, HB_CAP_HIT_MARKED = 2u };

// ---- host-shared words: system scope ------------------------------------------------------------------------
#ifdef __CUDACC__
HB_CAP_DEV uint32_t hb_cap_ld32(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
HB_CAP_DEV uint64_t hb_cap_ld64(const void* p) {
    uint64_t v;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
HB_CAP_DEV void hb_cap_st32(uint32_t* p, uint32_t v) {
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
HB_CAP_DEV uint32_t hb_cap_add32(uint32_t* p, uint32_t v) {
    uint32_t o;
    asm volatile("atom.relaxed.sys.global.add.u32 %0, [%1], %2;" : "=r"(o) : "l"(p), "r"(v) : "memory");
    return o;
}
HB_CAP_DEV uint32_t hb_cap_exch32(uint32_t* p, uint32_t v) {
    uint32_t o;
    asm volatile("atom.relaxed.sys.global.exch.b32 %0, [%1], %2;" : "=r"(o) : "l"(p), "r"(v) : "memory");
    return o;
}
HB_CAP_DEV void hb_cap_fence() { asm volatile("fence.sc.sys;" ::: "memory"); }
// the unpin: a release reduction at system scope (the access's bytes are visible before pins drops)
HB_CAP_DEV void hb_cap_unpin_word(uint32_t* p) {
    asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(0xFFFFFFFFu) : "memory");
}
#else
HB_CAP_DEV uint32_t hb_cap_ld32(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
HB_CAP_DEV uint64_t hb_cap_ld64(const void* p) { return __atomic_load_n((const uint64_t*)p, __ATOMIC_RELAXED); }
HB_CAP_DEV void hb_cap_st32(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
HB_CAP_DEV uint32_t hb_cap_add32(uint32_t* p, uint32_t v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
HB_CAP_DEV uint32_t hb_cap_exch32(uint32_t* p, uint32_t v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
HB_CAP_DEV void hb_cap_fence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
HB_CAP_DEV void hb_cap_unpin_word(uint32_t* p) { __atomic_fetch_add(p, 0xFFFFFFFFu, __ATOMIC_RELEASE); }
#endif

// The hit path. Pins the frame of `addr`'s page when its mapping is current (pte -> pin -> fence -> state and
// generation re-checked: the host marks EVICTING before it reads pins, so the two cannot both proceed).
// Returns HB_CAP_MISS (nothing pinned) or HB_CAP_HIT / HB_CAP_HIT_MARKED (pinned; *xaddr = the frame's byte,
// *frame, *ready_ns = when the frame's modeled read lands: the access waits until then).
HB_CAP_DEV uint32_t hb_cap_pin(const hbf_cap_range* r, uint64_t addr, bool store, uint64_t* xaddr,
                               uint32_t* frame, uint64_t* ready_ns) {
    const uint64_t off = addr - r->base;
    const uint64_t page = off >> 12;
    if (page >= r->pages) return HB_CAP_MISS;
    const hbf_cap_pte* pt = (const hbf_cap_pte*)r->page_table;
    const uint64_t e = hb_cap_ld64(&pt[page]);
    const uint32_t f = (uint32_t)e;
    if (f == HBF_CAP_NO_FRAME || f >= r->n_frames) return HB_CAP_MISS;
    hbf_cap_frame* fr = (hbf_cap_frame*)r->frames + f;
    hb_cap_add32(&fr->pins, 1u);
    hb_cap_fence();
    const uint32_t st = hb_cap_ld32(&fr->state);
    if ((st != HBF_FR_VALID && st != HBF_FR_DIRTY) || hb_cap_ld32(&fr->generation) != (uint32_t)(e >> 32)) {
        hb_cap_add32(&fr->pins, 0xFFFFFFFFu);
        return HB_CAP_MISS;
    }
    if (!hb_cap_ld32(&fr->referenced)) hb_cap_st32(&fr->referenced, 1u);   // no write on a warm frame
    if (store && !hb_cap_ld32(&fr->dirty)) hb_cap_st32(&fr->dirty, 1u);
    uint32_t res = HB_CAP_HIT;
    if (hb_cap_ld32(&fr->marker) && hb_cap_exch32(&fr->marker, 0u)) res = HB_CAP_HIT_MARKED;
    *xaddr = r->frame_data + ((uint64_t)f << 12) + (off & (HBF_CAP_PAGE_BYTES - 1u));
    *frame = f;
    *ready_ns = hb_cap_ld64(&fr->ready_ns);
    return res;
}

// After the access has executed: the pin goes with release semantics at system scope, so the access's bytes are
// visible to the host's copy before it can see pins == 0.
HB_CAP_DEV void hb_cap_unpin(const hbf_cap_range* r, uint32_t frame) {
    hb_cap_unpin_word(&((hbf_cap_frame*)r->frames + frame)->pins);
}

#if defined(__CUDACC__) || defined(HBF_CAP_HOST_LOOP)
// (HBF_CAP_HOST_LOOP: a host test harness that supplies the warp intrinsics for one lane, hb_now, and the miss
// and hint requests: tests/capacity/test_access_loop_host.py runs this loop against hbfd's ring.)
// The miss request: posts HBF_REQ_CAP_MISS for the page of `addr` and waits for its completion (the media
// wait included); returns HBF_ST_READY (the page was published: translate again), HBF_ST_PENDING (no frame
// could be taken now: ask again) or a terminal status (already recorded as the run's failure).
extern "C" __device__ unsigned int __hb_cap_miss(unsigned long long addr, unsigned long long media_address,
                                                 unsigned int op, unsigned int range_id, unsigned int site);
// The hint: the first hit on a prefetched frame (HBF_REQ_CAP_HINT), posted, never waited for.
extern "C" __device__ void __hb_cap_hint(unsigned long long addr, unsigned long long media_address,
                                         unsigned int range_id, unsigned int site);

// The access: translate (hit) or miss, wait for the modeled read when the frame's data has not landed yet.
// Returns the translated address with the frame pinned (the caller accesses it, then hb_cap_unpin), or 0 with
// *status = the terminal status of a failed miss (the caller records it and exits, docs/design.md §3.4).
// *waited: 0 no media wait, 1 a demand miss, 2 a late prefetch (a hit on a frame whose read had not landed).
// A warp never waits for a miss while it holds a pin: when any lane of the call misses, the lanes that hit
// release their pins (no access has happened), the missing lanes post their requests (one per page: a leader
// per group of lanes missing the same page) and wait, and every lane translates again (docs/design.md §3.6: else warps holding pins could take every frame while their misses
// wait for one).
extern "C" {   // C name, internal linkage: not part of the helper library's exports
static __device__ __noinline__ unsigned long long __hb_cap_access(const hbf_cap_range* r, unsigned long long addr,
                                                                 unsigned int op, unsigned int site,
                                                                 unsigned int* frame, unsigned int* status,
                                                                 unsigned int* waited) {
    const bool store = op == 1u || op == 2u;            // HBF_OP_STORE, HBF_OP_ATOMIC
    const uint64_t media = r->media_offset + ((addr - r->base) & ~(uint64_t)(HBF_CAP_PAGE_BYTES - 1u));
    uint32_t w = 0u, backoff = 256u;
#pragma unroll 1
    for (;;) {
        uint64_t x, ready;
        const uint32_t h = hb_cap_pin(r, addr, store, &x, frame, &ready);
        if (h == HB_CAP_HIT_MARKED) __hb_cap_hint(addr, media, r->range_id, site);   // the marker is taken once
        const uint32_t missing = __ballot_sync(hb_group_mask(), h == HB_CAP_MISS);
        if (missing == 0u) {
            if (hb_now() < ready) {
                if (w == 0u) w = 2u;
#pragma unroll 1
                while (hb_now() < ready) {
                }
            }
            *status = 1u;                                // HBF_ST_READY
            *waited = w;
            return x;
        }
        if (h != HB_CAP_MISS) {                          // release: nothing was accessed through it
            hb_cap_add32(&((hbf_cap_frame*)r->frames + *frame)->pins, 0xFFFFFFFFu);
        } else {
            // one request per page per warp: the lanes missing the same page elect a leader, which posts the
            // miss; they all take its status (a coalesced warp access touches one page: 1 request, not 32)
            const uint32_t peers = __match_any_sync(hb_group_mask(), media);
            const uint32_t leader = (uint32_t)(__ffs(peers) - 1);
            uint32_t s = 0u;
            if (hb_laneid() == leader) s = __hb_cap_miss(addr, media, op, r->range_id, site);
            s = hb_from_leader(peers, s, leader);
            if (s == 0u) {                               // HBF_ST_PENDING: every frame pinned or busy
                __nanosleep(backoff);
                backoff = backoff < 65536u ? backoff * 2u : backoff;
            } else if (s != 1u) {
                *status = s;
                *waited = w;
                return 0ull;
            } else {
                w = 1u;
            }
        }
    }
}
}
#endif

#endif /* HBF_CAPACITY_CUH */
