#include <cstdio>
__device__ float scale(float x);   // defined in scale.cu (separable compilation: two modules)

__global__ void saxpy(int n, float a, const float* __restrict__ x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * scale(x[i]) + y[i];
}

int main() {
    const int n = 1 << 10;
    float *x, *y;
    if (cudaMallocManaged(&x, n * sizeof(float)) != cudaSuccess) { std::printf("no device\n"); return 0; }
    cudaMallocManaged(&y, n * sizeof(float));
    for (int i = 0; i < n; ++i) { x[i] = 1.0f; y[i] = 2.0f; }
    saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, x, y);
    cudaDeviceSynchronize();
    double s = 0;
    for (int i = 0; i < n; ++i) s += y[i];
    std::printf("sum %.1f\n", s);
    return 0;
}
