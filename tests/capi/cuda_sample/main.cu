// capi_sample: a cuda-samples-style program (cudart, <<<>>>) whose inputs live in modeled HBF.
//
//   capi_sample [--socket S] [--summary PATH] [--out PATH] [--n N] [--iters K] [--native] [--dry-run]
//               [--artifacts A[:B]] [--allow-unmodeled]
//
// --native: no hbfsim at all (the plain build's reference run); --dry-run: attach without CUDA and bind
// (the kernels and their host stubs are found and printed; nothing runs: for machines without a GPU);
// --artifacts: the admission records to bind from (default: capi_sample.hbfcc.json). Otherwise:
// attach, register a and b as timing ranges, bind the program's modules, run, synchronize (a recorded
// device failure is reported), print the counters, write the summary and the output (c, then the sums).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "hbfsim.hpp"

#define CUDA_CHECK(x)                                                                                   \
    do {                                                                                                \
        cudaError_t e_ = (x);                                                                           \
        if (e_ != cudaSuccess) {                                                                        \
            std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, __LINE__, \
                         cudaGetErrorString(e_));                                                       \
            std::exit(2);                                                                               \
        }                                                                                               \
    } while (0)

__global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

__global__ void saxpy(float alpha, const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = alpha * x[i] + y[i];
}

template <int BLOCK>
__global__ void block_sum(const float* x, float* partial, int n) {
    __shared__ float s[BLOCK];
    float v = 0.f;
    for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += BLOCK * gridDim.x) v += x[i];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int w = BLOCK / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);   // line by line into a pipe: a run killed by a timeout still shows its last step
    const char* sock = nullptr;
    const char* summary = "capi_sample.summary.json";
    const char* out = nullptr;
    int n = 1 << 20, iters = 3;
    const char* artifacts = nullptr;
    bool native = false, dry = false, allow = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&]() -> const char* {
            if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", a.c_str()); std::exit(64); }
            return argv[++i];
        };
        if (a == "--socket") sock = next();
        else if (a == "--summary") summary = next();
        else if (a == "--out") out = next();
        else if (a == "--n") n = std::atoi(next());
        else if (a == "--iters") iters = std::atoi(next());
        else if (a == "--native") native = true;
        else if (a == "--dry-run") dry = true;
        else if (a == "--artifacts") artifacts = next();
        else if (a == "--allow-unmodeled") allow = true;
        else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); return 64; }
    }
    if (n <= 0 || iters <= 0) { std::fprintf(stderr, "--n and --iters must be > 0\n"); return 64; }
    try {
        if (dry) {
            std::printf("stub _Z10vector_addPKfS0_Pfi %p\nstub _Z5saxpyfPKfPfi %p\nstub _Z9block_sumILi256EEvPKfPfi %p\n",
                        (void*)vector_add, (void*)saxpy, (void*)block_sum<256>);
            hbfsim::Session s(sock, HBFSIM_ATTACH_NO_CUDA | (allow ? HBFSIM_ATTACH_ALLOW_UNMODELED : 0));
            hbfsim_bind_report r = s.bind_all(artifacts);
            std::printf("bind modules=%u kernels=%u admitted=%u not_admitted=%u\n", r.modules, r.kernels,
                        r.admitted, r.not_admitted);
            s.write_summary(summary);
            s.detach();
            return 0;
        }
        const size_t bytes = size_t(n) * sizeof(float);
        std::vector<float> ha(n), hb(n), hc(n);
        for (int i = 0; i < n; i++) { ha[i] = float(i % 1000) * 0.5f; hb[i] = float((i * 7) % 333) * 0.25f; }
        float *a, *b, *c, *partial;
        const int blocks = 264;
        CUDA_CHECK(cudaMalloc(&a, bytes));
        CUDA_CHECK(cudaMalloc(&b, bytes));
        CUDA_CHECK(cudaMalloc(&c, bytes));
        CUDA_CHECK(cudaMalloc(&partial, blocks * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(a, ha.data(), bytes, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(b, hb.data(), bytes, cudaMemcpyHostToDevice));

        std::unique_ptr<hbfsim::Session> s;
        if (!native) s.reset(new hbfsim::Session(sock, allow ? HBFSIM_ATTACH_ALLOW_UNMODELED : 0));
        hbfsim::Range ra, rb;   // destroyed (unregistered) before the session
        if (s) {
            hbfsim_bind_report r = s->bind_all(artifacts);
            std::printf("bind modules=%u kernels=%u admitted=%u not_admitted=%u\n", r.modules, r.kernels,
                        r.admitted, r.not_admitted);
            ra = s->register_timing_range(a, bytes, "a");
            rb = s->register_timing_range(b, bytes, "b");
        }
        cudaEvent_t t0, t1;
        CUDA_CHECK(cudaEventCreate(&t0));
        CUDA_CHECK(cudaEventCreate(&t1));
        CUDA_CHECK(cudaEventRecord(t0));
        for (int it = 0; it < iters; it++) {
            vector_add<<<(n + 255) / 256, 256>>>(a, b, c, n);
            saxpy<<<blocks, 256>>>(0.5f, a, c, n);
        }
        block_sum<256><<<blocks, 256>>>(c, partial, n);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaEventRecord(t1));
        if (s) s->synchronize();   // throws hbfsim::DeviceFailure with status and site
        CUDA_CHECK(cudaDeviceSynchronize());
        float ms = 0.f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
        std::vector<float> hp(blocks);
        CUDA_CHECK(cudaMemcpy(hc.data(), c, bytes, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(hp.data(), partial, blocks * sizeof(float), cudaMemcpyDeviceToHost));
        double sum = 0;
        for (float p : hp) sum += p;
        std::printf("elapsed_ms=%.3f sum=%.6e\n", ms, sum);
        if (s) {
            hbfsim_counters k = s->counters();
            std::printf("counters requests=%llu media_bytes=%llu program_bytes=%llu modeled_ns=%llu "
                        "exposed_wait_ns=%llu lateness_ns=%llu helper_ns=%llu slack_ns=%llu launches=%llu\n",
                        (unsigned long long)k.requests, (unsigned long long)k.media_bytes,
                        (unsigned long long)k.program_bytes, (unsigned long long)k.modeled_ns,
                        (unsigned long long)k.exposed_wait_ns, (unsigned long long)k.lateness_ns,
                        (unsigned long long)k.helper_ns, (unsigned long long)k.slack_ns,
                        (unsigned long long)k.launches);
            ra.reset();
            rb.reset();
            s->write_summary(summary);
            s->detach();
        }
        if (out) {
            FILE* f = std::fopen(out, "wb");
            if (!f) { std::perror(out); return 3; }
            std::fwrite(hc.data(), sizeof(float), hc.size(), f);
            std::fwrite(hp.data(), sizeof(float), hp.size(), f);
            std::fclose(f);
        }
        CUDA_CHECK(cudaFree(a));
        CUDA_CHECK(cudaFree(b));
        CUDA_CHECK(cudaFree(c));
        CUDA_CHECK(cudaFree(partial));
    } catch (const hbfsim::DeviceFailure& e) {
        std::fprintf(stderr, "device failure: %s (status %s, kernel %u, site %u)\n", e.what(),
                     e.failure().status_name, e.failure().kernel_index, e.failure().site_index);
        return 4;
    } catch (const hbfsim::Error& e) {
        std::fprintf(stderr, "hbfsim error %d: %s\n", e.code(), e.what());
        return 5;
    }
    return 0;
}
