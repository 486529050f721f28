// The real TMA load of bench/tma_tensormap.py gpu (tma_semantics): one tiled cp.async.bulk.tensor per launch, issued
// by thread 0, completing on an mbarrier with expect_tx = the caller's count; wait with a 50 ms timeout; copy the
// reserved shared-memory region out. status: 1 completed, 2 timed out (the transaction count did not match).
//
// Shared-memory layout (one dynamic block, no static __shared__ variable, so the block starts at the CTA's first
// user byte and its declared 1024-byte alignment holds): the mbarrier at TMA_MBAR_OFF, the box at TMA_BOX_OFF. Both
// come from bench/tma_tensormap.py (-D): hbfcommon.tensormap.copy_problems() checks every launch against them before
// it is issued, and tests/tma/test_tma_load_kernel.py checks this file's PTX uses exactly them.
// The tensor map is a const __grid_constant__ parameter: its generic address points into the parameter space, which
// cp.async.bulk.tensor accepts (PTX ISA: .param / .const / .global); no copy into local memory.
#include <cuda.h>
#include <stdint.h>

#if !defined(TMA_MBAR_OFF) || !defined(TMA_BOX_OFF) || !defined(TMA_PREFILL)
#error "compile with -DTMA_MBAR_OFF=... -DTMA_BOX_OFF=... -DTMA_PREFILL=... (bench/tma_tensormap.py tma_load_defines)"
#endif

extern "C" __global__ void tma_load(const __grid_constant__ CUtensorMap tm, int rank, int c0, int c1, int c2, int c3,
                                    int c4, unsigned expect, unsigned reserve, unsigned char* out,
                                    unsigned long long* status) {
    extern __shared__ __align__(1024) unsigned char dyn[];
    unsigned char* smem = dyn + TMA_BOX_OFF;
    if (threadIdx.x != 0) return;
    // the reserved region gets a known byte (TMA_PREFILL) first: bytes the copy does not write are told apart
    for (unsigned i = 0; i < reserve; ++i) smem[i] = TMA_PREFILL;
    const unsigned b = (unsigned)__cvta_generic_to_shared(dyn + TMA_MBAR_OFF);
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const unsigned long long t = (unsigned long long)&tm;
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    // the generic-proxy writes above (prefill, init) ordered before the async proxy's (the copy)
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(expect) : "memory");
    switch (rank) {
    case 1: asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];"
                         :: "r"(s), "l"(t), "r"(c0), "r"(b) : "memory"); break;
    case 2: asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                         :: "r"(s), "l"(t), "r"(c0), "r"(c1), "r"(b) : "memory"); break;
    case 3: asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                         :: "r"(s), "l"(t), "r"(c0), "r"(c1), "r"(c2), "r"(b) : "memory"); break;
    case 4: asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
                         :: "r"(s), "l"(t), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(b) : "memory"); break;
    default: asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];"
                          :: "r"(s), "l"(t), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(b) : "memory"); break;
    }
    unsigned long long t0, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    unsigned done = 0;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(b) : "memory");
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (!done && now - t0 < 50000000ull);
    *status = done ? 1ull : 2ull;
    if (done) for (unsigned i = 0; i < reserve; ++i) out[i] = smem[i];
}
