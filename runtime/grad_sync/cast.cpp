#include "grad_sync/cast.h"

#include <cstring>
#include <string>

#include "common/half.h"
#include "slurmddp/error.h"

namespace slurmddp::grad_sync {

namespace {

bool is_16bit(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16;
}
bool is_wide(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64;
}

template <typename Src, typename Dst, typename Fn>
void map(const void* src, void* dst, size_t n, Fn fn) {
  const auto* s = static_cast<const Src*>(src);
  auto* d = static_cast<Dst*>(dst);
  for (size_t i = 0; i < n; ++i) {
    d[i] = fn(s[i]);
  }
}

}  // namespace

bool convertible(DataType src, DataType dst) {
  if (src == dst) {
    return true;
  }
  return (is_wide(src) && is_16bit(dst)) || (is_16bit(src) && is_wide(dst));
}

void convert(const void* src, DataType src_type, void* dst, DataType dst_type, size_t n) {
  if (n == 0) {
    return;
  }
  if (src_type == dst_type) {
    size_t es = 0;
    switch (src_type) {
      case DataType::kFloat16:
      case DataType::kBFloat16:
        es = 2;
        break;
      case DataType::kFloat32:
      case DataType::kInt32:
        es = 4;
        break;
      case DataType::kFloat64:
      case DataType::kInt64:
        es = 8;
        break;
    }
    if (src != dst) {
      std::memcpy(dst, src, n * es);
    }
    return;
  }
  using D = DataType;
  if (src_type == D::kFloat32 && dst_type == D::kFloat16) {
    common::floats_to_half(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  } else if (src_type == D::kFloat16 && dst_type == D::kFloat32) {
    common::half_to_floats(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  } else if (src_type == D::kFloat32 && dst_type == D::kBFloat16) {
    common::floats_to_bfloat16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  } else if (src_type == D::kBFloat16 && dst_type == D::kFloat32) {
    common::bfloat16_to_floats(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  } else if (src_type == D::kFloat64 && dst_type == D::kFloat16) {
    map<double, uint16_t>(src, dst, n, common::double_to_half);
  } else if (src_type == D::kFloat16 && dst_type == D::kFloat64) {
    map<uint16_t, double>(src, dst, n, [](uint16_t h) { return double{common::half_to_float(h)}; });
  } else if (src_type == D::kFloat64 && dst_type == D::kBFloat16) {
    map<double, uint16_t>(src, dst, n, common::double_to_bfloat16);
  } else if (src_type == D::kBFloat16 && dst_type == D::kFloat64) {
    map<uint16_t, double>(src, dst, n,
                          [](uint16_t b) { return double{common::bfloat16_to_float(b)}; });
  } else {
    throw InvalidArgument("grad_sync: failed to convert elements: unsupported conversion; src=" +
                          std::to_string(static_cast<int>(src_type)) +
                          ", dst=" + std::to_string(static_cast<int>(dst_type)));
  }
}

}  // namespace slurmddp::grad_sync
