// Host-side element conversions for bucket copies and wire compression.
//
// Note [Compression rounding]
// Narrowing rounds to nearest, ties to even, in one step from the source type:
// float64 is not first rounded to float32 (that double rounding would be off
// by one unit in rare ties). Overflow gives infinity of the same sign, NaN
// stays a quiet NaN, subnormal results are kept (not flushed). Widening is
// exact. The CUDA kernels (cuda_kernels.cu) use the toolkit's _rn intrinsics,
// which round the same way, so host and device agree bit for bit (NaN
// payloads aside: the device returns its canonical NaN).
#pragma once

#include <cstddef>
#include <cstdint>

#include "slurmddp/communicator.h"

namespace slurmddp::grad_sync {

uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bfloat16(float f);
float bfloat16_to_float(uint16_t b);
uint16_t double_to_half(double d);
uint16_t double_to_bfloat16(double d);

// True when convert() supports src -> dst: equal types, or one of float32 and
// float64 to or from one of float16 and bfloat16.
bool convertible(DataType src, DataType dst);

// dst[i] = src[i] converted, for n elements; buffers must not overlap (unless
// equal types and src == dst). Throws InvalidArgument when !convertible.
void convert(const void* src, DataType src_type, void* dst, DataType dst_type, size_t n);

}  // namespace slurmddp::grad_sync
