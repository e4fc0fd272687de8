// The one host-side float16 and bfloat16 conversion, used by the runtime
// (comm's 16-bit reductions, grad_sync's casts and compression), the tests
// and the benchmarks.
//
// Note [Half rounding]
// Narrowing rounds to nearest, ties to even. Overflow gives infinity of the
// same sign; NaN stays NaN, made quiet, with its sign and the top bits of its
// payload (what F16C's vcvtps2ph does); subnormal results are kept, not
// flushed. Widening is exact. float64 is narrowed in one rounding step: it is
// first rounded to float32 "to odd", which keeps a second rounding to a type
// at least two bits narrower correct (plain float64 -> float32 -> float16
// would be off by one unit in rare ties). The bulk float16 forms use F16C
// where the CPU has it (same results, eight elements an instruction).
#pragma once

#include <cstddef>
#include <cstdint>

namespace slurmddp::common {

uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bfloat16(float f);
float bfloat16_to_float(uint16_t b);
uint16_t double_to_half(double d);
uint16_t double_to_bfloat16(double d);

// dst[i] = the conversion of src[i] for n elements; buffers must not overlap.
void floats_to_half(const float* src, uint16_t* dst, size_t n);
void half_to_floats(const uint16_t* src, float* dst, size_t n);
void floats_to_bfloat16(const float* src, uint16_t* dst, size_t n);
void bfloat16_to_floats(const uint16_t* src, float* dst, size_t n);

}  // namespace slurmddp::common
