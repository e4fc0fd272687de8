// The harness's one rank command line (tests/support/rank_args.h) and the
// plugin's environment for a loopback task (plugin_env.h).
#include "rank_args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "plugin_env.h"

namespace slurmddp::support {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// argv as a program gets it (argv[argc] == nullptr), backed by `words`.
struct Argv {
  explicit Argv(std::vector<std::string> w) : words(std::move(w)) {
    for (auto& s : words) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
    argc = static_cast<int>(words.size());
  }
  std::vector<std::string> rest() const { return {ptrs.begin(), ptrs.begin() + argc}; }
  std::vector<std::string> words;
  std::vector<char*> ptrs;
  int argc = 0;
};

TEST(RankArgs, ALauncherArgvRoundTripsAndTheProgramKeepsItsOwnArguments) {
  Argv a(with_rank({"comm_rank", "loop", "mp0", "3000"}, 2, 4, 40123));
  EXPECT_THAT(a.words, ElementsAre("comm_rank", "loop", "mp0", "3000", "--rank", "2", "--world",
                                   "4", "--store-port", "40123"));
  const RankArgs r = RankArgs::take_from(a.argc, a.ptrs.data());
  EXPECT_TRUE(r.started_as_rank());
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.world, 4);
  EXPECT_EQ(r.store_port, 40123);
  EXPECT_THAT(a.rest(), ElementsAre("comm_rank", "loop", "mp0", "3000"));
  EXPECT_EQ(a.ptrs[static_cast<size_t>(a.argc)], nullptr);
}

TEST(RankArgs, OptionsMayComeAnywhereAndWithoutThemItIsNotARank) {
  Argv a({"bench", "--rank", "0", "--iters", "5", "--world", "1", "--store-port", "7", "-x"});
  const RankArgs r = RankArgs::take_from(a.argc, a.ptrs.data());
  EXPECT_EQ(r.rank, 0);
  EXPECT_THAT(a.rest(), ElementsAre("bench", "--iters", "5", "-x"));

  Argv alone({"bench", "--iters", "5"});
  const RankArgs none = RankArgs::take_from(alone.argc, alone.ptrs.data());
  EXPECT_FALSE(none.started_as_rank());
  EXPECT_THAT(alone.rest(), ElementsAre("bench", "--iters", "5"));
}

TEST(RankArgs, ABadValueIsNamedWithWhatWasExpected) {
  RankArgs r;
  try {
    r.take("--world", "0");
    FAIL() << "--world 0 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("--world 0: expected an integer in [1, "));
  }
  EXPECT_THROW(r.take("--store-port", "70000"), std::invalid_argument);
  EXPECT_THROW(r.take("--rank", "1x"), std::invalid_argument);
  EXPECT_THROW(r.take("--rank", ""), std::invalid_argument);
  EXPECT_FALSE(r.take("--ranks", "3"));  // not one of the three: the program's own
}

TEST(RankArgs, ARankOutsideTheWorldOrWithoutAStoreIsRefused) {
  Argv outside(with_rank({"p"}, 4, 4, 9000));
  try {
    RankArgs::take_from(outside.argc, outside.ptrs.data());
    FAIL() << "rank 4 of 4 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("--rank 4 with --world 4: expected 0 <= rank < world"));
  }
  Argv no_store({"p", "--rank", "0", "--world", "2"});
  try {
    RankArgs::take_from(no_store.argc, no_store.ptrs.data());
    FAIL() << "a rank without a store port was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("--rank 0 without --store-port"));
  }
}

TEST(PluginEnv, IsTheOneNodeStepOfThePluginWithExtrasOnTop) {
  const Env env = plugin_env(1, 3, 29500, {{"SLURMDDP_TIMEOUT", "5s"}, {"PMIX_RANK", "7"}});
  EXPECT_EQ(env.at("RANK"), "1");
  EXPECT_EQ(env.at("WORLD_SIZE"), "3");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "3");
  EXPECT_EQ(env.at("MASTER_ADDR"), "127.0.0.1");
  EXPECT_EQ(env.at("MASTER_PORT"), "29500");
  EXPECT_EQ(env.at("SLURM_JOB_ID"), "");  // removed in the child: not inside a job
  EXPECT_EQ(env.at("SLURMDDP_TIMEOUT"), "5s");
  EXPECT_EQ(env.at("PMIX_RANK"), "7");
}

}  // namespace
}  // namespace slurmddp::support
