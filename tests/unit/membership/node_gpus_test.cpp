// Note [Node GPUs]: ranks of one node settle their GPUs from each other's join
// records (ranks as threads on the in-process store).
#include "group/node_gpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "launch/parse.h"
#include "rank_threads.h"

namespace slurmddp {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// Each rank's outcome when rank r sees lists[r] (CUDA_VISIBLE_DEVICES), has
// device presets[r] (-1: none) and sharing[r] (none when not given).
std::vector<NodeGpuOutcome> settle(const std::vector<std::string>& lists,
                                   const std::vector<int>& presets,
                                   const std::vector<GpuSharing>& sharing = {}) {
  auto store = make_in_process_store();
  const int n = static_cast<int>(lists.size());
  std::vector<int> node_ranks;
  for (int r = 0; r < n; ++r) node_ranks.push_back(r);
  std::vector<NodeGpuOutcome> out(lists.size());
  support::expect_no_rank_errors(support::on_rank_threads(n, [&](int r) {
    ProcessIdentity id;
    id.rank = r;
    id.world_size = n;
    id.local_rank = r;
    id.local_world_size = n;
    id.gpu_variable = "CUDA_VISIBLE_DEVICES";
    for (const auto& g : launch::split(lists[static_cast<size_t>(r)], ',')) id.gpus.push_back(g);
    if (presets[static_cast<size_t>(r)] >= 0) id.local_device = presets[static_cast<size_t>(r)];
    id.device_why = "rule";
    membership::JoinOptions o;
    o.store = store;
    o.prefix = "t";
    o.rank = r;
    o.size = n;
    o.deadline = membership::Clock::now() + 10s;
    o.fields = node_gpu_fields(id, id.gpus,
                               sharing.empty() ? GpuSharing{} : sharing[static_cast<size_t>(r)]);
    auto group = membership::Membership::join(o);
    out[static_cast<size_t>(r)] =
        settle_node_gpus(id, *group, node_ranks, "n1", std::string("gres/gpu:closest"));
  }));
  return out;
}

TEST(NodeGpus, RanksOfANodeTakeDistinctGpusFromTheirRecords) {
  auto out = settle({"0,1", "0,1", "2,3", "2,3"}, {-1, -1, -1, -1});
  std::vector<std::optional<int>> devices;
  for (const auto& o : out) {
    devices.push_back(o.device);
    EXPECT_EQ(o.conflict, "");
  }
  EXPECT_EQ(devices, (std::vector<std::optional<int>>{0, 1, 0, 1}));
  EXPECT_THAT(out[1].why, HasSubstr("GPU 1 of the node's ranks' GPUs, exchanged at init"));
}

TEST(NodeGpus, TwoRanksOnOneGpuAreNamedWithTheNodeAndTheBinding) {
  auto out = settle({"0", "1", "1"}, {0, 0, 0});
  EXPECT_EQ(out[0].conflict, "");
  for (size_t r : {1u, 2u}) {
    EXPECT_THAT(out[r].conflict, HasSubstr("ranks 1 and 2 on node n1 are left on one GPU (1)"));
    EXPECT_THAT(out[r].conflict, HasSubstr("rank 2 sees CUDA_VISIBLE_DEVICES=1"));
    EXPECT_THAT(out[r].conflict, HasSubstr("SLURMD_TRES_BIND=gres/gpu:closest"));
  }
}

// As scripts/gpu-check and the gpu tests start ranks on a one-GPU machine
// (Note [Sharing one GPU] in tests/gpu/nccl_ranks.cpp): both given GPU 0 of
// CUDA_VISIBLE_DEVICES=0, each claiming a host of its own. NCCL accepts them,
// so init() must not refuse them.
TEST(NodeGpus, RanksThatClaimHostsOfTheirOwnShareAGpuAsAsked) {
  auto out = settle({"0", "0"}, {0, 0}, {{"check-rank-0", true}, {"check-rank-1", true}});
  for (const auto& o : out) {
    EXPECT_EQ(o.conflict, "");
    EXPECT_EQ(o.device, std::optional<int>(0));
    EXPECT_THAT(o.shared, HasSubstr("ranks 0 and 1 on node n1 share one GPU (0) as asked "
                                    "(NCCL_HOSTID=check-rank-0 and check-rank-1"));
  }
}

TEST(NodeGpus, NcclMultiRankGpuOnBothRanksIsSharingAsAsked) {
  auto out = settle({"0", "0"}, {0, 0}, {{"", true}, {"", true}});
  EXPECT_EQ(out[0].conflict, "");
  EXPECT_THAT(out[1].shared, HasSubstr("NCCL_MULTI_RANK_GPU_ENABLE=1 on both"));
}

TEST(NodeGpus, OneHostIdOrAHalfAskedSharingIsStillAConflict) {
  // The same NCCL_HOSTID: one host to NCCL, which refuses them.
  auto same = settle({"0", "0"}, {0, 0}, {{"h", false}, {"h", false}});
  EXPECT_THAT(same[0].conflict, HasSubstr("ranks 0 and 1 on node n1 are left on one GPU (0)"));
  EXPECT_EQ(same[0].shared, "");
  // NCCL_MULTI_RANK_GPU_ENABLE=1 on one rank only.
  auto half = settle({"0", "0"}, {0, 0}, {{"", true}, {"", false}});
  EXPECT_THAT(half[1].conflict, HasSubstr("are left on one GPU (0)"));
}

TEST(NodeGpus, SharingFieldsOnlyWhereSet) {
  ProcessIdentity id;
  id.gpu_variable = "CUDA_VISIBLE_DEVICES";
  id.gpus = {"0"};
  EXPECT_EQ(node_gpu_fields(id, id.gpus).size(), 3u);
  const auto f = node_gpu_fields(id, id.gpus, {"r1", true});
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[3], (std::pair<std::string, std::string>{"nccl_hostid", "r1"}));
  EXPECT_EQ(f[4], (std::pair<std::string, std::string>{"nccl_multi_rank_gpu", "1"}));
}

TEST(NodeGpus, NoGpusNoRecordFields) {
  ProcessIdentity id;
  EXPECT_TRUE(node_gpu_fields(id, {}).empty());
}

}  // namespace
}  // namespace slurmddp
