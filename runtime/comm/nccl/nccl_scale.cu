#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "comm/nccl/nccl_scale.h"
#include "common/cuda_launch.h"

namespace slurmddp::comm {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;

template <typename T>
struct Divide {
  __device__ static T apply(T x, int d) { return x / static_cast<T>(d); }
};

template <>
struct Divide<__half> {
  __device__ static __half apply(__half x, int d) {
    return __float2half_rn(__half2float(x) / static_cast<float>(d));
  }
};

template <>
struct Divide<__nv_bfloat16> {
  __device__ static __nv_bfloat16 apply(__nv_bfloat16 x, int d) {
    return __float2bfloat16_rn(__bfloat162float(x) / static_cast<float>(d));
  }
};

template <typename T>
__global__ void divide_kernel(T* data, size_t count, int divisor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    data[i] = Divide<T>::apply(data[i], divisor);
  }
}

template <typename T>
cudaError_t launch(void* data, size_t count, int divisor, cudaStream_t stream) {
  const size_t blocks = std::min(kMaxBlocks, (count + kThreads - 1) / kThreads);
  // Note [Launch errors and pending errors] in common/cuda_launch.h.
  const cudaError_t pending = cuda_util::pending_error();
  divide_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<T*>(data),
                                                                           count, divisor);
  return cuda_util::finish_launch(pending);
}

}  // namespace

cudaError_t launch_divide(void* data, size_t count, DataType type, int divisor,
                          cudaStream_t stream) {
  if (count == 0 || divisor == 1) return cudaSuccess;
  switch (type) {
    case DataType::kFloat32:
      return launch<float>(data, count, divisor, stream);
    case DataType::kFloat64:
      return launch<double>(data, count, divisor, stream);
    case DataType::kFloat16:
      return launch<__half>(data, count, divisor, stream);
    case DataType::kBFloat16:
      return launch<__nv_bfloat16>(data, count, divisor, stream);
    case DataType::kInt32:
      return launch<int32_t>(data, count, divisor, stream);
    case DataType::kInt64:
      return launch<int64_t>(data, count, divisor, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace slurmddp::comm
