// The one formatter of rank sets and "who is missing" (membership/ranks.h).
#include "membership/ranks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace slurmddp::membership {
namespace {

TEST(FormatRanks, RunsOfThreeOrMoreAreRanges) {
  EXPECT_EQ(format_ranks({}), "");
  EXPECT_EQ(format_ranks({2}), "2");
  EXPECT_EQ(format_ranks({1, 2}), "1, 2");
  EXPECT_EQ(format_ranks({1, 2, 3, 4, 6, 7, 8, 9}), "1-4, 6-9");
  EXPECT_EQ(format_ranks({9, 2, 2, 4, 3}), "2-4, 9") << "sorted, deduplicated";
  EXPECT_EQ(format_ranks({0, 1, 2, 5, 6}), "0-2, 5, 6");
}

TEST(FormatRanks, LongListsAreCutAfterMaxItems) {
  std::vector<int> odd;
  for (int r = 1; r < 200; r += 2) odd.push_back(r);  // 100 ranks, no runs
  const std::string s = format_ranks(odd);
  EXPECT_EQ(s.rfind("1, 3, 5, ", 0), 0u) << s;
  EXPECT_NE(s.find(", 63 ... and 68 more"), std::string::npos) << s;
  EXPECT_EQ(format_ranks({1, 2, 3, 7, 9}, 2), "1-3, 7 ... and 1 more");
}

TEST(JoinedText, CountsAndNamesTheMissing) {
  EXPECT_EQ(joined_text(4, {2}), "3/4 ranks joined; missing: [2]");
  EXPECT_EQ(joined_text(3, {2, 1}), "1/3 ranks joined; missing: [1, 2]");
  std::vector<int> all_but_zero;
  for (int r = 1; r < 100; ++r) all_but_zero.push_back(r);
  EXPECT_EQ(joined_text(100, all_but_zero), "1/100 ranks joined; missing: [1-99]");
  EXPECT_EQ(joined_text(2, {}), "2/2 ranks joined; missing: []");
  EXPECT_EQ(rank_list({5, 4, 3, 0}), "[0, 3-5]");
}

TEST(ProbeMissing, FindsExactlyTheAbsentKeys) {
  auto store = make_in_process_store();
  for (int r : {0, 1, 3, 5, 6, 7}) store->set("k/" + std::to_string(r), Bytes{'1'});
  EXPECT_EQ(probe_missing(*store, 9, [](int r) { return "k/" + std::to_string(r); }),
            (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(probe_missing(*store, 2, [](int r) { return "k/" + std::to_string(r); }),
            std::vector<int>{});
  EXPECT_EQ(probe_missing(*store, 0, [](int r) { return "k/" + std::to_string(r); }),
            std::vector<int>{});
}

}  // namespace
}  // namespace slurmddp::membership
