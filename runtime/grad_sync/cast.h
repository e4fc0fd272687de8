// Host-side element conversions for bucket copies and wire compression.
//
// Note [Compression rounding]
// The element conversions are common/half.h's (Note [Half rounding]):
// narrowing rounds to nearest, ties to even, in one step from the source type
// (float64 is not first rounded to float32), overflow gives infinity, NaN
// stays a quiet NaN, subnormals are kept, widening is exact. The CUDA kernels
// (cuda_kernels.cu) use the toolkit's _rn intrinsics, which round the same
// way, so host and device agree bit for bit (NaN payloads aside: the device
// returns its canonical NaN).
#pragma once

#include <cstddef>
#include <cstdint>

#include "slurmddp/communicator.h"

namespace slurmddp::grad_sync {

// True when convert() supports src -> dst: equal types, or one of float32 and
// float64 to or from one of float16 and bfloat16.
bool convertible(DataType src, DataType dst);

// dst[i] = src[i] converted, for n elements; buffers must not overlap (unless
// equal types and src == dst). Throws InvalidArgument when !convertible.
void convert(const void* src, DataType src_type, void* dst, DataType dst_type, size_t n);

}  // namespace slurmddp::grad_sync
