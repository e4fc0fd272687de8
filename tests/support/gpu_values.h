// Deterministic inputs with closed-form results for the gpu suite, their host
// encoding (common/dtype.h), and an owner of device memory.
//
// Input of rank r at index i:  v(r, i) = (r + 1) * k * scale,  k = i % 7 + 1,
// scale = 2^33 for int64 (exercises the upper half), 1 otherwise. Values are
// positive, so integer averages truncate the same way everywhere. Over n
// ranks: sum = k * n(n+1)/2 * scale, min = k * scale, max = n * k * scale,
// avg = sum / n (integers: truncated). For n <= 4 every sum, min and max is an
// integer below 256, exact in bfloat16 and float16; averages of floating
// types carry NCCL's rounding (ncclAvg pre-multiplies by 1/n in the type's
// own precision), so they compare with a relative tolerance.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "slurmddp/communicator.h"

namespace slurmddp::gpu_testing {

using common::all_ops;
using common::all_types;
using common::is_integer;

inline double scale_of(DataType t) {
  return t == DataType::kInt64 ? std::ldexp(1.0, 33) : 1.0;
}

inline double input_value(DataType t, int rank, size_t i) {
  return static_cast<double>(rank + 1) * static_cast<double>(i % 7 + 1) * scale_of(t);
}

inline double expected_reduction(DataType t, ReduceOp op, int n, size_t i) {
  const double k = static_cast<double>(i % 7 + 1) * scale_of(t);
  const double sum = k * n * (n + 1) / 2.0;
  switch (op) {
    case ReduceOp::kSum:
      return sum;
    case ReduceOp::kMin:
      return k;
    case ReduceOp::kMax:
      return k * n;
    case ReduceOp::kAvg:
      return is_integer(t) ? std::trunc(sum / n) : sum / n;
  }
  return 0;
}

// Largest accepted |got - expected|.
inline double tolerance(DataType t, ReduceOp op, double expected) {
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

// Host bytes of `count` elements of `t` with element i = value(i).
template <typename F>
std::vector<uint8_t> encode(DataType t, size_t count, F value) {
  std::vector<uint8_t> out(count * element_size(t));
  for (size_t i = 0; i < count; ++i) common::store_from_double(t, out.data(), i, value(i));
  return out;
}

inline double decode(DataType t, const uint8_t* p) {
  return common::load_as_double(t, p, 0);
}

// Device memory owned for one scope (on the current device).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0 && cudaMalloc(&ptr_, bytes_) != cudaSuccess) {
      ptr_ = nullptr;
      error_ = cudaGetErrorString(cudaGetLastError());
    }
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(ptr_); }
  size_t size() const { return bytes_; }
  bool ok() const { return bytes_ == 0 || ptr_ != nullptr; }
  const std::string& error() const { return error_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  std::string error_;
};

}  // namespace slurmddp::gpu_testing
