#include <cuda_runtime.h>

#include "gpu_kernels.h"

namespace slurmddp::bench {

namespace {

__global__ void fill_kernel(float* p, size_t n, float scale) {
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[j] = scale * static_cast<float>(j % 7 + 1);
  }
}

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

unsigned blocks_for(size_t n) {
  const size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 1024 ? (b > 0 ? b : 1) : 1024);
}

}  // namespace

void fill_pattern(float* p, size_t n, float scale, CUstream_st* stream) {
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), 256, 0, stream>>>(p, n, scale);
}

void spin_then_fill(long long cycles, float* p, size_t n, float scale, CUstream_st* stream) {
  if (cycles > 0) spin_kernel<<<1, 32, 0, stream>>>(cycles);
  fill_pattern(p, n, scale, stream);
}

}  // namespace slurmddp::bench
