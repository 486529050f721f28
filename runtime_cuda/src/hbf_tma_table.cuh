// hbf_tma_table.cuh — the per-CTA TMA completion table (hbf_abi.h "TMA completion table"; the design in hbf_tma.cuh
// and docs/design.md §3.3 "TMA and bulk async copies (issue 15)"). __host__ __device__: on the device the words are
// shared::cluster atomics (a shared::cta address of the executing CTA is a shared::cluster address too; another
// CTA's table is reached through mapa); on the host (tests/runtime/test_tma_table.py compiles this header into a
// CPU program) the same code runs on a byte array, so the phase-object rules are tested without a GPU.
//
// Addresses on sm_90 (read from ptxas 13's SASS, tests/runtime/test_tma_table.py checks it where cuobjdump is
// present): in a cluster launch a shared::cta address is (cluster rank << 24) + offset -- ptxas materializes
// `mov.u32 r, sym` of a .shared variable as (SR_CgaCtaId << 24) + offset -- and mapa.shared::cluster replaces
// bits 24..31 with the target rank (PRMT). So one barrier offset has a DIFFERENT address in each CTA of a cluster:
// the table's key is the barrier's offset from the table (hb_tw_key), the same in every CTA of the kernel, never
// its address (stop 41: keyed by address, rank 0's multicast records in rank 1's table were never found by rank
// 1's waiter, whose barrier address has rank 1 in its top byte). The host twin models the same layout.
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
// The address in CTA `rank` of the cluster that corresponds to shared address a.
HB_TW_HD uint32_t hb_tw_mapa(uint32_t a, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}
#else
// the host twin (single-threaded: the CAS cannot fail): address a is CTA (a >> 24)'s byte a & 0xFFFFFF, CTA r's
// shared memory at hb_tw_host_mem + r * HB_TW_HOST_CTA_BYTES (the sm_90 layout above)
#ifndef HB_TW_HOST_CTA_BYTES
#define HB_TW_HOST_CTA_BYTES 16384u
#endif
extern uint8_t* hb_tw_host_mem;
HB_TW_HD uint8_t* hb_tw_host(uint32_t a) { return hb_tw_host_mem + (a >> 24) * HB_TW_HOST_CTA_BYTES + (a & 0xFFFFFFu); }
HB_TW_HD uint32_t hb_smc_ld32(uint32_t a) { return *(uint32_t*)hb_tw_host(a); }
HB_TW_HD uint64_t hb_smc_ld64(uint32_t a) { return *(uint64_t*)hb_tw_host(a); }
HB_TW_HD uint32_t hb_smc_cas32(uint32_t a, uint32_t cmp, uint32_t val) {
    uint32_t* p = (uint32_t*)hb_tw_host(a);
    const uint32_t old = *p;
    if (old == cmp) *p = val;
    return old;
}
HB_TW_HD uint64_t hb_smc_cas64(uint32_t a, uint64_t cmp, uint64_t val) {
    uint64_t* p = (uint64_t*)hb_tw_host(a);
    const uint64_t old = *p;
    if (old == cmp) *p = val;
    return old;
}
HB_TW_HD uint32_t hb_tw_mapa(uint32_t a, uint32_t rank) { return (a & 0xFFFFFFu) | (rank << 24); }
#endif

// ---- the table ----
// The key of barrier `mbar` in the table at `table` (both shared::cta addresses of the same CTA): the barrier's
// offset from the table, + 1 (never 0, the free mark: both are 8-byte aligned). The same in every CTA of the
// kernel, whatever the CTA's address bits (see the header); 0 never matches a barrier.
HB_TW_HD uint32_t hb_tw_key(uint32_t table, uint32_t mbar) { return mbar - table + 1u; }
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

// A deadline `dl` (> 0) into phase `par` of barrier `mbar`, both of the executing CTA (shared::cta addresses, as
// `table`): into this CTA's table, or with `multicast` into the table of each CTA of `ctamask` (one tracked
// destination per cluster rank; the destinations' barriers are at mbar's offset, as the multicast signals them),
// under the key the destination's own waiter computes. false: a table is full (the caller fails closed).
HB_TW_HD bool hb_tw_record_into(uint32_t table, uint32_t mbar, uint32_t par, uint64_t dl, bool multicast,
                                uint32_t ctamask, hb_tw_counts& c) {
    const uint32_t key = hb_tw_key(table, mbar);
    if (!multicast) {
        const uint32_t e = hb_tw_find(table, key, true);
        if (e == 0u) return false;
        hb_tw_put(e, par, dl, c);
        return true;
    }
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
    for (uint32_t m = ctamask & 0xFFFFu; m != 0u; m &= m - 1u) {
        uint32_t rank = 0u;
        while (((m >> rank) & 1u) == 0u) ++rank;                // the lowest destination left
        const uint32_t e = hb_tw_find(hb_tw_mapa(table, rank), key, true);
        if (e == 0u) return false;
        hb_tw_put(e, par, dl, c);
    }
    return true;
}

// The waiter of phase parity `par`: the deadline it must wait for (0: none) after marking the object waited.
HB_TW_HD uint64_t hb_tw_take(uint32_t table, uint32_t mbar, uint32_t par) {
    const uint32_t e = hb_tw_find(table, hb_tw_key(table, mbar), false);
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
