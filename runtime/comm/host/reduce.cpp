#include "comm/host/reduce.h"

#include <cstring>
#include <type_traits>

#include "common/half.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {

namespace {

// The kernels use GCC's portable vector extensions (16-byte vectors: SSE2 on
// x86-64, NEON on arm64) so they are SIMD at the project's default -O2, where
// GCC 12's "very cheap" vectorizer leaves these loops scalar.
template <typename T>
struct Vec {
  typedef T type __attribute__((vector_size(16)));
};
template <typename T>
using VecT = typename Vec<T>::type;
template <typename T>
using UVecT = typename Vec<std::make_unsigned_t<T>>::type;
template <typename T>
constexpr size_t kLanes = 16 / sizeof(T);

template <typename V>
V load(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename V>
void store(void* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

struct SumOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));  // wraps
    } else {
      return a + b;
    }
  }
  template <typename T>
  static VecT<T> apply_vec(VecT<T> a, VecT<T> b) {
    if constexpr (std::is_integral_v<T>) {
      return reinterpret_cast<VecT<T>>(reinterpret_cast<UVecT<T>>(a) +
                                       reinterpret_cast<UVecT<T>>(b));
    } else {
      return a + b;
    }
  }
};

struct MinOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? a : b;
    } else {
      return (a < b || a != a) ? a : b;  // NaN in either operand wins
    }
  }
  template <typename T>
  static VecT<T> apply_vec(VecT<T> a, VecT<T> b) {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? a : b;
    } else {
      return ((a < b) | (a != a)) ? a : b;
    }
  }
};

struct MaxOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a > b ? a : b;
    } else {
      return (a > b || a != a) ? a : b;
    }
  }
  template <typename T>
  static VecT<T> apply_vec(VecT<T> a, VecT<T> b) {
    if constexpr (std::is_integral_v<T>) {
      return a > b ? a : b;
    } else {
      return ((a > b) | (a != a)) ? a : b;
    }
  }
};

// out[i] = op(a[i], b[i]); out may equal a or b exactly (each block is loaded
// before it is stored).
template <typename T, typename Op>
void three(void* out_v, const void* a_v, const void* b_v, size_t n) {
  using V = VecT<T>;
  auto* out = static_cast<T*>(out_v);
  const auto* a = static_cast<const T*>(a_v);
  const auto* b = static_cast<const T*>(b_v);
  constexpr size_t kStep = 2 * kLanes<T>;
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    const V r0 = Op::template apply_vec<T>(load<V>(a + i), load<V>(b + i));
    const V r1 = Op::template apply_vec<T>(load<V>(a + i + kLanes<T>), load<V>(b + i + kLanes<T>));
    store(out + i, r0);
    store(out + i + kLanes<T>, r1);
  }
  for (; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

template <typename T, typename Op>
void inplace(void* dst, const void* src, size_t n) {
  three<T, Op>(dst, dst, src, n);
}

template <typename T>
InplaceReduceFn inplace_for(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return &inplace<T, SumOp>;
    case ReduceOp::kMin:
      return &inplace<T, MinOp>;
    case ReduceOp::kMax:
      return &inplace<T, MaxOp>;
    case ReduceOp::kAvg:
      break;
  }
  throw InvalidArgument(std::string("comm: failed to select a reduction: ") + to_string(op) +
                        " is applied as sum followed by a division");
}

using ThreeFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ThreeFn three_for(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return &three<T, SumOp>;
    case ReduceOp::kMin:
      return &three<T, MinOp>;
    case ReduceOp::kMax:
      return &three<T, MaxOp>;
    case ReduceOp::kAvg:
      break;
  }
  throw InvalidArgument(std::string("comm: failed to select a reduction: ") + to_string(op) +
                        " is applied as sum followed by a division");
}

[[noreturn]] void not_native(DataType type) {
  throw InvalidArgument(std::string("comm: failed to select a reduction kernel: type ") +
                        to_string(type) + " is not reduced natively; type=" + to_string(type));
}

template <typename T>
void divide_as(void* data, size_t n, int divisor) {
  T* p = static_cast<T*>(data);
  const T d = static_cast<T>(divisor);
  for (size_t i = 0; i < n; ++i) p[i] = p[i] / d;
}

}  // namespace

bool is_native(DataType type) {
  return common::dtype_traits(type) != nullptr && !common::is_16bit_float(type);
}

void widen_to_float(DataType type, const void* src, float* dst, size_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  if (type == DataType::kFloat16) {
    common::half_to_floats(s, dst, n);
  } else if (type == DataType::kBFloat16) {
    common::bfloat16_to_floats(s, dst, n);
  } else {
    not_native(type);
  }
}

void narrow_from_float(DataType type, const float* src, void* dst, size_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  if (type == DataType::kFloat16) {
    common::floats_to_half(src, d, n);
  } else if (type == DataType::kBFloat16) {
    common::floats_to_bfloat16(src, d, n);
  } else {
    not_native(type);
  }
}

InplaceReduceFn inplace_reducer(DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kFloat32:
      return inplace_for<float>(op);
    case DataType::kFloat64:
      return inplace_for<double>(op);
    case DataType::kInt32:
      return inplace_for<int32_t>(op);
    case DataType::kInt64:
      return inplace_for<int64_t>(op);
    case DataType::kFloat16:
    case DataType::kBFloat16:
      break;
  }
  not_native(type);
}

void reduce3(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  switch (type) {
    case DataType::kFloat32:
      return three_for<float>(op)(out, a, b, n);
    case DataType::kFloat64:
      return three_for<double>(op)(out, a, b, n);
    case DataType::kInt32:
      return three_for<int32_t>(op)(out, a, b, n);
    case DataType::kInt64:
      return three_for<int64_t>(op)(out, a, b, n);
    case DataType::kFloat16:
    case DataType::kBFloat16:
      break;
  }
  not_native(type);
}

void divide(DataType type, void* data, size_t n, int divisor) {
  switch (type) {
    case DataType::kFloat32:
      return divide_as<float>(data, n, divisor);
    case DataType::kFloat64:
      return divide_as<double>(data, n, divisor);
    case DataType::kInt32:
      return divide_as<int32_t>(data, n, divisor);
    case DataType::kInt64:
      return divide_as<int64_t>(data, n, divisor);
    case DataType::kFloat16:
    case DataType::kBFloat16:
      break;
  }
  not_native(type);
}

}  // namespace slurmddp::comm
