// The engine against a fake in-process group (ranks as threads): launch order,
// overlap, exact averages, accumulation, compression, the layout check,
// misuse and failures.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <thread>

#include "fake_group.h"
#include "rank_threads.h"
#include "slurmddp/error.h"
#include "slurmddp/grad_sync.h"
#include "test_values.h"

namespace slurmddp {
namespace {

using namespace std::chrono_literals;
using support::expected_average;
using support::FakeGroup;
using support::get_value;
using support::grad_value;
using support::Model;
using support::param_value;
using support::set_value;
using support::Shape;
using ::testing::HasSubstr;

using support::expect_no_rank_errors;
using support::on_rank_threads;

GradSyncOptions small_buckets() {
  GradSyncOptions o;
  o.first_bucket_bytes = 256;
  o.bucket_cap_bytes = 1024;
  return o;
}

std::vector<Shape> f32_layout(std::initializer_list<size_t> counts) {
  std::vector<Shape> s;
  for (size_t c : counts) s.push_back({c, DataType::kFloat32});
  return s;
}

void* grad_ptr(GradSync& sync, Model& m, size_t i, bool views) {
  return views ? sync.gradient(i) : m.grads[i].data();
}

void fill_grads(GradSync& sync, Model& m, int rank, int step, bool views, bool accumulate) {
  for (size_t i = 0; i < m.shapes.size(); ++i) {
    void* g = grad_ptr(sync, m, i, views);
    for (size_t k = 0; k < m.shapes[i].count; ++k) {
      const double before = accumulate ? get_value(m.shapes[i].dtype, g, k) : 0.0;
      set_value(m.shapes[i].dtype, g, k, before + grad_value(rank, i, k, step));
    }
  }
}

std::vector<size_t> shuffled(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// Checks gradient i of every parameter against the average over `ranks` of
// the sum over `steps` steps.
void check_average(GradSync& sync, Model& m, int ranks, int first_step, int steps, bool views,
                   int rank) {
  for (size_t i = 0; i < m.shapes.size(); ++i) {
    const void* g = grad_ptr(sync, m, i, views);
    size_t wrong = 0;
    for (size_t k = 0; k < m.shapes[i].count; ++k) {
      double sum = 0;
      for (int r = 0; r < ranks; ++r) {
        for (int s = first_step; s < first_step + steps; ++s) sum += grad_value(r, i, k, s);
      }
      const double want = expected_average(m.shapes[i].dtype, sum, ranks);
      const double got = get_value(m.shapes[i].dtype, g, k);
      if (got != want && wrong++ < 3) {
        ADD_FAILURE() << "rank " << rank << " parameter " << i << " element " << k << ": got "
                      << got << ", want " << want;
      }
    }
    EXPECT_EQ(wrong, 0u) << "rank " << rank << " parameter " << i;
  }
}

double rounded(DataType t, double v) {
  std::vector<uint8_t> one(8);
  set_value(t, one.data(), 0, v);
  return get_value(t, one.data(), 0);
}

// ---- order and overlap ----------------------------------------------------------

TEST(GradSyncEngine, LaunchesBucketsInPlanOrderWhateverTheReadyOrder) {
  auto group = std::make_shared<FakeGroup>(1);
  std::vector<Shape> shapes;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 40; ++i) shapes.push_back({1 + rng() % 200, DataType::kFloat32});
  Model m(shapes, false);
  auto o = small_buckets();
  o.gradient_as_bucket_view = true;
  GradSync sync(group->communicator(0), m.parameters(false), o);
  const auto& buckets = sync.buckets();
  ASSERT_GT(buckets.size(), 5u);
  std::vector<const void*> expected;
  for (const auto& b : buckets) expected.push_back(sync.gradient(b.params[0]));
  for (int trial = 0; trial < 20; ++trial) {
    const size_t base = group->calls(0).size();
    for (size_t i : shuffled(shapes.size(), 100 + trial)) sync.mark_ready(i);
    sync.wait();
    const auto calls = group->calls(0);
    ASSERT_EQ(calls.size(), base + buckets.size());
    for (size_t b = 0; b < buckets.size(); ++b) {
      EXPECT_EQ(calls[base + b].kind, "allreduce");
      EXPECT_EQ(calls[base + b].data, expected[b]) << "trial " << trial << " position " << b;
      EXPECT_EQ(calls[base + b].count, buckets[b].count);
      EXPECT_EQ(calls[base + b].op, ReduceOp::kAvg);
    }
  }
}

TEST(GradSyncEngine, ABucketStartsAsSoonAsItIsReadyButNeverBeforeTheOnesBeforeIt) {
  auto group = std::make_shared<FakeGroup>(1);
  // 3 buckets with limits of 256 bytes: {5, 4}, {3, 2}, {1, 0}.
  Model m(f32_layout({32, 32, 32, 32, 32, 32}), true);
  auto o = small_buckets();
  o.bucket_cap_bytes = 256;
  GradSync sync(group->communicator(0), m.parameters(true), o);
  ASSERT_EQ(sync.buckets().size(), 3u);
  const size_t base = group->calls(0).size();
  sync.mark_ready(5);
  sync.mark_ready(4);
  ASSERT_TRUE(group->wait_for_calls(0, base + 1, 10s)) << "bucket 0 did not start";
  // Bucket 2 complete, bucket 1 not: bucket 2 must wait.
  sync.mark_ready(0);
  sync.mark_ready(1);
  EXPECT_FALSE(group->wait_for_calls(0, base + 2, 200ms)) << "bucket 2 overtook bucket 1";
  EXPECT_EQ(group->calls(0).size(), base + 1);
  sync.mark_ready(3);
  sync.mark_ready(2);
  ASSERT_TRUE(group->wait_for_calls(0, base + 3, 10s));
  sync.wait();
  const auto calls = group->calls(0);
  EXPECT_EQ(calls[base + 0].count, 64u);  // two parameters of 32 elements
  EXPECT_EQ(calls.size(), base + 3);
}

// ---- exact averages -------------------------------------------------------------

struct AverageCase {
  int ranks;
  bool views;
  bool mixed;
};

class ExactAverage : public ::testing::TestWithParam<AverageCase> {};

TEST_P(ExactAverage, EveryRankEndsWithTheExactAverage) {
  const auto c = GetParam();
  auto group = std::make_shared<FakeGroup>(c.ranks);
  const auto shapes = support::random_layout(42 + c.ranks, 30, 1024, c.mixed);
  expect_no_rank_errors(on_rank_threads(c.ranks, [&](int rank) {
    Model m(shapes, !c.views);
    auto o = small_buckets();
    o.gradient_as_bucket_view = c.views;
    GradSync sync(group->communicator(rank), m.parameters(!c.views), o);
    for (int step = 0; step < 3; ++step) {
      fill_grads(sync, m, rank, step, c.views, false);
      for (size_t i : shuffled(shapes.size(), 1000 * rank + step)) sync.mark_ready(i);
      sync.wait();
      check_average(sync, m, c.ranks, step, 1, c.views, rank);
    }
  }));
}

INSTANTIATE_TEST_SUITE_P(Cases, ExactAverage,
                         ::testing::Values(AverageCase{1, false, true},
                                           AverageCase{2, false, false},
                                           AverageCase{3, false, true}, AverageCase{3, true, true},
                                           AverageCase{4, true, false},
                                           AverageCase{4, false, true}));

TEST(GradSyncEngine, ParametersAreBroadcastFromRankZeroAndGradientViewsStartAtZero) {
  const int ranks = 3;
  auto group = std::make_shared<FakeGroup>(ranks);
  const auto shapes = support::random_layout(5, 20, 1024, true);
  expect_no_rank_errors(on_rank_threads(ranks, [&](int rank) {
    Model m(shapes, false);
    for (size_t i = 0; i < shapes.size(); ++i) {
      for (size_t k = 0; k < shapes[i].count; ++k) {
        set_value(shapes[i].dtype, m.data[i].data(), k, param_value(rank, i, k));
      }
    }
    auto o = small_buckets();
    o.gradient_as_bucket_view = true;
    GradSync sync(group->communicator(rank), m.parameters(false), o);
    for (size_t i = 0; i < shapes.size(); ++i) {
      for (size_t k = 0; k < shapes[i].count; ++k) {
        ASSERT_EQ(get_value(shapes[i].dtype, m.data[i].data(), k),
                  rounded(shapes[i].dtype, param_value(0, i, k)))
            << "rank " << rank << " parameter " << i << " element " << k;
        ASSERT_EQ(get_value(shapes[i].dtype, sync.gradient(i), k), 0.0);
      }
      if (shapes[i].count == 0) {
        EXPECT_EQ(sync.gradient(i), nullptr);
      }
    }
  }));
}

TEST(GradSyncEngine, WithoutBroadcastParametersAreLeftAlone) {
  auto group = std::make_shared<FakeGroup>(2);
  expect_no_rank_errors(on_rank_threads(2, [&](int rank) {
    Model m(f32_layout({3}), true);
    static_cast<float*>(static_cast<void*>(m.data[0].data()))[0] = static_cast<float>(rank + 5);
    auto o = small_buckets();
    o.broadcast_parameters = false;
    GradSync sync(group->communicator(rank), m.parameters(true), o);
    EXPECT_EQ(static_cast<float*>(static_cast<void*>(m.data[0].data()))[0], rank + 5.0f);
  }));
}

// ---- accumulation ---------------------------------------------------------------

TEST(GradSyncEngine, AccumulationOverKStepsAveragesTheSums) {
  for (bool views : {false, true}) {
    const int ranks = 3;
    const int k = 3;
    auto group = std::make_shared<FakeGroup>(ranks);
    const auto shapes = support::random_layout(77, 25, 1024, true);
    expect_no_rank_errors(on_rank_threads(ranks, [&](int rank) {
      Model m(shapes, !views);
      auto o = small_buckets();
      o.gradient_as_bucket_view = views;
      GradSync sync(group->communicator(rank), m.parameters(!views), o);
      for (int round = 0; round < 2; ++round) {
        // Zero, then k micro-steps; only the last synchronizes.
        for (size_t i = 0; i < shapes.size(); ++i) {
          void* g = grad_ptr(sync, m, i, views);
          for (size_t e = 0; e < shapes[i].count; ++e) set_value(shapes[i].dtype, g, e, 0);
        }
        const size_t calls_before = group->calls(rank).size();
        for (int s = 0; s < k; ++s) {
          const bool last = s == k - 1;
          if (!last) {
            NoSyncScope no_sync(sync);
            EXPECT_FALSE(sync.sync_enabled());
            fill_grads(sync, m, rank, 10 * round + s, views, true);
            for (size_t i : shuffled(shapes.size(), 31 * rank + s)) sync.mark_ready(i);
            sync.wait();
            EXPECT_EQ(group->calls(rank).size(), calls_before) << "a no-sync step communicated";
          } else {
            EXPECT_TRUE(sync.sync_enabled());
            fill_grads(sync, m, rank, 10 * round + s, views, true);
            for (size_t i : shuffled(shapes.size(), 31 * rank + s)) sync.mark_ready(i);
            sync.wait();
          }
        }
        check_average(sync, m, ranks, 10 * round, k, views, rank);
      }
    }));
  }
}

// ---- compression ----------------------------------------------------------------

TEST(GradSyncEngine, CompressedAveragesStayWithinTheRoundingBound) {
  struct Case {
    Compression c;
    double unit;  // unit roundoff of the wire type
  };
  for (const Case cs : {Case{Compression::kFloat16, std::ldexp(1.0, -11)},
                        Case{Compression::kBFloat16, std::ldexp(1.0, -8)}}) {
    for (bool views : {false, true}) {
      const int ranks = 3;
      auto group = std::make_shared<FakeGroup>(ranks);
      std::vector<Shape> shapes = {{1000, DataType::kFloat32}, {333, DataType::kFloat64},
                                   {0, DataType::kFloat32},    {77, DataType::kFloat16},
                                   {4001, DataType::kFloat32}, {65, DataType::kBFloat16}};
      const auto value = support::real_value;
      expect_no_rank_errors(on_rank_threads(ranks, [&](int rank) {
        Model m(shapes, !views);
        auto o = small_buckets();
        o.gradient_as_bucket_view = views;
        o.compression = cs.c;
        GradSync sync(group->communicator(rank), m.parameters(!views), o);
        for (const auto& b : sync.buckets()) {
          const bool wide = b.dtype == DataType::kFloat32 || b.dtype == DataType::kFloat64;
          EXPECT_EQ(b.wire_bytes, b.count * (wide ? 2 : element_size(b.dtype)));
        }
        for (size_t i = 0; i < shapes.size(); ++i) {
          void* g = grad_ptr(sync, m, i, views);
          for (size_t k = 0; k < shapes[i].count; ++k) {
            set_value(shapes[i].dtype, g, k, value(rank, i, k));
          }
        }
        for (size_t i : shuffled(shapes.size(), rank)) sync.mark_ready(i);
        sync.wait();
        for (size_t i = 0; i < shapes.size(); ++i) {
          const DataType t = shapes[i].dtype;
          const bool compressed = t == DataType::kFloat32 || t == DataType::kFloat64;
          const void* g = grad_ptr(sync, m, i, views);
          for (size_t k = 0; k < shapes[i].count; ++k) {
            double sum = 0;
            double max_abs = 0;
            for (int r = 0; r < ranks; ++r) {
              std::vector<uint8_t> one(8);
              set_value(t, one.data(), 0, value(r, i, k));
              const double v = get_value(t, one.data(), 0);  // what rank r held
              sum += v;
              max_abs = std::max(max_abs, std::fabs(v));
            }
            const double avg = sum / ranks;
            const double got = get_value(t, g, k);
            // Inputs rounded to the wire type (relative u each), the average
            // rounded once more (u of itself), plus the parameter type's own
            // rounding for 16-bit parameters.
            const double u = compressed                ? cs.unit
                             : t == DataType::kFloat16 ? std::ldexp(1.0, -11)
                                                       : std::ldexp(1.0, -8);
            const double bound = u * max_abs + u * std::fabs(avg) + 1e-12;
            ASSERT_LE(std::fabs(got - avg), bound)
                << "compression " << to_string(cs.c) << " views " << views << " parameter " << i
                << " element " << k;
          }
        }
      }));
    }
  }
}

TEST(GradSyncEngine, CompressionOfIntegerValuedGradientsIsExact) {
  const int ranks = 4;
  auto group = std::make_shared<FakeGroup>(ranks);
  const auto shapes = support::random_layout(9, 20, 1024, true);
  expect_no_rank_errors(on_rank_threads(ranks, [&](int rank) {
    Model m(shapes, true);
    auto o = small_buckets();
    o.compression = Compression::kBFloat16;
    GradSync sync(group->communicator(rank), m.parameters(true), o);
    fill_grads(sync, m, rank, 0, false, false);
    for (size_t i : shuffled(shapes.size(), 5 + rank)) sync.mark_ready(i);
    sync.wait();
    // Sums of integers in [-8, 8] over 4 ranks are exact in bfloat16; the
    // average (a multiple of 1/4 below 8) is exact too, in every type.
    check_average(sync, m, ranks, 0, 1, false, rank);
  }));
}

// ---- the layout check -----------------------------------------------------------

std::vector<std::string> construct_all(int ranks,
                                       const std::function<std::vector<Shape>(int)>& shapes_of,
                                       const std::function<GradSyncOptions(int)>& options_of) {
  auto group = std::make_shared<FakeGroup>(ranks);
  return on_rank_threads(ranks, [&](int rank) {
    Model m(shapes_of(rank), true);
    GradSync sync(group->communicator(rank), m.parameters(true), options_of(rank));
  });
}

TEST(GradSyncLayoutCheck, ACountMismatchIsNamedOnEveryRankWithBothValues) {
  const auto errors = construct_all(
      4,
      [](int rank) {
        return f32_layout({5, 6, 7, rank == 2 ? size_t{12} : size_t{10}, 9});
      },
      [](int) { return small_buckets(); });
  for (int r = 0; r < 4; ++r) {
    const auto& e = errors[static_cast<size_t>(r)];
    EXPECT_THAT(e, HasSubstr("grad_sync: failed to check the parameter layout: rank 2 registered "
                             "a different layout than rank 0: parameter 3 ('layer1.bias'): "
                             "count=10 on rank 0, count=12 on rank 2; ranks that differ from "
                             "rank 0: [2]"))
        << "rank " << r;
    EXPECT_THAT(e, HasSubstr("rank=" + std::to_string(r)));
  }
}

TEST(GradSyncLayoutCheck, ADtypeMismatchNamesBothDtypesAndTheLowestDifferingRank) {
  const auto errors = construct_all(
      3,
      [](int rank) {
        std::vector<Shape> s = f32_layout({5, 6, 7});
        if (rank >= 1) s[1 + static_cast<size_t>(rank) - 1].dtype = DataType::kFloat16;
        return s;
      },
      [](int) { return small_buckets(); });
  for (const auto& e : errors) {
    EXPECT_THAT(e, HasSubstr("rank 1 registered a different layout than rank 0: parameter 1 "
                             "('layer0.bias'): dtype=float32 on rank 0, dtype=float16 on rank 1; "
                             "ranks that differ from rank 0: [1, 2]"));
  }
}

TEST(GradSyncLayoutCheck, AMissingParameterIsNamed) {
  const auto errors = construct_all(
      2,
      [](int rank) {
        return rank == 0 ? f32_layout({5, 6, 7}) : f32_layout({5, 6});
      },
      [](int) { return small_buckets(); });
  for (const auto& e : errors) {
    EXPECT_THAT(e, HasSubstr("parameter 2 ('layer1.weight' on rank 0) is missing on rank 1: "
                             "num_parameters=3 on rank 0, num_parameters=2 on rank 1"));
  }
}

TEST(GradSyncLayoutCheck, DifferentBucketOptionsAreNamed) {
  const auto errors = construct_all(
      3,
      [](int) {
        return f32_layout({5, 6, 7});
      },
      [](int rank) {
        auto o = small_buckets();
        if (rank == 2) o.bucket_cap_bytes = 2048;
        return o;
      });
  for (const auto& e : errors) {
    EXPECT_THAT(e, HasSubstr("rank 2 registered a different layout than rank 0: "
                             "bucket_cap_bytes=1024 on rank 0, bucket_cap_bytes=2048 on rank 2"));
  }
  const auto errors2 = construct_all(
      2, [](int) { return f32_layout({5}); },
      [](int rank) {
        auto o = small_buckets();
        if (rank == 1) o.compression = Compression::kBFloat16;
        return o;
      });
  for (const auto& e : errors2) {
    EXPECT_THAT(e, HasSubstr("compression=none on rank 0, compression=bfloat16 on rank 1"));
  }
}

TEST(GradSyncLayoutCheck, ARankRefusingItsParametersFailsEveryRankWithoutAHang) {
  auto group = std::make_shared<FakeGroup>(3);
  const auto errors = on_rank_threads(3, [&](int rank) {
    Model m(f32_layout({5, 6, 7}), true);
    auto params = m.parameters(true);
    if (rank == 1) params[2].grad = nullptr;
    GradSync sync(group->communicator(rank), params, small_buckets());
  });
  EXPECT_THAT(errors[1], HasSubstr("grad_sync: failed to register parameters: parameter 2 "
                                   "('layer1.weight') has no grad buffer; grad=null, count=7; "
                                   "rank=1, size=3"));
  EXPECT_THAT(errors[0], HasSubstr("rank 1 refused its own parameters (see its error); rank=0"));
  EXPECT_THAT(errors[2], HasSubstr("rank 1 refused its own parameters (see its error); rank=2"));
}

TEST(GradSyncLayoutCheck, NamesMayDifferBetweenRanks) {
  auto group = std::make_shared<FakeGroup>(2);
  expect_no_rank_errors(on_rank_threads(2, [&](int rank) {
    Model m(f32_layout({5, 6}), true);
    auto params = m.parameters(true);
    params[0].name = "rank" + std::to_string(rank);
    GradSync sync(group->communicator(rank), params, small_buckets());
  }));
}

TEST(GradSyncLayoutCheck, ParametersCommunicatorsCannotCarryAreRefused) {
  auto group = std::make_shared<FakeGroup>(1);
  Model m(f32_layout({5, 6}), true);
  auto params = m.parameters(true);
  params[1].dtype = DataType::kInt32;
  try {
    GradSync sync(group->communicator(0), params, small_buckets());
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("parameter 1 ('layer0.bias') has a dtype gradients cannot "
                                    "have (float32, float64, float16, bfloat16); dtype="));
  }
  params = m.parameters(true);
  params[0].device = DeviceKind::kCuda;
  try {
    GradSync sync(group->communicator(0), params, small_buckets());
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("parameter 0 ('layer0.weight') is not where the "
                                    "communicator's buffers live; device=cuda, "
                                    "communicator=gloo (host)"));
  }
  auto o = small_buckets();
  o.gradient_as_bucket_view = true;
  try {
    GradSync sync(group->communicator(0), m.parameters(true), o);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("has a grad buffer although gradients live in bucket memory"));
  }
  o = small_buckets();
  o.first_bucket_bytes = 0;
  try {
    GradSync sync(group->communicator(0), m.parameters(true), o);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("first_bucket_bytes=0"));
  }
  o = small_buckets();
  o.timeout = 0ms;  // unset means the communicator's; zero is no bound at all
  try {
    GradSync sync(group->communicator(0), m.parameters(true), o);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("GradSyncOptions::timeout=0ms; expected a positive duration"));
  }
  EXPECT_THROW(GradSync(nullptr, m.parameters(true), small_buckets()), InvalidArgument);
}

// ---- misuse and failures --------------------------------------------------------

TEST(GradSyncEngine, MisuseIsNamedAndBreaksTheObject) {
  auto group = std::make_shared<FakeGroup>(1);
  Model m(f32_layout({5, 6, 7}), true);
  {
    GradSync sync(group->communicator(0), m.parameters(true), small_buckets());
    try {
      sync.mark_ready(3);
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("index out of range; index=3, parameters=3"));
    }
    EXPECT_THROW(sync.mark_ready(0), InvalidArgument);  // broken: the same error again
  }
  {
    GradSync sync(group->communicator(0), m.parameters(true), small_buckets());
    sync.mark_ready(1);
    try {
      sync.mark_ready(1);
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(),
                  HasSubstr("parameter 1 ('layer0.bias') was already marked in this step"));
    }
  }
  {
    GradSync sync(group->communicator(0), m.parameters(true), small_buckets());
    sync.mark_ready(1);
    try {
      sync.wait();
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("failed to finish the step: 2 of 3 parameters were not "
                                      "marked ready: 0 ('layer0.weight'), 2 ('layer1.weight')"));
    }
    EXPECT_THROW(sync.wait(), InvalidArgument);
  }
  {
    GradSync sync(group->communicator(0), m.parameters(true), small_buckets());
    EXPECT_THROW(sync.gradient(0), InvalidArgument);
  }
}

TEST(GradSyncEngine, AFailedCollectiveIsRethrownByWaitAndEveryLaterCall) {
  auto group = std::make_shared<FakeGroup>(1);
  Model m(f32_layout({50, 60, 70, 80}), true);
  GradSync sync(group->communicator(0), m.parameters(true), small_buckets());
  group->fail_from(group->calls(0).size());
  for (size_t i = 0; i < 4; ++i) sync.mark_ready(i);
  EXPECT_THROW(sync.wait(), PeerError);
  EXPECT_THROW(sync.mark_ready(0), PeerError);
  EXPECT_THROW(sync.wait(), PeerError);
}

TEST(GradSyncEngine, DestroyingMidStepReturnsWithinTheTimeout) {
  auto group = std::make_shared<FakeGroup>(1);
  Model m(f32_layout({50, 60, 70, 80}), true);
  auto o = small_buckets();
  o.timeout = 300ms;
  const auto start = std::chrono::steady_clock::now();
  {
    GradSync sync(group->communicator(0), m.parameters(true), o);
    group->hold_from(group->calls(0).size());
    for (size_t i = 0; i < 4; ++i) sync.mark_ready(i);
    ASSERT_TRUE(group->wait_for_calls(0, 2, 10s));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  group->release_all();
}

TEST(GradSyncEngine, AHeldCollectiveTimesOutInWait) {
  auto group = std::make_shared<FakeGroup>(1);
  Model m(f32_layout({50}), true);
  auto o = small_buckets();
  o.timeout = 200ms;
  GradSync sync(group->communicator(0), m.parameters(true), o);
  group->hold_from(group->calls(0).size());
  sync.mark_ready(0);
  EXPECT_THROW(sync.wait(), TimeoutError);
  group->release_all();
}

TEST(GradSyncEngine, NoParametersAndZeroSizeBucketsNeedNoCommunication) {
  auto group = std::make_shared<FakeGroup>(1);
  {
    GradSync sync(group->communicator(0), {}, small_buckets());
    EXPECT_EQ(sync.buckets().size(), 0u);
    sync.wait();
  }
  Model m(f32_layout({0, 0}), true);
  GradSync sync(group->communicator(0), m.parameters(true), small_buckets());
  ASSERT_EQ(sync.buckets().size(), 1u);
  const size_t base = group->calls(0).size();
  sync.mark_ready(1);
  sync.mark_ready(0);
  sync.wait();
  EXPECT_EQ(group->calls(0).size(), base);
}

TEST(GradSyncEngine, StatsCoverTheLastSynchronizedStep) {
  auto group = std::make_shared<FakeGroup>(1);
  Model m(f32_layout({500, 600}), true);
  GradSync sync(group->communicator(0), m.parameters(true), small_buckets());
  sync.mark_ready(0);
  sync.mark_ready(1);
  sync.wait();
  const auto s = sync.last_step_stats();
  EXPECT_GT(s.step_seconds, 0.0);
  EXPECT_GE(s.step_seconds, s.wait_seconds);
  EXPECT_GT(s.bucket_seconds, 0.0);
  EXPECT_EQ(sync.num_parameters(), 2u);
  ASSERT_EQ(s.buckets.size(), sync.buckets().size());
  double previous_issue = 0;
  for (const auto& b : s.buckets) {
    EXPECT_LE(b.ready, b.issued);
    EXPECT_LE(b.issued, b.done);
    EXPECT_LE(b.done, s.step_seconds);
    EXPECT_GE(b.issued, previous_issue);  // issued in bucket order
    previous_issue = b.issued;
  }
}

TEST(GradSyncEngine, MarkReadyMayBeCalledFromSeveralThreads) {
  const int ranks = 2;
  auto group = std::make_shared<FakeGroup>(ranks);
  const auto shapes = support::random_layout(3, 64, 1024, false);
  expect_no_rank_errors(on_rank_threads(ranks, [&](int rank) {
    Model m(shapes, true);
    GradSync sync(group->communicator(rank), m.parameters(true), small_buckets());
    for (int step = 0; step < 5; ++step) {
      fill_grads(sync, m, rank, step, false, false);
      const auto order = shuffled(shapes.size(), 17 * rank + step);
      std::vector<std::thread> markers;
      for (int t = 0; t < 4; ++t) {
        markers.emplace_back([&, t] {
          for (size_t j = static_cast<size_t>(t); j < order.size(); j += 4)
            sync.mark_ready(order[j]);
        });
      }
      for (auto& th : markers) th.join();
      sync.wait();
      check_average(sync, m, ranks, step, 1, false, rank);
    }
  }));
}

}  // namespace
}  // namespace slurmddp
