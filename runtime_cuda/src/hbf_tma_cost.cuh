// hbf_tma_cost.cuh — what a TMA copy inside ONE timing range costs, counted without issuing its requests one by one
// (issue 15, the issue cost; docs/design.md §3.3 "The issue cost"). __host__ __device__: tests/tma/test_tma_cost.py
// runs it on the CPU (tests/tma/tma_cost_host.cu) against a Python twin of the per-run path.
//
// The per-run path (hb_tma_run, hbf_tma.cuh) makes ONE media request per page span of each run: the span
// [off, off + pl) of a page, rounded out to granules (hb_group_bytes with uniq = 0). For a run [media, media + n)
// of one range whose page boundaries are granule boundaries (granule <= page: the profile's 64 B read granule and
// pages of 4 KiB or more), the interior page boundaries cancel, so the run's
//   requests = the pages it touches = (last >> ps) - (media >> ps) + 1,
//   bytes    = its [media, media + n) rounded out to granules,
// exactly the sums of the per-page requests; a granule larger than a page is summed page by page.
#ifndef HBF_TMA_COST_CUH
#define HBF_TMA_COST_CUH

#include "hbf_tensormap.cuh"

struct hb_tma_cnt {
    uint64_t nreq;          // the media requests the per-run path makes (one per page span)
    uint64_t req_bytes;     // their request bytes (granule-rounded)
    uint64_t hbf;           // the program's bytes in the range
};

// One run [media, media + n) of a range's media address space: page 1 << ps, granule 1 << gsh.
HB_TMAP_HD void hb_tma_count_run(uint64_t media, uint64_t n, uint32_t ps, uint32_t gsh, hb_tma_cnt& c) {
    if (n == 0ull) return;
    const uint64_t last = media + n - 1ull, g = 1ull << gsh;
    if (gsh <= ps) {
        c.nreq += (last >> ps) - (media >> ps) + 1ull;
        c.req_bytes += ((last | (g - 1ull)) + 1ull) - (media & ~(g - 1ull));
    } else {
        const uint64_t page = 1ull << ps;
        for (uint64_t m = media, left = n; left != 0ull;) {
            const uint64_t off = m & (page - 1ull), pl = (page - off) < left ? (page - off) : left;
            c.nreq += 1ull;
            c.req_bytes += (((off + pl) + g - 1ull) & ~(g - 1ull)) - (off & ~(g - 1ull));
            m += pl;
            left -= pl;
        }
    }
    c.hbf += n;
}

// The extent of the box's in-bounds bytes without walking it: [*first, *end) (the lowest in-bounds byte and one past
// the highest), *inb their count; returns the box's out-of-bounds bytes (hb_tmap_box_runs' return value). The runs
// hb_tmap_box_runs visits all lie inside the extent, the first run starts at *first and the last one ends at *end
// (strides are unsigned: the address grows with every index). No in-bounds byte: *first = *end = *inb = 0.
HB_TMAP_HD uint64_t hb_tmap_box_extent(const hb_tmap& m, const int32_t* coords, uint64_t* first, uint64_t* end,
                                       uint64_t* inb) {
    const uint32_t r = m.rank;
    const uint64_t e = m.elem_bytes;
    uint64_t total = e, in = e, lo_a = m.base, hi_a = m.base;
HB_TMAP_UNROLL
    for (uint32_t k = 0; k < 5; ++k) {
        if (k >= r) continue;
        const int64_t c = coords[k], s = hb_tmap_step(m, k), n = hb_tmap_count(m, k), d = (int64_t)m.dim[k];
        const int64_t jlo = c >= 0 ? 0 : (-c + s - 1) / s;
        int64_t jhi = c >= d ? 0 : (d - c + s - 1) / s;
        if (jhi > n) jhi = n;
        total *= (uint64_t)n;
        if (jhi <= jlo) { in = 0ull; continue; }
        in *= (uint64_t)(jhi - jlo);
        const uint64_t w = k == 0u ? e : m.stride[k];          // bytes per index of dimension k
        lo_a += (uint64_t)(c + jlo * s) * w;
        hi_a += (uint64_t)(c + (jhi - 1) * s) * w;
    }
    if (in == 0ull) { *first = *end = *inb = 0ull; return total; }
    *first = lo_a;
    *end = hi_a + e;
    *inb = in;
    return total - in;
}

#endif  // HBF_TMA_COST_CUH
