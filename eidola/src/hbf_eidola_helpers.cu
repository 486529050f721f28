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
 *   .func (.param .b64 r) __hb_eidola_ld_flag32_acct(.param .b64 addr);
 *   .func __hb_eidola_count_flag_other(.param .b32 klass, .param .b32 lead, .param .b32 virt);
 *   .func __hb_eidola_flush_flag(.param .b32 klass, .param .b32 thread_reads, .param .b32 warp_reads,
 *                                .param .b32 virtual_loads);
 * (and __hb_eidola_count_nonflag / __hb_eidola_register_write, unused by the pass). The last four are
 * defined here. __hb_eidola_ld_flag32_acct is the 32-bit flag load the pass emits: the same
 * hbf_eidola_ld_flag as the hand-instrumented workload (classification, engine b's value at this
 * instant, else a real ld.acquire.sys), but it returns its accounting to the caller instead of
 * counting with atomics, and reads the state pointer and t0 with cacheable loads (both are constant
 * once every block has entered); the caller keeps the counts in registers like
 * hbf_eidola_acct. __hb_eidola_flush_nonflag is defined here too: the pass counts non-flag global reads in two per-thread registers (reads this lane
 * executed; reads for which this lane was the lowest executing lane = warp-instructions) and
 * flushes them at every ret/exit, so a GEMV's data loads cost two register adds, not two atomics.
 * The state they read is the module global
 * __hb_eidola_state (u64, 0 = detached): the runtime binds it after module load exactly like
 * __hb_state (cuModuleGetGlobal + an 8-byte copy of the Replay's device state pointer;
 * eidola.replay.bind_module_state).
 */
#define HBF_EIDOLA_EXTERN_API 1
#include "hbf_eidola.cuh"

/* Add one thread's non-flag read counts to class 0 (HBF_EIDOLA_C_THREAD / HBF_EIDOLA_C_WARP): the
 * calling lanes' counts are summed across the warp, one atomic pair per warp. Detached: no-op. */
extern "C" __device__ __noinline__ void __hb_eidola_flush_nonflag(unsigned int thread_reads, unsigned int warp_reads) {
    hbf_eidola_state* st = hbf_eidola_gstate();
    if (!st || !st->ctr) return;
    const uint32_t m = hb_group_mask();   // hbf_ptx.cuh: every collective checked per lane (HBF_GROUP_SYNC)
    const uint32_t t = __reduce_add_sync(m, thread_reads);
    const uint32_t w = __reduce_add_sync(m, warp_reads);
    if ((uint32_t)(__ffs(m) - 1) == hb_laneid()) {
        unsigned long long* c = (unsigned long long*)st->ctr;
        if (t) atomicAdd(&c[HBF_EIDOLA_C_THREAD], (unsigned long long)t);
        if (w) atomicAdd(&c[HBF_EIDOLA_C_WARP], (unsigned long long)w);
    }
}

/* Weak (L1-cacheable) reads of the module state: __hb_eidola_state is written by the host before the
 * launch; st->t0 is the atomicMin of every block's entry time, settled long before a block's first
 * flag poll (its own compute phase lies between). hbf_eidola_gstate() (volatile) stays for the
 * extern API functions above. */
static __device__ __forceinline__ hbf_eidola_state* hbf_eh_state() {
    return (hbf_eidola_state*)__ldg(&__hb_eidola_state);
}

/* One 32-bit flag-like load. Returns value | klass << 32 | virtual << 40 | lead << 41 | 1 << 42
 * (klass 0: not in a registered flag range, a non-flag read; lead: this lane is the lowest lane
 * executing this call, i.e. it counts the warp-instruction; bit 42: the call ran). */
extern "C" __device__ __noinline__ unsigned long long __hb_eidola_ld_flag32_acct(unsigned long long addr) {
    const unsigned long long valid = 1ull << 42;
    const unsigned long long lead = (unsigned long long)hbf_eidola_leader() << 41;
    if (!__isGlobal((const void*)addr))   /* a generic load of shared/local memory: not a flag */
        return (unsigned long long)*(volatile const uint32_t*)addr | lead | valid;
    hbf_eidola_state* st = hbf_eh_state();
    if (!st) return (unsigned long long)hb_ld_acq_sys32((const void*)addr) | lead | valid;
    hbf_eidola_acct a;
    hbf_eidola_acct_init(&a);
    const uint64_t t0 = *(const uint64_t*)&st->t0;
    const uint32_t v = (uint32_t)hbf_eidola_ld_flag(st, &a, t0, (const void*)addr, 4);
    return (unsigned long long)v | ((unsigned long long)(a.flag_class & 0xffu) << 32)
           | ((unsigned long long)(a.vloads ? 1u : 0u) << 40) | lead | valid;
}

/* A flag read of a second class in the same thread (the registers hold one class): count directly. */
extern "C" __device__ __noinline__ void __hb_eidola_count_flag_other(unsigned int klass, unsigned int lead,
                                                                     unsigned int virt) {
    hbf_eidola_state* st = hbf_eh_state();
    if (!st || !st->ctr || klass == 0 || klass >= HBF_EIDOLA_MAX_CLASSES) return;
    unsigned long long* c = (unsigned long long*)st->ctr + klass * HBF_EIDOLA_NCTR;
    atomicAdd(&c[HBF_EIDOLA_C_THREAD], 1ull);
    if (lead) atomicAdd(&c[HBF_EIDOLA_C_WARP], 1ull);
    if (virt) atomicAdd(&c[HBF_EIDOLA_C_VLOADS], 1ull);
}

/* Add one thread's flag-read counts of class `klass` (0: none): lanes with the same class are summed,
 * one atomic per counter per class group of the warp. */
extern "C" __device__ __noinline__ void __hb_eidola_flush_flag(unsigned int klass, unsigned int thread_reads,
                                                               unsigned int warp_reads, unsigned int virtual_loads) {
    hbf_eidola_state* st = hbf_eh_state();
    if (!st || !st->ctr) return;
    const uint32_t m = hb_group_mask();
    const uint32_t grp = __match_any_sync(m, klass);
    const uint32_t t = __reduce_add_sync(grp, thread_reads);
    const uint32_t w = __reduce_add_sync(grp, warp_reads);
    const uint32_t v = __reduce_add_sync(grp, virtual_loads);
    if (klass == 0 || klass >= HBF_EIDOLA_MAX_CLASSES || (uint32_t)(__ffs(grp) - 1) != hb_laneid()) return;
    unsigned long long* c = (unsigned long long*)st->ctr + klass * HBF_EIDOLA_NCTR;
    if (t) atomicAdd(&c[HBF_EIDOLA_C_THREAD], (unsigned long long)t);
    if (w) atomicAdd(&c[HBF_EIDOLA_C_WARP], (unsigned long long)w);
    if (v) atomicAdd(&c[HBF_EIDOLA_C_VLOADS], (unsigned long long)v);
}
