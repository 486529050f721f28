// Which warp-synchronous instructions wait for a load still in flight (issue 13, stop 53)?
// One warp per variant: t0 = %globaltimer; v = ld.global (a cold line: DRAM latency); <the variant's code, which does
// not read v>; t1 = %globaltimer; then v is used. If the variant's code waits for the load, t1 - t0 ~ the load's
// latency (~0.5-1 us); if not, a few ns. Variants, as hbfcc's inline path emits them (hbfcc/passes/timing.py):
//   none       nothing
//   alu        a few ALU instructions
//   vote_im    vote.sync.any.pred with the group's mask (activemask | own bit: ptxas checks each lane's mask)
//   vote_full  vote.sync.any.pred with 0xffffffff
//   shfl_im    shfl.sync.idx with the group's mask (ptxas: MATCH.ANY + BRA.DIV)
//   shfl_full  shfl.sync.idx with 0xffffffff
//   diverge    a data-dependent branch around a block (BSSY/BSYNC)
//   call       a data-dependent branch around a call of a noinline function (not taken)
// Each variant runs twice: with ld.global.cg (L2 only, as stop 53 ran it) and with a plain ld.global (LDG.E, L1
// allocating, as Triton's and hbfcc's loads are): stop 54 asks whether the plain load's read barrier (which the
// group's BRA.DIV waits on when hbfcc's HBFCC_LOADS_FIRST puts the load first) is held longer.
// Writes one line per variant: name, median and p90 of t1 - t0 over the repetitions (ns).
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

__device__ __noinline__ unsigned rare_fn(unsigned x) { return x * 3u + 1u; }

__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}

template <int V, int C>
__global__ void probe(const unsigned* __restrict__ x, unsigned stride, int reps, unsigned long long* out, unsigned* sink,
                      unsigned never) {
    unsigned acc = 0;
    const unsigned lane = threadIdx.x & 31u;
    for (int r = 0; r < reps; ++r) {
        const unsigned* p = x + (size_t)r * stride + lane;          // a new line each repetition: cold
        unsigned long long t0 = gtimer();
        unsigned v;
        if (C == 0) asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
        else asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
        unsigned w = lane;
        if (V == 1) { asm volatile("{ .reg .b32 a; add.u32 a, %1, 7; xor.b32 %0, a, 5; }" : "=r"(w) : "r"(lane)); }
        if (V == 2 || V == 4) {
            unsigned m; asm volatile("activemask.b32 %0;" : "=r"(m));
            m |= (1u << lane);
            if (V == 2) asm volatile("{ .reg .pred p, q; setp.ne.u32 p, %1, 0; vote.sync.any.pred q, p, %2; selp.u32 %0, 1, 0, q; }"
                                     : "=r"(w) : "r"(lane), "r"(m));
            else asm volatile("shfl.sync.idx.b32 %0, %1, 0, 31, %2;" : "=r"(w) : "r"(lane), "r"(m));
        }
        if (V == 3) asm volatile("{ .reg .pred p, q; setp.ne.u32 p, %1, 0; vote.sync.any.pred q, p, 0xffffffff; selp.u32 %0, 1, 0, q; }"
                                 : "=r"(w) : "r"(lane));
        if (V == 5) asm volatile("shfl.sync.idx.b32 %0, %1, 0, 31, 0xffffffff;" : "=r"(w) : "r"(lane));
        if (V == 6) { if (lane == never) { w = w * 7u + (unsigned)t0; } }
        if (V == 7) { if (lane == never) { w = rare_fn(w); } }
        unsigned long long t1 = gtimer();
        asm volatile("" :: "r"(w));
        acc += v + w;
        if (lane == 0) out[r] = t1 - t0;
        // let the load complete before the next repetition's stamp
        asm volatile("" :: "r"(acc));
    }
    sink[threadIdx.x] = acc;
}

// The consume probe's shape (bench/devpath_common.py consume_SFX, issue 13 stop 53: HBFCC_LOADS_FIRST grew its
// work interval by ~0.74 us even unregistered): t0; [LF: the load] a vote over the group's mask (BRA.DIV) [else: the
// load]; `iters` dependent integer steps from t0; t1 once they are done; the value used after t1. Reports t1 - t0.
template <int LF>
__global__ void consume_shape(const unsigned* __restrict__ x, unsigned stride, int reps, int iters,
                              unsigned long long* out, unsigned* sink) {
    unsigned acc = 0;
    const unsigned lane = threadIdx.x & 31u;
    for (int r = 0; r < reps; ++r) {
        unsigned long long t0 = gtimer();
        const unsigned* p = x + (size_t)r * stride + lane + (unsigned)(t0 >> 63);
        unsigned v = 0, m, w;
        if (LF) asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
        asm volatile("activemask.b32 %0;" : "=r"(m));
        m |= (1u << lane);
        asm volatile("{ .reg .pred p, q; setp.ne.u32 p, %1, 99; vote.sync.any.pred q, p, %2; selp.u32 %0, 1, 0, q; }"
                     : "=r"(w) : "r"(lane), "r"(m));
        // as hbfcc's group: a branch on the vote (no lane accesses: skip), the load after it (base) or before (LF)
        if (!LF && w) asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
        unsigned y = (unsigned)t0 + w;
        for (int k = 0; k < iters; ++k) y = y * 1664525u + 1013904223u;
        unsigned long long t1;
        asm volatile("{ .reg .pred q; setp.eq.u32 q, %1, 0; @q mov.u64 %0, %%globaltimer; @!q mov.u64 %0, %%globaltimer; }"
                     : "=l"(t1) : "r"(y));
        acc += v + y;
        if (lane == 0) out[r] = t1 - t0;
        asm volatile("" :: "r"(acc));
    }
    sink[threadIdx.x] = acc;
}

template <int LF>
void run_shape(const char* name, const unsigned* x, unsigned stride, int reps, int iters, unsigned long long* d_out,
               unsigned* sink) {
    consume_shape<LF><<<1, 32>>>(x, stride, reps, iters, d_out, sink);
    cudaDeviceSynchronize();
    std::vector<unsigned long long> h(reps);
    cudaMemcpy(h.data(), d_out, reps * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
    std::sort(h.begin() + 1, h.end());
    printf("%-10s median %6llu ns  p10 %6llu  p90 %6llu  (n=%d)\n", name, h[reps / 2], h[reps / 10], h[reps * 9 / 10], reps - 1);
}

template <int V, int C = 0>
void run(const char* name, const unsigned* x, unsigned stride, int reps, unsigned long long* d_out, unsigned* sink) {
    probe<V, C><<<1, 32>>>(x, stride, reps, d_out, sink, 99u);
    cudaDeviceSynchronize();
    std::vector<unsigned long long> h(reps);
    cudaMemcpy(h.data(), d_out, reps * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
    std::sort(h.begin() + 1, h.end());
    printf("%-10s median %6llu ns  p10 %6llu  p90 %6llu  (n=%d)\n", name, h[reps / 2], h[reps / 10], h[reps * 9 / 10], reps - 1);
}

int main() {
    const int reps = 201;
    const unsigned stride = 1u << 16;                 // 256 KiB apart
    unsigned* x; unsigned long long* d_out; unsigned* sink;
    cudaMalloc(&x, (size_t)reps * stride * sizeof(unsigned) + 4096);
    cudaMemset(x, 1, (size_t)reps * stride * sizeof(unsigned) + 4096);
    cudaMalloc(&d_out, reps * sizeof(unsigned long long));
    cudaMalloc(&sink, 1024);
    for (int round = 0; round < 2; ++round) {
        printf("round %d\n", round);
        run<0>("none", x, stride, reps, d_out, sink);
        run<1>("alu", x, stride, reps, d_out, sink);
        run<2>("vote_im", x, stride, reps, d_out, sink);
        run<3>("vote_full", x, stride, reps, d_out, sink);
        run<4>("shfl_im", x, stride, reps, d_out, sink);
        run<5>("shfl_full", x, stride, reps, d_out, sink);
        run<6>("diverge", x, stride, reps, d_out, sink);
        run<7>("call", x, stride, reps, d_out, sink);
        run<0, 1>("none_ca", x, stride, reps, d_out, sink);
        run<1, 1>("alu_ca", x, stride, reps, d_out, sink);
        run<2, 1>("vote_im_ca", x, stride, reps, d_out, sink);
        run<3, 1>("vote_full_ca", x, stride, reps, d_out, sink);
        run<4, 1>("shfl_im_ca", x, stride, reps, d_out, sink);
        run<6, 1>("diverge_ca", x, stride, reps, d_out, sink);
        run_shape<0>("shape_base", x, stride, reps, 1000, d_out, sink);
        run_shape<1>("shape_lf", x, stride, reps, 1000, d_out, sink);
        run_shape<0>("shape_base0", x, stride, reps, 0, d_out, sink);
        run_shape<1>("shape_lf0", x, stride, reps, 0, d_out, sink);
    }
    cudaError_t e = cudaGetLastError();
    printf("cuda: %s\n", cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : 1;
}
