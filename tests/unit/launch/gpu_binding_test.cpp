// Note [Device choice]: every binding form Slurm has, as one task of a node
// sees it, and init()'s assignment across the ranks of a node.
#include "launch/gpu_binding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

namespace slurmddp::launch {
namespace {

using ::testing::HasSubstr;

GpuList cuda(const std::string& v) {
  return gpu_list("CUDA_VISIBLE_DEVICES", v);
}

// What Slurm's --gpu-bind gives local task `t` of a 4-GPU node with 4 tasks.
DeviceChoice task(uint32_t t, uint32_t tasks, const std::string& list,
                  const std::optional<std::string>& tres_bind, bool bind = false,
                  const std::string& node = "0,1,2,3") {
  DeviceFacts f;
  f.local_rank = t;
  f.local_task_count = tasks;
  f.task = cuda(list);
  f.node = cuda(node);
  if (tres_bind) f.bind = parse_gpu_bind(*tres_bind);
  return choose_device(f, bind);
}

TEST(GpuList, ReadsTheFirstVariableSetAndIgnoresSlurmsPlaceholder) {
  std::map<std::string, std::string> env{{"ROCR_VISIBLE_DEVICES", "2,3"}};
  auto lookup = [&](const char* n) -> std::optional<std::string> {
    auto it = env.find(n);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  EXPECT_EQ(read_gpu_list(lookup).variable, "ROCR_VISIBLE_DEVICES");
  EXPECT_EQ(read_gpu_list(lookup).ids, (std::vector<std::string>{"2", "3"}));
  env["HIP_VISIBLE_DEVICES"] = "1";  // narrows ROCR's list: what the program sees
  EXPECT_EQ(read_gpu_list(lookup).text(), "HIP_VISIBLE_DEVICES=1");
  env["CUDA_VISIBLE_DEVICES"] = "GPU-aa,GPU-bb";
  EXPECT_EQ(read_gpu_list(lookup).ids, (std::vector<std::string>{"GPU-aa", "GPU-bb"}));
  EXPECT_TRUE(cuda("NoDevFiles").empty());
  EXPECT_TRUE(cuda("").empty());
  EXPECT_EQ(cuda(",1,").ids, (std::vector<std::string>{"1"}));
  EXPECT_TRUE(cuda("-1").empty());  // CUDA's "no GPU"
  EXPECT_EQ(cuda("2,-1,3").ids, (std::vector<std::string>{"2"}));
  EXPECT_EQ(GpuList{}.text(), "no GPU variable");
}

TEST(GpuBind, ParsesEveryFormOfEverySlurm) {
  auto map = parse_gpu_bind("gres/gpu:map_gpu:0,1*2,0x3");  // 23.02 and later
  ASSERT_TRUE(map);
  EXPECT_EQ(map->kind, GpuBind::Kind::kMap);
  EXPECT_EQ(map->text, "map_gpu:0,1*2,0x3");
  EXPECT_EQ(map->sets, (std::vector<uint64_t>{1, 2, 2, 8}));
  auto mask = parse_gpu_bind("gpu:verbose,mask_gpu:0x3,0xC");  // 22.05, with verbose
  ASSERT_TRUE(mask);
  EXPECT_EQ(mask->kind, GpuBind::Kind::kMask);
  EXPECT_EQ(mask->text, "mask_gpu:0x3,0xC");
  EXPECT_EQ(mask->sets, (std::vector<uint64_t>{3, 12}));
  EXPECT_EQ(parse_gpu_bind("gres/gpu:map:1,0")->sets, (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(parse_gpu_bind("gres/gpu:mask:010")->sets, (std::vector<uint64_t>{8}));  // octal
  EXPECT_EQ(parse_gpu_bind("gres/gpu:closest")->kind, GpuBind::Kind::kClosest);
  EXPECT_EQ(parse_gpu_bind("gres/gpu:none")->kind, GpuBind::Kind::kNone);
  EXPECT_EQ(parse_gpu_bind("gres/gpu:single:2")->count, 2u);
  EXPECT_EQ(parse_gpu_bind("gres/gpu:per_task:1")->kind, GpuBind::Kind::kPerTask);
  EXPECT_EQ(parse_gpu_bind("gres/nic:closest+gres/gpu:per_task:2")->count, 2u);
  EXPECT_EQ(parse_gpu_bind("gres/gpu:future_form")->kind, GpuBind::Kind::kOther);
  EXPECT_FALSE(parse_gpu_bind("gres/nic:closest"));
  EXPECT_FALSE(parse_gpu_bind(""));
  // unreadable lists leave the sets unknown, never guessed
  EXPECT_FALSE(parse_gpu_bind("gres/gpu:map_gpu:64")->sets);
  EXPECT_FALSE(parse_gpu_bind("gres/gpu:map_gpu:a")->sets);
  EXPECT_FALSE(parse_gpu_bind("gres/gpu:mask_gpu:0")->sets);
  EXPECT_FALSE(parse_gpu_bind("gres/gpu:map_gpu:")->sets);
}

TEST(Device, NoBindingSharesTheListByLocalRank) {
  for (uint32_t r = 0; r < 4; ++r) {
    auto d = task(r, 4, "0,1,2,3", std::nullopt);
    EXPECT_EQ(d.local_device, r);
    EXPECT_FALSE(d.oversubscribed);
    EXPECT_THAT(d.why, HasSubstr("local rank " + std::to_string(r) + " modulo the 4 GPUs"));
  }
  auto over = task(5, 8, "0,1,2,3", std::nullopt);
  EXPECT_EQ(over.local_device, 1u);
  EXPECT_TRUE(over.oversubscribed);
  EXPECT_EQ(task(2, 4, "0,1,2,3", std::string("gres/gpu:none")).local_device, 2u);
  // the runtime without the plugin does not know the node's list
  DeviceFacts f;
  f.local_rank = 3;
  f.local_task_count = 4;
  f.task = cuda("4,5,6,7");
  EXPECT_EQ(choose_device(f, false).local_device, 3u);
}

// The sets --gpu-bind=closest gives on a two-socket node: two tasks per pair.
TEST(Device, OverlappingSubsetsAreNeverGuessed) {
  for (uint32_t t = 0; t < 4; ++t) {
    auto d = task(t, 4, t < 2 ? "0,1" : "2,3", std::string("gres/gpu:closest"));
    EXPECT_FALSE(d.local_device) << t;
    EXPECT_THAT(d.why, HasSubstr("--gpu-bind=closest gives this task CUDA_VISIBLE_DEVICES="));
    EXPECT_THAT(d.why, HasSubstr("init() gives each rank of the node a distinct GPU"));
  }
  // a subset with no binding that explains it (a wrapper changed the list)
  auto d = task(1, 2, "2,3", std::nullopt);
  EXPECT_FALSE(d.local_device);
  EXPECT_THAT(d.why, HasSubstr("the step has CUDA_VISIBLE_DEVICES=0,1,2,3 on this node"));
  // single:2 with two GPUs in a list (nothing certain about the others)
  EXPECT_FALSE(task(0, 4, "0,1", std::string("gres/gpu:single:2")).local_device);
}

TEST(Device, MaskSetsThatPartitionTheTasksGiveDistinctGpus) {
  // the layout: mask_gpu:0x3,0x3,0xC,0xC -> 0,1 | 0,1 | 2,3 | 2,3
  const std::string bind = "gres/gpu:mask_gpu:0x3,0x3,0xC,0xC";
  std::vector<std::string> lists = {"0,1", "0,1", "2,3", "2,3"};
  std::set<std::string> used;
  for (uint32_t t = 0; t < 4; ++t) {
    auto d = task(t, 4, lists[t], bind, /*bind=*/true);
    ASSERT_TRUE(d.local_device) << d.why;
    EXPECT_EQ(*d.local_device, 0u);  // narrowed to the one GPU
    used.insert(*d.visible_devices);
    EXPECT_FALSE(d.oversubscribed);
  }
  EXPECT_EQ(used, (std::set<std::string>{"0", "1", "2", "3"}));
  auto second = task(1, 4, "0,1", bind);
  EXPECT_EQ(second.local_device, 1u);
  EXPECT_THAT(second.why, HasSubstr("position 1 among the 2 tasks of the node that "
                                    "--gpu-bind=mask_gpu:0x3,0x3,0xC,0xC gives"));
  // the same with repetitions: mask:0x3*2,0xC*2
  EXPECT_EQ(task(3, 4, "2,3", std::string("gres/gpu:mask:0x3*2,0xC*2")).local_device, 1u);
  // overlapping masks that differ: left to init()
  auto overlap = task(1, 2, "1,2", std::string("gres/gpu:mask_gpu:0x3,0x6"));
  EXPECT_FALSE(overlap.local_device);
  EXPECT_THAT(overlap.why, HasSubstr("GPU sets that overlap"));
}

TEST(Device, MapGivesEachTaskItsGpuAndSaysWhenTheyShare) {
  for (uint32_t t = 0; t < 4; ++t) {
    auto d = task(t, 4, std::to_string(3 - t), std::string("gres/gpu:map_gpu:3,2,1,0"));
    EXPECT_EQ(d.local_device, 0u);
    EXPECT_FALSE(d.oversubscribed);
  }
  // map_gpu:0,0,1,1: two tasks on each GPU, by the user's choice
  auto shared = task(1, 4, "0", std::string("gres/gpu:map_gpu:0,0,1,1"));
  EXPECT_EQ(shared.local_device, 0u);
  EXPECT_TRUE(shared.oversubscribed);
  // the list cycles over the node's tasks as Slurm's does
  EXPECT_TRUE(task(2, 4, "0", std::string("gres/gpu:map_gpu:0,1")).oversubscribed);
}

TEST(Device, OwnGpusPerTaskAndSingle) {
  EXPECT_EQ(task(3, 4, "3", std::string("gres/gpu:single:1")).local_device, 0u);
  auto per = task(1, 2, "2,3", std::string("gres/gpu:per_task:2"));
  EXPECT_EQ(per.local_device, 0u);
  EXPECT_THAT(per.why, HasSubstr("gives each task 2 GPUs of its own"));
  // more than the node has: Slurm runs out and gives some tasks the first GPU
  EXPECT_FALSE(task(1, 3, "2,3", std::string("gres/gpu:per_task:2")).local_device);
  // --gpus-per-task on Slurm 22.05 (implicit per_task), the one GPU of a task
  EXPECT_EQ(task(2, 4, "2", std::string("gpu:per_task:1")).local_device, 0u);
  EXPECT_EQ(task(0, 2, "0", std::string("gres/gpu:closest")).local_device, 0u);
}

TEST(Device, NoGpusNoChoiceAndAmdNarrowsItsOwnVariable) {
  EXPECT_FALSE(task(0, 1, "", std::nullopt).local_device);
  EXPECT_TRUE(task(0, 1, "NoDevFiles", std::nullopt).why.empty());
  DeviceFacts f;
  f.local_rank = 1;
  f.local_task_count = 2;
  f.task = gpu_list("ROCR_VISIBLE_DEVICES", "4,5");
  auto d = choose_device(f, true);
  EXPECT_EQ(d.visible_devices, "5");
  EXPECT_EQ(d.local_device, 0u);
  EXPECT_THAT(d.why, HasSubstr("(ROCR_VISIBLE_DEVICES=4,5)"));
}

NodeRankGpus rank_sees(int rank, const std::vector<std::string>& gpus,
                       std::optional<int> device = std::nullopt) {
  NodeRankGpus r;
  r.rank = rank;
  r.gpus = gpus;
  r.device = device;
  r.list_text = "CUDA_VISIBLE_DEVICES=...";
  return r;
}

// The GPU each rank ends up on.
std::vector<std::string> physical(const std::vector<NodeRankGpus>& ranks, const NodeAssignment& a) {
  std::vector<std::string> out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    out.push_back(a.device[i] ? ranks[i].gpus[static_cast<size_t>(*a.device[i])] : "-");
  }
  return out;
}

TEST(NodeGpus, ClosestPairsGetDistinctGpus) {
  std::vector<NodeRankGpus> ranks = {rank_sees(0, {"a", "b"}), rank_sees(1, {"a", "b"}),
                                     rank_sees(2, {"c", "d"}), rank_sees(3, {"c", "d"})};
  auto a = assign_node_gpus(ranks);
  EXPECT_EQ(physical(ranks, a), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_TRUE(a.shared.empty());
}

TEST(NodeGpus, SharedListGivesLocalRankModuloAsThePluginDoes) {
  std::vector<NodeRankGpus> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(rank_sees(r, {"w", "x", "y", "z"}));
  auto a = assign_node_gpus(ranks);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(a.device[static_cast<size_t>(r)], r);
}

TEST(NodeGpus, FindsAnAssignmentWhereGreedyWouldNot) {
  // rank 0 sees both, rank 1 only the first: rank 0 must take the second
  std::vector<NodeRankGpus> ranks = {rank_sees(0, {"a", "b"}), rank_sees(1, {"a"})};
  auto a = assign_node_gpus(ranks);
  EXPECT_EQ(physical(ranks, a), (std::vector<std::string>{"b", "a"}));
  EXPECT_TRUE(a.shared.empty());
}

TEST(NodeGpus, KeepsChosenDevicesAndNamesRanksLeftOnOneGpu) {
  // two ranks that can only see the same single GPU
  std::vector<NodeRankGpus> one = {rank_sees(4, {"a"}), rank_sees(5, {"a"})};
  auto a = assign_node_gpus(one);
  EXPECT_EQ(physical(one, a), (std::vector<std::string>{"a", "a"}));
  ASSERT_EQ(a.shared.size(), 1u);
  EXPECT_EQ(a.shared[0].a, 0u);
  EXPECT_EQ(a.shared[0].b, 1u);
  EXPECT_EQ(a.shared[0].gpu, "a");
  // a preset device (SLURMDDP_LOCAL_DEVICE) is kept; the other rank avoids it
  std::vector<NodeRankGpus> preset = {rank_sees(0, {"a", "b"}), rank_sees(1, {"a", "b"}, 0)};
  EXPECT_EQ(physical(preset, assign_node_gpus(preset)), (std::vector<std::string>{"b", "a"}));
  // two presets on one GPU
  std::vector<NodeRankGpus> clash = {rank_sees(0, {"a"}, 0), rank_sees(1, {"b", "a"}, 1)};
  EXPECT_EQ(assign_node_gpus(clash).shared.size(), 1u);
  // more ranks than GPUs: they share, and it is said
  std::vector<NodeRankGpus> many;
  for (int r = 0; r < 3; ++r) many.push_back(rank_sees(r, {"a", "b"}));
  auto m = assign_node_gpus(many);
  EXPECT_EQ(physical(many, m), (std::vector<std::string>{"a", "b", "a"}));
  ASSERT_EQ(m.shared.size(), 1u);
  EXPECT_EQ(m.shared[0].b, 2u);
  // a rank without GPUs gets nothing
  std::vector<NodeRankGpus> none = {rank_sees(0, {})};
  EXPECT_FALSE(assign_node_gpus(none).device[0]);
}

}  // namespace
}  // namespace slurmddp::launch
