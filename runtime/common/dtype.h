// The one table of DataType traits: byte size, name and kind of every element
// type. The public element_size() and to_string(DataType) read it, and so do
// the runtime's type checks, the tests and the benchmarks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/half.h"
#include "slurmddp/communicator.h"

namespace slurmddp::common {

struct DTypeTraits {
  DataType type;
  const char* name;  // as to_string(DataType) and the benchmarks' -t spell it
  size_t size;       // bytes of one element
  bool floating;     // float32, float64, float16, bfloat16
  bool half;         // float16, bfloat16: 16-bit floats, reduced in float32
};

// Every DataType, in the enum's order.
inline constexpr std::array<DTypeTraits, 6> kDTypes = {{
    {DataType::kFloat32, "float32", 4, true, false},
    {DataType::kFloat64, "float64", 8, true, false},
    {DataType::kFloat16, "float16", 2, true, true},
    {DataType::kBFloat16, "bfloat16", 2, true, true},
    {DataType::kInt32, "int32", 4, false, false},
    {DataType::kInt64, "int64", 8, false, false},
}};
static_assert(
    [] {
      for (size_t i = 0; i < kDTypes.size(); ++i) {
        if (static_cast<size_t>(kDTypes[i].type) != i) return false;
      }
      return true;
    }(),
    "kDTypes must list the DataType values in the enum's order");

// Every DataType and every ReduceOp, in the enums' order: what the tests and
// benchmarks that cover them all iterate over.
inline const std::vector<DataType>& all_types() {
  static const std::vector<DataType> t = [] {
    std::vector<DataType> v;
    v.reserve(kDTypes.size());
    for (const auto& d : kDTypes) v.push_back(d.type);
    return v;
  }();
  return t;
}
inline const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> o = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin,
                                          ReduceOp::kMax};
  return o;
}

// The traits of `t`; nullptr for a value outside the enum.
constexpr const DTypeTraits* dtype_traits(DataType t) {
  const auto i = static_cast<size_t>(t);
  return i < kDTypes.size() ? &kDTypes[i] : nullptr;
}

// Bytes of one element; 0 for a value outside the enum.
constexpr size_t dtype_size(DataType t) {
  const DTypeTraits* d = dtype_traits(t);
  return d != nullptr ? d->size : 0;
}

// "float32", ...; "unknown" for a value outside the enum.
constexpr const char* dtype_name(DataType t) {
  const DTypeTraits* d = dtype_traits(t);
  return d != nullptr ? d->name : "unknown";
}

constexpr bool is_floating(DataType t) {
  const DTypeTraits* d = dtype_traits(t);
  return d != nullptr && d->floating;
}

// float16 and bfloat16.
constexpr bool is_16bit_float(DataType t) {
  const DTypeTraits* d = dtype_traits(t);
  return d != nullptr && d->half;
}

// float32 and float64.
constexpr bool is_wide_float(DataType t) {
  return is_floating(t) && !is_16bit_float(t);
}

constexpr bool is_integer(DataType t) {
  const DTypeTraits* d = dtype_traits(t);
  return d != nullptr && !d->floating;
}

// The type named `name` (as dtype_name() spells it); false when none is.
inline bool dtype_from_name(const char* name, DataType* out) {
  for (const DTypeTraits& d : kDTypes) {
    if (std::strcmp(d.name, name) == 0) {
      *out = d.type;
      return true;
    }
  }
  return false;
}

// Element i of a buffer of `t` as a double (16-bit floats widened exactly);
// 0 for a value outside the enum. The buffer need not be aligned.
inline double load_as_double(DataType t, const void* data, size_t i) {
  const auto* p = static_cast<const unsigned char*>(data) + i * dtype_size(t);
  auto load = [p](auto x) {
    std::memcpy(&x, p, sizeof x);
    return x;
  };
  switch (t) {
    case DataType::kFloat32:
      return load(float{});
    case DataType::kFloat64:
      return load(double{});
    case DataType::kFloat16:
      return half_to_float(load(uint16_t{}));
    case DataType::kBFloat16:
      return bfloat16_to_float(load(uint16_t{}));
    case DataType::kInt32:
      return load(int32_t{});
    case DataType::kInt64:
      return static_cast<double>(load(int64_t{}));
  }
  return 0;
}

// Sets element i of a buffer of `t` to `v`, rounded once to the type
// (Note [Half rounding]; integers truncate). The buffer need not be aligned.
inline void store_from_double(DataType t, void* data, size_t i, double v) {
  auto* p = static_cast<unsigned char*>(data) + i * dtype_size(t);
  auto store = [p](auto x) { std::memcpy(p, &x, sizeof x); };
  switch (t) {
    case DataType::kFloat32:
      return store(static_cast<float>(v));
    case DataType::kFloat64:
      return store(v);
    case DataType::kFloat16:
      return store(double_to_half(v));
    case DataType::kBFloat16:
      return store(double_to_bfloat16(v));
    case DataType::kInt32:
      return store(static_cast<int32_t>(v));
    case DataType::kInt64:
      return store(static_cast<int64_t>(v));
  }
}

}  // namespace slurmddp::common
