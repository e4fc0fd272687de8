#include "grad_sync/cast.h"

#include <cstring>
#include <string>

#include "common/dtype.h"
#include "common/half.h"
#include "slurmddp/error.h"

namespace slurmddp::grad_sync {

namespace {

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
  using common::is_16bit_float;
  using common::is_wide_float;
  return (is_wide_float(src) && is_16bit_float(dst)) || (is_16bit_float(src) && is_wide_float(dst));
}

void convert(const void* src, DataType src_type, void* dst, DataType dst_type, size_t n) {
  if (n == 0) {
    return;
  }
  if (src_type == dst_type) {
    if (src != dst) {
      std::memcpy(dst, src, n * common::dtype_size(src_type));
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
