// System tests of every way people launch on Slurm, on the real test cluster:
// -m arbitrary with rank 0 on the second node, a heterogeneous step as one
// world, torchrun inside srun, --export=NONE and --export=VAR, a token lost on
// the way into the task, a container-style launch through unshare and chroot,
// and a MASTER_PORT changed after the plugin ran.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cluster.h"

namespace slurmddp::systest {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string probe() {
  return probe_path();
}
std::string runtime_probe() {
  return env_or_empty("SLURMDDP_RUNTIME_PROBE");
}

// Probe lines of one srun, sorted by RANK.
std::vector<Fields> by_rank(const Result& r) {
  auto tasks = parse_lines(r.out);
  std::sort(tasks.begin(), tasks.end(), [](const Fields& a, const Fields& b) {
    return std::stoi(a.at("RANK")) < std::stoi(b.at("RANK"));
  });
  return tasks;
}

// The ranks of runtime_probe lines that report ok=1.
std::set<std::string> ok_ranks(const Result& r) {
  std::set<std::string> ranks;
  for (const auto& l : parse_lines(r.out, "runtime ")) {
    if (l.count("ok") != 0 && l.at("ok") == "1") ranks.insert(l.at("rank"));
  }
  return ranks;
}

std::set<std::string> ranks_upto(int n) {
  std::set<std::string> s;
  for (int i = 0; i < n; ++i) s.insert(std::to_string(i));
  return s;
}

TEST(LaunchForms, ArbitraryLayoutPutsTheMasterOnRankZerosNode) {
  REQUIRE_CLUSTER();
  std::string dir = fresh_dir("arbitrary-layout");
  std::ofstream(dir + "/hosts") << "n2\nn1\nn1\nn2\n";
  std::string env = "SLURM_HOSTFILE=" + dir + "/hosts ";
  Result r = run(env + "srun -n 4 -m arbitrary --ddp-verbose " + probe());
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto tasks = by_rank(r);
  ASSERT_EQ(tasks.size(), 4u);
  const char* hosts[] = {"n2", "n1", "n1", "n2"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(tasks[i].at("host"), hosts[i]) << "rank " << i;
    EXPECT_EQ(tasks[i].at("MASTER_ADDR"), node_address("n2")) << "n2's address, rank " << i;
    EXPECT_EQ(tasks[i].at("WORLD_SIZE"), "4");
    EXPECT_EQ(tasks[i].at("LOCAL_WORLD_SIZE"), "2");
  }
  EXPECT_THAT(r.err, HasSubstr("first line of SLURM_HOSTFILE=" + dir + "/hosts"));
  // and the rendezvous works on it
  Result rt = run(env + "srun -n 4 -m arbitrary " + runtime_probe(), std::chrono::seconds(120));
  ASSERT_EQ(rt.rc, 0) << rt.out << rt.err;
  EXPECT_EQ(ok_ranks(rt), ranks_upto(4));
}

TEST(LaunchForms, ArbitraryLayoutWithoutAHostfileIsStillRefused) {
  REQUIRE_CLUSTER();
  Result r = run("srun --kill-on-bad-exit=0 -n 2 -m arbitrary -w n2,n1 " + probe());
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("failed to establish MASTER_ADDR"));
  EXPECT_THAT(r.err, HasSubstr("SLURM_HOSTFILE is not set in the step"));
  EXPECT_THAT(r.err, HasSubstr("--ddp-addr=HOST"));
  EXPECT_THAT(r.out, Not(HasSubstr("RANK=")));
}

// Component 0 on n2 (2 tasks), component 1 on n1 (2 tasks): rank 0 is on n2
// although n1 comes first in the combined node list.
const char* const kHetAlloc = "salloc -w n2 -n 2 : -w n1 -n 2 ";

TEST(LaunchForms, HeterogeneousStepIsOneWorld) {
  REQUIRE_CLUSTER();
  // One allocation (a heterogeneous job waits for its nodes), two steps.
  Result r = run(std::string(kHetAlloc) + "bash -c 'srun --het-group=0,1 " + probe() +
                     " && srun --het-group=0,1 " + runtime_probe() +
                     " && srun --het-group=0,1 --no-ddp " + runtime_probe() + "'",
                 std::chrono::seconds(150));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto tasks = by_rank(r);
  ASSERT_EQ(tasks.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const Fields& t = tasks[i];
    EXPECT_EQ(t.at("RANK"), std::to_string(i));
    EXPECT_EQ(t.at("RANK"), t.at("SLURM_PROCID"));
    EXPECT_EQ(t.at("WORLD_SIZE"), "4");
    EXPECT_EQ(t.at("host"), i < 2 ? "n2" : "n1");
    EXPECT_EQ(t.at("NODE_RANK"), i < 2 ? "0" : "1");
    EXPECT_EQ(t.at("LOCAL_RANK"), std::to_string(i % 2));
    EXPECT_EQ(t.at("LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(t.at("MASTER_ADDR"), node_address("n2"));
    EXPECT_EQ(t.at("MASTER_PORT"), tasks[0].at("MASTER_PORT"));
    EXPECT_EQ(t.at("SLURMDDP_STEP"), tasks[0].at("SLURMDDP_STEP"));
    EXPECT_EQ(t.at("TOKEN_FP"), tasks[0].at("TOKEN_FP"));
    EXPECT_NE(t.at("TOKEN_FP"), "<unset>");
  }
  // with the plugin, and without it (the runtime applies the same rules)
  std::map<std::string, int> sources;
  for (const auto& l : parse_lines(r.out, "runtime ")) {
    EXPECT_EQ(l.at("ok"), "1");
    EXPECT_EQ(l.at("world"), "4");
    ++sources[l.at("source")];
  }
  EXPECT_EQ(sources, (std::map<std::string, int>{{"plugin", 4}, {"slurm", 4}}));
}

TEST(LaunchForms, TorchrunLauncherWithTwoTasksPerNodeIsAClearError) {
  REQUIRE_CLUSTER();
  Result r = run("srun --kill-on-bad-exit=0 -N 1 -n 2 --ddp-launcher=torchrun " + probe());
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("--ddp-launcher=torchrun runs one torchrun per node"));
  EXPECT_THAT(r.err, HasSubstr("--ntasks-per-node=1"));
}

TEST(LaunchForms, MasterOnlyLauncherLeavesRanksUnset) {
  REQUIRE_CLUSTER();
  Result r = run("srun -N 2 -n 2 --ddp-launcher=master-only " + probe());
  ASSERT_EQ(r.rc, 0) << r.err;
  auto tasks = parse_lines(r.out);
  ASSERT_EQ(tasks.size(), 2u);
  for (const auto& t : tasks) {
    EXPECT_EQ(t.at("RANK"), "<unset>");
    EXPECT_EQ(t.at("WORLD_SIZE"), "<unset>");
    EXPECT_EQ(t.at("MASTER_ADDR"), node_address("n1"));
    EXPECT_NE(t.at("MASTER_PORT"), "<unset>");
  }
}

TEST(LaunchForms, ExportNoneAndExportVarKeepTheRendezvous) {
  REQUIRE_CLUSTER();
  for (const char* mode : {"--export=NONE", "--export=FOO"}) {
    Result r = run(std::string("FOO=1 srun -N 2 -n 4 ") + mode + " " + runtime_probe(),
                   std::chrono::seconds(120));
    ASSERT_EQ(r.rc, 0) << mode << "\n" << r.out << r.err;
    EXPECT_EQ(ok_ranks(r), ranks_upto(4)) << mode;
    Result p = run(std::string("srun -N 2 -n 2 ") + mode + " " + probe());
    auto tasks = parse_lines(p.out);
    ASSERT_EQ(tasks.size(), 2u) << mode << p.err;
    for (const auto& t : tasks) EXPECT_EQ(t.at("TOKEN_LEN"), "32") << mode;
  }
}

TEST(LaunchForms, LostTokenIsRefusedUnlessOpenIsAllowed) {
  REQUIRE_CLUSTER();
  Result r = run("srun --kill-on-bad-exit=0 -N 2 -n 2 env -u SLURMDDP_TOKEN " + runtime_probe(),
                 std::chrono::seconds(120));
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("SLURMDDP_TOKEN is not set, but slurm-ddp's plugin announced"));
  EXPECT_THAT(r.err, HasSubstr("SLURMDDP_ALLOW_OPEN=1"));
  EXPECT_TRUE(ok_ranks(r).empty());
  Result open = run("srun -N 2 -n 2 env -u SLURMDDP_TOKEN SLURMDDP_ALLOW_OPEN=1 " + runtime_probe(),
                    std::chrono::seconds(120));
  ASSERT_EQ(open.rc, 0) << open.out << open.err;
  EXPECT_EQ(ok_ranks(open), ranks_upto(2));
  EXPECT_THAT(open.err, HasSubstr("running with an open rendezvous"));
}

TEST(LaunchForms, ContainerStyleLaunchKeepsTheVariables) {
  REQUIRE_CLUSTER();
  // What enroot does: new mount and pid namespaces, a changed root, then exec.
  const std::string wrap = "unshare --mount --pid --fork --mount-proc chroot / ";
  Result p = run("srun -N 2 -n 4 " + wrap + probe());
  ASSERT_EQ(p.rc, 0) << p.err;
  auto tasks = by_rank(p);
  ASSERT_EQ(tasks.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(tasks[i].at("WORLD_SIZE"), "4");
    EXPECT_EQ(tasks[i].at("MASTER_ADDR"), node_address("n1"));
    EXPECT_EQ(tasks[i].at("TOKEN_LEN"), "32");
  }
  Result r = run("srun -N 2 -n 4 " + wrap + runtime_probe(), std::chrono::seconds(120));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(ok_ranks(r), ranks_upto(4));
}

// Note [A master changed after the plugin] (runtime/env/identity.cpp)
TEST(LaunchForms, AMasterChangedAfterThePluginIsReportedAndThePluginsIsUsed) {
  REQUIRE_CLUSTER();
  // An image's preset (or enroot's hook) replacing MASTER_PORT in every task.
  Result r = run(
      "srun -N 2 -n 4 --ntasks-per-node=2 sh -c 'MASTER_PORT=29517 exec " + runtime_probe() + "'",
      std::chrono::seconds(120));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(ok_ranks(r), ranks_upto(4));
  // by default, once a node, with both values and the fix
  EXPECT_EQ(count(r.err, ":29517 differs from " + node_address("n1") + ":"), 2u) << r.err;
  EXPECT_THAT(r.err, HasSubstr("which slurm-ddp's plugin exported for step"));
  EXPECT_THAT(r.err, HasSubstr("--container-env=MASTER_ADDR,MASTER_PORT"));
  EXPECT_THAT(r.err, ::testing::ContainsRegex("; using " + node_address("n1") + ":[0-9]+\\."));
  // who sets it on purpose unsets SLURMDDP_MASTER: then their values serve
  Result own = run("srun -N 2 -n 2 sh -c 'MASTER_PORT=29517 exec env -u SLURMDDP_MASTER " +
                       runtime_probe() + "'",
                   std::chrono::seconds(120));
  ASSERT_EQ(own.rc, 0) << own.out << own.err;
  EXPECT_EQ(ok_ranks(own), ranks_upto(2));
  EXPECT_THAT(own.err, Not(HasSubstr("differs from")));
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
