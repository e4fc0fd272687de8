// Where a rank and its node-mates run (env/locality.h), from the environment
// of the plugin, torchrun and bare Slurm.
#include "env/locality.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace slurmddp {
namespace {

EnvReader reader(const std::map<std::string, std::string>& vars) {
  return [vars](const char* n) -> std::optional<std::string> {
    auto it = vars.find(n);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

ProcessIdentity identity(IdentitySource source, int rank, int size, int local_rank,
                         int local_size) {
  ProcessIdentity id;
  id.source = source;
  id.rank = rank;
  id.world_size = size;
  id.local_rank = local_rank;
  id.local_world_size = local_size;
  return id;
}

TEST(Locality, PluginTasksNameTheirNodeMatesFromGtids) {
  // srun -n 6 -m cyclic over n[1-2]: n2 runs ranks 1, 3, 5.
  const auto l = locality_from_environment(identity(IdentitySource::kPlugin, 3, 6, 1, 3),
                                           reader({{"SLURMD_NODENAME", "n2"},
                                                   {"SLURM_GTIDS", "1,3,5"},
                                                   {"SLURM_STEP_NODELIST", "n[1-2]"}}));
  EXPECT_EQ(l.node, "n2");
  EXPECT_EQ(l.node_ranks, (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(l.nodes, (std::vector<std::string>{"n1", "n2"}));
}

TEST(Locality, TorchrunWorkersAreAConsecutiveBlock) {
  const auto l = locality_from_environment(identity(IdentitySource::kTorchrun, 6, 8, 2, 4),
                                           reader({{"SLURMD_NODENAME", "gpu7"}}));
  EXPECT_EQ(l.node, "gpu7");
  EXPECT_EQ(l.node_ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_TRUE(l.nodes.empty());
}

TEST(Locality, GtidsThatDoNotFitTheWorldAreIgnored) {
  // Not this rank, out of range, not a number: the list says nothing reliable.
  for (const char* gtids : {"0,1", "2,9", "2,x", ""}) {
    const auto l =
        locality_from_environment(identity(IdentitySource::kSlurm, 2, 4, 0, 2),
                                  reader({{"SLURMD_NODENAME", "n1"}, {"SLURM_GTIDS", gtids}}));
    EXPECT_TRUE(l.node_ranks.empty()) << gtids;
  }
}

TEST(Locality, ANodeListWithoutThisNodeOrUnreadableIsLeftOut) {
  for (const char* list : {"n[3-4]", "n[1-"}) {
    const auto l = locality_from_environment(
        identity(IdentitySource::kPlugin, 0, 2, 0, 2),
        reader({{"SLURMD_NODENAME", "n1"}, {"SLURM_GTIDS", "0,1"}, {"SLURM_NODELIST", list}}));
    EXPECT_TRUE(l.nodes.empty()) << list;
    EXPECT_EQ(l.node_ranks, (std::vector<int>{0, 1}));
  }
}

TEST(Locality, WithoutSlurmTheHostNameIsTheNode) {
  const auto l =
      locality_from_environment(identity(IdentitySource::kTorchrun, 0, 1, 0, 1), reader({}));
  EXPECT_FALSE(l.node.empty());
  EXPECT_EQ(l.node_ranks, (std::vector<int>{0}));
}

}  // namespace
}  // namespace slurmddp
