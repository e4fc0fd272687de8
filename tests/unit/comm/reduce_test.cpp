// The arithmetic under the CPU collectives: 16-bit conversions, reduction
// kernels, average.
#include "comm/host/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/half.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {
namespace {

using common::bfloat16_to_float;
using common::float_to_bfloat16;
using common::float_to_half;
using common::half_to_float;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Half, EveryValueSurvivesARoundTrip) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    const bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
    if (nan) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << h;
    } else {
      EXPECT_EQ(float_to_half(f), h) << "half 0x" << std::hex << h << " -> " << f;
    }
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);  // below the midpoint to 2^16
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // the midpoint rounds to even: inf
  EXPECT_EQ(float_to_half(1e9f), 0x7c00);
  EXPECT_EQ(float_to_half(-1e9f), 0xfc00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);         // tie to even: 0
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);         // above the tie
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);         // 1.5 ulp: tie to even 2
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie to even (up)
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);
}

// Rounding to nearest even, checked against the two neighbouring halves.
TEST(Half, NarrowingPicksTheNearestNeighbour) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  std::uniform_int_distribution<int> expo(-30, 15);
  for (int i = 0; i < 200000; ++i) {
    float f = i % 2 ? dist(gen) : std::ldexp(dist(gen) / 70000.0f, expo(gen));
    const uint16_t h = float_to_half(f);
    const double got = half_to_float(h);
    if (std::isinf(got)) {
      EXPECT_GE(std::fabs(f), 65520.0f) << f;
      continue;
    }
    // Neighbours of h towards and away from zero.
    const double up = half_to_float(static_cast<uint16_t>(h + 1));
    const double down = (h & 0x7fff) ? half_to_float(static_cast<uint16_t>(h - 1)) : -got;
    const double err = std::fabs(static_cast<double>(f) - got);
    if (!std::isinf(up)) {
      EXPECT_LE(err, std::fabs(static_cast<double>(f) - up)) << f;
    }
    EXPECT_LE(err, std::fabs(static_cast<double>(f) - down)) << f;
  }
}

TEST(BFloat16, RoundTripAndRounding) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = bfloat16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(f))));
    } else {
      EXPECT_EQ(float_to_bfloat16(f), b);
    }
  }
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(from_bits(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(float_to_bfloat16(from_bits(0x3f818000)), 0x3f82);  // tie, odd goes up
  EXPECT_EQ(float_to_bfloat16(from_bits(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(float_to_bfloat16(from_bits(0x7f7fffff)), 0x7f80);  // max float rounds to inf
  EXPECT_EQ(bits(bfloat16_to_float(0xc040)), 0xc0400000u);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(from_bits(0x7f800001)))));
}

TEST(Convert, BulkMatchesScalar) {
  std::vector<uint16_t> h = {0x3c00, 0x0001, 0xfbff, 0x7c00, 0x3555};
  std::vector<float> f(h.size());
  widen_to_float(DataType::kFloat16, h.data(), f.data(), h.size());
  std::vector<uint16_t> back(h.size());
  narrow_from_float(DataType::kFloat16, f.data(), back.data(), h.size());
  EXPECT_EQ(back, h);
  widen_to_float(DataType::kBFloat16, h.data(), f.data(), h.size());
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ(f[i], bfloat16_to_float(h[i]));
  EXPECT_THROW(widen_to_float(DataType::kFloat32, h.data(), f.data(), 1), InvalidArgument);
}

template <typename T>
void check_kernels(DataType type) {
  // Lengths around the vector width, so both the SIMD body and the tail run.
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{8}, size_t{17}, size_t{1001}}) {
    std::vector<T> a(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = static_cast<T>(static_cast<int>(i % 11) - 5);
      b[i] = static_cast<T>(static_cast<int>(i % 7) * 2 - 6);
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
      std::vector<T> expect(n);
      for (size_t i = 0; i < n; ++i) {
        expect[i] = op == ReduceOp::kSum   ? static_cast<T>(a[i] + b[i])
                    : op == ReduceOp::kMin ? std::min(a[i], b[i])
                                           : std::max(a[i], b[i]);
      }
      std::vector<T> x = a;
      inplace_reducer(type, op)(x.data(), b.data(), n);
      EXPECT_EQ(x, expect) << to_string(type) << ' ' << to_string(op) << " n=" << n;
      std::vector<T> out(n, T(99));
      reduce3(type, op, out.data(), a.data(), b.data(), n);
      EXPECT_EQ(out, expect);
      std::vector<T> y = b;  // out aliases the second operand
      reduce3(type, op, y.data(), a.data(), y.data(), n);
      EXPECT_EQ(y, expect);
    }
  }
}

TEST(Kernels, SumMinMaxEveryNativeType) {
  check_kernels<float>(DataType::kFloat32);
  check_kernels<double>(DataType::kFloat64);
  check_kernels<int32_t>(DataType::kInt32);
  check_kernels<int64_t>(DataType::kInt64);
}

TEST(Kernels, IntegerSumsWrap) {
  std::vector<int32_t> x(20, std::numeric_limits<int32_t>::max());
  std::vector<int32_t> y(20, 1);
  inplace_reducer(DataType::kInt32, ReduceOp::kSum)(x.data(), y.data(), x.size());
  for (auto v : x) EXPECT_EQ(v, std::numeric_limits<int32_t>::min());
  std::vector<int64_t> p(5, std::numeric_limits<int64_t>::min());
  std::vector<int64_t> q(5, -1);
  inplace_reducer(DataType::kInt64, ReduceOp::kSum)(p.data(), q.data(), p.size());
  for (auto v : p) EXPECT_EQ(v, std::numeric_limits<int64_t>::max());
}

TEST(Kernels, MinMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    std::vector<float> a(19, 1.0f), b(19, 2.0f);
    a[0] = nan;   // SIMD body, first operand
    b[5] = nan;   // SIMD body, second operand
    a[18] = nan;  // scalar tail
    b[17] = nan;
    inplace_reducer(DataType::kFloat32, op)(a.data(), b.data(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const bool want_nan = i == 0 || i == 5 || i == 17 || i == 18;
      EXPECT_EQ(std::isnan(a[i]), want_nan) << to_string(op) << " i=" << i;
      if (!want_nan) {
        EXPECT_EQ(a[i], op == ReduceOp::kMin ? 1.0f : 2.0f);
      }
    }
  }
  std::vector<double> d = {nan, 1.0}, e = {1.0, nan};
  inplace_reducer(DataType::kFloat64, ReduceOp::kMax)(d.data(), e.data(), 2);
  EXPECT_TRUE(std::isnan(d[0]));
  EXPECT_TRUE(std::isnan(d[1]));
}

TEST(Kernels, AvgIsNotAKernelAnd16BitIsNotNative) {
  EXPECT_THROW(inplace_reducer(DataType::kFloat32, ReduceOp::kAvg), InvalidArgument);
  EXPECT_THROW(inplace_reducer(DataType::kFloat16, ReduceOp::kSum), InvalidArgument);
  EXPECT_THROW(inplace_reducer(DataType::kBFloat16, ReduceOp::kMax), InvalidArgument);
  EXPECT_TRUE(is_native(DataType::kInt64));
  EXPECT_FALSE(is_native(DataType::kFloat16));
  EXPECT_TRUE(is_16bit_float(DataType::kBFloat16));
}

TEST(Divide, TypeSemantics) {
  std::vector<int32_t> i = {7, -7, 6, -1};
  divide(DataType::kInt32, i.data(), i.size(), 2);
  EXPECT_EQ(i, (std::vector<int32_t>{3, -3, 3, 0}));  // truncation toward zero
  std::vector<int64_t> l = {int64_t{1} << 40, -9};
  divide(DataType::kInt64, l.data(), l.size(), 4);
  EXPECT_EQ(l, (std::vector<int64_t>{int64_t{1} << 38, -2}));
  std::vector<float> f = {1.0f, 3.0f};
  divide(DataType::kFloat32, f.data(), f.size(), 3);
  EXPECT_EQ(f[0], 1.0f / 3.0f);
  EXPECT_EQ(f[1], 1.0f);
  std::vector<double> d = {1.0};
  divide(DataType::kFloat64, d.data(), 1, 3);
  EXPECT_EQ(d[0], 1.0 / 3.0);
}

TEST(DataTypes, SizesAndNames) {
  EXPECT_EQ(element_size(DataType::kFloat32), 4u);
  EXPECT_EQ(element_size(DataType::kFloat64), 8u);
  EXPECT_EQ(element_size(DataType::kFloat16), 2u);
  EXPECT_EQ(element_size(DataType::kBFloat16), 2u);
  EXPECT_EQ(element_size(DataType::kInt32), 4u);
  EXPECT_EQ(element_size(DataType::kInt64), 8u);
  EXPECT_EQ(element_size(static_cast<DataType>(42)), 0u);
  EXPECT_STREQ(to_string(DataType::kBFloat16), "bfloat16");
  EXPECT_STREQ(to_string(DataType::kInt64), "int64");
  EXPECT_STREQ(to_string(ReduceOp::kAvg), "avg");
  EXPECT_STREQ(to_string(ReduceOp::kMax), "max");
}

}  // namespace
}  // namespace slurmddp::comm
