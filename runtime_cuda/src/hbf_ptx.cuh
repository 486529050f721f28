/*
 * hbf_ptx.cuh — the PTX primitives shared by the device helpers (hbf_helpers.cu) and the eidola
 * device code (hbf_eidola.cuh): %globaltimer, %laneid, and the host-visible load/store forms the
 * control region needs (DESIGN.md §3.1: poll host words with ld.acquire.sys or ld.volatile; hand off
 * with st.release.sys). Header-only, static inline.
 */
#ifndef HBF_PTX_CUH
#define HBF_PTX_CUH
#include <stdint.h>

#define HBF_PTX_DEV static __device__ __forceinline__

HBF_PTX_DEV uint64_t hb_now() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
HBF_PTX_DEV uint32_t hb_laneid() {
    uint32_t l;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
    return l;
}
// A value one lane (the leader) computed alone, for every lane of `m` (a mask the caller's lanes share, the leader
// in it). The leader's work before it (a page transaction with CAS retries, a ticket poll with sleeps, a capacity
// miss) runs while the other lanes wait at the compiler's reconvergence point, which under independent thread
// scheduling may let them go on to the shuffle without the leader; the shuffle then takes its divergent form. On the
// H100 (stop 45, the 48-layer sg2 Qwen3 stall, docs/RESULTS.md) lanes 25-31 stayed in that form of the fast path's
// `dl` shuffle while their leader, lane 24, was past it. HBF_LEADER_BARRIER=1 (a measurement build, default off) puts
// a warp barrier over m before the shuffle, in a function of its own: a __syncwarp(m) written right before it is
// merged into the shuffle by ptxas (the SASS has none), so it would change nothing.
//
// HBF_LEADER_CHECKED (default ON since stop 47, 2026-12-06: on the H100 the 48-layer ocp-sg2 batch-8 run stalled in
// moe_down_hbf 3 times out of 3 without it -- stop 45 twice, stop 47 once -- and ended 3 times out of 3 with it, the
// whole decode matrix included; docs/RESULTS.md "Stop 47") gives the shuffle the mask m | %lanemask_eq: the same
// value (the lane is in m), but one ptxas cannot prove warp-uniform. With a mask it takes for uniform (m comes from
// __activemask(), a VOTE), ptxas reads one lane's m into a uniform register (R2UR) and takes the plain SHFL when the
// lanes of that one m are active (BRA.DIV); a lane whose own group is not all there, converged at a reconvergence
// point with lanes of another group of the same warp (a second invocation of the same helper, e.g. the lanes of the
// next page), takes the plain SHFL too and goes on without its group: the stall's picture (an inference from the
// stalled SASS; the card's reproducer did not make the stall itself). With the mask it cannot prove uniform, ptxas
// checks every lane's own mask against the lanes active (MATCH.ANY, REDUX.OR, VOTEU) before the plain SHFL, and sends
// any other case to the form that waits for each lane's own mask. -DHBF_LEADER_CHECKED=0 builds the unchecked form.
// bench/warp_groups.py tells the variants apart on a card (two groups of one warp in one helper).
#ifndef HBF_LEADER_BARRIER
#define HBF_LEADER_BARRIER 0
#endif
#ifndef HBF_LEADER_CHECKED
#define HBF_LEADER_CHECKED 1
#endif
#if HBF_LEADER_BARRIER
static __device__ __noinline__ void hb_warp_barrier(uint32_t m) { __syncwarp(m); }
#endif
// This lane's bit (%lanemask_eq): per lane by definition, so a mask OR-ed with it is not warp-uniform to ptxas.
HBF_PTX_DEV uint32_t hb_lanemask_eq() {
    uint32_t v;
    asm("mov.u32 %0, %%lanemask_eq;" : "=r"(v));
    return v;
}
// The lanes of a helper's call (its group), for the warp-synchronous operations that follow.
//
// HBF_GROUP_SYNC (default ON since wt/grp13, 2026-12-06; docs/design.md §3.8 "The group's mask"): the group is the
// lanes of the entry's VOTE (__activemask()), handed to every collective as a value ptxas cannot prove warp-uniform
// (OR-ed with %lanemask_eq: the same value, the lane is in it), plus a guard (hb_group_seen below) that the helpers
// turn into a recorded failure (status WARP_GROUP) when a collective ran with other lanes than the group.
//
// Why: the VOTE's result IS one group's identity -- every lane of it executed that one VOTE and got the same mask,
// and two groups of one warp in a helper at once have disjoint masks -- and every helper's lanes run the same
// collectives in the same order, so by the PTX ISA's rule for shfl.sync / vote.sync / match.sync / redux.sync /
// bar.warp.sync ("the executing thread waits until all non-exited threads corresponding to membermask have executed
// <the instruction> with the same qualifiers and same membermask value") each collective is defined and independent
// of convergence. What was not sound is how ptxas compiles a collective whose mask it takes for warp-uniform (a
// VOTE's result): it reads ONE lane's mask into a uniform register (R2UR), BRA.DIV takes the plain form when that
// mask's lanes are all active -- without checking that no other lane is -- and the plain SHFL / REDUX / VOTE then
// runs over every active lane. Under independent thread scheduling lanes of two groups of one warp (two invocations
// of the helper, entered apart) are active together at one collective (the per-warp convergence barrier BSSY/BSYNC
// of the helper's code releases them together, or the scheduler runs them at one PC): a REDUX counts both groups, a
// SHFL reads a lane that is not there, and a lane that passed a collective without its group runs on into its next
// call and meets its old group at the same instruction with another mask (bench/warp_groups.py `staggered`, stop 48:
// 4.0 G merged calls, 290.6 M wrong counts, 615,680 wrong leader values in the plain build). With a mask ptxas cannot
// prove uniform it compiles every collective in its checked form: each lane's own mask against the lanes active
// (MATCH.ANY + REDUX.OR + VOTEU.ANY for a shuffle, R2UR's uniformity predicate for a reduction or a vote) before
// the plain form, else the form that waits for each lane's own mask (WARPSYNC.COLLECTIVE). tests/runtime/
// test_leader_variants.py fails when any collective of the installed helpers is compiled in the unchecked form.
//
// HBF_GROUP_CHECKED (the opaque mask alone) and HBF_GROUP_GUARD (the guard alone) follow HBF_GROUP_SYNC unless set:
// -DHBF_GROUP_SYNC=0 builds the old helpers (the VOTE's mask as it is, no guard); bench/warp_groups.py's variants
// `sync` (default), `guard` (-DHBF_GROUP_SYNC=0 -DHBF_GROUP_GUARD=1: the detector over the unchecked form) and
// `group` (-DHBF_GROUP_SYNC=0 -DHBF_GROUP_CHECKED=1) tell them apart on a card.
#ifndef HBF_GROUP_SYNC
#define HBF_GROUP_SYNC 1
#endif
#ifndef HBF_GROUP_CHECKED
#define HBF_GROUP_CHECKED HBF_GROUP_SYNC
#endif
#ifndef HBF_GROUP_GUARD
#define HBF_GROUP_GUARD HBF_GROUP_SYNC
#endif
HBF_PTX_DEV uint32_t hb_group_mask() {
#if HBF_GROUP_CHECKED
    return __activemask() | hb_lanemask_eq();
#else
    return __activemask();
#endif
}
// The guard: the lanes that took part in a ballot over the group's mask m. With every collective in its checked form
// that is exactly m; a lane that sees anything else ran a collective with lanes of another group (extra bits) or
// without lanes of its own (missing bits), and its results cannot be trusted: the helpers record WARP_GROUP and end
// the warp (hbf_helpers.cu hb_group_guard). Returns m itself when the guard is off (nothing to compare).
HBF_PTX_DEV uint32_t hb_group_seen(uint32_t m) {
#if HBF_GROUP_GUARD
    return __ballot_sync(m, 1);
#else
    return m;
#endif
}
template <class T>
HBF_PTX_DEV T hb_from_leader(uint32_t m, T v, uint32_t leader) {
#if HBF_LEADER_BARRIER
    hb_warp_barrier(m);
#endif
#if HBF_LEADER_CHECKED
    m |= hb_lanemask_eq();
#endif
    return __shfl_sync(m, v, (int)leader);
}
HBF_PTX_DEV uint64_t hb_ld_acq_sys(const void* p) {
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
HBF_PTX_DEV uint32_t hb_ld_acq_sys32(const void* p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
HBF_PTX_DEV uint64_t hb_ld_vol(const void* p) {
    uint64_t v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
// A relaxed load at CTA scope: served from this SM's L1 when the line is there (no L2 round trip; under a
// streaming kernel an L2 read costs as much as a DRAM one, ~3000 cycles, bench/results/issue_path_profile_r5);
// it may return a value another SM has since replaced. Only for words whose staleness is bounded by their
// own content (the thermal replicas carry the time their snapshot was read: the age check bounds it).
HBF_PTX_DEV uint64_t hb_ld_l1(const void* p) {
    uint64_t v;
    asm("ld.relaxed.cta.global.u64 %0, [%1];" : "=l"(v) : "l"(p));
    return v;
}
HBF_PTX_DEV uint32_t hb_ld_vol32(const void* p) {
    uint32_t v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
HBF_PTX_DEV void hb_st_rel_sys(void* p, uint64_t v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
HBF_PTX_DEV void hb_st_rel_sys32(void* p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// gpu-scope acquire / release (GPU threads on both sides: the ring's consumed mark, the overflow
// table's entries in device memory)
HBF_PTX_DEV uint64_t hb_ld_acq_gpu(const void* p) {
    uint64_t v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
HBF_PTX_DEV void hb_st_rel_gpu(void* p, uint64_t v) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
HBF_PTX_DEV void hb_st_vol(void* p, uint64_t v) {
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
HBF_PTX_DEV void hb_st_vol32(void* p, uint32_t v) {
    asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// relaxed gpu-scope loads/stores and global-space atomics (capacity mode's page table and frames)
HBF_PTX_DEV uint32_t hb_ld_rlx_gpu32(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
HBF_PTX_DEV uint64_t hb_ld_rlx_gpu64(const void* p) {
    uint64_t v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
// Global-space atomics (a generic atomicAdd is an ATOM with a shared-window check, docs/design.md §3.3).
HBF_PTX_DEV uint32_t hb_atom_add_g32(uint32_t* p, uint32_t v) {
    uint32_t o;
    asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], %2;" : "=r"(o) : "l"(p), "r"(v) : "memory");
    return o;
}
HBF_PTX_DEV uint32_t hb_atom_exch_g32(uint32_t* p, uint32_t v) {
    uint32_t o;
    asm volatile("atom.relaxed.gpu.global.exch.b32 %0, [%1], %2;" : "=r"(o) : "l"(p), "r"(v) : "memory");
    return o;
}
HBF_PTX_DEV void hb_st_rlx_gpu32(uint32_t* p, uint32_t v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

#endif /* HBF_PTX_CUH */
