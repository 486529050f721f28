/*
 * gemv_allreduce.cu — fused GEMV + AllReduce (one-shot push), after the SC24 kernel the Eidola paper
 * studies (its Fig. 3) and the public vLLM-lineage fused_gemv_allreduce pattern.
 *
 * Every rank r holds A_r (M x Kl, row-major, its K-slice) and x_r (Kl); y = sum_r A_r x_r.
 * Block b owns row tile b (tile_rows rows):
 *   1. compute     partial_r[tile b] = A_r[tile b] . x_r                  (tile compute)
 *   2. data write  push the partial tile into every peer's recv[r][b]     (xGMI/NVLink write)
 *   3. flag write  st.release.sys peer.flags[b][r] = seq                 (out-of-band flag)
 *   4. spin        warp 0, lane p waits for flags[b][p] == seq, p != r    (spin | Mesa | Hoare)
 *   5. reduce      y[tile b] = sum_p partial_p in fixed rank order         (bitwise identical)
 * Flags are out-of-band: a 128-B-aligned region of u32 slots [tile][src]; sequence numbers are
 * monotone. Each phase boundary is stamped with %globaltimer (timelines, Fig. 1-2).
 *
 * Modes: real peers (peer pointers; n ranks, possibly on one GPU when all ranks' blocks are
 * co-resident) or eidola replay (one rank; the other n-1 are eidolons: their partial tiles are
 * pre-staged in recv, their flags come from engine (a) stores or engine (b) virtualized loads;
 * this rank's outgoing writes go to sink buffers so the store traffic is still issued).
 *
 * Flag loads go through hbf_eidola_ld_flag / monitor / mwait explicitly ("hand-instrumented flag
 * loads"); every other global read is counted as non-flag with hbf_eidola_count_nonflag.
 */
#include <cstdint>

#include "gemv_allreduce.h"
#include "hbf_eidola.cuh"

/* sizeof/offsets of gar_params and GAR_STAGE_FLOATS (workloads/gemv_allreduce/fused.py checks them) */
extern "C" __device__ unsigned long long gar_layout[GAR_LAYOUT_N] = GAR_LAYOUT_VALUES;

/* The tile compute, shared by the fused kernel and the partials kernel (identical arithmetic,
 * so pre-staged eidolon partials are bitwise what a real peer would push). */
static __device__ __forceinline__ void gar_tile_dot(const float* A, const float* x, int M, int Kl,
                                                    int row0, int tile_rows, float* out,
                                                    hbf_eidola_acct* acct) {
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
                if (acct) hbf_eidola_count_nonflag(acct, 2);
                acc = fmaf(av.x, xv.x, acc); acc = fmaf(av.y, xv.y, acc);
                acc = fmaf(av.z, xv.z, acc); acc = fmaf(av.w, xv.w, acc);
            }
        }
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) out[rr] = acc;
    }
}

/* Deterministic fill: values in [-0.5, 0.5) from a 64-bit hash of (seed, index). Launched by
 * workloads/gemv_allreduce/fused.py with 1024 x 256 threads. */
extern "C" __global__ void gar_fill_kernel(float* p, uint64_t n, uint64_t seed) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t z = i + 0x9E3779B97F4A7C15ull * (seed + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        p[i] = (float)(z >> 40) * (1.0f / 16777216.0f) - 0.5f;
    }
}

/* The partial tiles a peer q would push: recv[q][b][:] = A_q[tile b] . x_q
 * (grid: tiles blocks; dynamic shared memory: tile_rows floats). */
extern "C" __global__ void __launch_bounds__(256) gar_partials_kernel(const float* A, const float* x, float* recv, int q,
                                                          int M, int Kl, int tiles, int tile_rows) {
    extern __shared__ float tile_sh[];
    const int b = blockIdx.x;
    gar_tile_dot(A, x, M, Kl, b * tile_rows, tile_rows, tile_sh, nullptr);
    __syncthreads();
    for (int r = threadIdx.x; r < tile_rows; r += blockDim.x)
        recv[((uint64_t)q * tiles + b) * tile_rows + r] = tile_sh[r];
}

extern "C" __global__ void __launch_bounds__(256) gemv_allreduce_kernel(gar_params p) {
    hbf_eidola_state* st = (hbf_eidola_state*)p.st;
    const uint64_t t0 = hbf_eidola_kernel_enter(st);
    const int b = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint64_t* marks = (uint64_t*)p.marks + (uint64_t)b * GAR_NMARKS;
    extern __shared__ float tile_sh[];      /* tile_rows partials */
    hbf_eidola_acct acct;
    hbf_eidola_acct_init(&acct, st);
    if (tid == 0) marks[0] = hb_now();

    /* 1. compute the partial tile: one row per warp at a time, float4 loads */
    const int row0 = b * p.tile_rows;
    gar_tile_dot((const float*)p.A, (const float*)p.x, p.M, p.Kl, row0, p.tile_rows, tile_sh, &acct);
    __syncthreads();
    if (tid == 0) marks[1] = hb_now();

    /* 2. push the partial tile to every peer (its recv[rank][b]) */
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
    if (tid == 0) marks[2] = hb_now();

    /* 3. flag write: flags[b][rank] = seq at every peer */
    for (int q = tid; q < p.n_gpus; q += blockDim.x) {
        if (q == p.rank) continue;
        uint32_t* f;
        if (p.eidola) f = (uint32_t*)p.sink_flags + (uint64_t)b * p.n_gpus + q;
        else f = ((uint32_t**)p.peer_flags)[q] + (uint64_t)b * p.n_gpus + p.rank;
        hb_st_rel_sys32(f, p.seq);
    }
    __syncthreads();
    if (tid == 0) {
        uint64_t now = hb_now();
        marks[3] = now;
        ((uint64_t*)p.release)[b] = now - t0;
    }

    /* 4. wait for every peer's flag for this tile */
    if (warp == 0) {
        const uint32_t* flags = (const uint32_t*)p.flags + (uint64_t)b * p.n_gpus;
        uint64_t* seen = (uint64_t*)p.seen + (uint64_t)b * p.n_gpus;
        uint32_t* polls = (uint32_t*)p.polls + (uint64_t)b * p.n_gpus;
        const uint64_t tmo = hbf_eidola_timeout(st);
        for (int q = lane; q < p.n_gpus; q += 32) {
            if (q == p.rank) continue;
            const uint32_t* f = flags + q;
            uint32_t before = acct.flag_thread;
            if (p.wait_mode == GAR_WAIT_SPIN) {
                while (hbf_eidola_ld_flag_u32(st, &acct, t0, f) != p.seq) {
                    acct.spin += 1;
                    if (hb_now() - t0 > tmo) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, (uint32_t)(b * 1024 + q));
                }
            } else if (p.wait_mode == GAR_WAIT_HOARE) {
                if (!hbf_eidola_monitor(st, &acct, t0, f, 4, p.seq)) hbf_eidola_mwait(st, &acct, t0, f);
            } else {
                while (!hbf_eidola_monitor(st, &acct, t0, f, 4, p.seq)) {
                    hbf_eidola_mwait(st, &acct, t0, f);
                    if (hb_now() - t0 > tmo) hbf_eidola_fail(st, HBF_EIDOLA_FAIL_TIMEOUT, (uint32_t)(b * 1024 + q));
                }
            }
            seen[q] = hb_now() - t0;
            polls[q] = acct.flag_thread - before;
        }
    }
    __syncthreads();
    if (tid == 0) marks[4] = hb_now();

    /* 5. reduce in fixed rank order: peers' partials are staged through shared memory in chunks
     * (all threads load in parallel), then each row's thread adds them in rank order 0..n-1, so
     * the result is bitwise the sequential sum whatever the chunking. */
    const float* recv = (const float*)p.recv;
    float* y = (float*)p.y;
    float* stage = tile_sh + p.tile_rows;                     /* tile_rows x chunk */
    const int chunk = max(1, min(p.n_gpus, GAR_STAGE_FLOATS / p.tile_rows));
    float acc_r = 0.f;                                        /* thread r < tile_rows owns row r */
    for (int q0 = 0; q0 < p.n_gpus; q0 += chunk) {
        const int nq = min(chunk, p.n_gpus - q0);
        for (int i = tid; i < nq * p.tile_rows; i += blockDim.x) {
            const int qq = i / p.tile_rows, r = i % p.tile_rows, q = q0 + qq;
            float v;
            if (q == p.rank) v = tile_sh[r];
            else { v = recv[((uint64_t)q * p.tiles + b) * p.tile_rows + r]; hbf_eidola_count_nonflag(&acct, 1); }
            stage[qq * p.tile_rows + r] = v;
        }
        __syncthreads();
        if (tid < p.tile_rows)
            for (int qq = 0; qq < nq; ++qq) acc_r += stage[qq * p.tile_rows + tid];
        __syncthreads();
    }
    if (tid < p.tile_rows && row0 + tid < p.M) y[row0 + tid] = acc_r;   /* tile_rows <= blockDim */
    __syncthreads();
    if (tid == 0) marks[5] = hb_now();
    hbf_eidola_acct_flush(st, &acct);
}
