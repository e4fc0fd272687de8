// Note [Deterministic cache]: hits, misses and evictions depend only on the
// sequence of keys and sizes.
#include <gtest/gtest.h>

#include "comm/gloo/gloo_algorithms.h"
#include "comm/gloo/gloo_communicator.h"
#include "slurmddp/gloo_communicator.h"

namespace slurmddp::comm {
namespace {

std::shared_ptr<CachedAlgorithm> entry_of(size_t bytes, int* made) {
  ++*made;
  auto e = std::make_shared<CachedAlgorithm>();
  e->in.resize(bytes);
  return e;
}

TEST(AlgorithmCache, HitsMissesAndLeastRecentlyUsedEviction) {
  AlgorithmCache cache(300);
  int made = 0;
  auto a = cache.get("a", [&] { return entry_of(100, &made); });
  auto b = cache.get("b", [&] { return entry_of(100, &made); });
  EXPECT_EQ(made, 2);
  EXPECT_EQ(cache.get("a", [&] { return entry_of(100, &made); }), a);  // hit, now newest
  EXPECT_EQ(made, 2);
  cache.get("c", [&] { return entry_of(100, &made); });
  cache.get("d", [&] { return entry_of(100, &made); });  // over budget: evicts b (oldest)
  EXPECT_EQ(made, 4);
  EXPECT_EQ(cache.entries(), 3u);
  EXPECT_EQ(cache.get("a", [&] { return entry_of(100, &made); }), a);
  EXPECT_EQ(made, 4);
  EXPECT_NE(cache.get("b", [&] { return entry_of(100, &made); }), b);
  EXPECT_EQ(made, 5);
}

TEST(AlgorithmCache, OversizedEntriesAreNotKept) {
  AlgorithmCache cache(100);
  int made = 0;
  auto small = cache.get("s", [&] { return entry_of(50, &made); });
  auto big = cache.get("big", [&] { return entry_of(500, &made); });
  EXPECT_EQ(big->in.size(), 500u);
  EXPECT_EQ(cache.entries(), 1u);  // "s" survives: a huge entry evicts nothing
  cache.get("big", [&] { return entry_of(500, &made); });
  EXPECT_EQ(made, 3);
  EXPECT_EQ(cache.get("s", [&] { return entry_of(50, &made); }), small);
}

TEST(AlgorithmCache, SameSequenceSameDecisions) {
  // Two "ranks" replaying one operation sequence make identical objects.
  const std::vector<std::pair<std::string, size_t>> seq = {
      {"x", 40}, {"y", 70}, {"x", 40}, {"z", 90}, {"w", 10}, {"y", 70}, {"v", 300}, {"x", 40}};
  std::vector<int> made_at[2];
  for (int r = 0; r < 2; ++r) {
    AlgorithmCache cache(128);
    for (size_t i = 0; i < seq.size(); ++i) {
      int made = 0;
      cache.get(seq[i].first, [&] { return entry_of(seq[i].second, &made); });
      if (made) made_at[r].push_back(static_cast<int>(i));
    }
  }
  EXPECT_EQ(made_at[0], made_at[1]);
  EXPECT_EQ(made_at[0], (std::vector<int>{0, 1, 3, 4, 5, 6, 7}));
}

TEST(AllreduceTier, BySize) {
  const size_t small = GlooOptions{}.small_max_bytes;
  EXPECT_EQ(small, size_t{1} << 20);
  EXPECT_EQ(choose_allreduce_tier(4, small), AllreduceTier::kSmallSync);
  EXPECT_EQ(choose_allreduce_tier(small, small), AllreduceTier::kSmallSync);
  EXPECT_EQ(choose_allreduce_tier(small + 1, small), AllreduceTier::kLargeRing);
  EXPECT_EQ(choose_allreduce_tier(1, 0), AllreduceTier::kLargeRing);
  EXPECT_STREQ(to_string(AllreduceTier::kLargeRing), "ring");
  EXPECT_STREQ(to_string(AllreduceTier::kSmallSync), "halving-doubling/sync");
}

}  // namespace
}  // namespace slurmddp::comm
