// hbf_tma_table.cuh — the per-CTA TMA completion table (hbf_abi.h "TMA completion table"; the design in hbf_tma.cuh
// and docs/design.md §3.3 "TMA and bulk async copies (issue 15)"). __host__ __device__: on the device the words are
// shared::cluster atomics (a shared::cta address of the executing CTA is a shared::cluster address too; another
// CTA's table is reached through mapa); on the host (tests/runtime/test_tma_table.py compiles this header into a
// CPU program) the same code runs on a byte array, so the phase-object rules are tested without a GPU.
#ifndef HBF_TMA_TABLE_CUH
#define HBF_TMA_TABLE_CUH

#include <stdint.h>
#include "hbf_abi.h"

#ifdef __CUDACC__
#define HB_TW_HD static __host__ __device__ __forceinline__
#else
#define HB_TW_HD static inline
#endif

#define HB_TW_CLOSED (1ull << 63)
#define HB_TW_WAITED (1ull << 62)
#define HB_TW_DL ((1ull << 62) - 1ull)

// ---- the table's words (32-bit addresses) ----
#if defined(__CUDA_ARCH__)
HB_TW_HD uint32_t hb_smc_ld32(uint32_t a) {
    uint32_t v;
    asm volatile("ld.volatile.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
    return v;
}
HB_TW_HD uint64_t hb_smc_ld64(uint32_t a) {
    uint64_t v;
    asm volatile("ld.volatile.shared::cluster.u64 %0, [%1];" : "=l"(v) : "r"(a) : "memory");
    return v;
}
HB_TW_HD uint32_t hb_smc_cas32(uint32_t a, uint32_t cmp, uint32_t val) {
    uint32_t old;
    asm volatile("atom.relaxed.cluster.shared::cluster.cas.b32 %0, [%1], %2, %3;" : "=r"(old) : "r"(a), "r"(cmp), "r"(val)
                 : "memory");
    return old;
}
HB_TW_HD uint64_t hb_smc_cas64(uint32_t a, uint64_t cmp, uint64_t val) {
    uint64_t old;
    asm volatile("atom.relaxed.cluster.shared::cluster.cas.b64 %0, [%1], %2, %3;" : "=l"(old) : "r"(a), "l"(cmp), "l"(val)
                 : "memory");
    return old;
}
#else
// the host twin: address a is a byte offset into hb_tw_host_mem (single-threaded: the CAS cannot fail)
extern uint8_t* hb_tw_host_mem;
HB_TW_HD uint32_t hb_smc_ld32(uint32_t a) { return *(uint32_t*)(hb_tw_host_mem + a); }
HB_TW_HD uint64_t hb_smc_ld64(uint32_t a) { return *(uint64_t*)(hb_tw_host_mem + a); }
HB_TW_HD uint32_t hb_smc_cas32(uint32_t a, uint32_t cmp, uint32_t val) {
    uint32_t* p = (uint32_t*)(hb_tw_host_mem + a);
    const uint32_t old = *p;
    if (old == cmp) *p = val;
    return old;
}
HB_TW_HD uint64_t hb_smc_cas64(uint32_t a, uint64_t cmp, uint64_t val) {
    uint64_t* p = (uint64_t*)(hb_tw_host_mem + a);
    const uint64_t old = *p;
    if (old == cmp) *p = val;
    return old;
}
#endif

// ---- the table ----
HB_TW_HD uint32_t hb_tw_slot(uint32_t key) { return (key >> 3) * 2654435761u >> 28; }   // 16 entries
// The entry of `key` in the table at cluster address `tbl` (claimed when absent and `claim`); 0: none / full.
HB_TW_HD uint32_t hb_tw_find(uint32_t tbl, uint32_t key, bool claim) {
    const uint32_t h = hb_tw_slot(key);
    for (uint32_t i = 0; i < HBF_TMA_TABLE_ENTRIES; ++i) {
        const uint32_t e = tbl + 8u + 24u * ((h + i) & (HBF_TMA_TABLE_ENTRIES - 1u));
        uint32_t k = hb_smc_ld32(e);
        if (k == 0u) {
            if (!claim) return 0u;
            k = hb_smc_cas32(e, 0u, key);
            if (k == 0u) return e;
        }
        if (k == key) return e;
    }
    return 0u;
}

// The phase counts of the table operations (added to the kernel's counters by the caller).
struct hb_tw_counts { uint32_t phases, consumed, stale; };

// A copy's deadline `dl` (> 0) into the phase of parity `par` of the entry at `e`: the other parity's object
// is closed (its phase completed before this issue), this parity's joins the open phase or opens a new one.
HB_TW_HD void hb_tw_put(uint32_t e, uint32_t par, uint64_t dl, hb_tw_counts& c) {
    const uint32_t wa = e + 8u + 8u * (par & 1u), oa = e + 8u + 8u * ((par & 1u) ^ 1u);
    uint64_t o = hb_smc_ld64(oa);
    while (o != 0ull && (o & HB_TW_CLOSED) == 0ull) {
        const uint64_t seen = hb_smc_cas64(oa, o, o | HB_TW_CLOSED);
        if (seen == o) {
            if (o & HB_TW_WAITED) ++c.consumed; else ++c.stale;
            break;
        }
        o = seen;
    }
    dl &= HB_TW_DL;
    uint64_t w = hb_smc_ld64(wa);
    for (;;) {
        const bool fresh = w == 0ull || (w & (HB_TW_CLOSED | HB_TW_WAITED)) != 0ull;
        const uint64_t want = fresh ? dl : (w > dl ? w : dl);
        if (!fresh && want == w) break;                         // an earlier copy of this phase ends later
        const uint64_t seen = hb_smc_cas64(wa, w, want);
        if (seen == w) {
            if (fresh) {
                ++c.phases;
                // an open object that was waited ends consumed here (its parity's next phase); a closed one
                // was counted when it closed
                if (w != 0ull && (w & HB_TW_CLOSED) == 0ull) ++c.consumed;
            }
            break;
        }
        w = seen;
    }
}


// The CTA's exit: its open objects end consumed (waited) or leaked (never waited); closed ones were counted.
HB_TW_HD void hb_tw_exit_scan(uint32_t table, uint32_t* consumed, uint32_t* leaked) {
    *consumed = *leaked = 0u;
    for (uint32_t i = 0; i < HBF_TMA_TABLE_ENTRIES; ++i) {
        const uint32_t e = table + 8u + 24u * i;
        if (hb_smc_ld32(e) == 0u) continue;
        for (uint32_t p = 0; p < 2u; ++p) {
            const uint64_t w = hb_smc_ld64(e + 8u + 8u * p);
            if (w == 0ull || (w & HB_TW_CLOSED)) continue;
            if (w & HB_TW_WAITED) ++*consumed; else ++*leaked;
        }
    }
}

// The waiter of phase parity `par`: the deadline it must wait for (0: none) after marking the object waited.
HB_TW_HD uint64_t hb_tw_take(uint32_t table, uint32_t mbar, uint32_t par) {
    const uint32_t e = hb_tw_find(table, mbar + 1u, false);
    if (e == 0u) return 0ull;                                    // no tracked copy on this barrier
    const uint32_t wa = e + 8u + 8u * (par & 1u);
    uint64_t w = hb_smc_ld64(wa);
    if (w == 0ull) return 0ull;
    const uint64_t dl = w & HB_TW_DL;
    while ((w & (HB_TW_WAITED | HB_TW_CLOSED)) == 0ull) {        // the first waiter marks the object
        const uint64_t seen = hb_smc_cas64(wa, w, w | HB_TW_WAITED);
        if (seen == w) break;
        w = seen;
    }
    return dl;
}

#endif  // HBF_TMA_TABLE_CUH
