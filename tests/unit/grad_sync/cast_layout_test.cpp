// Host casts against references (GCC's _Float16 for binary16, exact nearest
// search for bfloat16), and the pure parts of the layout check.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "common/half.h"
#include "grad_sync/cast.h"
#include "grad_sync/layout.h"
#include "slurmddp/error.h"

namespace slurmddp::grad_sync {
namespace {

using common::bfloat16_to_float;
using common::double_to_bfloat16;
using common::double_to_half;
using common::float_to_bfloat16;
using common::float_to_half;
using common::half_to_float;
using ::testing::HasSubstr;

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
uint16_t bits16(_Float16 h) {
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
_Float16 half_of(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return h;
}

bool half_is_nan(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}
bool bf16_is_nan(uint16_t b) {
  return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
}

// bfloat16 nearest to x, ties to even, by comparing the two candidates
// exactly in double (overflow as if the exponent were unbounded).
uint16_t bf16_reference(double x) {
  if (std::isnan(x)) return 0x7fc0;
  const float f = static_cast<float>(x);  // only for the sign and a starting point
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double ax = std::fabs(x);
  auto value = [](uint16_t mag) {
    if (mag >= 0x7f80) return std::ldexp(1.0, 128);
    return static_cast<double>(from_bits(static_cast<uint32_t>(mag) << 16));
  };
  (void)f;
  // Largest magnitude <= ax.
  uint16_t lo = 0;
  uint16_t hi = 0x7f80;
  while (hi - lo > 1) {
    const auto mid = static_cast<uint16_t>((lo + hi) / 2);
    if (value(mid) <= ax) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  if (value(lo) == ax) return sign | lo;
  const double dlo = ax - value(lo);
  const double dhi = value(static_cast<uint16_t>(lo + 1)) - ax;
  uint16_t pick = dlo < dhi   ? lo
                  : dhi < dlo ? static_cast<uint16_t>(lo + 1)
                              : ((lo & 1) ? static_cast<uint16_t>(lo + 1) : lo);
  if (pick > 0x7f80) pick = 0x7f80;
  return sign | pick;
}

std::vector<float> interesting_floats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          65536.0f,
                          6.1035156e-05f,
                          6.0975552e-05f,
                          5.9604645e-08f,
                          2.9802322e-08f,
                          2.9802326e-08f,
                          1e-10f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min(),
                          3.3895314e38f,
                          3.3961775e38f};
  std::mt19937 rng(99);
  for (int i = 0; i < 2000000; ++i) v.push_back(from_bits(rng()));
  // Every tie and near-tie of binary16 and bfloat16 in the normal range.
  for (uint32_t u = 0x33000000; u < 0x47800000; u += 0x1000 - 1) {
    v.push_back(from_bits(u));
    v.push_back(from_bits(u | 0x1000));
    v.push_back(from_bits(u + 1));
  }
  return v;
}

TEST(Cast, HalfToFloatIsExactForAllValues) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float got = half_to_float(static_cast<uint16_t>(h));
    const float want = static_cast<float>(half_of(static_cast<uint16_t>(h)));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(bits(got), bits(want)) << "half bits " << h;
    }
  }
}

TEST(Cast, FloatToHalfRoundsToNearestEven) {
  for (float f : interesting_floats()) {
    const uint16_t got = float_to_half(f);
    const uint16_t want = bits16(static_cast<_Float16>(f));
    if (std::isnan(f)) {
      ASSERT_TRUE(half_is_nan(got)) << f;
    } else {
      ASSERT_EQ(got, want) << "float bits " << bits(f);
    }
  }
}

TEST(Cast, DoubleToHalfRoundsOnceFromDouble) {
  std::mt19937_64 rng(5);
  // Doubles just off binary16 ties: rounding through float first would break
  // these ties the wrong way in one direction.
  for (int i = 0; i < 200000; ++i) {
    const uint16_t h = static_cast<uint16_t>(rng() % 0x7bff);
    const double a = static_cast<double>(half_of(h));
    const double b = static_cast<double>(half_of(static_cast<uint16_t>(h + 1)));
    const double mid = (a + b) / 2;
    for (double d : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e9), -mid,
                     static_cast<double>(from_bits(static_cast<uint32_t>(rng())))}) {
      const uint16_t want = bits16(static_cast<_Float16>(d));
      if (std::isnan(d)) continue;
      ASSERT_EQ(double_to_half(d), want) << d;
    }
  }
}

TEST(Cast, BFloat16RoundsToNearestEvenAndWidensExactly) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bfloat16_to_float(static_cast<uint16_t>(b));
    ASSERT_EQ(bits(f), b << 16);
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 300000; ++i) {
    const float f = from_bits(rng());
    const uint16_t got = float_to_bfloat16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(bf16_is_nan(got));
      continue;
    }
    ASSERT_EQ(got, bf16_reference(f)) << "float bits " << bits(f);
  }
  for (uint32_t u = 0x00008000; u < 0x7f800000; u += 0x00010000 * 97) {
    for (uint32_t w : {u, u - 1, u + 1, u | 0x10000}) {
      const float f = from_bits(w);
      ASSERT_EQ(float_to_bfloat16(f), bf16_reference(f)) << "float bits " << w;
    }
  }
  std::mt19937_64 rng64(4);
  for (int i = 0; i < 100000; ++i) {
    const uint16_t b = static_cast<uint16_t>(rng64() % 0x7f7f);
    const double a = bfloat16_to_float(b);
    const double c = bfloat16_to_float(static_cast<uint16_t>(b + 1));
    const double mid = (a + c) / 2;
    for (double d : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300)}) {
      ASSERT_EQ(double_to_bfloat16(d), bf16_reference(d)) << d;
    }
  }
}

TEST(Cast, BulkConversionsMatchTheScalarOnesAtEveryLength) {
  std::mt19937 rng(8);
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 1000, 1003}) {
    std::vector<float> src(n);
    for (auto& x : src) x = static_cast<float>(static_cast<int>(rng() % 200001) - 100000) / 64.0f;
    std::vector<uint16_t> half(n + 1, 0xabcd);
    std::vector<uint16_t> bf(n + 1, 0xabcd);
    convert(src.data(), DataType::kFloat32, half.data(), DataType::kFloat16, n);
    convert(src.data(), DataType::kFloat32, bf.data(), DataType::kBFloat16, n);
    std::vector<float> back(n + 1, -7.0f);
    convert(half.data(), DataType::kFloat16, back.data(), DataType::kFloat32, n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(half[i], float_to_half(src[i]));
      ASSERT_EQ(bf[i], float_to_bfloat16(src[i]));
      ASSERT_EQ(bits(back[i]), bits(half_to_float(half[i])));
    }
    EXPECT_EQ(half[n], 0xabcd) << "wrote past the end";
    EXPECT_EQ(bf[n], 0xabcd);
    EXPECT_EQ(back[n], -7.0f);
    std::vector<double> dsrc(n, 1.0 / 3.0);
    std::vector<uint16_t> dh(n);
    std::vector<double> dback(n);
    convert(dsrc.data(), DataType::kFloat64, dh.data(), DataType::kFloat16, n);
    convert(dh.data(), DataType::kFloat16, dback.data(), DataType::kFloat64, n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(dback[i], static_cast<double>(half_to_float(dh[i])));
  }
  EXPECT_FALSE(convertible(DataType::kFloat16, DataType::kBFloat16));
  EXPECT_FALSE(convertible(DataType::kFloat32, DataType::kFloat64));
  EXPECT_TRUE(convertible(DataType::kFloat64, DataType::kBFloat16));
  float x = 1.0f;
  double y = 0;
  EXPECT_THROW(convert(&x, DataType::kFloat32, &y, DataType::kFloat64, 1), InvalidArgument);
}

// ---- layout ---------------------------------------------------------------------

LayoutDescription layout_of(std::vector<ParamDescription> params) {
  LayoutDescription l;
  l.first_bucket_bytes = 1 << 20;
  l.bucket_cap_bytes = 25 << 20;
  l.params = std::move(params);
  return l;
}

TEST(Layout, SerializationRoundTripsNamesIncluded) {
  auto l =
      layout_of({{"conv1.weight", 9408, DataType::kFloat32, DeviceKind::kHost},
                 {"", 0, DataType::kBFloat16, DeviceKind::kCuda},
                 {"a-name-longer-than-eight-bytes", 7, DataType::kFloat16, DeviceKind::kHost}});
  l.compression = Compression::kFloat16;
  const auto back = deserialize_layout(serialize_layout(l));
  EXPECT_EQ(back.first_bucket_bytes, l.first_bucket_bytes);
  EXPECT_EQ(back.bucket_cap_bytes, l.bucket_cap_bytes);
  EXPECT_EQ(back.compression, Compression::kFloat16);
  ASSERT_EQ(back.params.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.params[i].name, l.params[i].name);
    EXPECT_EQ(back.params[i].count, l.params[i].count);
    EXPECT_EQ(back.params[i].dtype, l.params[i].dtype);
    EXPECT_EQ(back.params[i].device, l.params[i].device);
  }
  auto words = serialize_layout(l);
  words.resize(words.size() - 1);
  EXPECT_THROW(deserialize_layout(words), ProtocolError);
  EXPECT_THROW(deserialize_layout({1, 2, 3}), ProtocolError);
}

TEST(Layout, TheDigestCoversShapesAndOptionsButNotNames) {
  const auto a = layout_of({{"x", 10, DataType::kFloat32, DeviceKind::kHost}});
  auto b = a;
  b.params[0].name = "y";
  EXPECT_EQ(layout_digest(a), layout_digest(b));
  for (int change = 0; change < 6; ++change) {
    auto c = a;
    switch (change) {
      case 0:
        c.params[0].count = 11;
        break;
      case 1:
        c.params[0].dtype = DataType::kFloat64;
        break;
      case 2:
        c.params[0].device = DeviceKind::kCuda;
        break;
      case 3:
        c.first_bucket_bytes = 1;
        break;
      case 4:
        c.compression = Compression::kBFloat16;
        break;
      case 5:
        c.params.push_back(c.params[0]);
        break;
    }
    EXPECT_NE(layout_digest(a), layout_digest(c)) << change;
  }
}

TEST(Layout, FirstDifferenceFindsTheEarliestFieldInOrder) {
  const auto a = layout_of({{"w", 10, DataType::kFloat32, DeviceKind::kHost},
                            {"b", 3, DataType::kFloat32, DeviceKind::kHost}});
  EXPECT_EQ(first_difference(a, a).field, LayoutField::kNone);
  auto b = a;
  b.params[1].dtype = DataType::kFloat16;
  b.params[1].count = 4;
  auto d = first_difference(a, b);
  EXPECT_EQ(d.field, LayoutField::kCount);
  EXPECT_EQ(d.param, 1);
  EXPECT_EQ(d.value0, 3);
  EXPECT_EQ(d.value, 4);
  b = a;
  b.params.pop_back();
  d = first_difference(a, b);
  EXPECT_EQ(d.field, LayoutField::kNumParameters);
  EXPECT_EQ(d.param, 1);
  b = a;
  b.bucket_cap_bytes = 5;
  b.params[0].count = 1;
  d = first_difference(a, b);
  EXPECT_EQ(d.field, LayoutField::kBucketCapBytes);
  EXPECT_EQ(d.param, -1);
}

TEST(Layout, MessagesNameBothRanksValues) {
  EXPECT_EQ(describe_difference(2, {LayoutField::kCount, 3, 10, 12}, "fc.bias", "fc.bias", {2}),
            "rank 2 registered a different layout than rank 0: parameter 3 ('fc.bias'): "
            "count=10 on rank 0, count=12 on rank 2; ranks that differ from rank 0: [2]");
  EXPECT_EQ(describe_difference(1,
                                {LayoutField::kDtype, 0, static_cast<int64_t>(DataType::kFloat32),
                                 static_cast<int64_t>(DataType::kBFloat16)},
                                "a", "b", {1, 3}),
            "rank 1 registered a different layout than rank 0: parameter 0 ('a' on rank 0, 'b' "
            "on rank 1): dtype=float32 on rank 0, dtype=bfloat16 on rank 1; ranks that differ "
            "from rank 0: [1, 3]");
  EXPECT_EQ(describe_difference(1, {LayoutField::kNumParameters, 2, 2, 3}, "", "extra", {1}),
            "rank 1 registered a different layout than rank 0: parameter 2 ('extra' on rank 1) "
            "is missing on rank 0: num_parameters=2 on rank 0, num_parameters=3 on rank 1; "
            "ranks that differ from rank 0: [1]");
  EXPECT_EQ(describe_difference(1, {LayoutField::kDevice, 4, 0, 1}, "", "", {1}),
            "rank 1 registered a different layout than rank 0: parameter 4 ('#4'): device=host "
            "on rank 0, device=cuda on rank 1; ranks that differ from rank 0: [1]");
}

}  // namespace
}  // namespace slurmddp::grad_sync
