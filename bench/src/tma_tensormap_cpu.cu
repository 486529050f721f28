// CPU cost of runtime_cuda/src/hbf_tensormap.cuh (bench/tma_tensormap.py cpu): the same header compiled by nvcc for
// the host. Input: one descriptor per line "<name> <hex of 128 bytes> <rank> <coords...>"; for each, REPS timed
// repetitions of ITERS calls each of decode, box_runs (counting runs) and split (against one range), printing one
// JSON object per line with the per-call ns of every repetition. The host timing says what the code costs on a
// CPU, not what it costs in a GPU thread (that is for the GPU session: bench/tma_tensormap.py gpu).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "hbf_tensormap.cuh"

struct Count {
    uint64_t runs = 0, bytes = 0;
    __host__ __device__ void operator()(uint64_t, uint32_t n) { ++runs; bytes += n; }
};

static int hexval(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

int main(int argc, char** argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 7, iters = argc > 2 ? atoi(argv[2]) : 20000;
    char name[64], hex[300];
    while (scanf("%63s %299s", name, hex) == 2) {
        alignas(64) unsigned char d[128];
        for (int i = 0; i < 128; ++i) d[i] = (unsigned char)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
        int rank = 0;
        int32_t c[5] = {0, 0, 0, 0, 0};
        if (scanf("%d", &rank) != 1 || rank < 1 || rank > 5) return 2;
        for (int i = 0; i < rank; ++i) if (scanf("%d", &c[i]) != 1) return 2;
        hb_tmap m;
        if (hb_tmap_decode(d, &m)) return 3;
        hbf_dev_range rg{};
        rg.base = m.base + m.extent / 3;
        rg.end = m.base + 2 * m.extent / 3;
        rg.media_offset = rg.base & 4095u;
        rg.page_shift = 12;
        hb_tmap_span sp[4096];
        printf("{\"name\": \"%s\"", name);
        Count cnt;
        hb_tmap_box_runs(m, c, cnt);
        printf(", \"runs\": %llu, \"inbounds_bytes\": %llu", (unsigned long long)cnt.runs,
               (unsigned long long)cnt.bytes);
        const char* what[3] = {"decode_ns", "box_runs_ns", "split_ns"};
        for (int w = 0; w < 3; ++w) {
            printf(", \"%s\": [", what[w]);
            for (int r = 0; r < reps; ++r) {
                volatile uint64_t sink = 0;
                const auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < iters; ++i) {
                    asm volatile("" ::: "memory");          // no hoisting of the loop-invariant call
                    if (w == 0) {
                        hb_tmap x;
                        sink += (uint64_t)hb_tmap_decode(d, &x) + x.extent;
                    } else if (w == 1) {
                        Count k;
                        sink += hb_tmap_box_runs(m, c, k) + k.runs;
                    } else {
                        hb_tmap_split_t s;
                        sink += (uint64_t)hb_tmap_split(m, c, &rg, 1, sp, 4096, &s) + s.hbf_bytes;
                    }
                }
                const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                                      .count() / iters;
                printf("%s%.1f", r ? ", " : "", ns);
            }
            printf("]");
        }
        printf("}\n");
        fflush(stdout);
    }
    return 0;
}
