/*
 * hbf_capacity.cuh — capacity mode's device half: the translation of an access to a capacity range through the
 * page table (hit path, no host round trip) and the access loop around the miss request. Layout and protocol:
 * runtime_cuda/include/hbf_capacity.h, docs/design.md §3.6.
 *
 * STATUS: NOT GPU-VERIFIED and NOT WIRED. Nothing includes this file yet: hbfcc does not rewrite capacity
 * accesses, the runtime does not allocate page tables or frames, and the GPU runtime refuses capacity ranges at
 * registration. It is checked on the CPU only: it compiles to PTX and assembles with ptxas for sm_90a within a
 * register budget (tests/capacity/test_device_ptx.py). The miss and hint requests are the helper library's to
 * provide (declared here, defined nowhere yet): on the reference path's ring (hb_ref_issue with
 * HBF_REQ_CAP_MISS / HBF_REQ_CAP_HINT in the request flags; the miss waits for its completion, the hint not).
 */
#ifndef HBF_CAPACITY_CUH
#define HBF_CAPACITY_CUH

#include <stdint.h>
#include "hbf_capacity.h"
#include "hbf_ptx.cuh"

#define HB_CAP_DEV static __device__ __forceinline__

enum { HB_CAP_MISS = 0u, HB_CAP_HIT = 1u, HB_CAP_HIT_MARKED = 2u };

// The miss request: posts HBF_REQ_CAP_MISS for the page of `addr` and waits for its completion (the media
// wait included); returns the terminal HBF_ST_* (READY: the page was published; re-translate).
extern "C" __device__ unsigned int __hb_cap_miss(unsigned long long addr, unsigned long long media_address,
                                                 unsigned int op, unsigned int range_id, unsigned int site);
// The hint: the first hit on a prefetched frame (HBF_REQ_CAP_HINT), posted, never waited for.
extern "C" __device__ void __hb_cap_hint(unsigned long long addr, unsigned long long media_address,
                                         unsigned int range_id, unsigned int site);

// The hit path. Pins the frame of `addr`'s page when its mapping is current (pte -> pin -> fence -> state and
// generation re-checked: the host marks EVICTING before it reads pins, so the two cannot both proceed).
// Returns HB_CAP_MISS (nothing pinned) or HB_CAP_HIT / HB_CAP_HIT_MARKED (pinned; *xaddr = the frame's byte,
// *frame, *ready_ns = when the frame's modeled read lands: the access waits until then).
HB_CAP_DEV uint32_t hb_cap_pin(const hbf_cap_range* r, uint64_t addr, bool store, uint64_t* xaddr,
                               uint32_t* frame, uint64_t* ready_ns) {
    const uint64_t off = addr - r->base;
    const uint64_t page = off >> 12;
    const hbf_cap_pte* pt = (const hbf_cap_pte*)r->page_table;
    const uint64_t e = hb_ld_rlx_gpu64(&pt[page]);
    const uint32_t f = (uint32_t)e;
    if (f == HBF_CAP_NO_FRAME || f >= r->n_frames) return HB_CAP_MISS;
    hbf_cap_frame* fr = (hbf_cap_frame*)r->frames + f;
    hb_atom_add_g32(&fr->pins, 1u);
    asm volatile("fence.sc.gpu;" ::: "memory");
    if (hb_ld_rlx_gpu32(&fr->state) != HBF_FR_VALID || hb_ld_rlx_gpu32(&fr->generation) != (uint32_t)(e >> 32)) {
        hb_atom_add_g32(&fr->pins, 0xFFFFFFFFu);
        return HB_CAP_MISS;
    }
    if (!hb_ld_rlx_gpu32(&fr->referenced)) hb_st_rlx_gpu32(&fr->referenced, 1u);   // no write on a warm frame
    if (store && !hb_ld_rlx_gpu32(&fr->dirty)) hb_st_rlx_gpu32(&fr->dirty, 1u);
    uint32_t res = HB_CAP_HIT;
    if (hb_ld_rlx_gpu32(&fr->marker) && hb_atom_exch_g32(&fr->marker, 0u)) res = HB_CAP_HIT_MARKED;
    *xaddr = r->frame_data + ((uint64_t)f << 12) + (off & (HBF_CAP_PAGE_BYTES - 1u));
    *frame = f;
    *ready_ns = hb_ld_rlx_gpu64(&fr->ready_ns);
    return res;
}

// After the access has executed: the pin goes with release semantics at system scope, so the access's bytes are
// visible to the host's copy before it can see pins == 0.
HB_CAP_DEV void hb_cap_unpin(const hbf_cap_range* r, uint32_t frame) {
    hbf_cap_frame* fr = (hbf_cap_frame*)r->frames + frame;
    asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(&fr->pins), "r"(0xFFFFFFFFu) : "memory");
}

// The access: translate (hit) or miss, wait for the modeled read when the frame's data has not landed yet.
// Returns the translated address with the frame pinned (the caller accesses it, then hb_cap_unpin), or 0 with
// *status = the terminal status of a failed miss (the caller records it and exits, docs/design.md §3.4).
// A warp never waits for a miss while it holds a pin: when any lane of the call misses, the lanes that hit
// release their pins (no access has happened), the missing lanes post their requests and wait, and every lane
// translates again (docs/design.md §3.6: else warps holding pins could take every frame while their misses
// wait for one).
extern "C" __device__ __noinline__ unsigned long long __hb_cap_access(const hbf_cap_range* r,
                                                                     unsigned long long addr, unsigned int op,
                                                                     unsigned int site, unsigned int* frame,
                                                                     unsigned int* status) {
    const bool store = op == 1u || op == 2u;            // HBF_OP_STORE, HBF_OP_ATOMIC
    const uint64_t media = r->media_offset + ((addr - r->base) & ~(uint64_t)(HBF_CAP_PAGE_BYTES - 1u));
#pragma unroll 1
    for (;;) {
        uint64_t x, ready;
        const uint32_t h = hb_cap_pin(r, addr, store, &x, frame, &ready);
        if (h == HB_CAP_HIT_MARKED) __hb_cap_hint(addr, media, r->range_id, site);   // the marker is taken once
        const uint32_t missing = __ballot_sync(__activemask(), h == HB_CAP_MISS);
        if (missing == 0u) {
#pragma unroll 1
            while (hb_now() < ready) {
            }
            *status = 1u;                                // HBF_ST_READY
            return x;
        }
        if (h != HB_CAP_MISS) {                          // release: nothing was accessed through it
            hbf_cap_frame* fr = (hbf_cap_frame*)r->frames + *frame;
            hb_atom_add_g32(&fr->pins, 0xFFFFFFFFu);
        } else {
            const uint32_t s = __hb_cap_miss(addr, media, op, r->range_id, site);
            if (s != 1u) {
                *status = s;
                return 0ull;
            }
        }
    }
}

#endif /* HBF_CAPACITY_CUH */
