// The pure bucket planner: order, limits, keys, alignment, and invariants over
// random layouts.
#include "grad_sync/bucket_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "slurmddp/error.h"
#include "slurmddp/grad_sync.h"

namespace slurmddp::grad_sync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

PlanParam f32(size_t count) {
  return PlanParam{count, DataType::kFloat32, DeviceKind::kHost, 0};
}
PlanParam of(size_t count, DataType t) {
  return PlanParam{count, t, DeviceKind::kHost, 0};
}

PlanOptions limits(size_t first, size_t cap) {
  return PlanOptions{first, cap};
}

TEST(BucketPlan, DefaultsAreOneAndTwentyFiveMebibytes) {
  EXPECT_EQ(kFirstBucketBytes, size_t{1} << 20);
  EXPECT_EQ(kBucketCapBytes, size_t{25} << 20);
  GradSyncOptions o;
  EXPECT_EQ(o.first_bucket_bytes, kFirstBucketBytes);
  EXPECT_EQ(o.bucket_cap_bytes, kBucketCapBytes);
}

TEST(BucketPlan, NoParametersNoBuckets) {
  const auto plan = plan_buckets({}, limits(kFirstBucketBytes, kBucketCapBytes));
  EXPECT_TRUE(plan.buckets.empty());
  EXPECT_TRUE(plan.locations.empty());
}

TEST(BucketPlan, SmallParametersShareOneBucketInReverseOrder) {
  const auto plan = plan_buckets({f32(10), f32(20), f32(30)}, limits(1 << 20, 25 << 20));
  ASSERT_EQ(plan.buckets.size(), 1u);
  EXPECT_THAT(plan.buckets[0].params, ElementsAre(2, 1, 0));
  // 30 floats pad to 32 (128 bytes), 20 to 32, 10 to 16.
  EXPECT_THAT(plan.buckets[0].offsets, ElementsAre(0, 32, 64));
  EXPECT_EQ(plan.buckets[0].count, 80u);
  EXPECT_EQ(plan.locations[2].bucket, 0u);
  EXPECT_EQ(plan.locations[2].slot, 0u);
  EXPECT_EQ(plan.locations[0].slot, 2u);
}

TEST(BucketPlan, FirstBucketIsSmallAndHoldsTheLastRegisteredParameters) {
  // Ten parameters of 256 KiB: four fill the 1 MiB first bucket exactly, the
  // other six fit one 25 MiB bucket.
  std::vector<PlanParam> params(10, f32(65536));
  const auto plan = plan_buckets(params, limits(kFirstBucketBytes, kBucketCapBytes));
  ASSERT_EQ(plan.buckets.size(), 2u);
  EXPECT_THAT(plan.buckets[0].params, ElementsAre(9, 8, 7, 6));
  EXPECT_THAT(plan.buckets[1].params, ElementsAre(5, 4, 3, 2, 1, 0));
}

TEST(BucketPlan, ABucketIsClosedBeforeAParameterThatWouldOverflowIt) {
  // Limits of 1024 bytes: 200 + 200 floats (800 + 800 bytes) cannot share.
  const auto plan = plan_buckets({f32(200), f32(200), f32(16)}, limits(1024, 1024));
  ASSERT_EQ(plan.buckets.size(), 2u);
  EXPECT_THAT(plan.buckets[0].params, ElementsAre(2, 1));
  EXPECT_THAT(plan.buckets[1].params, ElementsAre(0));
}

TEST(BucketPlan, AParameterLargerThanTheCapGetsItsOwnBucket) {
  // 64-byte parameters around one of 20000 bytes; first limit 256, cap 1024.
  const auto plan =
      plan_buckets({f32(16), f32(16), f32(5000), f32(16), f32(16)}, limits(256, 1024));
  ASSERT_EQ(plan.buckets.size(), 3u);
  EXPECT_THAT(plan.buckets[0].params, ElementsAre(4, 3));
  EXPECT_THAT(plan.buckets[1].params, ElementsAre(2));
  EXPECT_EQ(plan.buckets[1].count, 5008u);
  EXPECT_THAT(plan.buckets[2].params, ElementsAre(1, 0));
}

TEST(BucketPlan, DtypesAndDevicesNeverShareABucket) {
  std::vector<PlanParam> params = {
      of(8, DataType::kFloat32),
      of(8, DataType::kFloat16),
      of(8, DataType::kFloat32),
      of(8, DataType::kBFloat16),
      of(8, DataType::kFloat64),
      PlanParam{8, DataType::kFloat32, DeviceKind::kCuda, 0},
      PlanParam{8, DataType::kFloat32, DeviceKind::kCuda, 1},
  };
  const auto plan = plan_buckets(params, limits(1 << 20, 25 << 20));
  ASSERT_EQ(plan.buckets.size(), 6u);
  // Ordered by the walk position (from the last parameter) of the first member.
  EXPECT_THAT(plan.buckets[0].params, ElementsAre(6));
  EXPECT_EQ(plan.buckets[0].device_index, 1);
  EXPECT_THAT(plan.buckets[1].params, ElementsAre(5));
  EXPECT_EQ(plan.buckets[1].device, DeviceKind::kCuda);
  EXPECT_THAT(plan.buckets[2].params, ElementsAre(4));
  EXPECT_EQ(plan.buckets[2].dtype, DataType::kFloat64);
  EXPECT_THAT(plan.buckets[3].params, ElementsAre(3));
  EXPECT_THAT(plan.buckets[4].params, ElementsAre(2, 0));
  EXPECT_EQ(plan.buckets[4].dtype, DataType::kFloat32);
  EXPECT_EQ(plan.buckets[4].device, DeviceKind::kHost);
  EXPECT_THAT(plan.buckets[5].params, ElementsAre(1));
  EXPECT_EQ(plan.buckets[5].dtype, DataType::kFloat16);
}

TEST(BucketPlan, ZeroSizeParametersTakeNoSpace) {
  const auto plan =
      plan_buckets({f32(0), f32(3), f32(0), of(0, DataType::kFloat16)}, limits(1 << 20, 25 << 20));
  ASSERT_EQ(plan.buckets.size(), 2u);
  EXPECT_THAT(plan.buckets[0].params, ElementsAre(3));
  EXPECT_EQ(plan.buckets[0].count, 0u);
  EXPECT_THAT(plan.buckets[1].params, ElementsAre(2, 1, 0));
  EXPECT_THAT(plan.buckets[1].offsets, ElementsAre(0, 0, 16));
  EXPECT_EQ(plan.buckets[1].count, 16u);
}

TEST(BucketPlan, OffsetsAreAlignedForEveryDtype) {
  for (DataType t :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    const auto plan =
        plan_buckets({of(1, t), of(3, t), of(33, t), of(7, t)}, limits(1 << 20, 25 << 20));
    ASSERT_EQ(plan.buckets.size(), 1u);
    for (size_t off : plan.buckets[0].offsets) {
      EXPECT_EQ(off * dtype_bytes(t) % kAlignBytes, 0u) << static_cast<int>(t);
    }
    EXPECT_EQ(plan.buckets[0].count * dtype_bytes(t) % kAlignBytes, 0u);
  }
}

TEST(BucketPlan, ZeroLimitsAreRefusedNamingTheOption) {
  try {
    plan_buckets({f32(1)}, limits(0, 10));
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("first_bucket_bytes=0"));
  }
  try {
    plan_buckets({f32(1)}, limits(10, 0));
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("bucket_cap_bytes=0"));
  }
}

TEST(BucketPlan, AnOverflowingParameterIsRefused) {
  EXPECT_THROW(plan_buckets({f32(SIZE_MAX / 2)}, limits(1, 1)), InvalidArgument);
}

// Invariants over random layouts: every parameter exactly once; one key per
// bucket; within its limit unless alone; members in walk order; buckets in
// order of their first member; a closed bucket could not have taken the next
// member of its key; deterministic.
TEST(BucketPlan, RandomLayoutsKeepEveryInvariant) {
  std::mt19937_64 rng(12345);
  const DataType types[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                            DataType::kBFloat16};
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = rng() % 60;
    std::vector<PlanParam> params;
    for (size_t i = 0; i < n; ++i) {
      PlanParam p;
      const int shape = static_cast<int>(rng() % 10);
      p.count = shape == 0 ? 0 : shape < 8 ? rng() % 300 : 300 + rng() % 3000;
      p.dtype = types[rng() % (trial % 3 == 0 ? 1 : 4)];
      p.device = rng() % 5 == 0 ? DeviceKind::kCuda : DeviceKind::kHost;
      p.device_index = p.device == DeviceKind::kCuda ? static_cast<int>(rng() % 2) : 0;
      params.push_back(p);
    }
    const PlanOptions o = limits(64 + rng() % 1024, 64 + rng() % 4096);
    const auto plan = plan_buckets(params, o);
    ASSERT_EQ(plan.locations.size(), n);
    std::vector<int> seen(n, 0);
    size_t previous_first_walk = 0;
    std::set<std::tuple<int, int, int>> keys_seen;
    for (size_t b = 0; b < plan.buckets.size(); ++b) {
      const auto& bucket = plan.buckets[b];
      ASSERT_FALSE(bucket.params.empty());
      ASSERT_EQ(bucket.params.size(), bucket.offsets.size());
      const size_t first_walk = n - 1 - bucket.params[0];
      if (b > 0) {
        EXPECT_GT(first_walk, previous_first_walk);
      }
      previous_first_walk = first_walk;
      const auto key = std::make_tuple(static_cast<int>(bucket.dtype),
                                       static_cast<int>(bucket.device), bucket.device_index);
      const bool first_of_key = keys_seen.insert(key).second;
      const size_t limit = first_of_key ? o.first_bucket_bytes : o.bucket_cap_bytes;
      size_t offset = 0;
      for (size_t s = 0; s < bucket.params.size(); ++s) {
        const size_t i = bucket.params[s];
        ++seen[i];
        if (s > 0) {
          EXPECT_LT(i, bucket.params[s - 1]);
        }
        EXPECT_EQ(params[i].dtype, bucket.dtype);
        EXPECT_EQ(params[i].device, bucket.device);
        if (bucket.device == DeviceKind::kCuda) {
          EXPECT_EQ(params[i].device_index, bucket.device_index);
        }
        EXPECT_EQ(bucket.offsets[s], offset);
        EXPECT_EQ(plan.locations[i].bucket, b);
        EXPECT_EQ(plan.locations[i].slot, s);
        offset += aligned_count(params[i].count, params[i].dtype);
      }
      EXPECT_EQ(bucket.count, offset);
      const size_t bytes = bucket.count * dtype_bytes(bucket.dtype);
      if (bucket.params.size() > 1) {
        EXPECT_LE(bytes, limit) << "trial " << trial;
      }
      // A bucket below its limit was closed because the next parameter of its
      // key (if any) would not fit, or the walk ended.
      if (bytes < limit) {
        const size_t last = bucket.params.back();
        for (size_t j = last; j-- > 0;) {
          const auto& q = params[j];
          const int qi = q.device == DeviceKind::kHost ? 0 : q.device_index;
          if (std::make_tuple(static_cast<int>(q.dtype), static_cast<int>(q.device), qi) != key) {
            continue;
          }
          EXPECT_GT(aligned_count(q.count, q.dtype) * dtype_bytes(q.dtype), limit - bytes)
              << "trial " << trial << " bucket " << b;
          break;
        }
      }
    }
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "parameter " << i;
    const auto again = plan_buckets(params, o);
    ASSERT_EQ(again.buckets.size(), plan.buckets.size());
    for (size_t b = 0; b < plan.buckets.size(); ++b) {
      EXPECT_EQ(again.buckets[b].params, plan.buckets[b].params);
    }
  }
}

}  // namespace
}  // namespace slurmddp::grad_sync
