// grad_sync with ranks as separate processes (Gloo over loopback, a TCP store
// hosted by the test), world sizes 1-4. The helper (GRAD_SYNC_RANK) runs one
// scenario per rank; see grad_sync_rank.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rank_group.h"
#include "rank_launcher.h"
#include "subprocess.h"

namespace slurmddp::support {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

struct RankResult {
  std::optional<int> exit_code;
  std::vector<std::string> lines;  // every stdout line
  std::string stderr_text;

  std::string line_starting(const std::string& prefix) const {
    for (const auto& l : lines) {
      if (l.rfind(prefix, 0) == 0) return l.substr(prefix.size());
    }
    return "";
  }
};

std::string helper() {
  const char* h = std::getenv("GRAD_SYNC_RANK");
  return h != nullptr ? h : "";
}

// Starts the ranks around a store hosted here and collects every rank's
// output and exit code before `within` passes.
std::vector<RankResult> run_group(const std::string& scenario, int size, uint64_t seed,
                                  std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  std::vector<RankResult> results(static_cast<size_t>(size));
  const auto store = support::host_store();
  support::RankGroup ranks(size, [&](int r, int world) {
    return support::RankLaunch{
        support::with_rank({helper(), scenario, std::to_string(seed)}, r, world, store->port()),
        {}};
  });
  for (int r = 0; r < size; ++r) {
    auto& res = results[static_cast<size_t>(r)];
    while (auto line = ranks.rank(r).read_line(deadline)) res.lines.push_back(*line);
  }
  for (int r = 0; r < size; ++r) {
    auto& res = results[static_cast<size_t>(r)];
    res.exit_code = ranks.rank(r).wait(deadline);
    res.stderr_text = ranks.rank(r).stderr_text();
  }
  return results;
}

void expect_all_ok(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    const auto& res = results[r];
    EXPECT_EQ(res.exit_code, std::optional<int>(0)) << "rank " << r
                                                    << " (killed at the deadline "
                                                       "if empty)";
    EXPECT_EQ(res.line_starting("result "), "ok")
        << "rank " << r << ": " << res.line_starting("result ") << "\nstderr:\n"
        << res.stderr_text;
  }
}

class WorldSize : public ::testing::TestWithParam<int> {};

TEST_P(WorldSize, RandomMixedLayoutsAverageExactly) {
  const int n = GetParam();
  expect_all_ok(run_group("average", n, 101 + static_cast<uint64_t>(n), 100s));
}

TEST_P(WorldSize, GradientViewsAverageExactly) {
  const int n = GetParam();
  expect_all_ok(run_group("average_views", n, 202 + static_cast<uint64_t>(n), 100s));
}

TEST_P(WorldSize, AccumulationOverThreeStepsAveragesTheSums) {
  const int n = GetParam();
  expect_all_ok(run_group("accumulate", n, 303, 100s));
}

TEST_P(WorldSize, Float16CompressionStaysWithinItsBound) {
  const int n = GetParam();
  const auto results = run_group("compress_fp16", n, 404, 100s);
  expect_all_ok(results);
  EXPECT_NE(results[0].line_starting("worst_relative_error float16 copies "), "");
}

TEST_P(WorldSize, BFloat16CompressionStaysWithinItsBound) {
  const int n = GetParam();
  expect_all_ok(run_group("compress_bf16", n, 505, 100s));
}

TEST_P(WorldSize, DefaultLimitsOverThirtyMegabytes) {
  const int n = GetParam();
  const auto results = run_group("default_limits", n, 606, 200s);
  expect_all_ok(results);
  // 41 small parameters fill the 1 MiB first bucket, then 25 MiB buckets;
  // the 28 MB parameter has its own.
  EXPECT_NE(results[0].line_starting("buckets "), "");
}

TEST_P(WorldSize, AMismatchedLayoutIsNamedOnEveryRank) {
  const int n = GetParam();
  const auto results = run_group("mismatch", n, 1, 60s);
  expect_all_ok(results);
  if (n == 1) return;
  const std::string last = std::to_string(n - 1);
  for (int r = 0; r < n; ++r) {
    const std::string e = results[static_cast<size_t>(r)].line_starting("layout_error ");
    EXPECT_THAT(e, HasSubstr("grad_sync: failed to check the parameter layout: rank " + last +
                             " registered a different layout than rank 0: parameter 3 "
                             "('layer1.bias'): count=10 on rank 0, count=12 on rank " +
                             last + "; ranks that differ from rank 0: [" + last +
                             "]; rank=" + std::to_string(r)))
        << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, WorldSize, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

class Survivors : public ::testing::TestWithParam<int> {};

TEST_P(Survivors, ALostRankFailsTheOthersWithinTheTimeout) {
  const int n = GetParam();
  const auto start = Clock::now();
  const auto results = run_group("peer_lost", n, 7, 60s);
  EXPECT_LT(Clock::now() - start, 40s);
  EXPECT_EQ(results[static_cast<size_t>(n - 1)].exit_code, std::optional<int>(9));
  for (int r = 0; r < n - 1; ++r) {
    const auto& res = results[static_cast<size_t>(r)];
    EXPECT_EQ(res.exit_code, std::optional<int>(0)) << "rank " << r;
    EXPECT_THAT(res.line_starting("peer_error "), HasSubstr("gloo: "))
        << "rank " << r << "\nstderr:\n"
        << res.stderr_text;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Survivors, ::testing::Values(2, 3),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

}  // namespace
}  // namespace slurmddp::support
