// hbf_microbench.cu — test and benchmark kernels that call the device helpers DIRECTLY
// (__hb_issue / __hb_wait, hbf_abi.h), the way hbfcc-rewritten PTX does. Used by
// bench/runtime_proofs.py and runtime_cuda/demo.py until (and besides) hbfcc-built kernels.
//
// Every kernel exists twice: <name>_plain (no helper calls at all) and <name>_instr (an
// __hb_issue before each global access, the __hb_wait before the first use of a load's value,
// stores drained before exit). Build: nvcc -arch=sm_90a -rdc=true -ptx, then ptxas -c + nvlink
// with the helper PTX (runtime_cuda/linker.py). With -DHBF_PLAIN_ONLY only the plain twins are
// built: the input for hbfcc (bench/runtime_proofs.py rewrites them and runs the result).
#include <cstdint>

extern "C" __device__ unsigned long long __hb_issue(unsigned long long addr, unsigned int bytes,
                                                    unsigned int flags, unsigned int site);
extern "C" __device__ void __hb_wait(unsigned long long fut, unsigned int site);
extern "C" __device__ unsigned long long __hb_future_join(unsigned long long a, unsigned long long b);
extern "C" __device__ void __hb_kernel_enter(unsigned int kernel_index);
extern "C" __device__ void __hb_kernel_exit(unsigned int kernel_index);

#define F_LOAD 0u
#define F_STORE 1u
#define F_ATOMIC 2u
#define F_CPASYNC 3u
#define F_ACTIVE 4u
#define F_GENERIC 8u
#define F_WAIT_NOW 0x10u

#define SITE(k, n) (((unsigned)(k) << 16) | (unsigned)(n))

template <bool I>
__device__ __forceinline__ unsigned long long ISS(const void* p, unsigned bytes, unsigned flags, unsigned site) {
    if constexpr (I) return __hb_issue((unsigned long long)p, bytes, flags, site);
    return 0ull;
}
template <bool I>
__device__ __forceinline__ void WT(unsigned long long f, unsigned site) {
    if constexpr (I) __hb_wait(f, site);
}
template <bool I>
__device__ __forceinline__ void ENTER(unsigned k) {
    if constexpr (I) __hb_kernel_enter(k);
}
template <bool I>
__device__ __forceinline__ void EXIT(unsigned k) {
    if constexpr (I) __hb_kernel_exit(k);
}
__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// ---- 0: streaming (native-path overhead): b[i] = a[i] * s + 1, float4, grid-stride --------------
// M = 0 plain, 1 call the helper at every access (the ABI as is), 2 inline fast reject at every site
// (ld __hb_state, ld.v2 {lo, span}, compare, call only when in band; wait only on a nonzero future),
// 3 the same with __hb_state and {lo, span} loaded once at kernel entry (they cannot change while a
// kernel runs: registration after admission is refused).
struct hb_band { unsigned long long lo, span; };
#ifndef HBF_PLAIN_ONLY
extern "C" __device__ unsigned long long __hb_state;
__device__ __forceinline__ hb_band band_load() {
    const unsigned long long st = *(volatile unsigned long long*)&__hb_state;
    if (st == 0ull) return {~0ull, 0ull};
    const ulonglong2 b = __ldg((const ulonglong2*)st);
    return {b.x, b.y};
}
#else
__device__ __forceinline__ hb_band band_load() { return {~0ull, 0ull}; }
#endif
template <int M>
__device__ __forceinline__ unsigned long long ISSM(const hb_band& hb, const void* p, unsigned bytes, unsigned flags, unsigned site) {
    if constexpr (M == 0) return 0ull;
    if constexpr (M == 1) return __hb_issue((unsigned long long)p, bytes, flags, site);
    if constexpr (M == 2) {
        const hb_band b = band_load();
        if ((unsigned long long)p - b.lo >= b.span) return 0ull;
        return __hb_issue((unsigned long long)p, bytes, flags, site);
    }
    if ((unsigned long long)p - hb.lo >= hb.span) return 0ull;
    return __hb_issue((unsigned long long)p, bytes, flags, site);
}
template <int M>
__device__ __forceinline__ void WTM(unsigned long long f, unsigned site) {
    if constexpr (M == 1) __hb_wait(f, site);
    if constexpr (M >= 2) { if (f) __hb_wait(f, site); }
}
template <int M>
__device__ void stream_body(const float4* __restrict__ a, float4* __restrict__ b, unsigned long long n4, float s) {
    if constexpr (M != 0) __hb_kernel_enter(0);
    hb_band hb = {~0ull, 0ull};
    if constexpr (M == 3) hb = band_load();
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        unsigned long long f = ISSM<M>(hb, a + i, 16, F_LOAD | F_ACTIVE, SITE(0, 0));
        float4 v = a[i];
        WTM<M>(f, SITE(0, 0));
        float4 o = make_float4(v.x * s + 1.f, v.y * s + 1.f, v.z * s + 1.f, v.w * s + 1.f);
        unsigned long long g = ISSM<M>(hb, b + i, 16, F_STORE | F_ACTIVE, SITE(0, 1));
        b[i] = o;
        WTM<M>(g, SITE(0, 1));
    }
    if constexpr (M != 0) __hb_kernel_exit(0);
}
extern "C" __global__ void stream_plain(const float4* a, float4* b, unsigned long long n4, float s) { stream_body<0>(a, b, n4, s); }
#ifndef HBF_PLAIN_ONLY
extern "C" __global__ void stream_instr(const float4* a, float4* b, unsigned long long n4, float s) { stream_body<1>(a, b, n4, s); }
#endif
#ifndef HBF_PLAIN_ONLY
extern "C" __global__ void stream_guard(const float4* a, float4* b, unsigned long long n4, float s) { stream_body<2>(a, b, n4, s); }
#endif
#ifndef HBF_PLAIN_ONLY
extern "C" __global__ void stream_hoist(const float4* a, float4* b, unsigned long long n4, float s) { stream_body<3>(a, b, n4, s); }
#endif

// ---- 1: latency probe: one thread; issue, W ns of independent work, consume -----------------------
// out[r*4 + 0..3] = t_before_issue, t_after_work, t_after_wait, value
template <bool I>
__device__ void probe_body(const unsigned long long* p, unsigned long long* out, unsigned long long work_ns, int reps) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    ENTER<I>(1);
    unsigned long long acc = 0;
    for (int r = 0; r < reps; ++r) {
        const unsigned long long* q = p + (r & 63) * 512;  // a different page each rep
        const unsigned long long t0 = gtimer();
        unsigned long long f = ISS<I>(q, 8, F_LOAD | F_ACTIVE, SITE(1, 0));
        unsigned long long v = *(volatile const unsigned long long*)q;
        // independent work: W ns of ALU work that does not touch v
        unsigned long long x = t0;
        while (gtimer() - t0 < work_ns) x = x * 6364136223846793005ull + 1442695040888963407ull;
        const unsigned long long t1 = gtimer();
        WT<I>(f, SITE(1, 0));
        acc += v + (x & 1ull);  // first use of v
        const unsigned long long t2 = gtimer();
        out[r * 4 + 0] = t0;
        out[r * 4 + 1] = t1;
        out[r * 4 + 2] = t2;
        out[r * 4 + 3] = acc;
    }
    EXIT<I>(1);
}
extern "C" __global__ void probe_plain(const unsigned long long* p, unsigned long long* out, unsigned long long w, int reps) { probe_body<false>(p, out, w, reps); }
#ifndef HBF_PLAIN_ONLY
extern "C" __global__ void probe_instr(const unsigned long long* p, unsigned long long* out, unsigned long long w, int reps) { probe_body<true>(p, out, w, reps); }
#endif

// ---- 2: semantic kernel: one "case" per launch; each thread records its value and tier -------------
// src: input buffer (bytes), dst: output buffer; tier[tid] = future != 0; params pick the pattern.
// case 0 u8, 1 u16, 2 u32, 3 u64, 4 f32, 5 f64, 6 v2.u32, 7 v4.u32 (scalar/vector loads at offset+tid*stride)
// case 8 predicated (odd lanes guard false), 9 divergent (two branches, different offsets),
// 10 loop (sum of 8 loads per thread), 11 predicated-use counterexample, 12 store then reload,
// 13 atomicAdd (returns old, totals), 14 generic pointer (global) + generic shared (native),
// 15 cp.async pipeline (global -> shared, wait_all, read shared), 16 barrier + block reduction
template <bool I>
__device__ void sem_body(int kase, unsigned char* src, unsigned char* dst, unsigned long long* tier,
                         long long off, int stride) {
    ENTER<I>(2);
    __shared__ __align__(16) unsigned int sh[1024];
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned char* p = src + off + (long long)tid * stride;
    unsigned long long* o = (unsigned long long*)dst + tid * 4;
    unsigned long long f = 0, res = 0, extra = 0;
    switch (kase) {
    case 0: { f = ISS<I>(p, 1, F_LOAD | F_ACTIVE, SITE(2, 0)); unsigned char v = *p; WT<I>(f, SITE(2, 0)); res = v; break; }
    case 1: { f = ISS<I>(p, 2, F_LOAD | F_ACTIVE, SITE(2, 1)); unsigned short v = *(unsigned short*)p; WT<I>(f, SITE(2, 1)); res = v; break; }
    case 2: { f = ISS<I>(p, 4, F_LOAD | F_ACTIVE, SITE(2, 2)); unsigned v = *(unsigned*)p; WT<I>(f, SITE(2, 2)); res = v; break; }
    case 3: { f = ISS<I>(p, 8, F_LOAD | F_ACTIVE, SITE(2, 3)); unsigned long long v = *(unsigned long long*)p; WT<I>(f, SITE(2, 3)); res = v; break; }
    case 4: { f = ISS<I>(p, 4, F_LOAD | F_ACTIVE, SITE(2, 4)); float v = *(float*)p; WT<I>(f, SITE(2, 4)); res = __float_as_uint(v * 3.5f); break; }
    case 5: { f = ISS<I>(p, 8, F_LOAD | F_ACTIVE, SITE(2, 5)); double v = *(double*)p; WT<I>(f, SITE(2, 5)); res = __double_as_longlong(v * 1.25); break; }
    case 6: { f = ISS<I>(p, 8, F_LOAD | F_ACTIVE, SITE(2, 6)); uint2 v = *(uint2*)p; WT<I>(f, SITE(2, 6)); res = ((unsigned long long)v.y << 32) | v.x; break; }
    case 7: { f = ISS<I>(p, 16, F_LOAD | F_ACTIVE, SITE(2, 7)); uint4 v = *(uint4*)p; WT<I>(f, SITE(2, 7));
              res = ((unsigned long long)(v.w ^ v.z) << 32) | (v.x + v.y); break; }
    case 8: { const bool g = (threadIdx.x & 1) == 0;
              f = ISS<I>(p, 4, F_LOAD | (g ? F_ACTIVE : 0u), SITE(2, 8));
              unsigned v = 0xdeadbeefu; if (g) v = *(unsigned*)p; WT<I>(f, SITE(2, 8)); res = v; break; }
    case 9: { if (threadIdx.x & 4) { f = ISS<I>(p, 4, F_LOAD | F_ACTIVE, SITE(2, 9)); unsigned v = *(unsigned*)p; WT<I>(f, SITE(2, 9)); res = v + 1; }
              else { unsigned char* q = p + 4096 * 3; f = ISS<I>(q, 4, F_LOAD | F_ACTIVE, SITE(2, 10)); unsigned v = *(unsigned*)q; WT<I>(f, SITE(2, 10)); res = v * 7; }
              break; }
    case 10: { unsigned long long s = 0, fj = 0;
               for (int k = 0; k < 8; ++k) { unsigned char* q = p + k * 256; unsigned long long fk = ISS<I>(q, 4, F_LOAD | F_ACTIVE, SITE(2, 11));
                                              unsigned v = *(unsigned*)q; WT<I>(fk, SITE(2, 11)); s += (unsigned long long)v << (k & 3); fj |= fk; }
               f = fj; res = s; break; }
    case 11: { // predicated first use, then an unconditional use: the wait must be on both paths
               f = ISS<I>(p, 4, F_LOAD | F_ACTIVE, SITE(2, 12)); unsigned v = *(unsigned*)p;
               unsigned r = 0;
               if (threadIdx.x % 3 == 0) { WT<I>(f, SITE(2, 12)); r = v ^ 0x55u; }
               WT<I>(f, SITE(2, 13)); r += v; res = r; break; }
    case 12: { unsigned* q = (unsigned*)(p);
               unsigned long long fs = ISS<I>(q, 4, F_STORE | F_ACTIVE, SITE(2, 14)); *q = (unsigned)tid * 2654435761u; WT<I>(fs, SITE(2, 14));
               __threadfence();
               f = ISS<I>(q, 4, F_LOAD | F_ACTIVE, SITE(2, 15)); unsigned v = *(volatile unsigned*)q; WT<I>(f, SITE(2, 15)); res = v; break; }
    case 13: { unsigned* q = (unsigned*)(src + off);   // every thread adds to one word (+ a per-warp word)
               f = ISS<I>(q, 4, F_ATOMIC | F_ACTIVE | F_WAIT_NOW, SITE(2, 16)); WT<I>(f, SITE(2, 16));
               atomicAdd(q, 1u);
               unsigned* w = (unsigned*)(src + off + 64 + (tid >> 5) * 4);
               unsigned long long f2 = ISS<I>(w, 4, F_ATOMIC | F_ACTIVE | F_WAIT_NOW, SITE(2, 17)); WT<I>(f2, SITE(2, 17));
               unsigned old = atomicAdd(w, (unsigned)(tid & 31) + 1u); (void)old;
               res = 1; break; }
    case 14: { void* gp = (void*)p;                     // generic pointer to global
               f = ISS<I>(gp, 4, F_LOAD | F_ACTIVE | F_GENERIC, SITE(2, 18)); unsigned v = *(unsigned*)gp; WT<I>(f, SITE(2, 18));
               sh[threadIdx.x] = v ^ 0xa5a5a5a5u; __syncthreads();
               void* sp = (void*)&sh[(threadIdx.x + 1) % blockDim.x];   // generic pointer to shared: native
               unsigned long long fsh = ISS<I>(sp, 4, F_LOAD | F_ACTIVE | F_GENERIC, SITE(2, 19)); unsigned w = *(unsigned*)sp; WT<I>(fsh, SITE(2, 19));
               res = ((unsigned long long)w << 32) | v; extra = fsh ? 2ull : 0ull; break; }
    case 15: { unsigned sa = (unsigned)__cvta_generic_to_shared(&sh[threadIdx.x * 4]);
               f = ISS<I>(p, 16, F_CPASYNC | F_ACTIVE, SITE(2, 20));
               asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(p) : "memory");
               asm volatile("cp.async.commit_group;" ::: "memory");
               asm volatile("cp.async.wait_all;" ::: "memory");
               WT<I>(f, SITE(2, 20));
               __syncthreads();
               uint4 v = *(uint4*)&sh[threadIdx.x * 4];
               res = ((unsigned long long)(v.x ^ v.w) << 32) | (v.y + v.z); break; }
    case 16: { f = ISS<I>(p, 4, F_LOAD | F_ACTIVE, SITE(2, 21)); unsigned v = *(unsigned*)p; WT<I>(f, SITE(2, 21));
               sh[threadIdx.x] = v; __syncthreads();
               for (int s = blockDim.x / 2; s > 0; s >>= 1) { if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s]; __syncthreads(); }
               res = sh[0]; break; }
    default: break;
    }
    unsigned long long fo = ISS<I>(o, 16, F_STORE | F_ACTIVE, SITE(2, 30));   // output buffer is never registered
    o[0] = res;
    o[1] = (unsigned long long)(uintptr_t)p;
    WT<I>(fo, SITE(2, 30));
    tier[tid] = ((f != 0ull) ? 1ull : 0ull) | extra;
    EXIT<I>(2);
}
extern "C" __global__ void sem_plain(int k, unsigned char* s, unsigned char* d, unsigned long long* t, long long off, int st) { sem_body<false>(k, s, d, t, off, st); }
#ifndef HBF_PLAIN_ONLY
extern "C" __global__ void sem_instr(int k, unsigned char* s, unsigned char* d, unsigned long long* t, long long off, int st) { sem_body<true>(k, s, d, t, off, st); }
#endif

// ---- 3: request-rate kernel: each warp issues `iters` loads to its own page (one request per warp
// per iteration after aggregation) and waits each before the next. -----------------------------------
template <bool I>
__device__ void rate_body(const unsigned* src, unsigned long long n_words, unsigned* out, int iters) {
    ENTER<I>(3);
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long warp = tid >> 5;
    unsigned acc = 0;
    for (int k = 0; k < iters; ++k) {
        const unsigned long long idx = ((warp * 1024ull + (unsigned long long)k * 1024ull * 977ull) + (tid & 31)) % n_words;
        const unsigned* q = src + idx;
        unsigned long long f = ISS<I>(q, 4, F_LOAD | F_ACTIVE, SITE(3, 0));
        unsigned v = *q;
        WT<I>(f, SITE(3, 0));
        acc += v;
    }
    out[tid] = acc;
    EXIT<I>(3);
}
extern "C" __global__ void rate_plain(const unsigned* s, unsigned long long n, unsigned* o, int it) { rate_body<false>(s, n, o, it); }
#ifndef HBF_PLAIN_ONLY
extern "C" __global__ void rate_instr(const unsigned* s, unsigned long long n, unsigned* o, int it) { rate_body<true>(s, n, o, it); }
#endif
