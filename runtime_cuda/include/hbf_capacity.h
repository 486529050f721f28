/*
 * hbf_capacity.h — capacity mode: the page table and the frame records the device and hbfd share.
 *
 * THIS FILE IS THE ONLY DEFINITION of the layout. Its Python mirror is hbfcommon/capacity.py (numpy dtypes),
 * checked field by field by tests/capacity/test_layout.py (a compiled offsetof/sizeof probe). The protocol
 * is docs/design.md §3.6; the host half is hbfd/capacity (docs/capacity.md).
 *
 * A capacity range is a logical span that no physical memory backs. Its accesses translate page -> frame
 * through a dense page table (one hbf_cap_pte per 4 KiB page of the range) into a pool of frames (HBM pages,
 * one hbf_cap_frame record each). Every word has ONE writer per phase, because the GPU and the host cannot
 * update a word atomically together (hbf_ctl.h):
 *
 *   word                 writer
 *   pte                  host (publish after the frame is VALID; unpublish before the frame is reused)
 *   frame.state          host only (FREE -> FILLING -> VALID -> EVICTING -> FREE/FILLING)
 *   frame.generation     host only (+1 whenever a mapping to the frame is removed)
 *   frame.pins           device atomics only (+1 before an access uses the frame, -1 after); host reads
 *   frame.dirty          device writes 1 (a store / atomic hit); host writes 0 only while filling
 *   frame.referenced     device writes 1 at every hit; host writes 0 in the CLOCK sweep (a lost set only
 *                        ages the frame one sweep early)
 *   frame.marker         host writes 1 at a prefetch fill; device atomicExch(0) at a hit: the lane that
 *                        takes the 1 posts a HINT request (no completion is waited for)
 *
 * Device hit path (no host round trip): e = pte[page]; if e.frame == NO_FRAME -> miss.
 *   atomicAdd(&f.pins, 1); fence.sc.sys; if f.state != VALID || f.generation != e.generation -> unpin, miss.
 *   (Every word the host shares is accessed at system scope: the table, the records and the frames' bytes are
 *   hbfd's capacity region, host memory mapped into the device, hbfcommon/capacity.py CapRegion.)
 *   referenced = 1; (store/atomic: dirty = 1); marker: atomicExch -> HINT; the access's future is
 *   max(now, f.ready_ns) (a prefetched frame whose modeled read has not landed yet is waited for);
 *   the access uses frame_data + frame * 4096 + offset; unpin after the access has executed (a release
 *   reduction at system scope: its bytes are visible before the host can see pins drop). A warp never waits
 *   for a miss while it holds a pin: if any lane misses, the lanes that hit unpin, the misses are posted, and
 *   every lane translates again (runtime_cuda/src/hbf_capacity.cuh).
 * Host eviction: state = EVICTING; fence.sc.sys; read pins: != 0 -> state = VALID, next victim (never
 *   evicts a pinned frame). Else pte = {NO_FRAME, 0}; generation += 1; a dirty frame's 4096 bytes are
 *   written back (out of place on the media), and only then is the frame reused. The two fences make
 *   "device pinned it" and "host saw pins == 0" exclusive (the device re-checks state after pinning).
 * Miss: a ring request (hbf_ctl.h) with flags HBF_REQ_CAP_MISS, op = the access's op, media_address = the
 *   range's media offset + page * 4096. hbfd fills a frame: state FILLING, copy, checksum, ready_ns, state
 *   VALID, then the pte, then the completion (payload then seq, release); the device re-reads the pte
 *   after it has acquired the completion. completion.modeled_ns is the media model's wait for the page.
 *
 * The helper library's capacity exports (runtime_cuda/src/hbf_cap_helpers.cuh, included by hbf_helpers.cu; the rest is hbf_abi.h's), NOT
 * GPU-verified:
 *   .weak .func (.param .b64 x) __hb_cap_xlate(.param .b64 addr, .param .b32 op, .param .b32 site);
 *   .weak .func __hb_cap_release(.param .b64 addr, .param .b64 x);
 *   .weak .func (.param .b32 status) __hb_cap_miss(.param .b64 addr, .param .b64 media_address, .param .b32 op,
 *                                                 .param .b32 range_id, .param .b32 site);
 *   .weak .func __hb_cap_hint(.param .b64 addr, .param .b64 media_address, .param .b32 range_id,
 *                             .param .b32 site);
 *   .visible .global .align 8 .u64 __hb_cap_table;         device address of hbf_cap_range[HBF_MAX_RANGES]
 *                                                          (entry i: the device state's ranges[i]; 0 = none)
 *   .visible .global .align 8 .b8 __hb_cap_counters[64];   u64 accesses, no_wait, demand_waits, late_waits,
 *                                                          failed, misses, hints, pending
 * A rewritten access (hbfcc/passes/capacity.py): x = __hb_cap_xlate(addr, op, site); the access on x;
 * if x != addr: __hb_cap_release(addr, x).
 */
#ifndef HBF_CAPACITY_H
#define HBF_CAPACITY_H

#ifdef __cplusplus
#include <cstdint>
#define HBF_CAP_STATIC_ASSERT static_assert
#else
#include <stdint.h>
#define HBF_CAP_STATIC_ASSERT _Static_assert
#endif

#define HBF_CAP_LAYOUT_VERSION 1u
#define HBF_CAP_PAGE_BYTES 4096u
#define HBF_CAP_NO_FRAME 0xFFFFFFFFu    /* pte.frame of an unmapped page */

/* frame states (frame.state; "dirty" is VALID with frame.dirty == 1: the device never writes state) */
#define HBF_FR_FREE 0u
#define HBF_FR_FILLING 1u
#define HBF_FR_VALID 2u
#define HBF_FR_DIRTY 3u                 /* host bookkeeping only: VALID whose dirty word the host has read as 1 */
#define HBF_FR_EVICTING 4u
#define HBF_FR_N_STATES 5u

/* hbf_request.flags bits of capacity requests (the low 16 bits stay the timing path's) */
#define HBF_REQ_CAP_MISS 0x10000u       /* a capacity miss: the waiter waits for its completion */
#define HBF_REQ_CAP_HINT 0x20000u       /* first hit of a marked (prefetched) frame: posted, never waited */

/* One page-table entry: 8 bytes, read with one 64-bit load. */
typedef struct hbf_cap_pte {
    uint32_t frame;                 /* frame index, HBF_CAP_NO_FRAME when unmapped */
    uint32_t generation;            /* the frame's generation when the mapping was published */
} hbf_cap_pte;

/* One frame record: 64 bytes (one line per frame: the pins of two frames never share a line). */
typedef struct hbf_cap_frame {
    uint64_t logical_page;          /* the page of its range held (valid FILLING..EVICTING) */
    uint64_t ready_ns;              /* %globaltimer time the fill's modeled media read completes */
    uint64_t checksum;              /* hbf_cap page checksum of the bytes filled (hbfcommon/capacity.py) */
    uint32_t state;                 /* HBF_FR_* (host) */
    uint32_t generation;            /* host: +1 whenever a mapping to this frame is removed */
    uint32_t pins;                  /* device atomics: accesses using the frame now */
    uint32_t dirty;                 /* device: 1 after a store / atomic hit */
    uint32_t referenced;            /* device: 1 at a hit; host: 0 in the CLOCK sweep */
    uint32_t marker;                /* host: 1 at a prefetch fill; device: exchanged to 0 at the first hit */
    uint32_t range_id;              /* the capacity range the page belongs to */
    uint32_t prefetched;            /* host: filled by a prefetch (not a demand) */
    uint64_t reserved;
} hbf_cap_frame;

/* A capacity range's descriptor (the runtime's capacity table, device memory): where its table and frames are. 64 B. */
typedef struct hbf_cap_range {
    uint64_t base;                  /* logical VA of the range (reserved, not backed) */
    uint64_t pages;                 /* page-table entries */
    uint64_t page_table;            /* device pointer: hbf_cap_pte[pages] */
    uint64_t frames;                /* device pointer: hbf_cap_frame[n_frames] (the session's pool) */
    uint64_t frame_data;            /* device pointer: n_frames * HBF_CAP_PAGE_BYTES */
    uint32_t n_frames;
    uint32_t range_id;
    uint32_t perms;                 /* HBF_PERM_* */
    uint32_t reserved0;
    uint64_t media_offset;          /* the range's media offset (hbfd's range table) */
} hbf_cap_range;

HBF_CAP_STATIC_ASSERT(sizeof(hbf_cap_pte) == 8, "pte 8B");
HBF_CAP_STATIC_ASSERT(sizeof(hbf_cap_frame) == 64, "frame record 64B");
HBF_CAP_STATIC_ASSERT(sizeof(hbf_cap_range) == 64, "capacity range 64B");

#endif /* HBF_CAPACITY_H */
