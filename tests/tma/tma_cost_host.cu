// Host driver of runtime_cuda/src/hbf_tma_cost.cuh for tests/tma/test_tma_cost.py: the header's own code, compiled by
// nvcc for the CPU. One case per input line:
//   <hex of 128 bytes> <ncoords> <c...> <range base> <media_offset> <page_shift> <granule_shift>
// and one JSON object per output line: the box's extent (hb_tmap_box_extent), hb_tmap_box_runs' OOB bytes and run
// count, and the requests hb_tma_count_run counts over the runs (every run taken as inside the range).
#include <cstdio>
#include "hbf_tma_cost.cuh"

struct Counter {  // a functor (not a host lambda) so the header's __host__ __device__ template calls no host-only code
    uint64_t base, mo;
    uint32_t ps, gsh, nruns = 0;
    uint64_t lo = ~0ull, hi = 0, sum = 0;
    hb_tma_cnt c = {0, 0, 0};
    __host__ __device__ void operator()(uint64_t a, uint32_t n) {
        ++nruns;
        if (a < lo) lo = a;
        if (a + n > hi) hi = a + n;
        sum += n;
        hb_tma_count_run(mo + (a - base), n, ps, gsh, c);
    }
};

static int hexval(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

int main() {
    static char hex[1024];
    while (scanf("%300s", hex) == 1) {
        alignas(64) unsigned char d[128];
        for (int i = 0; i < 128; ++i) d[i] = (unsigned char)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
        int nc = 0;
        if (scanf("%d", &nc) != 1 || nc < 1 || nc > 5) return 2;
        int32_t c[5] = {0, 0, 0, 0, 0};
        for (int i = 0; i < nc; ++i) if (scanf("%d", &c[i]) != 1) return 2;
        unsigned long long base, mo;
        unsigned ps, gsh;
        if (scanf("%llu %llu %u %u", &base, &mo, &ps, &gsh) != 4) return 2;
        hb_tmap m;
        const int rc = hb_tmap_decode(d, &m);
        if (rc) { printf("{\"rc\": %d}\n", rc); continue; }
        uint64_t first = 1, end = 1, inb = 1;
        const uint64_t xoob = hb_tmap_box_extent(m, c, &first, &end, &inb);
        Counter k;
        k.base = base; k.mo = mo; k.ps = ps; k.gsh = gsh;
        const uint64_t oob = hb_tmap_box_runs(m, c, k);
        printf("{\"rc\": 0, \"first\": %llu, \"end\": %llu, \"inb\": %llu, \"xoob\": %llu, \"oob\": %llu, \"nruns\": %u, "
               "\"lo\": %llu, \"hi\": %llu, \"sum\": %llu, \"nreq\": %llu, \"req_bytes\": %llu, \"hbf\": %llu}\n",
               (unsigned long long)first, (unsigned long long)end, (unsigned long long)inb, (unsigned long long)xoob,
               (unsigned long long)oob, k.nruns, (unsigned long long)k.lo, (unsigned long long)k.hi,
               (unsigned long long)k.sum, (unsigned long long)k.c.nreq, (unsigned long long)k.c.req_bytes,
               (unsigned long long)k.c.hbf);
    }
    return 0;
}
