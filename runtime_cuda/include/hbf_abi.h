/*
 * hbf_abi.h — the helper ABI between hbfcc (which emits calls) and runtime_cuda (which
 * implements the helpers in CUDA C++ compiled to PTX at build time).
 *
 * Versioned: hbfcc records HBF_HELPER_ABI_VERSION and the helper PTX SHA-256 in every
 * admission artifact; a change to any prototype, flag bit or global below bumps the version.
 *
 * Every helper is a `.weak .func` (so it can be linked into several modules), named __hb_*.
 * hbfcc declares the prototypes before the first .entry and links the helper PTX module
 * (build/runtime_cuda/hbf_helpers.ptx) into each rewritten module.
 *
 * Futures are u64 values kept in registers by the rewritten code:
 *   0                      nothing to wait for (native access, predicated off, or not global)
 *   bit 63 clear, nonzero  a deadline on %globaltimer (ns): the consumer spins until then
 *   bit 63 set             a reference-path ticket: (1<<63) | ticket; the consumer polls the
 *                          completion slot, then spins until completion.arrival + modeled_ns
 * Futures merge with max.u64 *only* when both are deadlines; hbfcc never merges tickets
 * (it waits on them separately), except through __hb_future_join which the helper provides.
 *
 * PTX prototypes (as hbfcc declares them):
 *
 *   .weak .func (.param .b64 fut) __hb_issue(.param .b64 addr, .param .b32 bytes,
 *                                            .param .b32 flags, .param .b32 site);
 *   .weak .func __hb_wait(.param .b64 fut, .param .b32 site);
 *   .weak .func (.param .b64 fut) __hb_future_join(.param .b64 a, .param .b64 b);
 *   .weak .func __hb_kernel_enter(.param .b32 kernel_index);
 *   .weak .func __hb_kernel_exit(.param .b32 kernel_index);
 *   .weak .func (.param .b64 until) __hb_inline_until(.param .b32 op);
 *   .weak .func __hb_kernel_flush(.param .b32 kernel_index, .param .b32 rd_req, .param .b32 rd_granules,
 *                                 .param .b64 rd_bytes, .param .b32 wr_req, .param .b64 wr_bytes,
 *                                 .param .b32 ready_waits, .param .b64 slack_ns, .param .b64 inline_ns);
 *   .weak .func (.param .b64 until) __hb_inline_until_live(.param .b32 op, .param .b32 kernel_index,
 *                                 .param .b32 rd_req, .param .b32 rd_granules, .param .b64 rd_bytes,
 *                                 .param .b32 wr_req, .param .b64 wr_bytes, .param .b32 ready_waits,
 *                                 .param .b64 slack_ns, .param .b64 inline_ns);
 *   .weak .func (.param .b64 fut) __hb_issue_group(.param .b64 addrs, .param .b32 pmask,
 *                                                  .param .b64 nbpack, .param .b32 site);
 *   .weak .func (.param .b64 fut) __hb_tma(.param .b64 gaddr, .param .b32 c0, .param .b32 c1,
 *                                          .param .b32 c2, .param .b32 c3, .param .b32 c4,
 *                                          .param .b32 nbytes, .param .b32 mbar, .param .b32 kind,
 *                                          .param .b32 ctamask, .param .b32 table, .param .b32 site);
 *   .weak .func __hb_mbar_note(.param .b32 table, .param .b32 mbar, .param .b64 fut, .param .b32 site);
 *   .weak .func __hb_mbar_wait(.param .b32 table, .param .b32 mbar, .param .b32 parity, .param .b32 site);
 *   .weak .func __hb_tma_enter(.param .b32 table, .param .b32 flags);
 *   .weak .func __hb_tma_exit(.param .b32 table, .param .b32 kernel_index);
 * Inline issue (ABI 2; hbfcc's timing pass emits it in .entry functions, docs/design.md §3.3): the
 *   FIXED source's common case needs no helper call. A site serves its access inline when
 *   %globaltimer < until (signed; a per-thread register, 0 at entry), the address is inside the
 *   descriptor's range (rel = addr - r0_base < r0_len and rel + nb <= r0_len), and every active lane
 *   of the warp agrees (vote.all) with lanes in ascending address order (the granule count below is
 *   then exact). ABI 6: when that vote fails and inl_nranges != 0 (2..4 ranges, all qualifying), the
 *   site checks again with the range test over every inl_base[k] / inl_len[k] (rel < len: the entries
 *   are 32-byte aligned; r0 included), the until and the order it already computed, and a second vote;
 *   a warp whose lanes all hit r0 never runs that check. The future is %globaltimer + inl_read_delay / inl_write_delay. The thread counts in
 *   registers: warp requests (the lowest active lane counts one), granules first touched by the lane
 *   (loads; media bytes = granules << read_gshift), program bytes, and for ready waits (a deadline
 *   already due when the consumer asks, tested inline) the lowest lane's count and slack. A lane whose
 *   until has passed (or, for a negative until, whose %globaltimer >= -until) first asks
 *   __hb_inline_until: > 0 = inline until that time (half the thermal snapshot's age; once the snapshot is
 *   half aged, the first asker claims its refresh and every asker gets its expiry, so the snapshots are
 *   replaced before threads expire together; full rate, admission open, no refresh debt), < 0 = not
 *   inline, ask again at -value (-(2^63 - 1): never, this launch). Lanes not served inline call
 *   __hb_issue (__hb_wait).
 *   __hb_kernel_flush (before __hb_kernel_exit at every exit) adds the thread's inline counters to the
 *   kernel's (warp sums, one atomic per counter per warp; modeled_ns = requests x the fixed service).
 *   __hb_inline_until_live (ABI 7; what hbfcc calls instead of __hb_inline_until, HBFCC_INLINE_LIVE=1, the
 *   default): __hb_kernel_flush of the counters passed, then __hb_inline_until(op); the caller zeroes its
 *   counters after it. So a long-lived thread's inline requests reach the kernel's counter shards -- and the
 *   live activity (hbf_ctl.h hbf_activity) -- at every until point, not only at its exit (issue 17 item 2).
 *   inline_ns (ABI 8; both flushes' last parameter): the inline path's own time. With HBFCC_INLINE_TIME=1 each
 *   served inline path (a site served inline, an issue group served inline, a ready wait tested inline) reads
 *   %globaltimer again at its end and adds the time since the path's first read to a per-thread register on its
 *   leader lane only (the lane that counts the request / the wait); the flushes pass it and the caller zeroes it
 *   after a live flush like the other counters; the helper adds its warp sum (one atomic per warp) into the
 *   kernel's inline_ns (hbf_device.h). Paths that end in __hb_issue / __hb_wait are not timed (their helper time
 *   is in overhead_ns / wait_wall_ns). Without the knob hbfcc passes 0 and emits nothing at the sites.
 *
 * __hb_issue_group (ABI 3; hbfcc emits it where an issue group of at most 8 load sites is not served inline
 *   and the descriptor's inl_flags has HBF_CDI_GROUP: the FAST source): called by a full warp; addrs = the
 *   generic address of the lane's 64-byte local array of site addresses (site j's at 8 j, read where bit j of
 *   pmask is set: this lane accesses at site j, its guard holds and it is in band), byte j of nbpack = site
 *   j's access size (0: no site j), site = the group's first site (its kernel's counters).
 *   Returns HB_GROUP_SLOW (all ones) on every lane when any site is not the compact path's case (nothing is
 *   modeled or counted then: each site runs alone through __hb_issue); else lane j returns site j's future
 *   (0: no lane accesses a range there), which the caller takes with shfl from lane j for its accessing lanes.
 * TMA and bulk async copies (ABI 5; hbfcc/passes/tma.py, runtime_cuda/src/hbf_tma.cuh, docs/design.md §3.3
 *   "TMA and bulk async copies (issue 15)"). The contract change: hbfcc now ADMITS cp.async.bulk(.tensor),
 *   cp.reduce.async.bulk(.tensor), cp.async.bulk.prefetch(.tensor), cp.async.mbarrier.arrive(.noinc) and
 *   global tensormap writes, and a module with mbarrier-tracked copies gets a per-CTA table in .shared.
 *   __hb_tma: called by each lane that issues a copy, BEFORE the native copy (which runs unchanged). gaddr =
 *     the TensorMap's generic address (rank > 0; c0..c4 its coordinates) or the bulk copy's global address
 *     (rank 0; nbytes its size); mbar = the copy's mbarrier (a shared::cta address; 0 for bulk_group forms);
 *     kind = HBF_TMA_K_* | rank << HBF_TMA_RANK_SHIFT | HBF_TMA_F_ACTIVE (the guard holds) |
 *     HBF_TMA_F_MULTICAST (ctamask = the destination CTAs); table = the shared::cta address of the CTA's
 *     completion table. The helper decodes the descriptor, splits the box into HBM, HBF and out-of-bounds
 *     bytes, and makes one media request per HBF page span through the ordinary per-page request path
 *     (admission, timing source, refresh, bias). LOAD: the deadline goes into the table entry of (mbar,
 *     parity of the barrier's current phase), in each destination CTA's table for multicast (one tracked
 *     destination per cluster rank); returns 0. STORE / REDUCE: returns the deadline (hbfcc joins it into
 *     the thread's bulk-group window). PREFETCH: the media read is reserved, returns 0 (nobody waits).
 *   __hb_mbar_note: cp.async.mbarrier.arrive: fut (the thread's cp.async copies since its last arrive) goes
 *     into the entry of (mbar, current parity).
 *   __hb_mbar_wait: after an mbarrier.try_wait/test_wait that returned true for phase parity `parity`: waits
 *     until that entry's deadline (none: returns at once) and marks it waited.
 *   __hb_tma_enter (every thread of an instrumented entry, uniformly, before the program's first instruction):
 *     zeroes the table, bar.sync 0, and with HBF_TMA_E_CLUSTER a cluster barrier (other CTAs write it).
 *   __hb_tma_exit (every thread, before each exit): the CTA's last thread ends the table's open objects
 *     (leaked: never waited; consumed: waited) into the kernel's counters (tma_* fields, hbf_device.h).
 * TMA completion table (per CTA, HBF_TMA_TABLE_BYTES of .shared): header {u32 exited, u32 flags}, then
 *   HBF_TMA_TABLE_ENTRIES x {u32 key = the mbarrier's shared::cta address - the table's + 1 (0: free), u32 pad,
 *   u64 word[2]} (the offset, not the address: in a cluster a shared::cta address carries the CTA's rank, so a
 *   multicast issuer's address for a barrier is not the destination waiter's; hbf_tma_table.cuh);
 *   word[p] = the phase of parity p: bits 0..61 its deadline, bit 62 WAITED, bit 63 CLOSED (0: none).
 *   hbfcc declares the array 1024 B long (hbfcc/passes/tma.py TABLE_DECL_BYTES; the helpers use the first
 *   HBF_TMA_TABLE_BYTES): the kernel's dynamic shared memory follows its static bytes and keeps its 1024-byte
 *   alignment only if they grow by whole KiB (Triton's swizzled TMA tiles need it; issue 15, H100 2026-12-06).
 * __hb_issue: called by the lanes of a rewritten access site whose address is in the fast-reject
 *   band (hbfcc tests the band inline, see "Fast reject" below; a predicated access passes
 *   HBF_F_ACTIVE only where the guard is true), so __match_any_sync over __activemask() sees
 *   the in-band lanes that would have issued.
 *   Classifies addr against the range snapshot; outside every range -> returns 0 at once.
 *   In range: warp aggregation (lanes in the same page group share one request), thermal q
 *   snapshotted before the reservation, timing source as published, returns the future.
 *   Partial overlap / missing permission -> UNSUPPORTED recorded (device_failure), the warp ends
 *   (see "Terminal failures" below) before the access is performed.
 * __hb_wait: waits for a future (no-op for 0). Spins on %globaltimer for the final approach.
 *   Accounts wall_ns (exposed wait) and overhead_ns (lateness past the deadline).
 * __hb_kernel_enter/exit: optional per-kernel bookkeeping (start timestamp for eidola,
 *   counters flush); hbfcc emits enter at the top of each .entry and exit before ret/exit.
 *
 * Linkage: nvcc emits the helpers as .visible; the Makefile (helpers-ptx) rewrites them to .weak.
 * __hb_future_join on a ticket resolves (consumes) it: wait on the joined future, not the ticket.
 * A ticket waited twice (a wait on several paths) is fine: the second wait returns at once once
 * its completion slot has been reused (the first wait spun to the deadline).
 *
 * Fast reject (hbfcc does it inline at every site; measured in bench/runtime_proofs.py native_overhead): the
 * first 16 bytes of hbf_device_state (hbf_device.h) are {u64 lo; u64 span}; an access is native
 * when __hb_state == 0 or addr - lo >= span (unsigned). A rewriter may test this inline and call
 * __hb_issue only in band (then call __hb_wait only on a nonzero future); __hb_state and {lo, span}
 * do not change while a kernel runs, so they may be loaded once at kernel entry.
 *
 * Terminal failures (UNSUPPORTED, DAEMON_LOST, TIMEOUT, THERMAL_SHUTDOWN, a non-READY completion):
 *   the helper records the failure word (hbf_device_state.failure, header.device_failure: first one
 *   wins), then every lane of the warp that is in the helper call ends with PTX `exit` -- never
 *   returning to the failing access (fail-closed: __hb_issue before the access, __hb_wait before the
 *   consumer reads the value). `exit`, not `trap`: exited threads release bar.sync / barrier.sync
 *   waits on all CTA threads (PTX ISA, exit), so the kernel ends as soon as its other threads finish;
 *   the CUDA context survives (a trap kills it and the driver took ~0.4-0.7 s to report it on the
 *   H200) and the runtime raises the recorded failure (runtime_cuda/session.py: synchronize(), the
 *   next launch; DeviceFailure with the status code). Once a failure is recorded, every other warp's
 *   next reference-path step (issue, completion poll) ends that warp too. A dead hbfd thus ends a
 *   kernel ~52 ms after SIGKILL (heartbeat timeout 50 ms; measured, bench/refpath_rate.py).
 *   Hang risk, and why exit is still the default: threads that never call the helpers and wait for an
 *   exited warp through an mbarrier (TMA / warp-specialized pipelines), a counted named barrier or a
 *   memory flag would wait forever. The helpers cannot tell such kernels apart, so the runtime backs
 *   the policy up: synchronize() launches a one-thread `trap` kernel on a non-blocking stream when a
 *   kernel is still running 100 ms after a failure was recorded (ending the context as trap did).
 *   That backstop is NOT yet verified on a GPU (its first version, which loaded the trap module at
 *   the moment of need, hung; docs/runtime.md "Failure"). -DHBF_FAIL_TRAP=1 restores trap-at-once.
 *
 * site (u32): bits 0..15 = access-site index within the kernel; bits 16..31 = kernel index
 *   within the module (the order of .entry directives, as in the admission artifact).
 *
 * Module globals defined by the helper PTX and set by the runtime after the module loads
 * (cuModuleGetGlobal; the Triton kernel_load_end_hook; default 0 = detached = native path):
 *   .visible .global .align 8 .u64 __hb_state;        device address of hbf_device_state
 *   .visible .global .align 4 .u32 __hb_kslot_base;   first per-kernel counter slot of module
 *   .visible .const .align 8 .b8 __hb_cdesc[192];      the launch descriptor (hbf_device.h hbf_cdesc:
 *                                                     all zero = no compact path, the general one)
 * Only in the L2 build (-DHBF_L2_MODEL=1, runtime_cuda/ptx/hbf_helpers_l2.ptx; docs/design.md §3.12):
 *   .visible .global .align 4 .u32 __hb_l2_hooks;     1: the helpers carry the L2 model's hooks (the runtime
 *                                                     refuses a module without it under HBF_L2_MODEL=1)
 */
#ifndef HBF_ABI_H
#define HBF_ABI_H

#define HBF_HELPER_ABI_VERSION 8u   /* 2: __hb_inline_until, __hb_kernel_flush, a 128-byte __hb_cdesc; 3: __hb_issue_group;
                                       4: __hb_l2_hooks (the L2 build);
                                       5: __hb_tma, __hb_mbar_note, __hb_mbar_wait, __hb_tma_enter, __hb_tma_exit;
                                       6: a 192-byte __hb_cdesc (inl_nranges, inl_base/inl_len: several ranges inline);
                                       7: __hb_inline_until_live (inline counters flushed at every until point);
                                       8: inline_ns, the last parameter of __hb_kernel_flush and
                                          __hb_inline_until_live (the inline path's own time) */

/* flags argument of __hb_issue */
#define HBF_F_OP_MASK 0x3u          /* HBF_OP_LOAD / STORE / ATOMIC / CPASYNC (hbf_ctl.h) */
#define HBF_F_ACTIVE 0x4u           /* this lane really performs the access (guard true) */
#define HBF_F_GENERIC 0x8u          /* generic address: helper checks isspacep.global */
#define HBF_F_WAIT_NOW 0x10u        /* .volatile / .acquire / atomic: caller waits at once */
#define HBF_F_NC 0x20u              /* ld.global.nc (read-only path) */
#define HBF_F_RELEASE 0x40u         /* st.release / red.release: stores drained before */

#define HBF_FUTURE_TICKET_BIT (1ull << 63)

/* __hb_tma's kind argument (ABI 5) */
#define HBF_TMA_K_LOAD 0u           /* global -> shared, mbarrier complete_tx */
#define HBF_TMA_K_STORE 1u          /* shared -> global, bulk_group */
#define HBF_TMA_K_REDUCE 2u         /* shared -> global read-modify-write, bulk_group */
#define HBF_TMA_K_PREFETCH 3u       /* global -> L2, nobody waits */
#define HBF_TMA_K_MASK 0xFu
#define HBF_TMA_F_ACTIVE 0x10u      /* the copy's guard holds on this lane */
#define HBF_TMA_F_MULTICAST 0x20u   /* .multicast::cluster: ctamask names the destination CTAs */
#define HBF_TMA_RANK_SHIFT 8u       /* bits 8..11: tensor rank (0: bulk copy) */
#define HBF_TMA_TABLE_ENTRIES 16u
#define HBF_TMA_TABLE_BYTES (8u + 24u * HBF_TMA_TABLE_ENTRIES)
#define HBF_TMA_E_CLUSTER 0x1u      /* __hb_tma_enter: other CTAs of the cluster write this table */
/* the multicast debug buffer of a helper built with -DHBF_TMA_MC_DEBUG=1 (hbf_tma.cuh; bench/tma_semantics.py
 * --mc-debug reads it): u32 __hb_tma_dbg[HBF_TMA_DBG_WORDS] = a header of HBF_TMA_DBG_HDR words {events seen,
 * tables dumped, ...}, HBF_TMA_DBG_EVENTS events of HBF_TMA_DBG_EV_WORDS words, then HBF_TMA_DBG_CTAS table dumps
 * of HBF_TMA_DBG_CTA_WORDS words ({cluster rank, ctaid.x, table address, 0} then the table's words) */
#define HBF_TMA_DBG_HDR 4u
#define HBF_TMA_DBG_EVENTS 256u
#define HBF_TMA_DBG_EV_WORDS 12u
#define HBF_TMA_DBG_CTAS 8u
#define HBF_TMA_DBG_CTA_WORDS (4u + HBF_TMA_TABLE_BYTES / 4u)
#define HBF_TMA_DBG_WORDS (HBF_TMA_DBG_HDR + HBF_TMA_DBG_EVENTS * HBF_TMA_DBG_EV_WORDS + HBF_TMA_DBG_CTAS * HBF_TMA_DBG_CTA_WORDS)

#endif /* HBF_ABI_H */
