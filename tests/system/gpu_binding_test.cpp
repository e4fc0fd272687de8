// Every way Slurm binds GPUs to the tasks of a node, on the test cluster (4
// fake GPUs a node; node n3 is an AMD node): the plugin's SLURMDDP_LOCAL_DEVICE
// names distinct GPUs on each node or is left unset, and init() then settles
// distinct GPUs among the node's ranks (Note [Device choice], Note [Node GPUs]);
// ranks that can only share one GPU are refused with NCCL, naming both.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "cluster.h"

namespace slurmddp::systest {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

std::vector<Fields> probe_step(const std::string& srun_args) {
  Result r = run("srun " + srun_args + " " + probe_path(), std::chrono::seconds(60));
  EXPECT_EQ(r.rc, 0) << "srun " << srun_args << "\n" << r.out << r.err;
  auto tasks = parse_lines(r.out);  // in the order they printed: sorted by rank here
  std::sort(tasks.begin(), tasks.end(), [](const Fields& a, const Fields& b) {
    return std::stoi(a.at("SLURM_PROCID")) < std::stoi(b.at("SLURM_PROCID"));
  });
  return tasks;
}

std::vector<Fields> runtime_step(const std::string& srun_args, const std::string& env = "") {
  Result r = run(env + "srun " + srun_args + " " + env_or_empty("SLURMDDP_RUNTIME_PROBE"),
                 std::chrono::seconds(120));
  EXPECT_EQ(r.rc, 0) << "srun " << srun_args << "\n" << r.out << r.err;
  return parse_lines(r.out, "runtime ");
}

// The task's GPU list: CUDA_VISIBLE_DEVICES, or ROCR_VISIBLE_DEVICES on AMD.
std::vector<std::string> gpu_list(const Fields& t) {
  std::string v = t.at("CUDA_VISIBLE_DEVICES");
  if (v == "<unset>") v = t.at("ROCR_VISIBLE_DEVICES");
  std::vector<std::string> out;
  size_t start = 0;
  while (v != "<unset>" && start <= v.size()) {
    size_t comma = v.find(',', start);
    out.push_back(v.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// host -> the GPUs the plugin chose for the tasks there ("?" when unset).
std::map<std::string, std::vector<std::string>> plugin_choices(const std::vector<Fields>& tasks) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& t : tasks) {
    const std::string d = t.at("SLURMDDP_LOCAL_DEVICE");
    const auto list = gpu_list(t);
    out[t.at("host")].push_back(d == "<unset>" ? "?" : list.at(std::stoul(d)));
  }
  return out;
}

void expect_distinct(const std::map<std::string, std::vector<std::string>>& by_host,
                     const std::string& form) {
  for (const auto& [host, gpus] : by_host) {
    std::set<std::string> unique(gpus.begin(), gpus.end());
    EXPECT_EQ(unique.size(), gpus.size())
        << form << " on " << host << ": " << ::testing::PrintToString(gpus);
  }
}

// The plugin's choices where it made them are distinct, and init() settles
// distinct GPUs for all; returns how many tasks the plugin left to init().
size_t check_form(const std::string& srun_args, size_t tasks_expected) {
  auto tasks = probe_step(srun_args);
  EXPECT_EQ(tasks.size(), tasks_expected) << srun_args;
  size_t unset = 0;
  std::map<std::string, std::vector<std::string>> chosen;
  for (const auto& [host, gpus] : plugin_choices(tasks)) {
    for (const auto& g : gpus) {
      if (g == "?") {
        ++unset;
      } else {
        chosen[host].push_back(g);
      }
    }
  }
  expect_distinct(chosen, srun_args + " (plugin)");
  std::map<std::string, std::vector<std::string>> settled;
  auto lines = runtime_step(srun_args);
  EXPECT_EQ(lines.size(), tasks_expected) << srun_args;
  for (const auto& l : lines) {
    EXPECT_NE(l.at("gpu"), "none") << srun_args << " rank " << l.at("rank");
    settled[l.at("host")].push_back(l.at("gpu"));
  }
  expect_distinct(settled, srun_args + " (init)");
  return unset;
}

TEST(GpuBinding, NoBindingSharedListByLocalRank) {
  REQUIRE_CLUSTER();
  EXPECT_EQ(check_form("-N 2 -n 8 --ntasks-per-node=4 --gres=gpu:4", 8), 0u);
}

// The layout: --gpu-bind=closest on a two-socket node gives these sets.
TEST(GpuBinding, OverlappingMaskPairsGetDistinctGpus) {
  REQUIRE_CLUSTER();
  const std::string args = "-N 1 -n 4 --gres=gpu:4 --gpu-bind=mask_gpu:0x3,0x3,0xC,0xC";
  auto tasks = probe_step(args);
  ASSERT_EQ(tasks.size(), 4u);
  auto chosen = plugin_choices(tasks);
  ASSERT_EQ(chosen.size(), 1u);
  EXPECT_EQ(chosen.begin()->second, (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(check_form(args, 4), 0u);
}

TEST(GpuBinding, OverlappingSetsThatDifferAreSettledAtInit) {
  REQUIRE_CLUSTER();
  // 0,1 | 1,2 | 2,3 | 3,0: no rule is certain from one task's view
  const std::string args = "-N 1 -n 4 --gres=gpu:4 --gpu-bind=mask_gpu:0x3,0x6,0xC,0x9";
  EXPECT_EQ(check_form(args, 4), 4u);
}

TEST(GpuBinding, ClosestMapSingleAndPerTask) {
  REQUIRE_CLUSTER();
  check_form("-N 1 -n 4 --gres=gpu:4 --gpu-bind=closest", 4);
  EXPECT_EQ(check_form("-N 1 -n 4 --gres=gpu:4 --gpu-bind=map_gpu:3,2,1,0", 4), 0u);
  EXPECT_EQ(check_form("-N 1 -n 4 --gres=gpu:4 --gpu-bind=single:1", 4), 0u);
  EXPECT_EQ(check_form("-N 1 -n 4 --gpus-per-task=1", 4), 0u);
  EXPECT_EQ(check_form("-N 1 -n 2 --gpus-per-task=2 --gpu-bind=per_task:2", 2), 0u);
}

TEST(GpuBinding, AmdNodesUseRocrVisibleDevices) {
  REQUIRE_CLUSTER();
  auto tasks = probe_step("-p amd -N 1 -n 4 --gres=gpu:4");
  ASSERT_EQ(tasks.size(), 4u);
  for (const auto& t : tasks) {
    EXPECT_EQ(t.at("CUDA_VISIBLE_DEVICES"), "<unset>");
    EXPECT_EQ(t.at("ROCR_VISIBLE_DEVICES"), "0,1,2,3");
    EXPECT_EQ(t.at("SLURMDDP_LOCAL_DEVICE"), t.at("LOCAL_RANK"));
  }
  for (const auto& t : probe_step("-p amd -N 1 -n 4 --gres=gpu:4 --ddp-bind-gpu")) {
    EXPECT_EQ(t.at("ROCR_VISIBLE_DEVICES"), t.at("LOCAL_RANK"));
    EXPECT_EQ(t.at("SLURMDDP_LOCAL_DEVICE"), "0");
  }
  EXPECT_EQ(check_form("-p amd -N 1 -n 4 --gres=gpu:4 --gpu-bind=mask_gpu:0x3,0x3,0xC,0xC", 4), 0u);
}

TEST(GpuBinding, TwoRanksOnOneGpuAreRefusedForNccl) {
  REQUIRE_CLUSTER();
  const std::string args = "-N 1 -n 2 --gres=gpu:2 --gpu-bind=map_gpu:1,1";
  for (const auto& t : probe_step(args)) EXPECT_EQ(t.at("CUDA_VISIBLE_DEVICES"), "1");
  // Gloo works (the two ranks share the GPU's name only)
  auto gloo = runtime_step(args);
  EXPECT_EQ(gloo.size(), 2u);
  Result r = run("SLURMDDP_BACKEND=nccl SLURMDDP_TIMEOUT=10s srun --kill-on-bad-exit=0 " + args +
                     " " + env_or_empty("SLURMDDP_RUNTIME_PROBE"),
                 std::chrono::seconds(60));
  EXPECT_NE(r.rc, 0);
  // on whichever node the step got (the suites share the cluster)
  EXPECT_THAT(r.err, ContainsRegex("ranks 0 and 1 on node n[0-9]+ are left on one GPU \\(1\\)"));
  EXPECT_THAT(r.err, HasSubstr("rank 1 sees CUDA_VISIBLE_DEVICES=1"));
  EXPECT_THAT(r.err, HasSubstr("map_gpu:1,1)"));
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
