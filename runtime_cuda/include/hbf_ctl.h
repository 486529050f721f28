/*
 * hbf_ctl.h — the control region shared by hbfd, the workload process and the GPU.
 *
 * THIS FILE IS THE ONLY DEFINITION of the layout. The Python mirror (hbfcommon/ctl.py) is
 * checked against it by tests/test_ctl_layout.py, which compiles an offsetof/sizeof probe.
 *
 * The region is a memfd created by hbfd, sealed against resize
 * (F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL), mapped MAP_SHARED by hbfd and by the workload,
 * and registered by the workload with cuMemHostRegister(DEVICEMAP|PORTABLE); on the H200 the
 * device pointer equals the host pointer. A workload attaches without inheriting an fd, by
 * opening /proc/<hbfd pid>/fd/<fd> (the path hbfd returns from Attach).
 *
 * Rules (measured on the H200, see DESIGN.md §3.1):
 *  - the GPU polls host-written words only with ld.acquire.sys or ld.volatile (+ nanosleep);
 *  - the GPU cannot do atomics together with the host: a word the GPU updates atomically is never
 *    written by the host while a kernel may run, and host-written words are never updated
 *    atomically by the GPU (ring_head: see its comment; runtime_cuda reserves tickets in device
 *    memory and host-writes ring_head);
 *  - handoff is "write payload, then st.release.sys the sequence word"; the reader reads the
 *    sequence word with acquire, then the payload.
 *
 * Every section starts on a 64-byte boundary. All integers are little-endian. Time is integer
 * nanoseconds. Host clocks and GPU clocks are never subtracted from each other.
 */
#ifndef HBF_CTL_H
#define HBF_CTL_H

#ifdef __cplusplus
#include <cstdint>
#define HBF_STATIC_ASSERT static_assert
#else
#include <stdint.h>
#define HBF_STATIC_ASSERT _Static_assert
#endif

#define HBF_CTL_MAGIC 0x3130544c43464248ULL /* "HBFCTL01" little-endian */
#define HBF_CTL_ABI_VERSION 4u   /* 2: every request carries its tag under the run key (hbf_request);
                                    3: the live media activity section (hbf_activity, header.off_activity);
                                    4: a completion carries its request's site|flags and q|tag words
                                       (req_site_flags, req_q_tag) and is written under a seqlock */

#define HBF_MAX_RANGES 1024u
#define HBF_RING_SLOTS 4096u            /* power of two */
#define HBF_MAX_CURVE_POINTS 16u
#define HBF_N_OPS 4u                    /* HBF_OP_* */
#define HBF_N_STATUS 16u
#define HBF_MAX_KERNEL_SLOTS 1024u      /* per-kernel counters (device memory, hbf_kernel_counters) */

/* ---- request terminal states (PENDING is the only non-terminal one) ---------------------- */
#define HBF_ST_PENDING 0u
#define HBF_ST_READY 1u
#define HBF_ST_IO_ERROR 2u
#define HBF_ST_COPY_ERROR 3u
#define HBF_ST_CHECKSUM_ERROR 4u
#define HBF_ST_TIMEOUT 5u
#define HBF_ST_UNSUPPORTED 6u
#define HBF_ST_DAEMON_LOST 7u
#define HBF_ST_THERMAL_SHUTDOWN 8u
#define HBF_ST_RING_OVERFLOW 9u   /* device: the ring overflow table had no free entry for a stolen completion */
#define HBF_ST_WARP_GROUP 10u     /* device: a helper's collective ran with other lanes than its group's (hbf_ptx.cuh) */

/* ---- operations ---------------------------------------------------------------------------- */
#define HBF_OP_LOAD 0u
#define HBF_OP_STORE 1u
#define HBF_OP_ATOMIC 2u
#define HBF_OP_CPASYNC 3u

/* ---- range modes and permissions ----------------------------------------------------------- */
#define HBF_MODE_TIMING 1u
#define HBF_MODE_CAPACITY 2u
#define HBF_MODE_FLAG 3u
#define HBF_PERM_READ 1u
#define HBF_PERM_WRITE 2u
#define HBF_PERM_ATOMIC 4u

/* ---- timing sources ------------------------------------------------------------------------ */
#define HBF_SRC_FIXED 1u
#define HBF_SRC_CURVE 2u
#define HBF_SRC_FAST 3u
#define HBF_SRC_REFERENCE 4u

/* ---- thermal modes ------------------------------------------------------------------------- */
#define HBF_TH_NORMAL 0u
#define HBF_TH_LIGHT 1u
#define HBF_TH_SEVERE 2u
#define HBF_TH_SHUTDOWN 3u

/* ---- global failure word: 0 = running; else (status << 32) | reason ------------------------ */
#define HBF_FAIL_NONE 0ull
#define HBF_FAIL_REASON_SHUTDOWN 1u     /* clean daemon exit: status DAEMON_LOST to waiters */
#define HBF_FAIL_REASON_ENGINE 2u       /* model/engine failure */
#define HBF_FAIL_REASON_THERMAL 3u      /* thermal shutdown */
#define HBF_FAIL_REASON_DEVICE 4u       /* the GPU side reported a terminal failure */
#define HBF_FAIL_REASON_TELEMETRY 5u    /* GPU telemetry missing/stale/regressing/failed: the thermal model cannot run */

/* ---- sections ------------------------------------------------------------------------------ */

/* Media and timing parameters, published by hbfd from the profile before readiness. */
typedef struct hbf_media_params {
    uint32_t timing_source;        /* HBF_SRC_* */
    uint32_t page_bytes;           /* 4096 */
    uint32_t read_granularity;     /* 64 */
    uint32_t write_granularity;    /* 4096 */
    uint32_t channels;
    uint32_t dies_per_channel;
    uint32_t planes_per_die;
    uint32_t queue_depth;          /* per die */
    uint64_t t_read_ns;            /* tR: page sense */
    uint64_t t_prog_ns;            /* tPROG */
    uint64_t t_erase_ns;           /* tBERS */
    uint64_t channel_bytes_per_s;  /* per channel; aggregate = channels * this */
    uint64_t fixed_read_ns;        /* HBF_SRC_FIXED */
    uint64_t fixed_write_ns;
    uint32_t interleave;           /* 0: page -> channel = page % C, die = (page / C) % D */
    uint32_t curve_points;         /* HBF_SRC_CURVE: number of valid points */
    uint32_t curve_pages[HBF_MAX_CURVE_POINTS];    /* cumulative-burst curve: x (pages) */
    uint64_t curve_cum_ns[HBF_MAX_CURVE_POINTS];   /* y (cumulative ns) */
    uint64_t curve_write_ns;       /* per 4 KiB program in curve mode */
    uint64_t refresh_quantum_bytes;
    uint32_t page_buffers;         /* decoded page buffers per plane (OCP bank): 1 or 2 */
    uint32_t t_cmd_ns;             /* command/address time before a plane operation starts */
    /* the GPU's L2 in front of HBF (profile section l2; docs/design.md §3.12): the runtime's L2 model
     * (HBF_L2_MODEL) sizes its tag store from these; 0 (a daemon that does not fill them): no L2 geometry */
    uint64_t l2_bytes;             /* the card's capacity (all partitions) */
    uint32_t l2_line_bytes;        /* line (tag) size; a line holds line / read_granularity granules */
    uint16_t l2_ways;              /* associativity */
    uint8_t l2_policy;             /* HBF_L2_POLICY_* (runtime_cuda/src/hbf_l2.cuh): 1 LRU, 2 FIFO */
    uint8_t l2_partitions;         /* L2 partitions: the tag store holds l2_bytes / l2_partitions (0: 1, a daemon
                                      that predates the field) */
} hbf_media_params;

typedef struct hbf_header {
    uint64_t magic;                /* HBF_CTL_MAGIC */
    uint32_t abi_version;          /* HBF_CTL_ABI_VERSION */
    uint32_t header_bytes;         /* sizeof(hbf_header) */
    uint64_t total_bytes;          /* size of the whole region */
    uint64_t off_ranges;           /* offsets of the sections from the region start */
    uint64_t off_thermal;
    uint64_t off_refresh;
    uint64_t off_ring;
    uint64_t off_completions;
    uint64_t off_counters;
    uint32_t ring_slots;           /* HBF_RING_SLOTS */
    uint32_t max_ranges;           /* HBF_MAX_RANGES */
    uint64_t daemon_pid;
    uint64_t generation;           /* bumps when the daemon (re)configures the region */
    /* --- liveness (host-written; GPU reads with ld.acquire.sys) --- */
    uint64_t heartbeat;            /* 0 until ready; then a counter bumped at least every 10 ms */
    uint64_t heartbeat_period_ns;  /* the daemon's promise (<= 10 ms) */
    uint64_t failure;              /* global failure word, see HBF_FAIL_* */
    uint64_t admission_closed;     /* 1 once the daemon stops accepting requests */
    /* --- GPU side / workload-owned --- */
    uint64_t ring_head;            /* next ticket to reserve: a lower bound of the reserved tickets
                                      (hbfd treats it so). A runtime may reserve tickets with GPU
                                      atomics on this word, or from a counter in device memory
                                      (atomics on host memory from many warps serialize over PCIe:
                                      1-5 ms per issue measured on the H200). runtime_cuda does the
                                      latter (hbf_device_state.ref_next_ticket): it starts that
                                      counter at max(ring_head, max ring[].seq, max
                                      completions[].seq) and, after its own synchronization points
                                      (no kernel running), host-writes the counter back here for
                                      display -- allowed because the GPU then does no atomics on
                                      ring_head. Never both schemes in one region at once. */
    uint64_t device_failure;       /* first terminal failure seen by the GPU: (status<<32)|site */
    /* --- workload-owned (written by the attached process) --- */
    uint64_t workload_pid;
    uint64_t device_state_ptr;     /* device address of the runtime's hbf_device_state */
    uint8_t profile_sha256[32];
    uint64_t off_activity;         /* offset of the live media activity section (hbf_activity) */
    uint8_t reserved0[56];
    hbf_media_params media;        /* 64-byte aligned inside the header */
} hbf_header;

typedef struct hbf_range {
    uint64_t base;                 /* device virtual address */
    uint64_t length;               /* bytes */
    uint64_t media_offset;         /* offset in the modeled stack (not a GPU VA); media_offset ==
                                      base (mod page_bytes): any base/length is accepted, the range
                                      owns the whole media pages it touches */
    uint32_t range_id;             /* nonzero, stable for the range's life */
    uint32_t mode;                 /* HBF_MODE_* */
    uint32_t perms;                /* HBF_PERM_* */
    uint32_t page_bytes;
    uint32_t stream;
    uint32_t flags;
    uint64_t backing_offset;       /* capacity mode: offset in the backing file */
    uint64_t reserved;
} hbf_range;

/* Sorted by base, non-overlapping. Writer: hbfd, under the seqlock `seq` (odd while writing). */
typedef struct hbf_range_snapshot {
    uint64_t seq;
    uint64_t generation;           /* bumps on every change */
    uint32_t count;
    uint32_t reserved0;
    uint64_t reserved[5];
    hbf_range ranges[HBF_MAX_RANGES];
} hbf_range_snapshot;

/* Seqlock: hbfd makes seq odd, writes the fields, makes seq even (st.release.sys). */
typedef struct hbf_thermal_snapshot {
    uint64_t seq;
    uint32_t mode;                 /* HBF_TH_* */
    uint32_t q_ppm;                /* service fraction, 1..1e6; Normal publishes 1e6 */
    uint32_t admission_open;       /* 0 in Severe and Shutdown */
    uint32_t policy;
    int32_t hbf_max_millic;        /* hottest HBF layer */
    int32_t hbm_millic;
    int32_t gpu_millic;
    uint32_t reserved0;
    uint64_t tick;                 /* controller tick counter */
    /* Validity horizon (docs/design.md §3.3 "Validity horizon"): GPU %globaltimer before which hbfd guarantees
     * that mode, q_ppm, admission_open (here) and refresh.debt_total_bytes do not change. 0: none (the device
     * re-reads after thermal_max_age_ns, as always). hbfd expresses it in the GPU's clock from a GPU-written
     * time it read (activity.clock_echo_ns / activity.gpu_ns), minus a drift margin, and holds any change of
     * those words until the horizon it published has passed (hbfd/thermal/horizon.py). The device reads it with
     * the payload under the seqlock and treats the snapshot as valid while age <= max_age OR now < horizon
     * (runtime_cuda/include/hbf_thc.h). A device that predates it ignores it; a daemon that predates it
     * writes 0. */
    uint64_t valid_until_gpu_ns;
    uint64_t reserved[1];
} hbf_thermal_snapshot;

typedef struct hbf_refresh_debt {
    uint64_t seq;
    uint64_t debt_total_bytes;     /* monotonic: refresh bytes published to the device so far */
    uint64_t quantum_bytes;        /* one admission claims at most one quantum */
    uint64_t background_drained_bytes; /* debt the host drained in otherwise idle time */
    uint64_t reserved[4];
} hbf_refresh_debt;

/* One request (GPU -> hbfd). Payload first, then seq = ticket + 1 with st.release.sys. */
typedef struct hbf_request {
    uint64_t seq;
    uint64_t arrival_ns;           /* GPU %globaltimer at issue (never compared to host time) */
    uint64_t address;              /* device VA */
    uint64_t media_address;        /* range media_offset + offset in range */
    uint32_t bytes;
    uint32_t op;                   /* HBF_OP_* */
    uint32_t range_id;
    uint32_t kernel_slot;
    uint32_t site;
    uint32_t flags;
    uint64_t thermal_q_ppm;        /* bits 0..31: the issuing GPU's service-fraction snapshot (taken before the
                                      reservation); the waiter applies ceil(modeled_ns * 1e6 / q) once.
                                      0 (a host driver) = unthrottled. Bits 32..63: the record's tag
                                      under the run's ring key (hbfcommon/ctl.py request_tag); hbfd
                                      takes no record without it */
} hbf_request;

/* One completion (hbfd -> GPU). hbfd writes seq = 0 first (the slot's previous ticket no longer reads
 * as posted), then the payload, then seq = ticket + 1 with release (x86-64 TSO keeps the three store
 * passes in order; hbfd fences between them): a reader that sees seq == t + 1, reads the payload and then
 * sees seq == t + 1 again (the payload loads ordered before that re-read) read t's payload whole.
 * The record is self-contained: req_site_flags / req_q_tag are copies of the request's site | flags << 32
 * and thermal_q_ppm words, so nobody needs ring[slot] (which the next issuer rewrites once the slot is
 * consumed) to interpret a completion.
 * The GPU waiter writes consumed = ticket + 1 when it has read the completion; a ticket
 * t >= ring_slots may reuse slot t % ring_slots only after consumed == t - ring_slots + 1. A waiting
 * issuer may take ("steal") the posted, unconsumed completion of the slot's previous ticket into the
 * runtime's device-memory overflow table and write consumed itself (docs/runtime.md "ring": a slot wait
 * then depends only on hbfd, never on another warp's consumption). */
typedef struct hbf_completion {
    uint64_t seq;
    uint64_t arrival_ns;           /* echo of the request */
    uint64_t modeled_ns;           /* service the model asked for (device waits arrival+this) */
    uint64_t service_ns;           /* host time spent serving */
    uint32_t status;               /* HBF_ST_* */
    uint32_t reserved0;
    uint64_t consumed;             /* GPU-written (and by hbfd for the capacity hints it consumes itself) */
    uint64_t req_site_flags;       /* copy of the request's site | flags << 32 (0: no request, a terminal
                                      completion of a reserved-but-unpublished ticket) */
    uint64_t req_q_tag;            /* copy of the request's thermal_q_ppm word (q | tag << 32) */
} hbf_completion;

typedef struct hbf_op_counters {
    uint64_t requests;
    uint64_t bytes;
    uint64_t modeled_ns;
    uint64_t wall_ns;              /* exposed wait at the consumers */
    uint64_t service_ns;           /* host time serving reference requests */
    uint64_t overhead_ns;          /* device: helper time at issue (max over the warp's lanes, per warp);
                                      published totals add the lateness past deadlines */
    uint64_t program_bytes;        /* bytes the program's lanes accessed (bytes = media bytes moved,
                                      whole read granules) */
    uint64_t reserved;
} hbf_op_counters;

/* Run counters: hbfd writes the reference-path part; the workload runtime writes a copy of the
 * device counters at sync points (never both on the same word). */
typedef struct hbf_counters {
    hbf_op_counters daemon[HBF_N_OPS];   /* written by hbfd */
    hbf_op_counters device[HBF_N_OPS];   /* written by the workload runtime */
    uint64_t daemon_status[HBF_N_STATUS];/* reference requests by terminal state */
    uint64_t device_status[HBF_N_STATUS];
    uint64_t device_sync_seq;            /* bumps each time the runtime publishes */
    uint64_t device_inline_ns;           /* the device's inline issue path's own time (the kernel counters'
                                            inline_ns summed, helper ABI 8; 0 from an older runtime or without
                                            hbfcc's HBFCC_INLINE_TIME): a reserved word, the ABI unchanged */
    uint64_t reserved[6];
} hbf_counters;

/* Live media activity (issue 17): the device path's running totals of the accesses it modeled, per op,
 * published WHILE kernels run so hbfd's 10 ms energy bins see HBF activity during a long kernel (the
 * counters section's device part is written only at synchronization points). Writer: the GPU, one thread
 * at a time -- the thread that refreshed the thermal snapshot (about every thermal_max_age_ns) publishes
 * at most once per HBF_ACT_PERIOD_NS (single flight on hbf_device_state.act_stamp), and only while the latest
 * launched kernel has run for HBF_ACT_MIN_RUN_NS (short kernels never publish): it sums the per-kernel
 * counter shards of up to HBF_ACT_SLOTS_PER_FLUSH launched kernel slots (round robin) into running totals
 * kept in device memory, then writes them here under the seqlock `seq` (odd while writing; a system fence
 * after the odd value and after the payload; all stores st.volatile). No per-access host write. Reader: hbfd's control tick (seqlock
 * read), which takes, per op, the largest of this, counters.device and counters.daemon. The totals are
 * lower bounds of what the device did (a slot is summed when visited; counters.device is exact at sync)
 * and never decrease within one session (state_ptr); a new session starts its own totals. The inline issue
 * path's requests (counted in each thread's registers) reach the shards at every until point since helper ABI 7
 * (__hb_inline_until_live, hbf_abi.h), before that at the thread's exit only. */
#define HBF_ACT_PERIOD_NS 1000000ull    /* at most one publication per millisecond */
#define HBF_ACT_SLOTS_PER_FLUSH 4u      /* kernel slots summed per publication (each HBF_KSHARDS shards) */
/* ... and only once the latest launched kernel has run this long (hbf_device_state.act_launch_ns): a short kernel
 * never pays for a publication (one cost ~270 us at the end of a 40 us kernel on the H200, 2026-12-05); its
 * activity reaches hbfd at the next synchronization (counters.device), as before the live section existed. */
#define HBF_ACT_MIN_RUN_NS 2000000ull
typedef struct hbf_activity_op {
    uint64_t requests;             /* device-modeled requests (warp-level page transactions, as ops[].requests) */
    uint64_t bytes;                /* media bytes moved (as ops[].bytes) */
} hbf_activity_op;

typedef struct hbf_activity {
    uint64_t seq;                  /* seqlock, GPU-written */
    uint64_t flushes;              /* publications so far (this session) */
    uint64_t gpu_ns;               /* %globaltimer at the publication (GPU clock: never compared with host time) */
    uint64_t slot_visits;          /* kernel-slot visits so far (each sums that slot's counter shards) */
    uint64_t state_ptr;            /* device address of the publishing session's hbf_device_state */
    uint64_t clock_echo_ns;        /* %globaltimer of the latest thermal snapshot read (hb_thermal_read): one plain
                                      8-byte GPU store per read, outside the seqlock (any value a reader sees was
                                      written at that GPU time, so it bounds the GPU clock from below: what hbfd
                                      needs to express a validity horizon in the GPU's clock); 0: none yet */
    uint64_t reserved[2];
    hbf_activity_op ops[HBF_N_OPS];
} hbf_activity;

/* The whole region. Sections are laid out in this order; offsets are also in the header. */
typedef struct hbf_ctl {
    hbf_header header;
    hbf_range_snapshot ranges;
    hbf_thermal_snapshot thermal;
    hbf_refresh_debt refresh;
    hbf_request ring[HBF_RING_SLOTS];
    hbf_completion completions[HBF_RING_SLOTS];
    hbf_counters counters;
    hbf_activity activity;
} hbf_ctl;

HBF_STATIC_ASSERT(sizeof(hbf_media_params) % 64 == 0, "media params 64B multiple");
HBF_STATIC_ASSERT(sizeof(hbf_header) % 64 == 0, "header 64B multiple");
HBF_STATIC_ASSERT(sizeof(hbf_range) == 64, "range 64B");
HBF_STATIC_ASSERT(sizeof(hbf_range_snapshot) % 64 == 0, "snapshot 64B multiple");
HBF_STATIC_ASSERT(sizeof(hbf_thermal_snapshot) == 64, "thermal 64B");
HBF_STATIC_ASSERT(sizeof(hbf_refresh_debt) == 64, "refresh 64B");
HBF_STATIC_ASSERT(sizeof(hbf_request) == 64, "request 64B");
HBF_STATIC_ASSERT(sizeof(hbf_completion) == 64, "completion 64B");
HBF_STATIC_ASSERT(sizeof(hbf_op_counters) == 64, "op counters 64B");
HBF_STATIC_ASSERT(sizeof(hbf_counters) % 64 == 0, "counters 64B multiple");
HBF_STATIC_ASSERT(sizeof(hbf_activity) == 128, "activity 128B");

#endif /* HBF_CTL_H */
