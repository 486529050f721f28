/*
 * hbf_cap_helpers.cuh — capacity mode's part of the helper library, included at the end of hbf_helpers.cu (it
 * uses the helpers' ring issue, completion poll, failure and counters). NOT GPU-VERIFIED; checked by ptxas
 * (tests/capacity/test_device_ptx.py, tests/runtime/test_runtime_helpers_ptx.py). Exports: hbf_capacity.h.
 */
#ifndef HBF_CAP_HELPERS_CUH
#define HBF_CAP_HELPERS_CUH

// ------------------------------------------------------------------------------------------
// Capacity mode (docs/design.md §3.6; runtime_cuda/src/hbf_capacity.cuh: the hit path and the access loop).
// NOT GPU-VERIFIED. __hb_cap_table: a device pointer to hbf_cap_range[HBF_MAX_RANGES], entry i describing
// st->ranges[i] when that range is a capacity range (pages == 0: not served: an access fails the run with
// UNSUPPORTED instead of touching the unbacked span). __hb_cap_counters: accesses, without a wait, demand
// waits, late prefetch waits, failed, misses posted, hints posted, PENDING answers (warp-aggregated).
// ------------------------------------------------------------------------------------------
#include "hbf_capacity.h"
extern "C" {
__device__ unsigned long long __hb_cap_table;
__device__ unsigned long long __hb_cap_counters[8];
}
HB_DEV void hb_cap_count(uint32_t i) {
    const uint32_t m = hb_group_mask();                         // hbf_ptx.cuh: checked per lane
    const uint32_t same = __match_any_sync(m, i);
    if (hb_laneid() == (uint32_t)(__ffs(same) - 1)) atomicAdd(&__hb_cap_counters[i], (unsigned long long)__popc(same));
}

extern "C" __device__ __noinline__ unsigned int __hb_cap_miss(unsigned long long addr, unsigned long long media,
                                                              unsigned int op, unsigned int range_id,
                                                              unsigned int site) {
    hbf_device_state* st = (hbf_device_state*)__hb_state;
    hbf_ctl* c = (hbf_ctl*)st->ctl;
    hb_cap_count(5u);
    const uint64_t fut = HB_OOL(hb_ref_issue)(st, c, addr, media, HBF_CAP_PAGE_BYTES, op, range_id, site,
                                              HBF_REQ_CAP_MISS | (op & HBF_F_OP_MASK) | HBF_F_ACTIVE, 0u, hb_now());
    if (fut == HB_FAILED) return HBF_ST_DAEMON_LOST;         // recorded (or the run had already failed)
    const uint64_t ticket = fut & ~HBF_FUTURE_TICKET_BIT;
    hb_cpl o;                                                // the owner's take (claim, or the overflow table)
    const uint32_t polls = hb_ref_take(st, c, ticket, site, o);
    if (polls == HB_POLL_FAILED || polls == 0u) return HBF_ST_DAEMON_LOST;
    const uint64_t arrival = o.arrival, modeled = o.modeled, service = o.service;
    const uint32_t s = o.status;
    hbf_kernel_counters* ks = hb_kslot(st, site);
    hb_red_add(&ks->status[s & (HBF_N_STATUS - 1u)], 1ull);
    if (s == HBF_ST_PENDING) {
        hb_cap_count(7u);
        return s;
    }
    if (s != HBF_ST_READY) {
        HB_OOL(hb_fail)(st, s, site, addr);
        return s;
    }
    hb_red_add(&ks->ops[op & 3u].modeled_ns, (unsigned long long)modeled);   // the four times: modeled
    hb_red_add(&ks->ops[op & 3u].service_ns, (unsigned long long)service);   // and the host path's wall
    hb_wait_until(arrival + modeled);                      // the media wait (already over when the host was slower)
    return HBF_ST_READY;
}

extern "C" __device__ __noinline__ void __hb_cap_hint(unsigned long long addr, unsigned long long media,
                                                      unsigned int range_id, unsigned int site) {
    hbf_device_state* st = (hbf_device_state*)__hb_state;
    hb_cap_count(6u);
    HB_OOL(hb_ref_issue)(st, (hbf_ctl*)st->ctl, addr, media, HBF_CAP_PAGE_BYTES, HBF_OP_LOAD, range_id, site,
                         HBF_REQ_CAP_HINT | HBF_F_ACTIVE, 0u, hb_now());   // hbfd consumes its completion
}

// the hit path and the access loop (after the miss and the hint: the linked module defines them before use)
#include "hbf_capacity.cuh"

// The capacity descriptor of `addr`'s range, or nullptr (not in a capacity range: the access is native).
HB_DEV const hbf_cap_range* hb_cap_of(const hbf_device_state* st, uint64_t addr) {
    const uint64_t tab = __hb_cap_table;
    if (tab == 0ull || addr - __ldg(&st->lo) >= __ldg(&st->span)) return nullptr;
    const uint32_t n = __ldg(&st->n_ranges);
    uint32_t lo = 0, hi = n;
    while (lo < hi) {  // first range with base > addr
        const uint32_t mid = (lo + hi) >> 1;
        if (__ldg(&st->ranges[mid].base) <= addr) lo = mid + 1; else hi = mid;
    }
    if (lo == 0u) return nullptr;
    const hbf_dev_range r = hb_ld_range(&st->ranges[lo - 1u]);
    if (addr >= r.end || r.mode != HBF_MODE_CAPACITY) return nullptr;
    return (const hbf_cap_range*)tab + (lo - 1u);
}

// A rewritten access (hbfcc/passes/capacity.py): the address to access instead of `addr` (the frame's byte,
// pinned until __hb_cap_release), or `addr` itself when it is not in a capacity range. A failed miss records
// the run's failure and ends the thread (fail-closed, as hb_end: the access never executes, never on the unbacked
// span).
extern "C" __device__ __noinline__ unsigned long long __hb_cap_xlate(unsigned long long addr, unsigned int op,
                                                                     unsigned int site) {
    const unsigned long long sp = __hb_state;
    if (sp == 0ull) return addr;
    hbf_device_state* st = (hbf_device_state*)sp;
    const hbf_cap_range* r = hb_cap_of(st, addr);
    if (r == nullptr) return addr;
    hb_cap_count(0u);
    if (__ldg(&r->pages) == 0ull || hb_failed(st)) {
        if (!hb_failed(st)) HB_OOL(hb_fail)(st, HBF_ST_UNSUPPORTED, site, addr);   // a span nothing serves
        hb_cap_count(4u);
        hb_end();
    }
    unsigned int frame, status, waited;
    const unsigned long long x = __hb_cap_access(r, addr, op, site, &frame, &status, &waited);
    if (x == 0ull) {                                       // the failure is recorded (__hb_cap_miss)
        hb_cap_count(4u);
        hb_end();
    }
    hb_cap_count(waited == 0u ? 1u : waited == 1u ? 2u : 3u);
    return x;
}

// After the rewritten access has executed: unpin the frame `x` (the value __hb_cap_xlate returned for `addr`;
// the caller skips the call when x == addr: nothing was pinned).
extern "C" __device__ __noinline__ void __hb_cap_release(unsigned long long addr, unsigned long long x) {
    const unsigned long long sp = __hb_state;
    if (sp == 0ull) return;
    const hbf_cap_range* r = hb_cap_of((const hbf_device_state*)sp, addr);
    if (r == nullptr) return;
    hb_cap_unpin(r, (uint32_t)((x - __ldg(&r->frame_data)) >> 12));
}

#endif /* HBF_CAP_HELPERS_CUH */
