// Deterministic collective inputs with closed-form results, and their host
// encoding (common/dtype.h): one family for every suite (unit threads,
// multiproc processes, the gpu suite, the NCCL benchmark).
//
// Input of rank r at index i:  v(r, i) = s * (r + 1) * k * scale
//   k = i % 7 + 1, scale = 2^33 for int64 (exercises the upper half), 1 otherwise,
//   s = +1 for even i and -1 for odd i with Signs::kMixed (min and max then
//   pick rank 0 or rank n-1 by index), always +1 with Signs::kPositive.
// Over n ranks: sum = s * k * n(n+1)/2 * scale; min/max = k or n*k (times s,
// ordered by s); avg = sum / n, truncated toward zero for integer types (C++
// and NCCL alike for positive sums). Every sum, min and max is an integer small
// enough to be exact in bfloat16 and float16 for n <= 8, so results compare
// exactly in every type; only a backend that pre-multiplies by 1/n in the
// type's own precision (NCCL's floating average) needs rounded_average_tolerance().
//
// kPositive is the NCCL suite's: with positive values an integer average
// truncates the same way however a backend divides (before or after the sum,
// in a signed or an unsigned type).

#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace slurmddp::support {

using common::all_ops;
using common::all_types;
using common::is_integer;

enum class Signs { kMixed, kPositive };

inline double scale_of(DataType t) {
  return t == DataType::kInt64 ? std::ldexp(1.0, 33) : 1.0;
}

inline bool negative_at(Signs signs, size_t i) {
  return signs == Signs::kMixed && i % 2 == 1;
}

inline double input_value(DataType t, int rank, size_t i, Signs signs = Signs::kMixed) {
  const double k = static_cast<double>(i % 7 + 1);
  const double s = negative_at(signs, i) ? -1.0 : 1.0;
  return s * (rank + 1) * k * scale_of(t);
}

inline double expected_reduction(DataType t, ReduceOp op, int n, size_t i,
                                 Signs signs = Signs::kMixed) {
  const double k = static_cast<double>(i % 7 + 1);
  const bool positive = !negative_at(signs, i);
  const double s = positive ? 1.0 : -1.0;
  const double scale = scale_of(t);
  const double sum = s * k * n * (n + 1) / 2.0 * scale;
  switch (op) {
    case ReduceOp::kSum:
      return sum;
    case ReduceOp::kMin:
      return (positive ? k : -k * n) * scale;
    case ReduceOp::kMax:
      return (positive ? k * n : -k) * scale;
    case ReduceOp::kAvg:
      if (is_integer(t)) {
        const auto isum = static_cast<int64_t>(sum);
        return static_cast<double>(isum / n);  // C++ truncation toward zero
      }
      return sum / n;
  }
  return 0;
}

// Largest accepted |got - expected| where floating averages are computed by
// pre-multiplying with 1/n in the element type (NCCL); 0 for everything else.
inline double rounded_average_tolerance(DataType t, ReduceOp op, double expected) {
  if (op != ReduceOp::kAvg || is_integer(t)) return 0.0;
  switch (t) {
    case DataType::kFloat32:
      return 1e-5 * std::fabs(expected);
    case DataType::kFloat64:
      return 1e-12 * std::fabs(expected);
    default:
      return 3e-2 * std::fabs(expected);
  }
}

inline void store_value(DataType t, void* buf, size_t i, double v) {
  common::store_from_double(t, buf, i, v);
}

inline double load_value(DataType t, const void* buf, size_t i) {
  return common::load_as_double(t, buf, i);
}

// A byte buffer of `count` elements of `t`.
inline std::vector<uint8_t> make_buffer(DataType t, size_t count) {
  return std::vector<uint8_t>(count * element_size(t) + 1);  // +1: never a null data()
}

// Fills elements [0, count) with input_value(t, rank, first + i).
inline void fill(DataType t, void* buf, size_t count, int rank, size_t first = 0) {
  for (size_t i = 0; i < count; ++i) store_value(t, buf, i, input_value(t, rank, first + i));
}

// Host bytes of `count` elements of `t` with element i = value(i).
template <typename F>
std::vector<uint8_t> encode(DataType t, size_t count, F value) {
  std::vector<uint8_t> out(count * element_size(t));
  for (size_t i = 0; i < count; ++i) store_value(t, out.data(), i, value(i));
  return out;
}

inline double decode(DataType t, const uint8_t* p) {
  return load_value(t, p, 0);
}

// "" when buf[i] == want(i) for all i < count, else a description of the first
// few mismatches (and how many there are).
template <typename Want>
std::string mismatches(DataType t, const void* buf, size_t count, Want want) {
  std::ostringstream os;
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    const double got = load_value(t, buf, i);
    const double w = want(i);
    if (got != w) {
      if (bad < 3) os << " [" << i << "] got " << got << " want " << w << ";";
      ++bad;
    }
  }
  if (bad == 0) return "";
  os << " (" << bad << " of " << count << " wrong)";
  return os.str();
}

}  // namespace slurmddp::support
