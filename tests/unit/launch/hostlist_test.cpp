#include "launch/hostlist.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "launch/error.h"

namespace slurmddp::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> x(const char* e) {
  return expand_hostlist("L", e);
}

TEST(Hostlist, PlainAndRanges) {
  EXPECT_THAT(x("n1"), ElementsAre("n1"));
  EXPECT_THAT(x("n[1-3]"), ElementsAre("n1", "n2", "n3"));
  EXPECT_THAT(x("n[2,1],m1"), ElementsAre("n2", "n1", "m1"));
  EXPECT_THAT(x("a,b c"), ElementsAre("a", "b", "c"));
  EXPECT_THAT(x("n[1-2],n[1-2]"), ElementsAre("n1", "n2", "n1", "n2"));
}

// Widths as scontrol show hostnames prints them (Slurm 22.05).
TEST(Hostlist, ZeroPaddingFollowsLowBound) {
  EXPECT_THAT(x("n[08-10]"), ElementsAre("n08", "n09", "n10"));
  EXPECT_THAT(x("n[8-10]"), ElementsAre("n8", "n9", "n10"));
  EXPECT_THAT(x("n[098-100]"), ElementsAre("n098", "n099", "n100"));
  EXPECT_THAT(x("n[1-02]"), ElementsAre("n1", "n2"));
  EXPECT_THAT(x("n[01-2]"), ElementsAre("n01", "n02"));
  EXPECT_THAT(x("n[007]"), ElementsAre("n007"));
}

TEST(Hostlist, SeveralBracketGroupsInSlurmOrder) {
  EXPECT_THAT(x("a[1-2]b[3-4]"), ElementsAre("a1b3", "a1b4", "a2b3", "a2b4"));
  EXPECT_THAT(x("n[0-1]x[0-1]y[5-6]"), ElementsAre("n0x0y5", "n0x0y6", "n1x0y5", "n1x0y6", "n0x1y5",
                                                   "n0x1y6", "n1x1y5", "n1x1y6"));
}

TEST(Hostlist, TextAfterTheLastBracketIsASuffixOfEveryHost) {
  EXPECT_THAT(x("x[1-2]-ib"), ElementsAre("x1-ib", "x2-ib"));
  EXPECT_THAT(x("a[1-2]b3"), ElementsAre("a1b3", "a2b3"));
  EXPECT_THAT(x("node[0009-0010]-int,z"), ElementsAre("node0009-int", "node0010-int", "z"));
  EXPECT_THAT(x("a[1-2]b[3-4]-s"), ElementsAre("a1b3-s", "a1b4-s", "a2b3-s", "a2b4-s"));
  EXPECT_EQ(first_host("L", "gpu[07-09]-ib"), "gpu07-ib");
}

TEST(Hostlist, FirstHostWithoutExpanding) {
  EXPECT_EQ(first_host("L", "gpu[0007-9999999]"), "gpu0007");
  EXPECT_EQ(first_host("L", "a[3-4]b[9-10],z"), "a3b9");
}

TEST(Hostlist, RejectsMalformedNamingTheVariable) {
  for (const char* bad : {"n[1-3", "n]", "n[]", "n[3-1]", "x[1-2]-i]b", "n[[1]]", "n[a]", ""}) {
    try {
      expand_hostlist("SLURM_STEP_NODELIST", bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const LaunchError& e) {
      EXPECT_THAT(e.what(), HasSubstr("SLURM_STEP_NODELIST=")) << bad;
    }
  }
}

TEST(Hostlist, RefusesHugeExpansions) {
  EXPECT_THROW(expand_hostlist("L", "n[0-99999999]", 1000), LaunchError);
  EXPECT_EQ(expand_hostlist("L", "n[1-1000]", 1000).size(), 1000u);
}

// Note [Bounded parsing]: a count of hosts alone lets long names take
// gigabytes; the bytes of the names are capped too, and so is the expression.
TEST(Hostlist, RefusesLongNamesOverTheByteBudgetAndOversizedExpressions) {
  const std::string many = std::string(4000, 'a') + "[0-9999]";  // 40 MB of names
  try {
    expand_hostlist("L", many);
    ADD_FAILURE() << "expanded 40 MB of names";
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("more bytes of host names than the limit"));
  }
  EXPECT_EQ(expand_hostlist("L", "n[1-4]", 10, 8).size(), 4u);
  EXPECT_THROW(expand_hostlist("L", "n[1-5]", 10, 8), LaunchError);
  const std::string over(kMaxHostlistBytes + 1, 'n');
  for (auto* call : {+[](const std::string& e) { expand_hostlist("L", e); },
                     +[](const std::string& e) { first_host("L", e); }}) {
    try {
      call(over);
      ADD_FAILURE() << "accepted " << over.size() << " bytes";
    } catch (const LaunchError& e) {
      EXPECT_EQ(std::string(e.what()),
                "invalid L: 1048577 bytes long, over the limit of 1048576 bytes; expected a "
                "Slurm hostlist such as n[01-04,7],gpu1");
    }
  }
}

// A walk stops where its visitor says, without generating the rest, and a
// shared budget is taken from by every walk.
TEST(Hostlist, WalksStopEarlyAndShareABudget) {
  HostBudget budget{5, 1000};
  std::vector<std::string> seen;
  for_each_host("L", "n[1-3]", budget, [&](const std::string&) { return false; });
  EXPECT_EQ(budget.hosts, 4u);
  for_each_host("L", "m[1-3]", budget, [&](const std::string& h) {
    seen.push_back(h);
    return true;
  });
  EXPECT_THAT(seen, ElementsAre("m1", "m2", "m3"));
  EXPECT_THROW(for_each_host("L", "k[1-2]", budget, [](const std::string&) { return true; }),
               LaunchError);
}

}  // namespace
}  // namespace slurmddp::launch
