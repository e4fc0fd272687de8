// Element-wise arithmetic behind the CPU collectives: 16-bit float
// conversions and the reduction kernels handed to Gloo.
//
// Note [16-bit reductions]: float16 and bfloat16 buffers are reduced in
// float32. Each is widened to float32 (exact), the collective runs on float32,
// and the result is rounded once, to nearest even, back to 16 bits. Sums of
// values exactly representable in float32 are therefore exact until the final
// rounding, results do not depend on the order in which ranks are combined,
// and every rank receives bit-identical values. The price is twice the bytes on
// the wire compared with a 16-bit reduction.
//
// Note [Average]: avg is sum followed by a division by the world size, in the
// type's own arithmetic: float32/float64 divide (IEEE, round to nearest);
// float16/bfloat16 divide in float32 and round once; int32/int64 divide with
// C++ semantics (truncation toward zero).
//
// Integer sums wrap around (two's complement) instead of overflowing.
// Floating-point min and max propagate NaN: if either operand is NaN the result
// is NaN.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "slurmddp/communicator.h"

namespace slurmddp::comm {

// float16/bfloat16 buffers <-> float32 (`type` must be one of the two), with
// common/half.h's rounding (Note [Half rounding]).
void widen_to_float(DataType type, const void* src, float* dst, size_t n);
void narrow_from_float(DataType type, const float* src, void* dst, size_t n);

// True for the types Gloo reduces natively here (float32, float64, int32, int64).
bool is_native(DataType type);
using common::is_16bit_float;

// dst[i] = op(dst[i], src[i]) for a native type and op in {sum, min, max}.
using InplaceReduceFn = void (*)(void* dst, const void* src, size_t n);
InplaceReduceFn inplace_reducer(DataType type, ReduceOp op);

// out[i] = op(a[i], b[i]); out may alias a or b exactly (not partially).
void reduce3(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t n);

// data[i] /= divisor (see Note [Average]); `type` native.
void divide(DataType type, void* data, size_t n, int divisor);

}  // namespace slurmddp::comm
