/*
 * hbf_device.h — the runtime's DEVICE-memory state block (hbf_device_state).
 *
 * Owner: runtime_cuda. The workload runtime (runtime_cuda/session.py) allocates one block per
 * attached session in device memory with cuMemAlloc, fills it, and writes its device address into
 * every bound module's __hb_state global (and into header.device_state_ptr of the control region).
 * The Python mirror is runtime_cuda/devstate.py; tests/runtime/test_abi.py compiles an
 * offsetof/sizeof probe of this header and compares it with the mirror.
 *
 * Why a device copy: a host-mapped read costs ~1 us on the H200, so the per-access path never
 * touches the control region. The range snapshot, bounds, media parameters and queue tails live
 * here; host-mapped memory is touched only by the reference path (ring, completions, heartbeat,
 * failure word; its ticket counter, ref_next_ticket, is device memory), by the thermal /
 * refresh-debt snapshot refresh (at most once per
 * thermal_max_age_ns per GPU), and when a terminal failure is recorded.
 *
 * Range table update protocol (host writer, GPU readers): the table is immutable while any kernel
 * runs. The runtime synchronizes the context, then writes range_seq odd, the ranges + bounds +
 * generation, and range_seq even (the sequence word stays as a record of updates). The helpers read
 * the table through the read-only data cache (ld.global.nc, invalidated at every launch) without
 * checking range_seq: a launch sees the table as of its launch.
 */
#ifndef HBF_DEVICE_H
#define HBF_DEVICE_H

#include "hbf_ctl.h"

#define HBF_DEVSTATE_MAGIC 0x3130545344464248ULL  /* "HBFDST01" little-endian */
#define HBF_DEVSTATE_VERSION 7u   /* 3: the live activity words (act_*); 4: the L2 model (l2_*); 5: the tma_* kernel counters;
                                     6: the reference ring's slot stealing (ref_claim, ref_ovf*);
                                     7: inline_ns in the kernel counters (l2_reserved 2 -> 1 word) */
#define HBF_DEV_MAX_CHANNELS 64u
#define HBF_DEV_MAX_BANKS 8192u         /* channels * dies_per_channel * planes_per_die <= this (fast source) */
#define HBF_BUF_READY_BITS 40u          /* page buffer word: bits 40..63 tag (page in plane + 1), 0..39 ready */
#define HBF_DEV_GUARD_BYTES 65536u      /* fast-reject guard band below the lowest range */
#define HBF_KSHARDS 32u                 /* counter shards per kernel slot (power of two; by %smid) */
#define HBF_THC_REPLICA_STRIDE 16u      /* u64 words between two thermal replicas (128 B) */

/* Device-state flags */
#define HBF_DSF_ALLOW_UNMODELED 0x1u
#define HBF_DSF_TMA_DEVICE 0x2u   /* model TMA / bulk copies (HBF_TMA_DEVICE, default 1 since stop 55: verified on
                                     the card, issue 15); else __hb_tma fails closed */

/* Packed thermal cache word (one 64-bit store, so a reader never sees a torn snapshot):
 * bits 0..19 q_ppm, bit 20 admission_open, bits 21..22 mode, bit 23 valid,
 * bits 24..63 (%globaltimer >> 10) & (2^40-1) at the time of the snapshot. */
#define HBF_THC_Q(w) ((uint32_t)((w) & 0xFFFFFu))
#define HBF_THC_ADM(w) ((uint32_t)(((w) >> 20) & 1u))
#define HBF_THC_MODE(w) ((uint32_t)(((w) >> 21) & 3u))
#define HBF_THC_VALID(w) ((uint32_t)(((w) >> 23) & 1u))
#define HBF_THC_STAMP(w) ((w) >> 24)

/* One range as the device searches it (32 bytes; sorted by base, non-overlapping). */
typedef struct hbf_dev_range {
    uint64_t base;
    uint64_t end;                  /* base + length (exclusive) */
    uint64_t media_offset;
    uint32_t range_id;
    uint8_t mode;                  /* HBF_MODE_* */
    uint8_t perms;                 /* HBF_PERM_* */
    uint8_t page_shift;            /* log2(page_bytes) */
    uint8_t reserved;
} hbf_dev_range;

/* Per-kernel counters (device memory; one slot per instrumented kernel, slot =
 * __hb_kslot_base + (site >> 16)). Aggregated per warp: one atomic per warp, not per lane, into one
 * of HBF_KSHARDS shards chosen by the warp's SM (kshards, a separate allocation laid out
 * [slot][shard]): warps on different SMs never contend on one counter word. The runtime sums the
 * shards (max for kstart_ns/kend_ns). kslots[] in the state block is used when kshards is 0.
 * ops[op].requests/bytes/modeled_ns/overhead_ns(helper time at issue) are accounted at issue;
 * the wait side does not know the op of a deadline future, so exposed wait and lateness are
 * accounted per kernel in wait_wall_ns / wait_overhead_ns (and, for reference tickets, the
 * per-op wall_ns as well is left 0). */
typedef struct hbf_kernel_counters {
    hbf_op_counters ops[HBF_N_OPS];    /* wall_ns unused at issue (see wait_*) */
    uint64_t status[HBF_N_STATUS];     /* reference completions seen, by terminal state */
    uint64_t wait_calls;               /* warp-level waits on a nonzero future */
    uint64_t wait_wall_ns;             /* exposed wait at the consumers (max over the warp's lanes) */
    uint64_t wait_overhead_ns;         /* lateness past the deadline (max over the warp's lanes) */
    uint64_t launches;                 /* __hb_kernel_enter by block (0,0,0) thread 0 */
    uint64_t blocks_exited;            /* __hb_kernel_exit by thread 0 of each block */
    uint64_t kstart_ns;                /* %globaltimer at the latest launch's enter (block 0) */
    uint64_t kend_ns;                  /* max %globaltimer at block exit */
    uint64_t thermal_waits;            /* warp-level admissions withheld by Severe */
    uint64_t thermal_wait_ns;
    uint64_t refresh_claims;           /* refresh-debt quanta claimed by admissions */
    uint64_t refresh_bytes;
    uint64_t bias_clamps;              /* deadlines clamped to the issue time by deadline_bias_ns
                                          (the modeled delay was shorter than the bias) */
    uint64_t ready_waits;              /* warp-level waits whose future was already due at entry */
    uint64_t slack_ns;                 /* ready-before-use: entry - deadline of those waits (the warp's lowest
                                          active lane): time the value was ready before the consumer */
    uint64_t wait_helper_ns;           /* helper time of ready waits (entry -> return, max over lanes) */
    uint64_t inline_requests;          /* requests served by the inline issue path (in ops[] too; no helper
                                          time: overhead_ns excludes them) */
    uint64_t inline_ns;                /* the inline path's own time (helper ABI 8, hbfcc HBFCC_INLINE_TIME; 0
                                          without it): per served path, the leader lane's time from the path's
                                          %globaltimer read to its end, summed over warps; what overhead_ns is
                                          for the helpers (one word taken from l2_reserved: the size stays) */
    /* the L2 in front of HBF (docs/design.md §3.12, hbf_l2.cuh; 0 with the model off): ops[].bytes of loads
     * and cp.async are then what the L2 model missed (l2_miss_bytes, charged to HBF) */
    uint64_t l2_lines;                 /* line lookups */
    uint64_t l2_hit_bytes;             /* granule bytes the L2 model served (not charged to HBF) */
    uint64_t l2_miss_bytes;            /* granule bytes it missed (charged to HBF) */
    uint64_t l2_merged;                /* lookups whose granules a concurrent access had filled (not charged) */
    uint64_t l2_lost;                  /* lookups whose one CAS lost: charged, not inserted */
    uint64_t l2_unmodeled;             /* page groups whose geometry the model does not cover (charged whole) */
    uint64_t l2_reserved[1];
    /* TMA and bulk async copies (issue 15, hbf_tma.cuh): copies issued through __hb_tma, their bytes by tier,
     * and the deferred phase objects of the completion table: every opened phase ends exactly once, as
     * consumed (waited), stale (its parity reopened before any wait) or leaked (never waited at CTA exit). */
    uint64_t tma_copies;               /* active __hb_tma calls (each lane's copy) */
    uint64_t tma_hbf_bytes;            /* bytes of their boxes in HBF ranges (modeled) */
    uint64_t tma_hbm_bytes;            /* in bounds, outside every range (native) */
    uint64_t tma_oob_bytes;            /* out of the tensor's bounds (filled, no memory access) */
    uint64_t tma_phases;               /* phase objects opened (table entries) */
    uint64_t tma_consumed;             /* ... ended after a wait */
    uint64_t tma_stale;                /* ... ended by a reuse of their parity before any wait */
    uint64_t tma_leaked;               /* ... still open and never waited when their CTA exited */
} hbf_kernel_counters;

typedef struct hbf_device_state {
    /* --- line 0: what the native path reads --- */
    uint64_t lo;                   /* lowest range base - HBF_DEV_GUARD_BYTES (or ~0 when empty) */
    uint64_t span;                 /* highest end - lo (0 when empty): addr - lo >= span -> native */
    uint32_t enabled;              /* 0: every access native (set while detached) */
    uint32_t n_ranges;
    uint64_t range_seq;            /* even = stable; see the update protocol above */
    uint64_t generation;           /* range snapshot generation this copy mirrors */
    uint64_t ctl;                  /* device address of the host-mapped hbf_ctl */
    uint32_t timing_source;        /* HBF_SRC_* (copy of media.timing_source) */
    uint32_t flags;                /* HBF_DSF_* */
    uint64_t magic;
    /* --- line 1: run parameters --- */
    uint32_t version;              /* HBF_DEVSTATE_VERSION */
    uint32_t state_bytes;          /* sizeof(hbf_device_state) */
    uint64_t heartbeat_timeout_ns; /* heartbeat unchanged this long (GPU clock) -> DAEMON_LOST */
    uint64_t thermal_max_age_ns;   /* thermal/refresh snapshot reused at most this long (0: always read) */
    uint64_t completion_timeout_ns;/* a ticket pending this long with a live daemon -> TIMEOUT (0: never) */
    uint64_t backoff_max_ns;       /* nanosleep backoff cap while polling host words */
    uint64_t deadline_bias_ns;     /* MEASURED helper fixed cost (issue -> first use beyond the modeled
                                      delay; runtime_cuda/calibrate.py), subtracted once from every
                                      modeled deadline the helpers create (device sources at issue, the
                                      reference path's arrival + modeled_ns at ticket resolution),
                                      clamped so a deadline is never before its issue time. 0 = off. */
    uint64_t kshards;              /* device address of the sharded per-kernel counters
                                      (hbf_kernel_counters[HBF_MAX_KERNEL_SLOTS][HBF_KSHARDS]); 0: kslots[] */
    uint64_t ring_key;             /* the run's key of the reference path's request tags (hbfd's
                                      AttachReply.ring_key; hb_req_tag): not in the control region, so a
                                      writer that only maps the region cannot make a request hbfd takes */
    /* --- line 2: GPU-written run state --- */
    uint64_t failure;              /* first terminal failure: (status << 32) | site */
    uint64_t failure_addr;         /* the address of that access */
    uint64_t thermal_cache;        /* packed, see HBF_THC_* */
    uint64_t debt_seen;            /* refresh debt_total_bytes at the last snapshot */
    uint64_t debt_claimed;         /* refresh bytes claimed by admissions (GPU atomics) */
    uint64_t refresh_quantum;      /* bytes per claim (from the control region, 0 = off) */
    uint64_t ref_next_ticket;      /* reference path: next ring ticket (GPU atomicAdd here, in device
                                      memory, never on the host-mapped header.ring_head). The runtime
                                      starts it at max(ring_head, max ring[].seq, max completions[].seq)
                                      when it publishes the block and copies it back into ring_head
                                      after its own synchronization points (no kernel running). */
    uint64_t reserved2[1];
    hbf_media_params media;        /* copy of header.media */
    uint64_t chan_tail[HBF_DEV_MAX_CHANNELS];  /* fast model: channel busy until (GPU ns) */
    hbf_kernel_counters kslots[HBF_MAX_KERNEL_SLOTS];
    hbf_dev_range ranges[HBF_MAX_RANGES];
    /* Replicas of the thermal word for the compact issue path, one per SM shard (smid % HBF_KSHARDS),
     * each in its own 128-byte line (index shard * HBF_THC_REPLICA_STRIDE): every warp-request reads
     * one, so one word read by every SM would serialize in one L2 slice (H200: 423 -> 7562 cycles per
     * request under load, bench/results/issue_path_profile_r1.json). Written (GPU) by the thread that
     * refreshed the snapshot, and by a claimer that paid the last outstanding refresh debt; a replica
     * is the thermal word with its valid bit CLEAR while refresh debt is outstanding (the compact path
     * never claims debt: it sends such requests to the general path). Zero = not published yet. */
    uint64_t thc_replica[HBF_KSHARDS * HBF_THC_REPLICA_STRIDE];
    /* Fast model (docs/design.md "HBF media semantics"): per plane (OCP bank, index
     * (page % (C*D)) + (C*D) * ((page / (C*D)) % P), i.e. channel-major like the page map) its two decoded
     * page buffers, [MRU, LRU], one 16-byte record updated by one 128-bit CAS (a miss = a sense: the new
     * page becomes MRU, the LRU page is evicted; a hit on the LRU buffer swaps them; a store empties the
     * buffer of its page and makes it LRU). A word: bits 40..63 the page's index in its plane + 1
     * (0: empty), bits 0..39 the low 40 bits of the GPU ns at which its sense ends (a window of +-2^39 ns
     * around now: backlogs beyond 9 minutes are out of model). The latest sense's end is always in the
     * record (a miss's sense starts after both recorded times, so it ends after any time it evicts; an
     * emptied buffer keeps its time), so the plane's senses end at max(both readies); its queued programs end at
     * bank_busy, and a sense goes before those not yet running (read priority, docs/design.md §3.9). */
    uint64_t bank_buf[HBF_DEV_MAX_BANKS * 2];
    uint64_t bank_busy[HBF_DEV_MAX_BANKS];     /* programs and refresh queued on the plane end at (GPU ns) */
    /* Live media activity (hbf_ctl.h hbf_activity), GPU-only words (zero when the block is created). The thread
     * that refreshes the thermal snapshot publishes, at most once per HBF_ACT_PERIOD_NS (single flight: a CAS
     * on act_stamp), the running totals of the per-kernel counters: it visits up to HBF_ACT_SLOTS_PER_FLUSH
     * launched slots (act_mask, round robin from act_cursor), adds each slot's growth since its last visit
     * (act_seen) to act_total, and writes act_total into the control region under its seqlock. */
    uint64_t act_stamp;            /* even: GPU ns of the last publication (0: none); odd: one in progress */
    uint64_t act_cursor;           /* the next kernel slot to look at */
    uint64_t act_pub_seq;          /* the seqlock value last written to hbf_activity.seq */
    uint64_t act_flushes;          /* publications */
    uint64_t act_visits;           /* slot visits */
    uint64_t act_launch_ns;        /* GPU ns of the latest __hb_kernel_enter (block 0): no publication before
                                    * it is HBF_ACT_MIN_RUN_NS old (short kernels never pay for one) */
    uint64_t act_reserved[2];
    uint64_t act_mask[HBF_MAX_KERNEL_SLOTS / 64];   /* kernel slots launched (__hb_kernel_enter, block 0) */
    uint64_t act_total[2 * HBF_N_OPS];              /* published totals: requests, bytes per op */
    uint64_t act_seen[HBF_MAX_KERNEL_SLOTS * 2 * HBF_N_OPS];   /* each slot's sums at its last visit */
    /* The L2 in front of HBF (docs/design.md §3.12, runtime_cuda/src/hbf_l2.cuh): host-owned, fixed for the
     * session (runtime_cuda/session.py from the profile's l2 section, HBF_L2_MODEL). */
    uint64_t l2_tags;              /* device address of the tag store: l2_sets * l2_ways u64 words, zeroed; 0 = off */
    uint32_t l2_sets;              /* l2_bytes / (l2_partitions x l2_ways x line bytes) (any integer, 32 .. 2^20 - 1) */
    uint32_t l2_ways;              /* 1..32 */
    uint32_t l2_line_shift;        /* log2(line bytes) */
    uint32_t l2_policy;            /* HBF_L2_POLICY_* (hbf_l2.cuh): 1 LRU, 2 FIFO */
    uint64_t l2_magic;             /* hb_l2_magic(l2_sets) = (2^64 - 1) / l2_sets + 1: line / sets as a multiply */
    uint64_t l2_reserved[4];
    /* The reference ring's slot stealing (docs/runtime.md "ring"; hbf_helpers.cu hb_ref_steal / hb_ref_take):
     * an issuer whose slot's previous ticket is posted but unconsumed copies that completion into the
     * overflow table and writes consumed itself, so a slot wait never depends on another warp's consumption.
     * ref_ovf / ref_ovf_mask / ref_floor are host-owned (the runtime writes them with the context idle);
     * the rest is GPU-written. */
    uint64_t ref_ovf;              /* device address of hbf_ref_ovf[ref_ovf_mask + 1], zeroed; 0: no stealing */
    uint64_t ref_ovf_mask;         /* entries - 1 (entries a power of two; runtime_cuda/knobs.py ring_overflow_log2) */
    uint64_t ref_floor;            /* tickets below it were reserved before the runtime's last synchronization
                                      point (their warps are gone): their untaken entries may be reused */
    uint64_t ref_steals;           /* completions stolen (GPU counter) */
    uint64_t ref_ovf_takes;        /* owners served from the overflow table (GPU counter) */
    uint64_t ref_reserved[3];
    /* per ring slot: the largest claim of a posted completion there: 2 (t + 1) by ticket t's owner (atomicMax),
     * 2 (t + 1) + 1 by the issuer that steals it (CAS, only while below 2 (t + 1)); exactly one of them takes it */
    uint64_t ref_claim[HBF_RING_SLOTS];
} hbf_device_state;

/* One stolen completion (the device's ring overflow table, index ticket & ref_ovf_mask). tick1 = ticket + 1
 * once written (st.release.gpu after the payload), HBF_REF_OVF_BUSY while a stealer writes it, 0 never used.
 * taken = tick1 once its owner read it: only then (or below ref_floor) may a later steal reuse the entry; an
 * untaken one in the way fails the run with HBF_ST_RING_OVERFLOW (never overwritten). */
#define HBF_REF_OVF_BUSY 0xFFFFFFFFFFFFFFFFull
typedef struct hbf_ref_ovf {      /* the payload pairs 16-byte aligned (three v2 stores / loads) */
    uint64_t arrival_ns;
    uint64_t modeled_ns;
    uint64_t service_ns;
    uint64_t status;
    uint64_t req_site_flags;
    uint64_t req_q_tag;
    uint64_t tick1;
    uint64_t taken;
} hbf_ref_ovf;

/* The module's launch descriptor, __hb_cdesc (hbf_abi.h): one per instrumented module, in the .const
 * state space, read by the compact issue path (and the ready-wait) through the constant cache: operands
 * of the instructions, no load round trip, no registers for run parameters, not evicted by a streaming
 * kernel's data. What it holds is a pure function of the device state block's host-owned words (lines
 * 0-1, media, the range table) plus the module's counter slot base (devstate.cdesc_for): the runtime
 * rewrites it in every bound module whenever it rewrites those words, with the context idle (a kernel
 * never sees it change), and at bind time. flags == 0 (a module nobody wrote, a state that does not
 * qualify) = the helpers take the general path through __hb_state, exactly as without a descriptor. */
#define HBF_CD_ON 0x1u            /* written for the state at st, compact path allowed */
#define HBF_CD_FAST 0x2u          /* timing source FAST (else FIXED) */
#define HBF_CD_SHARDED 0x4u       /* counters sharded by SM (kshard_stride != 0) */
#define HBF_CD_MULTI 0x8u         /* several ranges: the helpers' lanes search the table (r0_* unused there;
                                     inline sites check r0 first, then inl_base/inl_len) */
#define HBF_CD_L2 0x10u           /* the L2 model is on (st->l2_tags): loads and cp.async through hbf_l2.cuh */
typedef struct hbf_cdesc {
    uint64_t st;                   /* device address of hbf_device_state */
    uint64_t r0_base;              /* the one range (n_ranges == 1; perms 0 unless its mode is TIMING) */
    uint64_t r0_end;
    uint64_t r0_media;             /* its media offset */
    uint64_t kslot;                /* counters of this module's first slot, shard 0 */
    uint64_t replica;              /* &st->thc_replica[0] */
    uint64_t bias;                 /* deadline_bias_ns */
    uint64_t max_age;              /* thermal_max_age_ns (> 0) */
    uint32_t fixed_read_ns;        /* media.fixed_read_ns / fixed_write_ns (FIXED source) */
    uint32_t fixed_write_ns;
    uint32_t flags;                /* HBF_CD_* */
    uint32_t kslot_stride;         /* bytes between two counter slots */
    uint32_t kshard_stride;        /* bytes between two shards of a slot (0: not sharded) */
    uint32_t kmax;                 /* highest slot index relative to kslot (the overflow bucket) */
    uint8_t r0_perms;              /* HBF_PERM_* */
    uint8_t r0_page_shift;         /* log2(page bytes) */
    uint8_t read_gshift;           /* log2(media.read_granularity) */
    uint8_t reserved0;
    uint32_t reserved1;
    /* --- the inline issue path (hbfcc emits it in kernels; __hb_inline_until decides per thread) --- */
    uint64_t r0_len;               /* r0_end - r0_base (an inline site's range check: rel < len, rel + nb <= len) */
    uint64_t inl_read_delay;       /* the deadline an inline load gets: issue + this (max(fixed_read_ns, 1)
                                      less the bias, 0 when the bias clamps it; the FIXED source at full rate) */
    uint64_t inl_write_delay;      /* the same for stores (fixed_write_ns) */
    uint32_t inl_flags;            /* HBF_CDI_*: which ops may be served inline (0: none, the helpers serve all) */
    uint32_t inl_nranges;          /* ABI 6: ranges in inl_base/inl_len (0: r0 only, the table unused; else
                                      2..HBF_INL_MAX_RANGES: a site that misses r0 checks them all) */
    /* --- ABI 6: the multi-range inline path (docs/design.md §3.3). Every registered range when there are
     * 2..HBF_INL_MAX_RANGES, all TIMING, each <= 2^37 bytes: base rounded up and end rounded down to 32 B
     * (an aligned access of <= 32 B that starts in [base, base + len) ends in it: one compare per range);
     * unused entries len 0 (never hit). A module built before ABI 6 has a 128-byte descriptor: the runtime
     * writes it the one-range descriptor (devstate.cdesc_for(multi=False)), as before. --- */
    uint64_t inl_base[4];          /* HBF_INL_MAX_RANGES */
    uint64_t inl_len[4];
} hbf_cdesc;
#define HBF_MAX_WAIT_NS 10000000000ull   /* the longest single modeled wait (longer: TIMEOUT); devstate.cdesc_for
                                            keeps inline delays below it */
#define HBF_CDI_READ 0x1u         /* loads inline: FIXED source, 1..HBF_INL_MAX_RANGES TIMING ranges, each with
                                     READ, granule >= 32 B (several: their 32-bit granule keys disjoint) */
#define HBF_CDI_WRITE 0x2u        /* stores inline: FIXED source, 1..HBF_INL_MAX_RANGES TIMING ranges, each with WRITE */
#define HBF_INL_MAX_RANGES 4u     /* ranges an inline site checks (hbf_cdesc.inl_base/inl_len) */
#define HBF_CDI_GROUP 0x4u        /* issue groups through __hb_issue_group: the FAST source */

HBF_STATIC_ASSERT(sizeof(hbf_dev_range) == 32, "dev range 32B");
HBF_STATIC_ASSERT(sizeof(hbf_kernel_counters) % 64 == 0, "kernel counters 64B multiple");
HBF_STATIC_ASSERT(sizeof(hbf_device_state) % 64 == 0, "device state 64B multiple");
HBF_STATIC_ASSERT(offsetof(hbf_device_state, bank_buf) % 16 == 0, "bank records 16B aligned (128-bit CAS)");

HBF_STATIC_ASSERT(sizeof(hbf_cdesc) == 192, "cdesc 192B (ABI 6; 128 before)");
HBF_STATIC_ASSERT(sizeof(hbf_ref_ovf) == 64, "ring overflow entry 64B");

#endif /* HBF_DEVICE_H */
