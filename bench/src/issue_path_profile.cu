// issue_path_profile.cu -- where the compact issue path's time goes (bench/issue_path_profile.py).
//
// Built by the bench with nvcc -DHBF_ISSUE_PROFILE=1 and the helper library included as source, so
// __hb_issue stamps %clock64 at its checkpoints (runtime_cuda/src/hbf_helpers.cu, HB_PROF) into
// __hb_prof[warp][i]. A hand-built device state (one timing range, FIXED source, a valid full-rate
// thermal word that never ages, no refresh quantum: exactly the compact path's case) stands in for a
// session; no hbfd, no control region. Each warp runs R dependent rounds: clock, __hb_issue (32 lanes,
// 4 B each, one page), clock once its future is known, the load, __hb_wait, clock once the value is used.
// Output: one JSON document on stdout.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#include "../../runtime_cuda/src/hbf_helpers.cu"
#ifndef HBF_PROF_WARPS
#define HBF_PROF_WARPS 4096u   // the production build (no checkpoints): only the kernel's own stamps
#endif

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(2); } } while (0)

static __device__ __forceinline__ uint64_t clk_after(uint64_t dep) {
    uint64_t t;
    asm volatile("{ .reg .u64 x; xor.b64 x, %1, %1; mov.u64 %0, %%clock64; add.u64 %0, %0, x; }"
                 : "=l"(t) : "l"(dep) : "memory");
    return t;
}

// out[(warp * R + r) * 20 + k]: k 0..15 the checkpoints of __hb_issue (10..14 inside the fast model), 16 before
// the call, 17 future known, 18 value used after __hb_wait. Round r of a warp reads 128 B at
// warp * stride_warp + r * stride_round (ints): stride_round 32 = 32 rounds on one page, 1024 = a page per round.
__global__ void prof_kernel(const int* x, int R, int stride_warp, int stride_round, unsigned long long* out, int* sink) {
    const int lane = threadIdx.x & 31;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int acc = 0;
    for (int r = 0; r < R; ++r) {
        const int* a = x + (size_t)warp * stride_warp + (size_t)r * stride_round + lane + (acc & 0x40000000);
        const uint64_t c0 = clk_after((uint64_t)acc);
        const unsigned long long fut = __hb_issue((unsigned long long)a, 4u, HBF_F_ACTIVE | HBF_OP_LOAD, 0u);
        const uint64_t c1 = clk_after(fut);
        const int v = *a;
        __hb_wait(fut, 0u);
        acc += v;
        const uint64_t c2 = clk_after((uint64_t)acc);
        if (lane == 0 && warp < (int)HBF_PROF_WARPS) {
            unsigned long long* o = out + ((size_t)warp * R + r) * 20;
#if HBF_ISSUE_PROFILE
            for (int k = 0; k < 16; ++k) o[k] = __hb_prof[warp * 16 + k];
#else
            for (int k = 0; k < 16; ++k) o[k] = 0;
#endif
            o[16] = c0; o[17] = c1; o[18] = c2;
        }
    }
    sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

static double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
static double pct(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[(size_t)((v.size() - 1) * p)];
}

int main(int argc, char** argv) {
    const int R = 32;
    const uint64_t fixed_ns = argc > 1 ? strtoull(argv[1], 0, 10) : 0;
    // argv[2]: fixed (default) | fast (the fast model, OCP-SG1-like geometry: 8 ch x 1 die x 256 planes,
    // 48 GB/s channels, tR 4 us, t_cmd 300 ns, 2 page buffers); argv[3]: hit (32 rounds on a page) | miss
    const bool fast = argc > 2 && strcmp(argv[2], "fast") == 0;
    const bool miss = argc > 3 && strcmp(argv[3], "miss") == 0;
    const int stride_round = miss ? 1024 : 32;
    int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int clk_khz = 0; CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));
    const int max_warps = HBF_PROF_WARPS;
    const size_t n_int = (size_t)max_warps * R * 1024 + 4096;
    int* x; CK(cudaMalloc(&x, n_int * sizeof(int)));
    CK(cudaMemset(x, 0, n_int * sizeof(int)));
    unsigned long long* out; CK(cudaMalloc(&out, (size_t)max_warps * R * 20 * 8));
    int* sink; CK(cudaMalloc(&sink, (size_t)max_warps * 32 * sizeof(int)));
    hbf_device_state* dst; CK(cudaMalloc(&dst, sizeof(hbf_device_state)));
    hbf_device_state* h = (hbf_device_state*)calloc(1, sizeof(hbf_device_state));
    const uint64_t base = (uint64_t)x, end = base + n_int * sizeof(int);
    h->lo = base - HBF_DEV_GUARD_BYTES; h->span = end - h->lo; h->enabled = 1; h->n_ranges = 1;
    h->timing_source = fast ? HBF_SRC_FAST : HBF_SRC_FIXED; h->version = HBF_DEVSTATE_VERSION; h->state_bytes = sizeof(hbf_device_state);
    h->magic = HBF_DEVSTATE_MAGIC; h->thermal_max_age_ns = 1ull << 62; h->backoff_max_ns = 8192;
    h->heartbeat_timeout_ns = 50000000ull;
    h->thermal_cache = (uint64_t)1000000u | (1ull << 20) | (1ull << 23);   // q 1e6, admission open, Normal, valid
    for (unsigned i = 0; i < HBF_KSHARDS; ++i) h->thc_replica[i * HBF_THC_REPLICA_STRIDE] = h->thermal_cache;
    h->media.timing_source = h->timing_source; h->media.page_bytes = 4096;
    h->media.channels = 8; h->media.dies_per_channel = 1; h->media.planes_per_die = 256; h->media.queue_depth = 512;
    h->media.t_read_ns = 4000; h->media.t_prog_ns = 75000; h->media.t_erase_ns = 2000000;
    h->media.channel_bytes_per_s = 48000000000ull; h->media.page_buffers = 2; h->media.t_cmd_ns = 300; h->media.read_granularity = 64;
    h->media.write_granularity = 4096; h->media.fixed_read_ns = fixed_ns; h->media.fixed_write_ns = fixed_ns;
    h->ranges[0].base = base; h->ranges[0].end = end; h->ranges[0].media_offset = base & 4095u;
    h->ranges[0].range_id = 1; h->ranges[0].mode = HBF_MODE_TIMING; h->ranges[0].perms = HBF_PERM_READ;
    h->ranges[0].page_shift = 12;
    CK(cudaMemcpy(dst, h, sizeof(hbf_device_state), cudaMemcpyHostToDevice));
    unsigned long long sp = (unsigned long long)dst;
    unsigned int kb = 0;
    CK(cudaMemcpyToSymbol(__hb_state, &sp, sizeof(sp)));
    CK(cudaMemcpyToSymbol(__hb_kslot_base, &kb, sizeof(kb)));
    // the launch descriptor (runtime_cuda/devstate.py cdesc_for), kshards 0: counters in kslots[]
    hbf_cdesc cd; memset(&cd, 0, sizeof(cd));
    cd.st = sp; cd.r0_base = base; cd.r0_end = end; cd.r0_media = h->ranges[0].media_offset;
    cd.kslot = sp + offsetof(hbf_device_state, kslots); cd.kslot_stride = sizeof(hbf_kernel_counters);
    cd.kshard_stride = 0; cd.kmax = HBF_MAX_KERNEL_SLOTS - 1u; cd.replica = sp + offsetof(hbf_device_state, thc_replica);
    cd.bias = 0; cd.max_age = h->thermal_max_age_ns; cd.fixed_read_ns = (uint32_t)fixed_ns; cd.fixed_write_ns = (uint32_t)fixed_ns;
    cd.r0_perms = HBF_PERM_READ; cd.r0_page_shift = 12; cd.read_gshift = 6;
    cd.flags = HBF_CD_ON | (fast ? HBF_CD_FAST : 0u);
    CK(cudaMemcpyToSymbol(__hb_cdesc, &cd, sizeof(cd)));
    printf("{\"sms\": %d, \"clock_khz\": %d, \"fixed_ns\": %llu, \"source\": \"%s\", \"pages\": \"%s\", \"R\": %d, \"runs\": [",
           sms, clk_khz, (unsigned long long)fixed_ns, fast ? "fast" : "fixed", miss ? "miss" : "hit", R);
    // (blocks, threads): idle = one warp; loaded = 16 blocks of 128 threads per SM (HBF_PROF_WARPS warps max)
    const int cfg[2][2] = {{1, 32}, {std::min(sms * 16, max_warps / 4), 128}};
    const char* names[2] = {"idle_1warp", "loaded"};
    for (int c = 0; c < 2; ++c) {
        const int blocks = cfg[c][0], threads = cfg[c][1], warps = blocks * threads / 32;
        for (int warm = 0; warm < 2; ++warm) {
            prof_kernel<<<blocks, threads>>>(x, R, R * stride_round, stride_round, out, sink);
            CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
        }
        std::vector<unsigned long long> hb((size_t)warps * R * 20);
        CK(cudaMemcpy(hb.data(), out, hb.size() * 8, cudaMemcpyDeviceToHost));
        // steps in path order: 9->0 call entry, 0->8 descriptor check, 8->2 classify (descriptor range),
        // 2->1 thermal replica word (its load issued after the classification), 1->3 votes, 3->4 one-page match, 4->5 granules, 5->6 deadline, 6->7 counters, 7->10 return,
        // 9->10 the whole issue, 10->11 load + wait + use
        // fast source: 5->10 model entry + map (divisions), 10->11 plane record load, 11->12 plane decision
        // (+ 128-bit CAS on a miss), 12->13 channel reservation, 13->6 model return + broadcast
        const int steps[17][2] = {{16, 0}, {0, 8}, {8, 2}, {2, 1}, {1, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 17},
                                  {16, 17}, {17, 18}, {5, 10}, {10, 11}, {11, 12}, {12, 13}, {13, 6}};
        const char* sn[17] = {"call_entry", "descriptor", "classify", "thermal_word", "votes", "one_page_match",
                              "granules", "deadline", "counters", "return", "issue_total", "load_wait_use",
                              "model_map", "model_record_load", "model_plane", "model_channel", "model_return"};
        const int nsteps = fast ? 17 : 12;
        printf("%s{\"name\": \"%s\", \"blocks\": %d, \"threads\": %d, \"steps_cycles\": {", c ? ", " : "",
               names[c], blocks, threads);
        for (int s = 0; s < nsteps; ++s) {
            std::vector<double> v;
            for (int w = 0; w < warps; ++w)
                for (int r = 1; r < R; ++r) {
                    const unsigned long long* o = &hb[((size_t)w * R + r) * 20];
                    v.push_back((double)(long long)(o[steps[s][1]] - o[steps[s][0]]));
                }
            printf("%s\"%s\": {\"median\": %.0f, \"p10\": %.0f, \"p90\": %.0f}", s ? ", " : "", sn[s], median(v),
                   pct(v, 0.1), pct(v, 0.9));
        }
        printf("}}");
    }
    hbf_kernel_counters kc;
    CK(cudaMemcpy(&kc, (char*)dst + offsetof(hbf_device_state, kslots), sizeof(kc), cudaMemcpyDeviceToHost));
    printf("], \"counters_slot0\": {\"requests\": %llu, \"bytes\": %llu, \"program_bytes\": %llu, \"modeled_ns\": %llu, "
           "\"overhead_ns\": %llu, \"ready_waits\": %llu, \"wait_calls\": %llu}}\n",
           (unsigned long long)kc.ops[HBF_OP_LOAD].requests, (unsigned long long)kc.ops[HBF_OP_LOAD].bytes,
           (unsigned long long)kc.ops[HBF_OP_LOAD].program_bytes, (unsigned long long)kc.ops[HBF_OP_LOAD].modeled_ns,
           (unsigned long long)kc.ops[HBF_OP_LOAD].overhead_ns, (unsigned long long)kc.ready_waits,
           (unsigned long long)kc.wait_calls);
    return 0;
}
