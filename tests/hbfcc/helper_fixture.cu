// Test fixture (NOT the product): a minimal implementation of the helper ABI of
// runtime_cuda/include/hbf_abi.h, used by the hbfcc linking tests alongside the real helper PTX
// (runtime_cuda/ptx/hbf_helpers.ptx). It deliberately has a module-local symbol that collides
// with nvcc's own naming ($str from printf) and an internal function, to exercise the linker's
// renaming and .extern handling.
#include <cstdio>

extern "C" {
__device__ unsigned long long __hb_state;
__device__ unsigned int __hb_kslot_base;
__constant__ unsigned char __hb_cdesc[192];   // read by inline sites (hbf_abi.h, ABI 6); all zero: nothing inline
}

static __device__ __noinline__ unsigned long long fixture_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __device__ __noinline__ unsigned long long __hb_issue(unsigned long long addr, unsigned int bytes,
                                                                 unsigned int flags, unsigned int site) {
    if ((flags & 0x4u) == 0u || __hb_state == 0ull) return 0ull;
    if (__hb_state == 1ull) printf("issue %llx %u %u %u\n", addr, bytes, flags, site);
    return fixture_now() + 1000ull;
}

extern "C" __device__ __noinline__ void __hb_wait(unsigned long long fut, unsigned int site) {
    if (fut == 0ull || __hb_state == 0ull) return;
    while (fixture_now() < fut) {
    }
}

extern "C" __device__ __noinline__ unsigned long long __hb_future_join(unsigned long long a,
                                                                       unsigned long long b) {
    return a > b ? a : b;
}

extern "C" __device__ __noinline__ void __hb_kernel_enter(unsigned int kernel_index) {
    if (__hb_state) atomicAdd(&__hb_kslot_base, 0u);
}

extern "C" __device__ __noinline__ void __hb_kernel_exit(unsigned int kernel_index) {
    if (__hb_state) atomicAdd(&__hb_kslot_base, 0u);
}

// never inline (the fixture serves every access through __hb_issue, whose prints the tests read)
extern "C" __device__ __noinline__ long long __hb_inline_until(unsigned int op) {
    return -0x7FFFFFFFFFFFFFFFll;
}

extern "C" __device__ __noinline__ void __hb_kernel_flush(unsigned int kernel_index, unsigned int rd_req,
                                                          unsigned int rd_granules, unsigned long long rd_bytes,
                                                          unsigned int wr_req, unsigned long long wr_bytes,
                                                          unsigned int ready_waits, unsigned long long slack_ns,
                                                          unsigned long long inline_ns) {
    if (__hb_state && (rd_req | wr_req | ready_waits | (inline_ns != 0ull))) atomicAdd(&__hb_kslot_base, 0u);
}

extern "C" __device__ __noinline__ long long __hb_inline_until_live(unsigned int op, unsigned int kernel_index,
                                                                   unsigned int rd_req, unsigned int rd_granules,
                                                                   unsigned long long rd_bytes, unsigned int wr_req,
                                                                   unsigned long long wr_bytes,
                                                                   unsigned int ready_waits,
                                                                   unsigned long long slack_ns,
                                                                   unsigned long long inline_ns) {
    __hb_kernel_flush(kernel_index, rd_req, rd_granules, rd_bytes, wr_req, wr_bytes, ready_waits, slack_ns,
                      inline_ns);
    return __hb_inline_until(op);
}

// never serves a group (the fixture's descriptor has no HBF_CDI_GROUP; each site runs alone)
extern "C" __device__ __noinline__ unsigned long long __hb_issue_group(unsigned long long addrs, unsigned int pmask,
                                                                       unsigned long long nbpack, unsigned int site) {
    return 0xFFFFFFFFFFFFFFFFull;
}

// the TMA helpers (ABI 5): the fixture models nothing (every copy native, every wait free)
extern "C" __device__ __noinline__ unsigned long long __hb_tma(unsigned long long gaddr, unsigned int c0,
                                                               unsigned int c1, unsigned int c2, unsigned int c3,
                                                               unsigned int c4, unsigned int nbytes,
                                                               unsigned int mbar, unsigned int kind,
                                                               unsigned int ctamask, unsigned int table,
                                                               unsigned int site) {
    if (__hb_state == 1ull) printf("tma %llx %u %u %u\n", gaddr, nbytes, kind, site);
    return 0ull;
}

extern "C" __device__ __noinline__ void __hb_mbar_note(unsigned int table, unsigned int mbar, unsigned long long fut,
                                                       unsigned int site) {
    if (__hb_state) atomicAdd(&__hb_kslot_base, 0u);
}

extern "C" __device__ __noinline__ void __hb_mbar_wait(unsigned int table, unsigned int mbar, unsigned int parity,
                                                       unsigned int site) {
    if (__hb_state) atomicAdd(&__hb_kslot_base, 0u);
}

extern "C" __device__ __noinline__ void __hb_tma_enter(unsigned int table, unsigned int flags) {
    if (__hb_state) atomicAdd(&__hb_kslot_base, 0u);
}

extern "C" __device__ __noinline__ void __hb_tma_exit(unsigned int table, unsigned int kernel_index) {
    if (__hb_state) atomicAdd(&__hb_kslot_base, 0u);
}
