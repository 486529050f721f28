/*
 * hbf_eidola_helpers.cu — the eidola extern API as a helper PTX module for hbfcc's flags pass.
 *
 * Built by `make helpers-ptx` into build/runtime_cuda/hbf_eidola_helpers.ptx (compute_90a, -rdc,
 * `.visible .func` made `.weak .func` like the timing helpers). hbfcc links it textually into every
 * module the flags pass rewrote (hbfcc/helpers.py: link_eidola_text), records its sha256 in the
 * admission artifact (`eidola_helper`), and counts its functions as admitted callees.
 *
 * The functions are the extern API of hbf_eidola.cuh (one definition, owned there), emitted because
 * HBF_EIDOLA_EXTERN_API is defined before the include. Exactly what the flags pass calls
 * (hbfcc/passes/flags.py: PROTOTYPES; tests/hbfcc/test_flags_helpers.py pins the signatures):
 *   .func (.param .b32 v) __hb_eidola_ld_flag_u32(.param .b64 addr);
 *   .func (.param .b64 v) __hb_eidola_ld_flag_u64(.param .b64 addr);
 *   .func __hb_eidola_kernel_enter();
 *   .func (.param .b32 hit) __hb_eidola_monitor(.param .b64 addr, .param .b32 nbytes, .param .b64 wake);
 *   .func __hb_eidola_mwait(.param .b64 addr);
 *   .func __hb_eidola_count_nonflag(.param .b32 insts);
 *   .func __hb_eidola_flush_nonflag(.param .b32 thread_reads, .param .b32 warp_reads);
 * (and __hb_eidola_count_nonflag / __hb_eidola_register_write, unused by the pass). The last one is
 * defined here: the pass counts non-flag global reads in two per-thread registers (reads this lane
 * executed; reads for which this lane was the lowest executing lane = warp-instructions) and
 * flushes them at every ret/exit, so a GEMV's data loads cost two register adds, not two atomics.
 * The state they read is the module global
 * __hb_eidola_state (u64, 0 = detached): the runtime binds it after module load exactly like
 * __hb_state (cuModuleGetGlobal + an 8-byte copy of the Replay's device state pointer;
 * runtime_cuda.eidola.bind_module_state).
 */
#define HBF_EIDOLA_EXTERN_API 1
#include "hbf_eidola.cuh"

/* Add one thread's non-flag read counts to class 0 (HBF_EIDOLA_C_THREAD / HBF_EIDOLA_C_WARP): the
 * calling lanes' counts are summed across the warp, one atomic pair per warp. Detached: no-op. */
extern "C" __device__ __noinline__ void __hb_eidola_flush_nonflag(unsigned int thread_reads, unsigned int warp_reads) {
    hbf_eidola_state* st = hbf_eidola_gstate();
    if (!st || !st->ctr) return;
    const uint32_t m = __activemask();
    const uint32_t t = __reduce_add_sync(m, thread_reads);
    const uint32_t w = __reduce_add_sync(m, warp_reads);
    if ((uint32_t)(__ffs(m) - 1) == hb_laneid()) {
        unsigned long long* c = (unsigned long long*)st->ctr;
        if (t) atomicAdd(&c[HBF_EIDOLA_C_THREAD], (unsigned long long)t);
        if (w) atomicAdd(&c[HBF_EIDOLA_C_WARP], (unsigned long long)w);
    }
}
