/*
 * gemv_allreduce_plain.cu — the fused GEMV + AllReduce of gemv_allreduce.cu with NO eidola code:
 * flags are polled with plain volatile loads in a plain spin loop, nothing is counted by hand.
 * It is made Eidola-aware purely by hbfcc (issue 7):
 *
 *   HBFCC_PASSES=timing,flags        hbfcc -cubin -arch=sm_90a gemv_allreduce_plain.cu   (spin, virtual flags)
 *   HBFCC_PASSES=timing,flags,mwait  ...                                                 (spin loop -> monitor/mwait)
 *
 * The flags pass routes the volatile flag loads through __hb_eidola_ld_flag_u32 (the table's value at
 * this instant under engine b), counts every other global read, and (mwait) parks the spin loop;
 * the eidola state is bound after module load (workloads/gemv_allreduce/plain.py: bind_module_state). Built and run
 * by workloads/gemv_allreduce/plain.py and bench/eidola_hbfcc_flags_e1.py.
 *
 * Same parameter block (gar_params in gemv_allreduce.h, mirrored by fused.py GarParams), same tile compute,
 * same phases and marks, so its output is bitwise the hand-instrumented kernel's; `st` and
 * `wait_mode` are ignored (the wait is whatever hbfcc made of the spin loop).
 */
#include <cstdint>

#include "gemv_allreduce.h"   /* gar_params, GAR_NMARKS, GAR_STAGE_FLOATS: shared with gemv_allreduce.cu */

#define GAR_PLAIN_TIMEOUT_NS 2000000000ull   /* a wait that never ends traps (the run fails loudly) */

static __device__ __forceinline__ uint64_t gar_now() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ __forceinline__ void gar_tile_dot(const float* A, const float* x, int M, int Kl,
                                                    int row0, int tile_rows, float* out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int rr = warp; rr < tile_rows; rr += nwarps) {
        const int row = row0 + rr;
        float acc = 0.f;
        if (row < M) {
            const float4* a4 = (const float4*)(A + (uint64_t)row * Kl);
            const float4* x4 = (const float4*)x;
            for (int k = lane; k < Kl / 4; k += 32) {
                float4 av = __ldg(&a4[k]);
                float4 xv = __ldg(&x4[k]);
                acc = fmaf(av.x, xv.x, acc); acc = fmaf(av.y, xv.y, acc);
                acc = fmaf(av.z, xv.z, acc); acc = fmaf(av.w, xv.w, acc);
            }
        }
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) out[rr] = acc;
    }
}

extern "C" __global__ void __launch_bounds__(256) gemv_allreduce_plain_kernel(gar_params p) {
    const uint64_t t0 = gar_now();
    const int b = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint64_t* marks = (uint64_t*)p.marks + (uint64_t)b * GAR_NMARKS;
    extern __shared__ float tile_sh[];
    if (tid == 0) marks[0] = t0;

    const int row0 = b * p.tile_rows;
    gar_tile_dot((const float*)p.A, (const float*)p.x, p.M, p.Kl, row0, p.tile_rows, tile_sh);
    __syncthreads();
    if (tid == 0) marks[1] = gar_now();

    const uint64_t tile_off = ((uint64_t)p.rank * p.tiles + b) * p.tile_rows;
    for (int q = 0; q < p.n_gpus; ++q) {
        if (q == p.rank) continue;
        float* dst;
        if (p.eidola) dst = (float*)p.sink_data + (uint64_t)b * p.tile_rows;
        else dst = ((float**)p.peer_recv)[q] + tile_off;
        for (int r = tid; r < p.tile_rows; r += blockDim.x) dst[r] = tile_sh[r];
    }
    __threadfence_system();
    __syncthreads();
    if (tid == 0) marks[2] = gar_now();

    for (int q = tid; q < p.n_gpus; q += blockDim.x) {
        if (q == p.rank) continue;
        volatile uint32_t* f;
        if (p.eidola) f = (uint32_t*)p.sink_flags + (uint64_t)b * p.n_gpus + q;
        else f = ((uint32_t**)p.peer_flags)[q] + (uint64_t)b * p.n_gpus + p.rank;
        *f = p.seq;
    }
    __syncthreads();
    if (tid == 0) {
        uint64_t now = gar_now();
        marks[3] = now;
        ((uint64_t*)p.release)[b] = now - t0;
    }

    /* 4. wait for every peer's flag for this tile: a plain spin on a volatile load */
    if (warp == 0) {
        const volatile uint32_t* flags = (const volatile uint32_t*)p.flags + (uint64_t)b * p.n_gpus;
        uint64_t* seen = (uint64_t*)p.seen + (uint64_t)b * p.n_gpus;
        uint32_t* polls = (uint32_t*)p.polls + (uint64_t)b * p.n_gpus;
        for (int q = lane; q < p.n_gpus; q += 32) {
            if (q == p.rank) continue;
            uint32_t n = 1;
            while (flags[q] != p.seq) {
                ++n;
                if (gar_now() - t0 > GAR_PLAIN_TIMEOUT_NS) __trap();
            }
            seen[q] = gar_now() - t0;
            polls[q] = n;
        }
        __threadfence_system();   /* acquire: the peers' data pushes before their flags */
    }
    __syncthreads();
    if (tid == 0) marks[4] = gar_now();

    const float* recv = (const float*)p.recv;
    float* y = (float*)p.y;
    float* stage = tile_sh + p.tile_rows;
    const int chunk = max(1, min(p.n_gpus, GAR_STAGE_FLOATS / p.tile_rows));
    float acc_r = 0.f;
    for (int q0 = 0; q0 < p.n_gpus; q0 += chunk) {
        const int nq = min(chunk, p.n_gpus - q0);
        for (int i = tid; i < nq * p.tile_rows; i += blockDim.x) {
            const int qq = i / p.tile_rows, r = i % p.tile_rows, q = q0 + qq;
            float v;
            if (q == p.rank) v = tile_sh[r];
            else v = recv[((uint64_t)q * p.tiles + b) * p.tile_rows + r];
            stage[qq * p.tile_rows + r] = v;
        }
        __syncthreads();
        if (tid < p.tile_rows)
            for (int qq = 0; qq < nq; ++qq) acc_r += stage[qq * p.tile_rows + tid];
        __syncthreads();
    }
    if (tid < p.tile_rows && row0 + tid < p.M) y[row0 + tid] = acc_r;
    __syncthreads();
    if (tid == 0) marks[5] = gar_now();
}
