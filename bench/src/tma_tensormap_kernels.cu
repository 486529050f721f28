/* Device uses of runtime_cuda/src/hbf_tensormap.cuh: ptxas resources (bench/tma_tensormap.py cpu) and the
   no-local-memory check (tests/tma/test_tensormap.py). */
#include "hbf_tensormap.cuh"
struct Acc { uint64_t s; __device__ void operator()(uint64_t a, uint32_t n) { s += a ^ n; } };
extern "C" __global__ void k_decode(const uint64_t* d, hb_tmap* out, int* rc) {
    rc[blockIdx.x] = hb_tmap_decode(d + 16 * blockIdx.x, out + blockIdx.x);
}
extern "C" __global__ void k_replace(const unsigned* ops, unsigned n, hb_tmap* out, int* rc) {
    hb_tmap_fields f = {};
    int bad = 0;
    for (unsigned i = 0; i < n; ++i) bad |= hb_tmap_replace(&f, ops[3 * i], ops[3 * i + 1], ops[3 * i + 2]);
    rc[0] = bad ? bad : hb_tmap_from_fields(&f, out);
}
extern "C" __global__ void k_lookup(const hb_tmap_entry* t, unsigned n, const uint64_t* d, hb_tmap* out) {
    const uint64_t* desc = d + 16 * blockIdx.x;
    const int i = hb_tmap_lookup(t, n, desc, hb_tmap_hash(desc));
    if (i >= 0) out[blockIdx.x] = t[i].map;
}
extern "C" __global__ void k_runs(const hb_tmap* m, const int32_t* c, unsigned long long* out) {
    Acc acc{0};
    const uint64_t oob = hb_tmap_box_runs(m[blockIdx.x], c + 5 * blockIdx.x, acc);
    out[blockIdx.x] = acc.s + oob;
}
extern "C" __global__ void k_split(const hb_tmap* m, const int32_t* c, const hbf_dev_range* rg, unsigned nr,
                                   unsigned long long* out, int* rc) {
    hb_tmap_span sp[16];                    /* the caller's span buffer, in local memory */
    hb_tmap_split_t s;
    rc[blockIdx.x] = hb_tmap_split(m[blockIdx.x], c + 5 * blockIdx.x, rg, nr, sp, 16, &s);
    out[blockIdx.x] = s.hbf_bytes + sp[0].bytes + sp[s.nspans ? s.nspans - 1 : 0].first_page;
}
