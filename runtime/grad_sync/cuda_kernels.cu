// Note [Batched transfer kernel] in cuda_kernels.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda_launch.h"
#include "grad_sync/cuda_kernels.h"

namespace slurmddp::grad_sync::cuda {

namespace {

// Element types as stored in buffers; 16-bit floats travel as their bits.
struct F32 {
  using T = float;
};
struct F64 {
  using T = double;
};
struct F16 {
  using T = unsigned short;
};
struct BF16 {
  using T = unsigned short;
};

// Same-type moves copy bits; narrowing rounds to nearest even (the _rn
// intrinsics), widening is exact: Note [Compression rounding] in cast.h.
template <typename S, typename D>
struct Convert;

template <typename X>
struct Convert<X, X> {
  __device__ static typename X::T run(typename X::T v) { return v; }
};
template <>
struct Convert<F32, F16> {
  __device__ static unsigned short run(float v) { return __half_as_ushort(__float2half_rn(v)); }
};
template <>
struct Convert<F16, F32> {
  __device__ static float run(unsigned short v) { return __half2float(__ushort_as_half(v)); }
};
template <>
struct Convert<F32, BF16> {
  __device__ static unsigned short run(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};
template <>
struct Convert<BF16, F32> {
  __device__ static float run(unsigned short v) {
    return __bfloat162float(__ushort_as_bfloat16(v));
  }
};
template <>
struct Convert<F64, F16> {
  __device__ static unsigned short run(double v) { return __half_as_ushort(__double2half(v)); }
};
template <>
struct Convert<F16, F64> {
  __device__ static double run(unsigned short v) { return __half2float(__ushort_as_half(v)); }
};
template <>
struct Convert<F64, BF16> {
  __device__ static unsigned short run(double v) {
    return __bfloat16_as_ushort(__double2bfloat16(v));
  }
};
template <>
struct Convert<BF16, F64> {
  __device__ static double run(unsigned short v) {
    return __bfloat162float(__ushort_as_bfloat16(v));
  }
};

template <typename S, typename D>
__global__ void transfer_kernel(const KernelSegment* table, uint32_t segments) {
  __shared__ uint32_t segment;
  const uint64_t block = blockIdx.x;
  if (threadIdx.x == 0) {
    // The last segment whose first block is <= this block.
    uint32_t lo = 0;
    uint32_t hi = segments;
    while (hi - lo > 1) {
      const uint32_t mid = lo + (hi - lo) / 2;
      if (table[mid].first_block <= block) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    segment = lo;
  }
  __syncthreads();
  const KernelSegment s = table[segment];
  const uint64_t begin = (block - s.first_block) * kElementsPerBlock;
  const uint64_t end = begin + kElementsPerBlock < s.count ? begin + kElementsPerBlock : s.count;
  const auto* src = static_cast<const typename S::T*>(s.src);
  auto* dst = static_cast<typename D::T*>(s.dst);
  for (uint64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    dst[i] = Convert<S, D>::run(src[i]);
  }
}

template <typename S, typename D>
int launch(const KernelSegment* table, uint32_t segments, uint64_t blocks, cudaStream_t stream) {
  // Note [Launch errors and pending errors] in common/cuda_launch.h.
  const cudaError_t pending = cuda_util::pending_error();
  transfer_kernel<S, D>
      <<<static_cast<unsigned int>(blocks), kThreadsPerBlock, 0, stream>>>(table, segments);
  return static_cast<int>(cuda_util::finish_launch(pending));
}

}  // namespace

bool kernel_supports(DataType src, DataType dst) {
  const bool wide_src = src == DataType::kFloat32 || src == DataType::kFloat64;
  const bool wide_dst = dst == DataType::kFloat32 || dst == DataType::kFloat64;
  const bool narrow_src = src == DataType::kFloat16 || src == DataType::kBFloat16;
  const bool narrow_dst = dst == DataType::kFloat16 || dst == DataType::kBFloat16;
  if (src == dst) return wide_src || narrow_src;
  return (wide_src && narrow_dst) || (narrow_src && wide_dst);
}

int launch_transfer(const KernelSegment* table, uint32_t segments, uint64_t blocks, DataType src,
                    DataType dst, void* stream_ptr) {
  if (segments == 0 || blocks == 0) return 0;
  if (blocks > 0x7fffffffULL) return static_cast<int>(cudaErrorInvalidConfiguration);
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  using D = DataType;
  if (src == dst) {
    switch (src) {
      case D::kFloat32:
        return launch<F32, F32>(table, segments, blocks, stream);
      case D::kFloat64:
        return launch<F64, F64>(table, segments, blocks, stream);
      case D::kFloat16:
      case D::kBFloat16:
        return launch<F16, F16>(table, segments, blocks, stream);
      default:
        return static_cast<int>(cudaErrorInvalidValue);
    }
  }
  if (src == D::kFloat32 && dst == D::kFloat16)
    return launch<F32, F16>(table, segments, blocks, stream);
  if (src == D::kFloat16 && dst == D::kFloat32)
    return launch<F16, F32>(table, segments, blocks, stream);
  if (src == D::kFloat32 && dst == D::kBFloat16)
    return launch<F32, BF16>(table, segments, blocks, stream);
  if (src == D::kBFloat16 && dst == D::kFloat32)
    return launch<BF16, F32>(table, segments, blocks, stream);
  if (src == D::kFloat64 && dst == D::kFloat16)
    return launch<F64, F16>(table, segments, blocks, stream);
  if (src == D::kFloat16 && dst == D::kFloat64)
    return launch<F16, F64>(table, segments, blocks, stream);
  if (src == D::kFloat64 && dst == D::kBFloat16)
    return launch<F64, BF16>(table, segments, blocks, stream);
  if (src == D::kBFloat16 && dst == D::kFloat64)
    return launch<BF16, F64>(table, segments, blocks, stream);
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace slurmddp::grad_sync::cuda
