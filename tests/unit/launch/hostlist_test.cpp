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

}  // namespace
}  // namespace slurmddp::launch
