/*
 * hbf_l2.cuh — the L2 in front of HBF (issue 14 item 4; docs/design.md §3.12).
 *
 * HBF sits below the GPU's L2, as HBM does: a load of a registered line that a real L2 would serve is not an
 * HBF read. This models L2 residency of REGISTERED lines: a set-associative tag store in device memory
 * (hbf_device_state.l2_tags: l2_sets x l2_ways 64-bit words), filled by the loads (and cp.async reads) of
 * registered ranges, in media addresses. The store is ONE L2 partition's share (the profile's l2.capacity_bytes /
 * l2.partitions, hbfcommon.profile.l2_model_bytes: a line read from SMs of both partitions is held by both, so a
 * working set read from every SM fits in one partition; docs/design.md §3.12 "L2 partitions"); the code below
 * knows only its sets and ways. The media request a warp makes for a page group carries only the
 * granules the L2 model missed; a group whose granules all hit makes no media request at all (future 0).
 *
 * A way's word: bits 63..40 the line's tag + 1 (tag = line / sets, < 2^24 - 1: the profile check bounds the
 * media capacity; 0 = empty), bits 39..32 the mask of the line's granules (read_granularity, the L2's DRAM fetch
 * unit) that are present, bits 31..0 the stamp: (%globaltimer >> HBF_L2_STAMP_SHIFT) mod 2^32 at its insertion
 * or last refresh (LRU; 64 ns units, wraps after 275 s: a line idle longer gets an arbitrary age).
 *
 * One access of one line (hb_l2_access, the ONE definition; hbfd/media/l2twin.py is its twin and the host test
 * tests/runtime/test_l2_model.py runs this very code on the CPU against it):
 *   read the set's words (relaxed: the one CAS below checks what was read);
 *   the line present with every needed granule: a hit; under LRU its stamp is refreshed when it is at least
 *     HBF_L2_TOUCH_UNITS old, by ONE atom.cas attempt (lost: nothing happens);
 *   present, some granules missing: ONE atom.cas adds them (a sector miss: only those are charged);
 *   absent: the victim is the first empty way, else the oldest stamp (ties: the first; both scans start at way
 *     tag1 % ways, so equal stamps -- one stamp unit is 64 ns -- do not always evict way 0), replaced by ONE
 *     atom.cas with the line and its needed granules (a line miss: the needed granules are charged).
 *   A lost CAS is never retried (no retry loop on words many warps share: issue 13): when the word the CAS
 *   found holds the same line with some of our granules, another warp filled them at the same time (a real
 *   L2 merges such misses in its miss table): those are NOT charged ("merged"); the rest is charged and not
 *   inserted ("lost": the next access misses again -- a bias toward charging more, counted).
 *
 * Compiled for the device (hbf_helpers.cu) and for the host (the CPU test: HB_L2_HOST, plain memory).
 */
#ifndef HBF_L2_CUH
#define HBF_L2_CUH
#include <stdint.h>

#define HBF_L2_STAMP_SHIFT 6u           /* stamp unit: 64 ns of %globaltimer (its tick is 32 ns) */
#define HBF_L2_STAMP_MASK 0xFFFFFFFFu   /* 32 bits */
#define HBF_L2_MASK_SHIFT 32u
#define HBF_L2_TAG_SHIFT 40u            /* tag + 1 in 24 bits */
#define HBF_L2_TOUCH_UNITS 16u          /* LRU: a hit refreshes a stamp at least this old (1024 ns): one CAS per hot
                                           line per microsecond, well below the L2's turnover under streaming
                                           (50 MiB at ~3 TB/s: ~17 us) */
#define HBF_L2_POLICY_LRU 1u            /* hbf_media_params.l2_policy */
#define HBF_L2_POLICY_FIFO 2u
#define HBF_L2_MAX_WAYS 32u
/* events of one access (hb_l2_access's *ev) */
#define HBF_L2_EV_MERGED 0x1u           /* some needed granules were filled by a concurrent access (not charged) */
#define HBF_L2_EV_LOST 0x2u             /* our CAS lost: charged granules not inserted */

#if defined(HB_L2_HOST)
#define HB_L2_FN static inline
/* the host test (sequential): the words are plain memory; a test hook may change a word between read and CAS */
#ifndef HB_L2_RACE
#define HB_L2_RACE(p) ((void)0)
#endif
HB_L2_FN uint64_t hb_l2_ld(const uint64_t* p) { return *p; }
HB_L2_FN uint64_t hb_l2_cas(uint64_t* p, uint64_t expect, uint64_t desired) {
    HB_L2_RACE(p);
    const uint64_t old = *p;
    if (old == expect) *p = desired;
    return old;
}
#else
#define HB_L2_FN static __device__ __forceinline__
/* a weak load at L2 (ld.global.cg: not served from this SM's L1, whose copy may be any age) */
HB_L2_FN uint64_t hb_l2_ld(const uint64_t* p) { return __ldcg((const unsigned long long*)p); }
HB_L2_FN uint64_t hb_l2_cas(uint64_t* p, uint64_t expect, uint64_t desired) {
    uint64_t o;
    asm volatile("atom.relaxed.gpu.global.cas.b64 %0, [%1], %2, %3;"
                 : "=l"(o) : "l"(p), "l"(expect), "l"(desired) : "memory");
    return o;
}
#endif

HB_L2_FN uint32_t hb_l2_tag(uint64_t w) { return (uint32_t)(w >> HBF_L2_TAG_SHIFT); }
HB_L2_FN uint32_t hb_l2_have(uint64_t w) { return (uint32_t)(w >> HBF_L2_MASK_SHIFT) & 0xFFu; }
HB_L2_FN uint32_t hb_l2_age(uint64_t w, uint32_t now_u) { return (now_u - (uint32_t)w) & HBF_L2_STAMP_MASK; }
HB_L2_FN uint64_t hb_l2_word(uint32_t tag1, uint32_t have, uint32_t now_u) {
    return ((uint64_t)tag1 << HBF_L2_TAG_SHIFT) | ((uint64_t)(have & 0xFFu) << HBF_L2_MASK_SHIFT) | now_u;
}
HB_L2_FN uint32_t hb_l2_popc(uint32_t x) {
#if defined(HB_L2_HOST)
    return (uint32_t)__builtin_popcount(x);
#else
    return (uint32_t)__popc(x);
#endif
}

/* One access of one line: `set` = its set's `ways` words, tag1 = line / sets + 1, need = the granules of the
 * line the access needs (bit i: granule i of the line), now_u = the stamp now. Returns the granules charged to
 * HBF (a subset of need); *ev |= HBF_L2_EV_*. */
HB_L2_FN uint32_t hb_l2_access(uint64_t* set, uint32_t ways, uint32_t tag1, uint32_t need, uint32_t now_u,
                               uint32_t policy, uint32_t* ev) {
    uint32_t m = HBF_L2_MAX_WAYS, victim = 0u, vage = 0u;
    bool have_empty = false;
    uint64_t wm = 0u, wv = 0u;
    uint32_t i = tag1 % ways;
#if !defined(HB_L2_HOST)
#pragma unroll 1
#endif
    for (uint32_t k = 0; k < ways; ++k, i = (i + 1u == ways) ? 0u : i + 1u) {
        const uint64_t w = hb_l2_ld(set + i);
        const uint32_t t = hb_l2_tag(w);
        if (t == tag1 && m == HBF_L2_MAX_WAYS) { m = i; wm = w; }
        if (have_empty) continue;
        if (t == 0u) { have_empty = true; victim = i; wv = w; continue; }
        const uint32_t a = hb_l2_age(w, now_u);
        if (k == 0u || a > vage) { victim = i; vage = a; wv = w; }
    }
    uint32_t miss;
    uint64_t exp, des;
    uint64_t* p;
    if (m != HBF_L2_MAX_WAYS) {
        miss = need & ~hb_l2_have(wm);
        if (miss == 0u) {                                          // a hit
            if (policy == HBF_L2_POLICY_LRU && hb_l2_age(wm, now_u) >= HBF_L2_TOUCH_UNITS)
                (void)hb_l2_cas(set + m, wm, hb_l2_word(tag1, hb_l2_have(wm), now_u));
            return 0u;
        }
        p = set + m;                                               // a sector miss: add the missing granules
        exp = wm;
        des = hb_l2_word(tag1, hb_l2_have(wm) | miss, policy == HBF_L2_POLICY_LRU ? now_u : (uint32_t)wm);
    } else {
        miss = need;                                               // a line miss: replace the victim
        p = set + victim;
        exp = wv;
        des = hb_l2_word(tag1, need, now_u);
    }
    const uint64_t got = hb_l2_cas(p, exp, des);
    if (got == exp) return miss;
    if (hb_l2_tag(got) == tag1) {                                  // the same line, filled concurrently
        const uint32_t merged = miss & hb_l2_have(got);
        if (merged) { *ev |= HBF_L2_EV_MERGED; miss &= ~merged; }
    }
    if (miss) *ev |= HBF_L2_EV_LOST;
    return miss;
}

/* The set and tag of a line (sets need not be a power of two): tag = q = line / sets, set = (line % sets + a hash
 * of q) % sets. Consecutive lines fall in consecutive sets; lines a multiple of sets apart (power-of-two strides:
 * the rows of a tile) do not all fall in one set, as a plain modulo would put them (a real L2 hashes its addresses
 * too). Exact: the set and q give the line back. The division is a multiply by magic = (2^64 - 1) / sets + 1
 * (hb_l2_magic; the runtime stores it in l2_magic): exact for line < 2^64 / sets, which sets < 2^20 and
 * tags < 2^24 guarantee (line < 2^44); no 64-bit division routine (its call costs registers in every kernel). */
#define HBF_L2_HASH_K 2654435761u
#define HBF_L2_MAX_SETS (1u << 20)
HB_L2_FN uint64_t hb_l2_magic(uint32_t sets) { return ~0ull / sets + 1ull; }
HB_L2_FN uint32_t hb_l2_locate(uint64_t line, uint32_t sets, uint64_t magic, uint32_t* tag1) {
#if defined(HB_L2_HOST)
    uint64_t q = (uint64_t)(((unsigned __int128)line * magic) >> 64);
#else
    uint64_t q = __umul64hi(line, magic);
#endif
    uint32_t r = (uint32_t)(line - q * sets);
    *tag1 = (uint32_t)q + 1u;
    uint32_t h = ((uint32_t)q * HBF_L2_HASH_K) % sets;
    uint32_t t = sets - r;                                       // r + h >= sets  <=>  h >= sets - r
    return h >= t ? h - t : r + h;
}

/* The granules of one access [off, off + nb) in its page, as a 64-bit mask (bit g: granule g of the page; a page
 * has at most 64 granules: the profile check; an access running past its page keeps its page's granules). */
HB_L2_FN uint64_t hb_l2_lane_bits(uint32_t off, uint32_t nb, uint32_t gsh) {
    uint32_t lo = off >> gsh, hi = (off + (nb ? nb : 1u) - 1u) >> gsh;
    if (hi > 63u) hi = 63u;
    if (lo > 63u) lo = 63u;
    return (2ull << hi) - (1ull << lo);                            // hi == 63: 2 << 63 wraps to 0, still exact
}

/* Line L of a page group (hb_l2_group's per-lane step; the host test runs it for L = 0, 1, ... as the twin's
 * request does): its needed granules from the group's 64-bit mask `all`, its set and tag, one hb_l2_access. Returns
 * the lane's counts packed as hb_l2_group sums them: missed granules (bits 0..7), lines looked up (8..15), merged
 * (16..23), lost (24..31); 0 when the group needs nothing of the line. */
HB_L2_FN uint32_t hb_l2_line(uint64_t* tags, uint32_t sets, uint32_t ways, uint64_t magic, uint32_t policy,
                             uint64_t page_line, uint32_t gpl, uint64_t all, uint32_t L, uint32_t now_u) {
    const uint32_t need = (uint32_t)(all >> (L << gpl)) & ((1u << (1u << gpl)) - 1u);
    if (need == 0u) return 0u;
    uint32_t tag1, e = 0u;
    const uint32_t set = hb_l2_locate(page_line + L, sets, magic, &tag1);
    const uint32_t miss = hb_l2_access(tags + (uint64_t)set * ways, ways, tag1, need, now_u, policy, &e);
    return hb_l2_popc(miss) + (1u << 8) + ((e & HBF_L2_EV_MERGED) << 16) + (((e >> 1) & 1u) << 24);
}

#if !defined(HB_L2_HOST)
/* The page group's accesses through the L2 model (docs/design.md §3.12). Called by every lane of `grp` (the
 * lanes of one media page group; a call of its own: its registers are not the caller's), each with its access
 * [off, off + nb) in the page whose media address is page_media. The group's granules (a 64-bit mask, two warp
 * ORs) are split by line; the lanes of grp take the page's lines in turn (lane rank r: lines r, r + n, ...; a
 * full warp with 4 KiB pages and 128 B lines: one line per lane, one round trip), each line one hb_l2_access.
 * Returns the group's charged bytes (missed granules << gsh; 0: the L2 serves the whole group), the same on
 * every lane of grp; the group's first lane adds the counters to ks (one red per counter per group). A page
 * whose geometry the model does not cover (more than 64 granules or 32 lines, or a line that is not 1-8
 * granules) is charged as without the model and counted in l2_unmodeled. */
static __device__ __noinline__ uint32_t hb_l2_group(const hbf_device_state* st, uint32_t grp, uint64_t page_media,
                                                    uint32_t off, uint32_t nb, uint32_t gsh, uint32_t pshift,
                                                    uint32_t uniq, uint64_t now, hbf_kernel_counters* ks) {
    const uint64_t tags = __ldg(&st->l2_tags);
    const uint2 g = __ldg((const uint2*)&st->l2_sets);             // {l2_sets, l2_ways}
    const uint2 q = __ldg((const uint2*)&st->l2_line_shift);       // {l2_line_shift, l2_policy}
    const uint64_t magic = __ldg(&st->l2_magic);
    const uint32_t lshift = q.x, lane = hb_laneid();
    const bool first = lane == (uint32_t)(__ffs(grp) - 1);
    if (pshift - gsh > 6u || lshift < gsh || lshift - gsh > 3u || pshift < lshift || pshift - lshift > 5u) {
        if (first) hb_red_add(&ks->l2_unmodeled, 1ull);
        return uniq;
    }
    const uint64_t bits = hb_l2_lane_bits(off, nb, gsh);
    const uint64_t all = ((uint64_t)__reduce_or_sync(grp, (uint32_t)(bits >> 32)) << 32) |
                         __reduce_or_sync(grp, (uint32_t)bits);
    const uint32_t gpl = lshift - gsh, n = __popc(grp), lines = 1u << (pshift - lshift);
    const uint32_t now_u = (uint32_t)(now >> HBF_L2_STAMP_SHIFT) & HBF_L2_STAMP_MASK;
    // this lane's counts in one word (a warp's totals fit: granules <= 64, lines <= 32): missed granules (bits
    // 0..7), lines looked up (8..15), merged (16..23), lost (24..31) -- one warp reduction for the four
    uint32_t cnt = 0u;
#pragma unroll 1
    for (uint32_t L = __popc(grp & ((1u << lane) - 1u)); L < lines; L += n)
        cnt += hb_l2_line((uint64_t*)tags, g.x, g.y, magic, q.y, page_media >> lshift, gpl, all, L, now_u);
    cnt = __reduce_add_sync(grp, cnt);
    const uint32_t tot_miss = cnt & 0xFFu;
    if (first) {
        hb_red_add(&ks->l2_lines, (unsigned long long)((cnt >> 8) & 0xFFu));
        hb_red_add(&ks->l2_hit_bytes, (unsigned long long)((uint32_t)__popcll(all) - tot_miss) << gsh);
        hb_red_add(&ks->l2_miss_bytes, (unsigned long long)tot_miss << gsh);
        if (cnt >> 16) {
            hb_red_add(&ks->l2_merged, (unsigned long long)((cnt >> 16) & 0xFFu));
            hb_red_add(&ks->l2_lost, (unsigned long long)(cnt >> 24));
        }
    }
    return tot_miss << gsh;
}
#endif

#endif /* HBF_L2_CUH */
