// hbf_tma.cuh — TMA and the bulk async copies (issue 15): the device half of hbf_abi.h "TMA".
//
// Included by hbf_helpers.cu after the ordinary helpers (it uses their request path: hb_classify,
// hb_group_request, hb_ticket_deadline, the counters, hb_fail / hb_end); the exported __hb_tma,
// __hb_mbar_note, __hb_mbar_wait, __hb_tma_enter, __hb_tma_exit are the compact block at the end of
// hbf_helpers.cu. docs/design.md §3.3 "TMA and bulk async copies (issue 15)" is the design.
//
// * A copy's global side becomes byte runs: a bulk copy is one run [gaddr, gaddr + nbytes); a tensor copy's
//   box is decoded from its 128-byte CUtensorMap (hbf_tensormap.cuh: hb_tmap_decode, hb_tmap_box_runs) into
//   its contiguous in-bounds runs, the out-of-bounds bytes counted (filled by the TMA unit, no memory access).
// * Each run is split at range boundaries (byte exact: a tile across the HBM-HBF boundary is modeled per
//   byte): bytes outside every range are HBM (native), bytes in a TIMING range are HBF; those are split at the
//   range's media pages and each page span is ONE media request through hb_group_request, the ordinary loads'
//   per-page request (admission and thermal snapshot, timing source FIXED / CURVE / FAST, refresh claim, the
//   measured bias applied once): no second media model. The copy's deadline is the latest of its requests.
//   A reference-path ticket is resolved at issue (the issuer waits for hbfd's answer, not for the deadline).
// * Completion (conjunctive): a load's deadline goes into its CTA's completion table under (mbarrier, parity
//   of the phase its bytes complete) -- each destination CTA's table for a multicast --, and the program's
//   mbarrier.try_wait/test_wait that sees the phase complete then waits for that deadline (__hb_mbar_wait).
//
// The table (hbf_abi.h "TMA completion table"), per CTA in .shared (hbfcc declares it):
//   header {u32 exited, u32 flags}, HBF_TMA_TABLE_ENTRIES x {u32 key = mbar - table + 1, u32 pad, u64 word[2]}
//   (the barrier's offset from the table: a shared::cta address carries the CTA's cluster rank, hbf_tma_table.cuh)
//   word[p]: the phase object of parity p: bits 0..61 deadline (ns), bit 62 WAITED, bit 63 CLOSED; 0: none.
// Every phase object ends exactly once (the kernel's tma_* counters):
//   opened   by the first copy of a phase (tma_phases);
//   consumed when a later phase of its parity opens after it was waited, or it is closed after a wait, or its
//            CTA exits after a wait (tma_consumed);
//   stale    when it is closed (the next phase, of the other parity, got a copy: this phase completed
//            natively) or replaced without any wait (tma_stale);
//   leaked   when its CTA exits and it was never waited (tma_leaked).
// A closed object keeps its deadline: a waiter that comes late still waits for it (until its parity reopens).
//
// Which phase a copy completes: the barrier's phase current at issue (mbarrier.test_wait.parity 0 is true once
// the even phase is over: the current one is odd). Sound when the copy's bytes are expected before it is
// issued (expect_tx, or an arrival the phase needs is still pending): every producer we know does that
// (Triton, CUTLASS, FA3, cuda::barrier). Multicast: the destination CTAs' barriers at the same offset are in the
// issuer's phase (every CTA's stage barrier completes once per fill: CUTLASS / FA3 pipelines).
#ifndef HBF_TMA_CUH
#define HBF_TMA_CUH

#include "hbf_tensormap.cuh"
#include "hbf_tma_cost.cuh"     // a copy's requests counted per run (__host__ __device__: tests/tma/test_tma_cost.py)

#ifndef HBF_TMA_TRUST_LAYOUT
#define HBF_TMA_TRUST_LAYOUT 0
#endif

#include "hbf_tma_table.cuh"   // the completion table (__host__ __device__: tests/runtime/test_tma_table.py runs it on the CPU)

// The mbarrier address is in the executing CTA (a copy whose destination is another CTA's shared memory
// signals that CTA's barrier, whose phase the issuer cannot read).
HB_DEV bool hb_own_shared(uint32_t a) {
    uint32_t own;
    asm volatile("{\n\t.reg .b64 g;\n\t.reg .pred p;\n\tcvt.u64.u32 g, %1;\n\tcvta.shared::cluster.u64 g, g;\n\t"
                 "isspacep.shared::cta p, g;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(own) : "r"(a));
    return own != 0u;
}
// The parity of the barrier's current phase.
HB_DEV uint32_t hb_mbar_parity(uint32_t mbar) {
    uint32_t odd;
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.test_wait.parity.shared::cta.b64 p, [%1], 0;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(odd) : "r"(mbar) : "memory");
    return odd;
}

// ---- the multicast debug build (-DHBF_TMA_MC_DEBUG=1; hbf_abi.h "multicast debug buffer") ----
// What each CTA of a cluster recorded and looked up, for a GPU run that fails (bench/tma_semantics.py --mc-debug
// zeroes __hb_tma_dbg before a launch and decodes it after): an event per destination of each record (issuer side:
// the destination's table address through mapa, the key, the entry and the parity word after the put), an event per
// warp of each take (waiter side: its table, barrier address, key, the entry it found -- 0: none -- and the word before
// the take), and each CTA's table as its last thread leaves.
#ifndef HBF_TMA_MC_DEBUG
#define HBF_TMA_MC_DEBUG 0
#endif
#if HBF_TMA_MC_DEBUG
__device__ unsigned int __hb_tma_dbg[HBF_TMA_DBG_WORDS];     // zeroed by the reader before a launch
HB_DEV uint32_t hb_dbg_ctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
HB_DEV void hb_dbg_event(uint32_t kind, uint32_t table, uint32_t mbar, uint32_t par, uint32_t key, uint32_t dst,
                         uint32_t e) {
    const uint32_t i = atomicAdd(&__hb_tma_dbg[0], 1u);
    if (i >= HBF_TMA_DBG_EVENTS) return;
    const uint64_t w = e ? hb_smc_ld64(e + 8u + 8u * (par & 1u)) : 0ull;
    const uint32_t tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    volatile unsigned int* v = &__hb_tma_dbg[HBF_TMA_DBG_HDR + i * HBF_TMA_DBG_EV_WORDS];
    const uint32_t ev[HBF_TMA_DBG_EV_WORDS] = {kind, hb_dbg_ctarank(), blockIdx.x, tid, table, mbar, par, key, dst, e,
                                                (uint32_t)w, (uint32_t)(w >> 32)};
    for (uint32_t k = 0; k < HBF_TMA_DBG_EV_WORDS; ++k) v[k] = ev[k];
}
HB_DEV void hb_tw_mc_debug_record(uint32_t table, uint32_t mbar, uint32_t par, uint64_t, uint32_t ctamask, bool) {
    const uint32_t key = hb_tw_key(table, mbar);
    if (ctamask == 0u) { hb_dbg_event(1u, table, mbar, par, key, 0xFFFFFFFFu, hb_tw_find(table, key, false)); return; }
    for (uint32_t m = ctamask & 0xFFFFu; m != 0u; m &= m - 1u) {
        const uint32_t rank = (uint32_t)__ffs(m) - 1u, dt = hb_tw_mapa(table, rank);
        hb_dbg_event(1u, dt, mbar, par, key, rank, hb_tw_find(dt, key, false));
    }
}
HB_DEV void hb_tw_mc_debug_take(uint32_t table, uint32_t mbar, uint32_t par) {
    if ((threadIdx.x & 31u) != 0u) return;                      // one event per warp
    const uint32_t key = hb_tw_key(table, mbar);
    hb_dbg_event(2u, table, mbar, par, key, 0xFFFFFFFFu, hb_tw_find(table, key, false));
}
HB_DEV void hb_tw_mc_debug_exit(uint32_t table) {
    const uint32_t i = atomicAdd(&__hb_tma_dbg[1], 1u);
    if (i >= HBF_TMA_DBG_CTAS) return;
    volatile unsigned int* v = &__hb_tma_dbg[HBF_TMA_DBG_HDR + HBF_TMA_DBG_EVENTS * HBF_TMA_DBG_EV_WORDS +
                                             i * HBF_TMA_DBG_CTA_WORDS];
    v[0] = hb_dbg_ctarank(); v[1] = blockIdx.x; v[2] = table; v[3] = 0u;
    for (uint32_t k = 0; k < HBF_TMA_TABLE_BYTES / 4u; ++k) v[4 + k] = hb_smc_ld32(table + 4u * k);
}
#else
HB_DEV void hb_tw_mc_debug_record(uint32_t, uint32_t, uint32_t, uint64_t, uint32_t, bool) {}
HB_DEV void hb_tw_mc_debug_take(uint32_t, uint32_t, uint32_t) {}
HB_DEV void hb_tw_mc_debug_exit(uint32_t) {}
#endif

HB_DEV void hb_tw_count(hbf_kernel_counters* ks, const hb_tw_counts& c) {
    if (c.phases) hb_red_add(&ks->tma_phases, c.phases);
    if (c.consumed) hb_red_add(&ks->tma_consumed, c.consumed);
    if (c.stale) hb_red_add(&ks->tma_stale, c.stale);
}

// A deadline into (mbar, current parity) of this CTA's table, or of each destination CTA's in `ctamask`.
// Returns false when the barrier is not the executing CTA's or a table is full (the caller fails closed).
HB_DEV bool hb_tw_record(hbf_device_state* st, uint32_t table, uint32_t mbar, uint64_t dl, bool multicast,
                         uint32_t ctamask, uint32_t site) {
    if (!hb_own_shared(mbar)) return false;
    const uint32_t par = hb_mbar_parity(mbar);
    hb_tw_counts c = {0u, 0u, 0u};
    // keyed by mbar's offset from this CTA's table (hb_tw_key): the destination's waiter, whose barrier address
    // carries its own cluster rank, computes the same key
    const bool ok = hb_tw_record_into(table, mbar, par, dl, multicast, ctamask, c);
    if (multicast) asm volatile("fence.acq_rel.cluster;" ::: "memory");
    hb_tw_mc_debug_record(table, mbar, par, dl, multicast ? ctamask : 0u, ok);
    hb_tw_count(hb_kslot(st, site), c);
    return ok;
}

// ---- a copy's byte runs into media requests ----
// The op counters of a copy's requests (requests, bytes, program_bytes, modeled_ns) are summed here and added ONCE per
// copy (hb_tma_flush), also when the copy fails part way (what its requests made so far, as the per-request adds did).
struct hb_tma_acc {
    uint64_t dl;            // the latest deadline (0: no HBF byte)
    uint64_t hbf, hbm;      // bytes by tier
    uint64_t nreq;          // media requests
    uint64_t req_bytes;     // their request bytes (ops[op].bytes)
    uint64_t pbytes;        // their program bytes (ops[op].program_bytes)
    uint64_t modeled;       // their modeled ns (ops[op].modeled_ns)
    bool bad;               // a run the ordinary path would refuse (partial permission, not a timing range)
    bool failed;            // a request's terminal failure (recorded)
};

HB_DEV void hb_tma_flush(hbf_device_state* st, uint32_t op, uint32_t site, const hb_tma_acc& acc) {
    if (acc.nreq == 0ull) return;
    hbf_op_counters* oc = &hb_kslot(st, site)->ops[op];
    hb_red_add(&oc->requests, acc.nreq);
    hb_red_add(&oc->bytes, acc.req_bytes);
    hb_red_add(&oc->program_bytes, acc.pbytes);
    if (acc.modeled) hb_red_add(&oc->modeled_ns, acc.modeled);
}

// One run [a, a + n) of a copy with operation `op`: split at range boundaries, HBF page spans requested (the per-run
// path: any timing source, a copy across range boundaries; `known`: the range hb_tma_batch found the whole copy in).
// A call of its own (noinline): its request path's registers are not stacked on the box walk's (the walk runs
// in hb_tma_collect, also a call), so the helper's footprint is the larger of the two, not their sum.
static __device__ __noinline__ void hb_tma_run(hbf_device_state* st, uint64_t a, uint64_t n, uint32_t op, uint32_t site,
                                               uint64_t t0, hb_tma_acc& acc, const hbf_dev_range* known) {
    const uint32_t op_flags = op | HBF_F_ACTIVE;
#pragma unroll 1
    while (n != 0ull && !acc.bad && !acc.failed) {
        hbf_dev_range r;
        // known: the copy lies in this one range (hb_tma_batch classified its extent): no classification per run
        const int cls = known != nullptr ? (r = *known, (int)HB_HIT) : HB_OOL(hb_classify)(st, a, n, r);
        if (cls == HB_NATIVE) { acc.hbm += n; return; }
        if (a < r.base) {                                        // HBM bytes before the range
            const uint64_t k = r.base - a;
            acc.hbm += k; a += k; n -= k;
            continue;
        }
        if ((r.perms & hb_perm_needed(op)) == 0u || r.mode != HBF_MODE_TIMING) { acc.bad = true; return; }
        const uint64_t take = (a + n <= r.end) ? n : r.end - a; // the HBF part in this range
        const uint32_t pshift = r.page_shift ? r.page_shift : 12u;
        const uint64_t page = 1ull << pshift;
        uint64_t media = r.media_offset + (a - r.base), left = take;
#pragma unroll 1
        while (left != 0ull) {
            const uint32_t off = (uint32_t)(media & (page - 1ull));
            const uint64_t pl = (page - off) < left ? (page - off) : left;
            uint64_t out[2];
            uint64_t f = HB_OOL(hb_group_request)(st, &r, media, off, off, off + (uint32_t)pl, 0u, op_flags, site,
                                                  r.base + (media - r.media_offset), t0, out);
            if (f == HB_FAILED) { acc.failed = true; return; }
            if (f & HBF_FUTURE_TICKET_BIT) {                    // the reference path: resolved at issue
                f = HB_OOL(hb_ticket_deadline)(st, f & ~HBF_FUTURE_TICKET_BIT, site);
                if (f == HB_FAILED) { acc.failed = true; return; }
            }
            if (f > acc.dl) acc.dl = f;
            ++acc.nreq;
            acc.req_bytes += out[0];
            acc.pbytes += pl;
            acc.modeled += out[1];
            media += pl;
            left -= pl;
        }
        acc.hbf += take;
        a += take;
        n -= take;
    }
}

// The box's runs number skip .. skip + HB_TMA_CHUNK - 1 (in hb_tmap_box_runs' order) into b; returns the number of
// runs of the box (*oob: its out-of-bounds bytes). The walk is repeated per chunk instead of holding its state (five
// dimensions of bounds and indices) live across the media requests: a box has at most a few hundred runs (one per
// row of dimension 0), and the walk is cheap next to a run's requests.
#define HB_TMA_CHUNK 16u
struct hb_tma_runs { uint64_t a[HB_TMA_CHUNK]; uint32_t n[HB_TMA_CHUNK]; };
static __device__ __noinline__ uint32_t hb_tma_collect(const hb_tmap* m, const int32_t* c, uint32_t skip,
                                                       hb_tma_runs* b, uint64_t* oob) {
    uint32_t i = 0;
    *oob = hb_tmap_box_runs(*m, c, [&](uint64_t a, uint32_t n) {
        if (i >= skip && i - skip < HB_TMA_CHUNK) { b->a[i - skip] = a; b->n[i - skip] = n; }
        ++i;
    });
    return i;
}

// ---- the batched issue (HBF_TMA_BATCH, default 1; docs/design.md §3.3 "The issue cost") ----
// The common copy: its in-bounds bytes' extent [first, end) (hb_tmap_box_extent, no walk) lies in ONE range -- or in
// none --, and the timing source is a device one. Then the per-run path's per-run classification gives the same
// answer for every run, so it is made once per copy: outside every range the copy is HBM; a range without the op's
// permission or not in TIMING mode fails closed as before; in a timing range
//   FIXED (no refresh debt pending: the compact path's condition): every request of the copy is issued at t0 and
//          gets the same deadline (t0 + the fixed service scaled by the thermal q of the snapshot at t0, the bias
//          once) and the same modeled ns, so only the FIRST is made (hb_tma_fixed: the per-run path's request on
//          the copy's first byte: admission, refresh claim, deadline, bias) and the others are COUNTED per run from
//          its pages (hb_tma_count_run) in one walk of the box: requests = the page spans, bytes = their granules,
//          modeled_ns = requests x the first's, bias_clamps + requests - 1 when the first was clamped;
//   CURVE, FAST: one request per page span as before (the per-run path given the range: the curve's service of its
//          bytes, or the queue model reserving die/channel tails; admission and refresh claim per request), without
//          the per-run classification.
// Anything else (a copy across a range boundary, the reference source, a pending refresh debt under FIXED) takes the
// per-run path. Every path sums the op counters per copy (hb_tma_flush). The only difference to the per-request
// issue is a race: under FIXED a thermal snapshot or refresh debt another thread publishes DURING the copy applies
// from the next copy on (the per-request issue could pick it up at a later request of the same copy).
// -DHBF_TMA_BATCH=0 builds the per-run path alone (A/B: bench/gpu_calls/stop45_tmacost.sh).
#ifndef HBF_TMA_BATCH
#define HBF_TMA_BATCH 1
#endif

// FIXED: the requests of every run of the box in range r, counted in one walk.
static __device__ __noinline__ void hb_tma_count_box(const hb_tmap* m, const int32_t* c, uint64_t base, uint64_t mo,
                                                     uint32_t pshift, uint32_t gsh, hb_tma_cnt* cnt) {
    hb_tma_cnt k = {0ull, 0ull, 0ull};
    (void)hb_tmap_box_runs(*m, c, [&](uint64_t a, uint32_t n) { hb_tma_count_run(mo + (a - base), n, pshift, gsh, k); });
    *cnt = k;
}

// Returns HB_TMA_SERVED with acc (and *oob) filled, acc.bad / acc.failed as the per-run path would set them;
// HB_TMA_COUNTED (FIXED): the requests counted into acc, the deadline still to get from the first (hb_tma_fixed);
// HB_TMA_IN_RANGE: the copy lies in the one timing range *rk, its requests are made per page by the per-run path
// without classifying each run (CURVE, FAST); HB_TMA_PER_RUN: the per-run path decides. m == nullptr: a bulk copy.
enum { HB_TMA_SERVED = 0, HB_TMA_PER_RUN = 1, HB_TMA_IN_RANGE = 2, HB_TMA_COUNTED = 3 };
static __device__ __noinline__ int hb_tma_batch(hbf_device_state* st, uint64_t gaddr, const hb_tmap* m,
                                                 const int32_t* c, uint32_t nbytes, uint32_t op, uint32_t site,
                                                 uint64_t t0, hb_tma_acc& acc, uint64_t* oob, hbf_dev_range* rk) {
    uint64_t first = gaddr, end = gaddr + nbytes, inb = nbytes;
    *oob = 0ull;
    if (m != nullptr) *oob = hb_tmap_box_extent(*m, c, &first, &end, &inb);
    if (inb == 0ull) return HB_TMA_SERVED;                               // nothing in bounds: no access
    const uint32_t src = st->timing_source;
    if (src == HBF_SRC_REFERENCE) return HB_TMA_PER_RUN;
    hbf_dev_range r;
    const int cls = HB_OOL(hb_classify)(st, first, end - first, r);
    if (cls == HB_NATIVE) { acc.hbm = inb; return HB_TMA_SERVED; }
    if (cls != HB_HIT) return HB_TMA_PER_RUN;                            // across a range boundary: per run
    if ((r.perms & hb_perm_needed(op)) == 0u || r.mode != HBF_MODE_TIMING) { acc.bad = true; return HB_TMA_SERVED; }
    if (src == HBF_SRC_FIXED && !hb_debt_pending(st)) {
        // every request of the copy gets the same deadline and modeled ns: they are counted here; the caller makes
        // the first one (hb_tma_fixed) for the deadline. acc.dl holds the copy's first byte until then.
        const uint32_t pshift = r.page_shift ? r.page_shift : 12u;
        const uint32_t gsh = hb_granule_shift(op, st->media.read_granularity);
        hb_tma_cnt k = {0ull, 0ull, 0ull};
        if (m == nullptr) hb_tma_count_run(r.media_offset + (first - r.base), nbytes, pshift, gsh, k);
        else hb_tma_count_box(m, c, r.base, r.media_offset, pshift, gsh, &k);
        acc.nreq = k.nreq;
        acc.req_bytes = k.req_bytes;
        acc.pbytes = acc.hbf = k.hbf;
        acc.dl = first;
        *rk = r;
        return HB_TMA_COUNTED;
    }
    if (src == HBF_SRC_FIXED) return HB_TMA_PER_RUN;            // a refresh debt to claim: per request, per run
    *rk = r;
    return HB_TMA_IN_RANGE;
}
static __device__ __noinline__ int hb_tma_decode(uint64_t gaddr, hb_tmap* m) {
    return hb_tmap_decode((const void*)gaddr, m);
}

// A COUNTED copy's first request, made as the per-run path makes it (hb_tma_run on its first byte: admission, the
// refresh claim -- none pending --, the FIXED deadline, the bias once): the deadline of every request of the copy.
// The others' modeled ns and bias clamps are the first one's (hb_apply_bias counted its clamp).
HB_DEV void hb_tma_fixed(hbf_device_state* st, uint32_t op, uint32_t site, uint64_t t0, const hbf_dev_range* rk,
                         hb_tma_acc& acc) {
    hb_tma_acc one = {0ull, 0ull, 0ull, 0ull, 0ull, 0ull, 0ull, false, false};
    hb_tma_run(st, acc.dl, 1ull, op, site, t0, one, rk);
    acc.failed = one.failed;
    if (one.failed) { acc.nreq = acc.req_bytes = acc.pbytes = acc.hbf = acc.dl = 0ull; return; }   // none made
    acc.dl = one.dl;
    acc.modeled = acc.nreq * one.modeled;
    const uint64_t bias = st->deadline_bias_ns;
    if (bias != 0ull && one.modeled <= bias && acc.nreq > 1ull) hb_red_add(&hb_kslot(st, site)->bias_clamps, acc.nreq - 1ull);
}

// __hb_tma (hbf_abi.h): the copy's requests, then its completion where the program will wait for it.
HB_DEV unsigned long long hb_tma_issue(hbf_device_state* st, uint64_t gaddr, const int32_t* c, uint32_t nbytes,
                                       uint32_t mbar, uint32_t kind, uint32_t ctamask, uint32_t table, uint32_t site,
                                       uint64_t t0) {
    const uint32_t k = kind & HBF_TMA_K_MASK, rank = (kind >> HBF_TMA_RANK_SHIFT) & 0xFu;
    const uint32_t op = (k == HBF_TMA_K_STORE) ? HBF_OP_STORE : (k == HBF_TMA_K_REDUCE) ? HBF_OP_ATOMIC : HBF_OP_CPASYNC;
    hb_tma_acc acc = {0ull, 0ull, 0ull, 0ull, 0ull, 0ull, 0ull, false, false};
    uint64_t oob = 0ull;
    if ((__ldg(&st->flags) & HBF_DSF_TMA_DEVICE) == 0u) {
        // turned off (HBF_TMA_DEVICE=0, runtime_cuda/knobs.py; on by default since stop 55) -- fail closed
        HB_OOL(hb_fail)(st, HBF_ST_UNSUPPORTED, site, gaddr);
        hb_end();
    }
    hbf_dev_range rk;
    int how = HB_TMA_PER_RUN;
    if (rank == 0u) {
        if (HBF_TMA_BATCH) how = hb_tma_batch(st, gaddr, nullptr, c, nbytes, op, site, t0, acc, &oob, &rk);
        if (how == HB_TMA_PER_RUN || how == HB_TMA_IN_RANGE)
            hb_tma_run(st, gaddr, nbytes, op, site, t0, acc, how == HB_TMA_IN_RANGE ? &rk : nullptr);
    } else {
        hb_tmap m;
        // the decoder's bit layout is trusted only where HB_TMAP_LAYOUT_VERIFIED (hbf_tensormap.cuh) says every
        // recorded driver encoding is reproduced (1 since the H200 fit, 2026-12-05); with it 0 a tensor copy that
        // touches the instrumented path fails closed (UNSUPPORTED, recorded) instead of being modeled from a guessed
        // decode; -DHBF_TMA_TRUST_LAYOUT=1 builds a helper that trusts it anyway (GPU validation runs)
        const bool trusted = HB_TMAP_LAYOUT_VERIFIED || HBF_TMA_TRUST_LAYOUT;
        if (!trusted || hb_tma_decode(gaddr, &m) != 0 || (uint32_t)m.rank != rank || m.im2col ||
            hb_tmap_unmeasured(m, c)) {
            // not a tiled map this copy can use, or an interleaved copy the hardware does not do as modeled
            HB_OOL(hb_fail)(st, HBF_ST_UNSUPPORTED, site, gaddr);
            hb_end();
        }
        if (HBF_TMA_BATCH) how = hb_tma_batch(st, gaddr, &m, c, nbytes, op, site, t0, acc, &oob, &rk);
        if (how == HB_TMA_PER_RUN || how == HB_TMA_IN_RANGE) {
            hb_tma_runs runs;
            uint32_t done = 0u, total;
#pragma unroll 1
            do {
                total = hb_tma_collect(&m, c, done, &runs, &oob);
                const uint32_t k = total - done < HB_TMA_CHUNK ? total - done : HB_TMA_CHUNK;
#pragma unroll 1
                for (uint32_t i = 0; i < k && !acc.bad && !acc.failed; ++i)
                    hb_tma_run(st, runs.a[i], runs.n[i], op, site, t0, acc, how == HB_TMA_IN_RANGE ? &rk : nullptr);
                done += k;
            } while (done < total && !acc.bad && !acc.failed);
        }
    }
    if (how == HB_TMA_COUNTED) hb_tma_fixed(st, op, site, t0, &rk, acc);
    hb_tma_flush(st, op, site, acc);                            // the requests made, also of a copy that fails
    if (acc.bad) HB_OOL(hb_fail)(st, HBF_ST_UNSUPPORTED, site, gaddr);
    if (acc.bad || acc.failed) hb_end();                        // recorded; before the copy is performed
    hbf_kernel_counters* ks = hb_kslot(st, site);
    hb_red_add(&ks->tma_copies, 1ull);
    if (acc.hbf) hb_red_add(&ks->tma_hbf_bytes, acc.hbf);
    if (acc.hbm) hb_red_add(&ks->tma_hbm_bytes, acc.hbm);
    if (oob) hb_red_add(&ks->tma_oob_bytes, oob);
    if (acc.nreq) hb_red_add(&ks->ops[op].overhead_ns, hb_now() - t0);
    if (k == HBF_TMA_K_LOAD) {
        // every load opens / joins its phase object, HBF bytes or not (a deadline of 1 ns: long past)
        if (!hb_tw_record(st, table, mbar, acc.dl ? acc.dl : 1ull, (kind & HBF_TMA_F_MULTICAST) != 0u, ctamask,
                          site)) {
            HB_OOL(hb_fail)(st, HBF_ST_UNSUPPORTED, site, mbar);    // a remote barrier, or the table is full
            hb_end();
        }
        return 0ull;
    }
    return k == HBF_TMA_K_PREFETCH ? 0ull : acc.dl;
}

// __hb_mbar_wait: the waiter of phase parity `par` of `mbar`, after the native phase completed.
HB_DEV void hb_mbar_wait(uint32_t table, uint32_t mbar, uint32_t par, uint32_t site) {
    hb_tw_mc_debug_take(table, mbar, par);
    const uint64_t dl = hb_tw_take(table, mbar, par);
    // 0: nothing tracked; 1: the phase's copies had no HBF byte (the object exists for its lifecycle only): no
    // wait, and no ready-wait slack counted against a deadline that was never modeled
    if (dl > 1ull) __hb_wait(dl, site);
}

// __hb_tma_exit: the CTA's last thread ends the open objects of its table.
HB_DEV void hb_tma_exit(hbf_device_state* st, uint32_t table, uint32_t kernel_index) {
    const uint32_t nthreads = blockDim.x * blockDim.y * blockDim.z;
    uint32_t done;
    asm volatile("atom.shared::cta.add.u32 %0, [%1], 1;" : "=r"(done) : "r"(table) : "memory");
    if (done + 1u != nthreads) return;
    uint32_t consumed, leaked;
    hb_tw_mc_debug_exit(table);
    hb_tw_exit_scan(table, &consumed, &leaked);
    hbf_kernel_counters* ks = hb_kslot(st, kernel_index << 16);
    if (consumed) hb_red_add(&ks->tma_consumed, consumed);
    if (leaked) hb_red_add(&ks->tma_leaked, leaked);
}

// __hb_tma_enter: the table zeroed before any thread of the CTA (of the cluster, when others write it) uses it.
HB_DEV void hb_tma_enter(uint32_t table, uint32_t flags) {
    const uint32_t tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const uint32_t nthreads = blockDim.x * blockDim.y * blockDim.z;
#pragma unroll 1
    for (uint32_t i = tid; i < HBF_TMA_TABLE_BYTES / 4u; i += nthreads)
        asm volatile("st.shared::cta.u32 [%0], 0;" ::"r"(table + 4u * i) : "memory");
    __syncthreads();
    if (flags & HBF_TMA_E_CLUSTER)
        asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

#endif  // HBF_TMA_CUH
