// Does an L2 prefetch of an address no allocation holds fault? (HBFCC_PREFETCH_NEXT, stop 55: hbfcc prefetches the
// next iteration's load addresses on the loop's back-edge predicate; a masked-off tail may name an address past the
// tensor.) Each case launches 1024 blocks x 256 threads, every thread prefetching its own address (base + tid * 16),
// then synchronizes and reports the error, if any; after a sticky error the process cannot go on, so each case is a
// separate run of this program: prefetch_probe <case>.
//   nvcc -arch=sm_90a -O3 -o /tmp/pfp bench/probes/prefetch_probe.cu && for c in 0 1 2 3 4 5; do /tmp/pfp $c; done
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cuda_runtime.h>

__global__ void pf_global(uint64_t base) {
    uint64_t a = base + (uint64_t)(blockIdx.x * blockDim.x + threadIdx.x) * 16u;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
}
__global__ void pf_generic(uint64_t base) {
    uint64_t a = base + (uint64_t)(blockIdx.x * blockDim.x + threadIdx.x) * 16u;
    asm volatile("prefetch.L2 [%0];" ::"l"(a));
}
__global__ void touch(const float* p, float* out) { out[0] = p[threadIdx.x]; }

int main(int argc, char** argv) {
    int c = argc > 1 ? atoi(argv[1]) : 0;
    float *buf = nullptr, *out = nullptr;
    const size_t bytes = 64ull << 20;
    cudaMalloc(&buf, bytes);
    cudaMalloc(&out, 4);
    uint64_t base = 0;
    const char* what = "?";
    bool generic = false;
    switch (c) {
        case 0: base = (uint64_t)buf; what = "inside a 64 MiB allocation (control)"; break;
        case 1: base = (uint64_t)buf + bytes; what = "right past the allocation's end (4 MiB beyond)"; break;
        case 2: base = (uint64_t)buf + (1ull << 36); what = "64 GiB past the allocation"; break;
        case 3: base = 0x1000; what = "address 0x1000 (null page)"; break;
        case 4: base = 0x7f0000000000ull; what = "0x7f0000000000 (unmapped high)"; break;
        case 5: {
            float* f = nullptr;
            cudaMalloc(&f, bytes);
            cudaFree(f);
            base = (uint64_t)f; what = "a freed 64 MiB allocation"; break;
        }
        case 6: base = 0x7f0000000000ull; generic = true; what = "generic prefetch.L2 of 0x7f0000000000"; break;
        default: fprintf(stderr, "case 0-6\n"); return 2;
    }
    if (generic)
        pf_generic<<<1024, 256>>>(base);
    else
        pf_global<<<1024, 256>>>(base);
    cudaError_t e = cudaDeviceSynchronize();
    cudaError_t e2 = cudaSuccess;
    if (e == cudaSuccess) {           // the context is still usable: a real kernel after it runs
        touch<<<1, 32>>>(buf, out);
        e2 = cudaDeviceSynchronize();
    }
    printf("case %d %-45s prefetch: %s; a kernel after it: %s\n", c, what, cudaGetErrorString(e),
           e == cudaSuccess ? cudaGetErrorString(e2) : "(not run)");
    return e == cudaSuccess && e2 == cudaSuccess ? 0 : 1;
}
