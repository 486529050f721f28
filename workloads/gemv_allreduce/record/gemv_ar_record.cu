// Recording variant of the fused GEMV+AllReduce (issue 8): the same flag protocol as the paper's
// Figure 3 / the vLLM-lineage fused_gemv_allreduce, instrumented with %globaltimer stamps.
//
//   y = sum_g W_g x_g            W_g: M x K (rank g's K-shard), x_g: K, all float32
//
// Block b owns output rows [b*R, min(M, (b+1)*R)):
//   1. start stamp; partial p = W_g[rows] . x_g (one warp per row, lane-strided float4 loads,
//      fixed-order warp-shuffle sum: deterministic);
//   2. push p into every rank's inbox slot inbox[parity][b][rank][.] (peer pointers over NVLink,
//      or local sinks in replay mode), data-release stamp; __threadfence_system();
//   3. thread q (q != rank) stamps and issues st.release.sys peer_flags[q][b*n + rank] = seq;
//   4. local work (optional: slow_ppm busy-work for the perturbation experiment);
//   5. thread q (q != rank) spins ld.acquire.sys on my_flags[b*n + q] >= seq, counting polls,
//      stamping first-seen; bounded by a %globaltimer timeout (error word, never a hang);
//   6. y[rows] = sum over g = 0..n-1 (fixed rank order) of inbox[parity][b][g][.]:
//      bit-identical on every rank and in replay;  end stamp.
//
// Flags are out-of-band u32 words (a 128-B aligned region of n_blocks*n words), monotone sequence
// numbers (seq = call + 1; never reset), partials double-buffered by call parity.
// Counters: flag reads (polls) and non-flag global reads, per warp-instruction, flushed once per
// block with atomicAdd.
//
// Build: nvcc -std=c++17 -O3 -arch=sm_90a -cubin gemv_ar_record.cu -o gemv_ar_record.cubin
// No multicast objects, no NVLS: plain peer pointers only.
#include "gar_record.h"

// GAR_EIDOLA=1 (default): the kernel start and the flag loads go through runtime_cuda's Eidola
// device primitives (eidola/src/hbf_eidola.cuh), so the SAME kernel is recorded on real peers
// (engine REAL: a plain ld.acquire.sys) and replayed on one GPU by either engine (a: eidolon stores
// into the flag region; b: virtualized flag loads). GAR_EIDOLA=0 builds a standalone variant.
#ifndef GAR_EIDOLA
#define GAR_EIDOLA 1
#endif
#if GAR_EIDOLA
#include "hbf_eidola.cuh"
#endif

__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ void st_release_sys(unsigned int* p, unsigned int v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned int ld_acquire_sys(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void busy_until(unsigned long long t_end) {
    while (gtimer() < t_end) {
    }
}

extern "C" __global__ void __launch_bounds__(GAR_THREADS, 1) gemv_ar_record(GarParams P) {
    __shared__ float part[GAR_MAX_ROWS_PER_BLOCK];
    __shared__ unsigned long long stamp[WG_FIELDS];
    const int b = blockIdx.x, nb = gridDim.x, n = P.n, R = P.rows_per_block;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int row0 = b * R;
    const int rows = max(0, min(R, P.M - row0));
    const unsigned int seq = P.seq_base + (unsigned int)P.call + 1u;
    const int parity = P.call & 1;
    unsigned long long nonflag = 0, flagreads = 0;  // per-thread; aggregated per warp below

    if (tid == 0) stamp[WG_START] = gtimer();
#if GAR_EIDOLA
    hbf_eidola_state* st = (hbf_eidola_state*)P.st;
    hbf_eidola_acct acct;
    hbf_eidola_acct_init(&acct);
    const uint64_t t0 = hbf_eidola_kernel_enter(st);  // atomicMin into st->t0 (+ __syncthreads)
#endif

    // 1. partial GEMV: one warp per row, float4 loads when K % 4 == 0.
    for (int r = warp; r < rows; r += GAR_WARPS) {
        const float* w = P.W + (size_t)(row0 + r) * P.K;
        float acc = 0.f;
        if ((P.K & 3) == 0) {
            const float4* w4 = reinterpret_cast<const float4*>(w);
            const float4* x4 = reinterpret_cast<const float4*>(P.x);
            for (int k = lane; k < P.K / 4; k += 32) {
                float4 a = w4[k], v = x4[k];
                acc = fmaf(a.x, v.x, acc); acc = fmaf(a.y, v.y, acc);
                acc = fmaf(a.z, v.z, acc); acc = fmaf(a.w, v.w, acc);
                if (lane == 0) nonflag += 2;  // one warp-instruction each for w and x
            }
        } else {
            for (int k = lane; k < P.K; k += 32) {
                acc = fmaf(w[k], P.x[k], acc);
                if (lane == 0) nonflag += 2;
            }
        }
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) part[r] = acc;
    }
    __syncthreads();

    // 2. push the partial tile to every rank's inbox (own slot included: the reduction reads all
    //    n slots in fixed order, so every rank — and the replay — sums identical values).
    if (tid == 0) stamp[WG_DATA_RELEASE] = gtimer();
    for (int q = 0; q < n; ++q) {
        float* dst = P.inbox[q] + (((size_t)parity * nb + b) * n + P.rank) * R;
        for (int i = tid; i < rows; i += GAR_THREADS) dst[i] = part[i];
    }
    __threadfence_system();
    __syncthreads();

    // 3. release the flags: thread q signals rank q.
    if (tid < n && tid != P.rank) {
        unsigned long long t = gtimer();
        st_release_sys(P.flags[tid] + (size_t)b * n + P.rank, seq);
        P.flag_release[((size_t)P.call * nb + b) * n + tid] = t;
    }
    if (tid == 0) stamp[WG_RELEASE] = gtimer();

    // 4. optional slowdown (perturbation experiment): busy-work proportional to compute time.
    if (P.slow_ppm && tid == 0) {
        unsigned long long now = gtimer();
        unsigned long long c = now - stamp[WG_START];
        busy_until(now + c * P.slow_ppm / 1000000ull);
    }
    __syncthreads();

    // 5. wait for every peer's flag for this block.
    if (tid == 0) stamp[WG_WAIT_START] = gtimer();
    if (tid < n && tid != P.rank) {
        const unsigned int* f = P.flags[P.rank] + (size_t)b * n + tid;
        unsigned int polls = 0;
        // tw: the wait start, for the timeout only. The virtual loads take the KERNEL start t0 (the
        // table's wakeups are relative to it); passing tw here shifted every flag by the compute phase.
        unsigned long long tw = gtimer(), seen = 0;
        for (;;) {
#if GAR_EIDOLA
            unsigned int v = hbf_eidola_ld_flag_u32(st, &acct, t0, f);
#else
            unsigned int v = ld_acquire_sys(f);
#endif
            ++polls;
            if ((int)(v - seq) >= 0) { seen = gtimer(); break; }
            if ((polls & 63u) == 0u && gtimer() - tw > P.timeout_ns) {
                atomicExch(P.error, 1u);
                seen = 0;
                break;
            }
        }
        size_t li = ((size_t)P.call * nb + b) * n + tid;
        P.flag_seen[li] = seen;
        P.flag_polls[li] = polls;
        flagreads += polls;
    }
    __syncthreads();
    if (tid == 0) stamp[WG_WAIT_END] = gtimer();

    // 6. fixed-order reduction over ranks 0..n-1 from this rank's inbox.
    const float* in = P.inbox[P.rank] + ((size_t)parity * nb + b) * n * R;
    for (int i = tid; i < rows; i += GAR_THREADS) {
        float s = 0.f;
        for (int g = 0; g < n; ++g) s += in[(size_t)g * R + i];
        P.y[row0 + i] = s;
    }
    // non-flag reads of the reduction, per warp-instruction: each active warp issues n loads per
    // iteration of the i-loop.
    {
        int iters = (rows + GAR_THREADS - 1) / GAR_THREADS;
        for (int it = 0; it < iters; ++it) {
            int first = it * GAR_THREADS + warp * 32;
            if (lane == 0 && first < rows) nonflag += n;
        }
    }
    if (P.slow_ppm && tid == 0) {
        unsigned long long now = gtimer();
        unsigned long long r = now - stamp[WG_WAIT_END];
        busy_until(now + r * P.slow_ppm / 1000000ull);
    }
    __syncthreads();

    // counters: warp-aggregate then one atomic per warp.
    for (int o = 16; o > 0; o >>= 1) {
        nonflag += __shfl_xor_sync(0xffffffffu, nonflag, o);
        flagreads += __shfl_xor_sync(0xffffffffu, flagreads, o);
    }
    if (lane == 0) {
        atomicAdd(P.counters + (size_t)P.call * 2 + 0, flagreads);
        atomicAdd(P.counters + (size_t)P.call * 2 + 1, nonflag);
    }
#if GAR_EIDOLA
    hbf_eidola_acct_flush(st, &acct);
#endif
    if (tid == 0) {
        stamp[WG_END] = gtimer();
        unsigned long long* L = P.wg_log + ((size_t)P.call * nb + b) * WG_FIELDS;
        for (int k = 0; k < WG_FIELDS; ++k) L[k] = stamp[k];
    }
}

// ---------------------------------------------------------------------------------------------
// NVLink ping-pong for clock alignment. The initiator (rank a, one thread) and the responder
// (rank b, one thread) run concurrently. Round k: a stamps t1, st.release.sys ping(in b's memory)
// = base+k, spins on pong (in a's memory) == base+k, stamps t3. b spins on ping == base+k, stamps
// t2, stamps t2s, st.release.sys pong = base+k. Timeouts set *error.
extern "C" __global__ void pingpong_initiator(unsigned int* ping_remote, const unsigned int* pong_local,
                                              unsigned int base, int rounds,
                                              unsigned long long* t1, unsigned long long* t3,
                                              unsigned long long timeout_ns, unsigned int* error) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    for (int k = 1; k <= rounds; ++k) {
        unsigned int v = base + (unsigned int)k;
        unsigned long long a = gtimer();
        st_release_sys(ping_remote, v);
        unsigned long long c;
        for (;;) {
            if (ld_acquire_sys(pong_local) == v) { c = gtimer(); break; }
            if (gtimer() - a > timeout_ns) { atomicExch(error, 2u); return; }
        }
        t1[k - 1] = a;
        t3[k - 1] = c;
        // small gap between rounds so consecutive samples are independent
        busy_until(c + 200);
    }
}

extern "C" __global__ void pingpong_responder(const unsigned int* ping_local, unsigned int* pong_remote,
                                              unsigned int base, int rounds,
                                              unsigned long long* t2, unsigned long long* t2s,
                                              unsigned long long timeout_ns, unsigned int* error) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    unsigned long long t0 = gtimer();
    for (int k = 1; k <= rounds; ++k) {
        unsigned int v = base + (unsigned int)k;
        unsigned long long s;
        for (;;) {
            if (ld_acquire_sys(ping_local) == v) { s = gtimer(); break; }
            if (gtimer() - t0 > timeout_ns) { atomicExch(error, 3u); return; }
        }
        unsigned long long r = gtimer();
        st_release_sys(pong_remote, v);
        t2[k - 1] = s;
        t2s[k - 1] = r;
        t0 = r;
    }
}

// %globaltimer resolution probe: smallest nonzero step seen in `iters` reads.
extern "C" __global__ void timer_resolution(unsigned long long* out, int iters) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    unsigned long long prev = gtimer(), best = ~0ull;
    for (int i = 0; i < iters; ++i) {
        unsigned long long t = gtimer();
        if (t != prev) { if (t - prev < best) best = t - prev; prev = t; }
    }
    *out = best;
}
