// Deterministic collective inputs with closed-form results, shared by the
// unit (threads) and multiproc (processes) suites.
//
// Input of rank r at index i:  v(r, i) = s * (r + 1) * k * scale
//   k = i % 7 + 1, s = +1 for even i and -1 for odd i,
//   scale = 2^33 for int64 (exercises the upper half), 1 otherwise.
// Over n ranks: sum = s * k * n(n+1)/2 * scale; min/max pick rank 0 or rank
// n-1 depending on s; avg = sum / n. Every value involved is an integer (or a
// half-integer for avg) small enough to be exact in bfloat16 for n <= 8, so
// results compare exactly in every type.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "slurmddp/communicator.h"

namespace slurmddp::testing {

using common::all_ops;
using common::all_types;
using common::is_integer;

inline double scale_of(DataType t) {
  return t == DataType::kInt64 ? std::ldexp(1.0, 33) : 1.0;
}

inline double input_value(DataType t, int rank, size_t i) {
  const double k = static_cast<double>(i % 7 + 1);
  const double s = (i % 2) ? -1.0 : 1.0;
  return s * (rank + 1) * k * scale_of(t);
}

inline double expected_reduction(DataType t, ReduceOp op, int n, size_t i) {
  const double k = static_cast<double>(i % 7 + 1);
  const bool positive = (i % 2) == 0;
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

}  // namespace slurmddp::testing
