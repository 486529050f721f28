/*
 * gemv_allreduce.h — the parameter block and constants shared by both builds of the fused
 * GEMV + AllReduce (gemv_allreduce.cu, hand-instrumented; gemv_allreduce_plain.cu, made
 * Eidola-aware by hbfcc alone). Mirrored by workloads/gemv_allreduce/fused.py GarParams, checked
 * against GAR_LAYOUT_VALUES (the module global gar_layout, and a host probe on CPU).
 * Plain C++: no CUDA and no eidola code (the plain build must not see any).
 */
#ifndef GEMV_ALLREDUCE_H
#define GEMV_ALLREDUCE_H

#include <cstddef>
#include <cstdint>

#define GAR_WAIT_SPIN 0
#define GAR_WAIT_MESA 1
#define GAR_WAIT_HOARE 2
#define GAR_NMARKS 6
#define GAR_STAGE_FLOATS 8192   /* shared-memory staging for the reduce: 32 KB */

typedef struct gar_params {
    uint64_t A, x, y, recv, flags;          /* float*, float*, float*, float*, u32* (this rank) */
    uint64_t peer_recv, peer_flags;         /* device arrays [n_gpus] of float* / u32* (real mode) */
    uint64_t sink_data, sink_flags;         /* eidola mode: where this rank's outgoing writes go */
    uint64_t marks;                         /* u64 [tiles][GAR_NMARKS] absolute %globaltimer */
    uint64_t seen;                          /* u64 [tiles][n_gpus] first-seen (relative to t0) */
    uint64_t polls;                         /* u32 [tiles][n_gpus] flag reads until seen */
    uint64_t release;                       /* u64 [tiles] flag release time (relative) */
    uint64_t st;                            /* hbf_eidola_state* (unused by the plain build) */
    int32_t rank, n_gpus, M, Kl, tiles, tile_rows;
    uint32_t seq;
    int32_t eidola;                         /* 1: replay mode */
    int32_t wait_mode;                      /* GAR_WAIT_* (unused by the plain build) */
    int32_t reserved;
} gar_params;

/* sizeof + the offsets the Python mirror relies on, and the staging size it computes smem from */
#define GAR_LAYOUT_N 6
#define GAR_LAYOUT_VALUES                                                                          \
    {(unsigned long long)sizeof(gar_params), (unsigned long long)offsetof(gar_params, st),         \
     (unsigned long long)offsetof(gar_params, rank), (unsigned long long)offsetof(gar_params, seq),  \
     (unsigned long long)offsetof(gar_params, reserved), (unsigned long long)GAR_STAGE_FLOATS}

#endif /* GEMV_ALLREDUCE_H */
