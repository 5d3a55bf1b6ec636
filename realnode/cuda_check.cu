// A CUDA program built on the node with its own nvcc (-cudart static, so the image needs no CUDA
// runtime): every device it sees adds two vectors, and the sums are checked on the host.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void add(const int *a, const int *b, int *sum, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) sum[i] = a[i] + b[i];
}

static bool failed(cudaError_t status, const char *what, int device) {
    if (status == cudaSuccess) return false;
    printf("cuda: device %d: %s: %s\n", device, what, cudaGetErrorString(status));
    return true;
}

int main() {
    int devices = 0;
    if (failed(cudaGetDeviceCount(&devices), "cudaGetDeviceCount", -1)) return 1;
    if (devices < 1) {
        printf("cuda: no devices\n");
        return 1;
    }
    const int n = 1 << 16;
    static int a[1 << 16], b[1 << 16], sum[1 << 16];
    for (int i = 0; i < n; ++i) {
        a[i] = i;
        b[i] = 3 * i;
    }
    cudaDeviceProp prop = {};
    for (int device = 0; device < devices; ++device) {
        int *da, *db, *dsum;
        if (failed(cudaSetDevice(device), "cudaSetDevice", device) ||
            failed(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", device) ||
            failed(cudaMalloc(&da, n * sizeof(int)), "cudaMalloc", device) ||
            failed(cudaMalloc(&db, n * sizeof(int)), "cudaMalloc", device) ||
            failed(cudaMalloc(&dsum, n * sizeof(int)), "cudaMalloc", device) ||
            failed(cudaMemcpy(da, a, n * sizeof(int), cudaMemcpyHostToDevice), "cudaMemcpy", device) ||
            failed(cudaMemcpy(db, b, n * sizeof(int), cudaMemcpyHostToDevice), "cudaMemcpy", device))
            return 1;
        add<<<(n + 255) / 256, 256>>>(da, db, dsum, n);
        if (failed(cudaGetLastError(), "kernel launch", device) ||
            failed(cudaMemcpy(sum, dsum, n * sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy back", device))
            return 1;
        for (int i = 0; i < n; ++i) {
            if (sum[i] != 4 * i) {
                printf("cuda: device %d: wrong sum at %d: %d\n", device, i, sum[i]);
                return 1;
            }
        }
        cudaFree(da);
        cudaFree(db);
        cudaFree(dsum);
    }
    printf("cuda: %d device(s), vector add checked on each (%s, sm_%d%d)\n", devices, prop.name, prop.major,
           prop.minor);
    return 0;
}
