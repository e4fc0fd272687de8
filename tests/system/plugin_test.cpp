// System tests of the SPANK plugin on the real test cluster: one case per line
// of the contract (issue "SPANK plugin + project foundation", part 4).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <thread>

#include "batch_jobs.h"
#include "cluster.h"

namespace slurmddp::systest {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const char* const kVars[] = {
    "RANK",       "LOCAL_RANK",  "WORLD_SIZE",  "LOCAL_WORLD_SIZE",      "NODE_RANK",
    "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURMDDP_LOCAL_DEVICE", "SLURMDDP_STEP"};

// The probe's path; the build tree's path has no spaces or quotes (checked).
std::string probe() {
  std::string p = probe_path();
  EXPECT_EQ(p.find_first_of(" '\"$"), std::string::npos) << p;
  return p;
}

// Runs srun with the probe and returns one Fields per task, sorted by RANK (or
// SLURM_PROCID when RANK is not set).
std::vector<Fields> probe_step(const std::string& srun_args, Result* raw = nullptr,
                               const std::string& env_prefix = "") {
  Result r = run(env_prefix + "srun " + srun_args + " " + probe(), std::chrono::seconds(60));
  EXPECT_EQ(r.rc, 0) << "srun " << srun_args << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err;
  auto tasks = parse_lines(r.out);
  std::sort(tasks.begin(), tasks.end(), [](const Fields& a, const Fields& b) {
    return std::stoi(a.at("SLURM_PROCID")) < std::stoi(b.at("SLURM_PROCID"));
  });
  if (raw != nullptr) *raw = r;
  return tasks;
}

// Waits (polling, 15 s at most) until no node is completing, then returns the states.
std::map<std::string, std::string> settled_node_states() {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  auto states = node_states();
  while (std::chrono::steady_clock::now() < deadline) {
    bool busy = std::any_of(states.begin(), states.end(), [](const auto& s) {
      return s.second.find("completing") != std::string::npos ||
             s.second.find("allocated") != std::string::npos ||
             s.second.find("mixed") != std::string::npos;
    });
    if (!busy) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling Slurm's state
    states = node_states();
  }
  return states;
}

void expect_nodes_idle() {
  auto states = settled_node_states();
  ASSERT_FALSE(states.empty());
  // "planned": idle, with the backfill scheduler holding it for a pending job
  // (heterogeneous jobs are scheduled by backfill only); not drained or down.
  for (const auto& [node, state] : states) {
    EXPECT_TRUE(state == "idle" || state == "planned") << node << " is " << state;
  }
}

std::string first_ip(const Fields& f) {
  return f.at("ips").substr(0, f.at("ips").find(','));
}

TEST(PluginSystem, EightTasksOnTwoNodesGetTheTorchrunContract) {
  REQUIRE_CLUSTER();
  auto tasks = probe_step("-n 8 --gres=gpu:4 --ntasks-per-node=4");
  ASSERT_EQ(tasks.size(), 8u);
  std::map<std::string, std::set<int>> local_ranks_by_host;
  std::string master_addr = tasks[0].at("MASTER_ADDR");
  std::string master_port = tasks[0].at("MASTER_PORT");
  std::string rank0_ip = first_ip(tasks[0]);
  for (int r = 0; r < 8; ++r) {
    const Fields& t = tasks[r];
    EXPECT_EQ(t.at("RANK"), std::to_string(r));
    EXPECT_EQ(t.at("RANK"), t.at("SLURM_PROCID"));
    EXPECT_EQ(t.at("WORLD_SIZE"), "8");
    EXPECT_EQ(t.at("LOCAL_WORLD_SIZE"), "4");
    EXPECT_EQ(t.at("NODE_RANK"), t.at("SLURM_NODEID"));
    EXPECT_EQ(t.at("GROUP_RANK"), t.at("SLURM_NODEID"));
    EXPECT_EQ(t.at("NODE_RANK"), t.at("host") == "n1" ? "0" : "1");
    EXPECT_EQ(t.at("MASTER_ADDR"), master_addr);
    EXPECT_EQ(t.at("MASTER_PORT"), master_port);
    EXPECT_EQ(t.at("TOKEN_FP"), tasks[0].at("TOKEN_FP"));
    EXPECT_EQ(t.at("TOKEN_LEN"), "32");  // 128 bits, hex
    EXPECT_EQ(t.at("CUDA_VISIBLE_DEVICES"), "0,1,2,3");
    EXPECT_EQ(t.at("SLURMDDP_LOCAL_DEVICE"), t.at("LOCAL_RANK"));  // shared GPUs: rank % 4
    EXPECT_EQ(t.at("SLURMDDP_STEP"), t.at("SLURMDDP_STEP"));
    local_ranks_by_host[t.at("host")].insert(std::stoi(t.at("LOCAL_RANK")));
  }
  EXPECT_EQ(master_addr, rank0_ip);
  EXPECT_EQ(master_addr, node_address("n1"));  // n1's eth0, not the 127.0.1.1 in its /etc/hosts
  ASSERT_EQ(local_ranks_by_host.size(), 2u);
  for (const auto& [host, ranks] : local_ranks_by_host) {
    EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3})) << host;
  }
  // A second step: a fresh token.
  auto again = probe_step("-n 2 -N 2");
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].at("TOKEN_FP"), again[1].at("TOKEN_FP"));
  EXPECT_NE(again[0].at("TOKEN_FP"), tasks[0].at("TOKEN_FP"));
}

TEST(PluginSystem, UnevenLayoutLocalWorldSizeIsTheRealCount) {
  REQUIRE_CLUSTER();
  auto tasks = probe_step("-N 2 -n 7");
  ASSERT_EQ(tasks.size(), 7u);
  std::map<std::string, int> count;
  std::map<std::string, std::set<int>> local;
  for (const auto& t : tasks) {
    ++count[t.at("host")];
    local[t.at("host")].insert(std::stoi(t.at("LOCAL_RANK")));
  }
  ASSERT_EQ(count.size(), 2u);
  for (const auto& t : tasks) {
    EXPECT_EQ(t.at("LOCAL_WORLD_SIZE"), std::to_string(count[t.at("host")])) << t.at("host");
    EXPECT_EQ(t.at("WORLD_SIZE"), "7");
  }
  for (const auto& [host, ranks] : local) {
    EXPECT_EQ(static_cast<int>(ranks.size()), count[host]);
    EXPECT_EQ(*ranks.rbegin(), count[host] - 1);
  }
}

TEST(PluginSystem, CyclicDistributionKeepsMasterOnRankZerosNode) {
  REQUIRE_CLUSTER();
  auto tasks = probe_step("-N 2 -n 6 --ntasks-per-node=3 -m cyclic");
  ASSERT_EQ(tasks.size(), 6u);
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(tasks[r].at("RANK"), std::to_string(r));
    EXPECT_EQ(tasks[r].at("host"), r % 2 == 0 ? "n1" : "n2") << "cyclic placement of rank " << r;
    EXPECT_EQ(tasks[r].at("MASTER_ADDR"), first_ip(tasks[0]));
    EXPECT_EQ(tasks[r].at("NODE_RANK"), tasks[r].at("SLURM_NODEID"));
  }
}

TEST(PluginSystem, ArbitraryDistributionHonoursAnExplicitAddr) {
  REQUIRE_CLUSTER();
  std::string dir = fresh_dir("arbitrary");
  std::ofstream(dir + "/hosts") << "n2\nn1\nn2\nn1\n";
  auto tasks =
      probe_step("-n 4 -m arbitrary --ddp-addr=n2", nullptr, "SLURM_HOSTFILE=" + dir + "/hosts ");
  ASSERT_EQ(tasks.size(), 4u);
  EXPECT_EQ(tasks[0].at("host"), "n2");
  for (const auto& t : tasks) EXPECT_EQ(t.at("MASTER_ADDR"), node_address("n2"));
}

// Two steps of one allocation running at the same time: each probe waits until
// the other step's probe has started, and each srun's exit status is checked.
std::vector<Fields> two_concurrent_steps(const std::string& step_args) {
  std::string dir = fresh_dir("concurrent");
  std::string step =
      "srun --overlap -N 2 -n 2 " + step_args + " " + probe() + " --meet " + dir + " 2";
  Result r = run("salloc -N 2 -n 4 bash -c '" + step + " & a=$!; " + step +
                     " & b=$!; wait $a; ra=$?; wait $b; rb=$?; exit $((ra | rb))'",
                 std::chrono::seconds(90));
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  return parse_lines(r.out);
}

TEST(PluginSystem, ConcurrentStepsGetDifferentPortsWithReservedPorts) {
  REQUIRE_CLUSTER();
  auto tasks = two_concurrent_steps("");
  ASSERT_EQ(tasks.size(), 4u);
  std::map<std::string, std::set<std::string>> ports_by_step;
  for (const auto& t : tasks) {
    ports_by_step[t.at("SLURM_STEP_ID")].insert(t.at("MASTER_PORT"));
    // the first port of the step's reservation
    std::string resv = t.at("SLURM_STEP_RESV_PORTS");
    EXPECT_EQ(t.at("MASTER_PORT"), resv.substr(0, resv.find_first_of("-,"))) << resv;
  }
  ASSERT_EQ(ports_by_step.size(), 2u);
  EXPECT_EQ(ports_by_step.begin()->second.size(), 1u);
  EXPECT_EQ(ports_by_step.rbegin()->second.size(), 1u);
  EXPECT_NE(*ports_by_step.begin()->second.begin(), *ports_by_step.rbegin()->second.begin());
}

TEST(PluginSystem, ConcurrentStepsGetDifferentHashedPortsWithoutReservation) {
  REQUIRE_CLUSTER();
  auto tasks = two_concurrent_steps("--resv-ports=0");
  ASSERT_EQ(tasks.size(), 4u);
  std::map<std::string, std::set<std::string>> ports_by_step;
  for (const auto& t : tasks) {
    EXPECT_EQ(t.at("SLURM_STEP_RESV_PORTS"), "<unset>");
    int port = std::stoi(t.at("MASTER_PORT"));
    EXPECT_GE(port, 61000);  // the default port_range, above the ephemeral range
    EXPECT_LE(port, 65535);
    ports_by_step[t.at("SLURM_STEP_ID")].insert(t.at("MASTER_PORT"));
  }
  ASSERT_EQ(ports_by_step.size(), 2u);
  EXPECT_NE(*ports_by_step.begin()->second.begin(), *ports_by_step.rbegin()->second.begin());
}

TEST(PluginSystem, PortOptionAndEnvironmentPrecedence) {
  REQUIRE_CLUSTER();
  for (const auto& t : probe_step("-N 2 -n 4 --ddp-port=29999"))
    EXPECT_EQ(t.at("MASTER_PORT"), "29999");
  for (const auto& t : probe_step("-N 2 -n 2", nullptr, "MASTER_PORT=29500 ")) {
    EXPECT_EQ(t.at("MASTER_PORT"), "29500");
  }
  // the option beats the environment
  for (const auto& t : probe_step("-N 2 -n 2 --ddp-port=29998", nullptr, "MASTER_PORT=29500 ")) {
    EXPECT_EQ(t.at("MASTER_PORT"), "29998");
  }
}

TEST(PluginSystem, NoDdpExportsNothing) {
  REQUIRE_CLUSTER();
  auto tasks = probe_step("-N 2 -n 4 --no-ddp");
  ASSERT_EQ(tasks.size(), 4u);
  for (const auto& t : tasks) {
    for (const char* v : kVars) EXPECT_EQ(t.at(v), "<unset>") << v;
    EXPECT_EQ(t.at("TOKEN_FP"), "<unset>");
  }
}

TEST(PluginSystem, DefaultOffNeedsDdpOption) {
  REQUIRE_CLUSTER();
  PlugstackArgs args("default=off");
  for (const auto& t : probe_step("-N 2 -n 2")) EXPECT_EQ(t.at("RANK"), "<unset>");
  auto on = probe_step("-N 2 -n 2 --ddp");
  ASSERT_EQ(on.size(), 2u);
  EXPECT_EQ(on[1].at("RANK"), "1");
}

TEST(PluginSystem, BatchShellHasNoRankButItsStepsDo) {
  REQUIRE_CLUSTER();
  std::string dir = fresh_dir("sbatch");
  std::ofstream(dir + "/job.sh")
      << "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n"
         "echo \"batch RANK=${RANK-<unset>} MASTER_ADDR=${MASTER_ADDR-<unset>} "
         "TOKEN=${SLURMDDP_TOKEN+set}\"\n"
      << "srun " << probe() << "\n";
  Result r =
      sbatch_wait("-o " + dir + "/out.txt " + dir + "/job.sh", std::chrono::seconds(90), dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::ifstream in(dir + "/out.txt");
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(out, HasSubstr("batch RANK=<unset> MASTER_ADDR=<unset> TOKEN=\n"));
  auto tasks = parse_lines(out);
  ASSERT_EQ(tasks.size(), 4u);
  std::set<std::string> ranks;
  for (const auto& t : tasks) ranks.insert(t.at("RANK"));
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2", "3"}));
}

TEST(PluginSystem, SbatchOptionReachesInnerSrun) {
  REQUIRE_CLUSTER();
  std::string dir = fresh_dir("sbatch-port");
  std::ofstream(dir + "/job.sh") << "#!/bin/bash\n#SBATCH -N 2 -n 2\n#SBATCH --ddp-port=29600\n"
                                 << "srun " << probe() << "\n";
  Result r =
      sbatch_wait("-o " + dir + "/out.txt " + dir + "/job.sh", std::chrono::seconds(90), dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::ifstream in(dir + "/out.txt");
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto tasks = parse_lines(out);
  ASSERT_EQ(tasks.size(), 2u);
  for (const auto& t : tasks) EXPECT_EQ(t.at("MASTER_PORT"), "29600");
}

TEST(PluginSystem, BindGpuNarrowsVisibleDevices) {
  REQUIRE_CLUSTER();
  auto tasks = probe_step("-n 8 --gres=gpu:4 --ntasks-per-node=4 --ddp-bind-gpu");
  ASSERT_EQ(tasks.size(), 8u);
  for (const auto& t : tasks) {
    EXPECT_EQ(t.at("CUDA_VISIBLE_DEVICES"), t.at("LOCAL_RANK"));
    EXPECT_EQ(t.at("SLURMDDP_LOCAL_DEVICE"), "0");
  }
}

TEST(PluginSystem, GpuSubsetPerTaskGivesDeviceZero) {
  REQUIRE_CLUSTER();
  auto tasks = probe_step("-N 1 -n 2 --gpus-per-task=2 --gpu-bind=per_task:2");
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].at("CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_EQ(tasks[1].at("CUDA_VISIBLE_DEVICES"), "2,3");
  for (const auto& t : tasks) EXPECT_EQ(t.at("SLURMDDP_LOCAL_DEVICE"), "0");
}

// Note [Thread counts]: the step's CPUs per task, capped by the task's mask
// (the test nodes do not bind CPUs: the mask is the machine, at least 2 CPUs).
TEST(PluginSystem, ThreadCountsFromTheTasksCpus) {
  REQUIRE_CLUSTER();
  for (const auto& t : probe_step("-N 1 -n 2 --cpus-per-task=2")) {
    EXPECT_EQ(t.at("OMP_NUM_THREADS"), "2");
    EXPECT_EQ(t.at("MKL_NUM_THREADS"), "2");
    EXPECT_EQ(t.at("OPENBLAS_NUM_THREADS"), "2");
  }
  for (const auto& t : probe_step("-N 1 -n 2 --cpus-per-task=2", nullptr, "OMP_NUM_THREADS=7 ")) {
    EXPECT_EQ(t.at("OMP_NUM_THREADS"), "7");  // the user's own
    EXPECT_EQ(t.at("MKL_NUM_THREADS"), "2");
  }
  for (const auto& t : probe_step("-N 1 -n 2 --cpus-per-task=2 --ddp-threads=no")) {
    EXPECT_EQ(t.at("OMP_NUM_THREADS"), "<unset>");
  }
  Result r = run("srun -N 1 -n 1 --ddp-threads=maybe true");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("--ddp-threads='maybe'"));
}

TEST(PluginSystem, NoGpusNoLocalDevice) {
  REQUIRE_CLUSTER();
  for (const auto& t : probe_step("-N 2 -n 2")) {
    EXPECT_EQ(t.at("SLURMDDP_LOCAL_DEVICE"), "<unset>");
  }
}

TEST(PluginSystem, IfnameExportsSocketVariables) {
  REQUIRE_CLUSTER();
  auto tasks = probe_step("-N 2 -n 2 --ddp-ifname=eth0");
  ASSERT_EQ(tasks.size(), 2u);
  for (const auto& t : tasks) {
    EXPECT_EQ(t.at("NCCL_SOCKET_IFNAME"), "eth0");
    EXPECT_EQ(t.at("GLOO_SOCKET_IFNAME"), "eth0");
    EXPECT_EQ(t.at("MASTER_ADDR"), node_address("n1"));
  }
  Result r = run("srun --kill-on-bad-exit=0 -N 2 -n 2 --ddp-ifname=ib7 " + probe());
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("interface 'ib7' has no IP address"));
}

// Note [Socket interfaces]: each node's interface toward MASTER_ADDR, on the
// two-network cluster, for Gloo and NCCL alike, unless the user set one or
// the admin said nccl_ifname=no.
TEST(PluginSystem, SocketInterfacesFollowTheRendezvousNetwork) {
  REQUIRE_CLUSTER();
  for (const auto& t : probe_step("-N 2 -n 2")) {
    EXPECT_EQ(t.at("NCCL_SOCKET_IFNAME"), "eth0");
    EXPECT_EQ(t.at("GLOO_SOCKET_IFNAME"), "eth0");
  }
  {
    PlugstackArgs args("hostname_suffix=-ib");
    for (const auto& t : probe_step("-N 2 -n 2")) {
      EXPECT_EQ(t.at("MASTER_ADDR"), node_address("n1-ib"));
      EXPECT_EQ(t.at("NCCL_SOCKET_IFNAME"), "ib0") << t.at("host");
      EXPECT_EQ(t.at("GLOO_SOCKET_IFNAME"), "ib0") << t.at("host");
    }
  }
  for (const auto& t : probe_step("-N 2 -n 2", nullptr, "NCCL_SOCKET_IFNAME=^docker ")) {
    EXPECT_EQ(t.at("NCCL_SOCKET_IFNAME"), "^docker");  // the user's own
  }
  {
    PlugstackArgs args("nccl_ifname=no");
    for (const auto& t : probe_step("-N 2 -n 2")) {
      EXPECT_EQ(t.at("NCCL_SOCKET_IFNAME"), "<unset>");
      EXPECT_EQ(t.at("GLOO_SOCKET_IFNAME"), "eth0");
    }
  }
}

TEST(PluginSystem, MultiHomedNodesChooseTheRendezvousNetwork) {
  REQUIRE_CLUSTER();
  {
    PlugstackArgs args("hostname_suffix=-ib");
    for (const auto& t : probe_step("-N 2 -n 2"))
      EXPECT_EQ(t.at("MASTER_ADDR"), node_address("n1-ib"));
  }
  {
    // n1 resolves to 127.0.1.1 and its address on n1 (its own name maps to
    // 127.0.1.1 there), to its address on n2: nothing in the -ib network. Both
    // nodes refuse the step (Slurm must not end it at the first, or both
    // messages can be lost on their way to srun); either node's view matches.
    PlugstackArgs args("network=" + network_of("n1-ib"));
    Result r = run("srun --kill-on-bad-exit=0 -N 2 -n 2 " + probe());
    EXPECT_NE(r.rc, 0);
    EXPECT_THAT(r.err, HasSubstr("host 'n1' has no address in network " + network_of("n1-ib")));
    const std::string n1 = node_address("n1");
    EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("resolved=127.0.1.1," + n1 + " "),
                                        HasSubstr("resolved=" + n1 + " ")));
  }
  {
    PlugstackArgs args("hostname_suffix=-ib network=" + network_of("n1-ib"));
    for (const auto& t : probe_step("-N 2 -n 2"))
      EXPECT_EQ(t.at("MASTER_ADDR"), node_address("n1-ib"));
  }
}

TEST(PluginSystem, OptionsAreListedInSrunHelp) {
  REQUIRE_CLUSTER();
  Result r = run("srun --help");
  for (const char* opt : {"--ddp ", "--no-ddp", "--ddp-port=N", "--ddp-addr=HOST",
                          "--ddp-ifname=NAME", "--ddp-bind-gpu", "--ddp-verbose"}) {
    EXPECT_THAT(r.out + r.err, HasSubstr(opt));
  }
  EXPECT_THAT(r.out + r.err, HasSubstr("[ddp] Use port N for MASTER_PORT"));
}

TEST(PluginSystem, VerbosePrintsTheRendezvousOnceWithoutTheToken) {
  REQUIRE_CLUSTER();
  Result r;
  auto tasks = probe_step("-N 2 -n 4 --ddp-verbose", &r);
  ASSERT_EQ(tasks.size(), 4u);
  size_t first = r.err.find("slurm-ddp: step ");
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("slurm-ddp: step ", first + 1), std::string::npos) << "printed twice";
  EXPECT_THAT(r.err, HasSubstr("MASTER_ADDR=" + node_address("n1")));
  EXPECT_THAT(r.err, HasSubstr("token=set"));
}

struct BadInput {
  const char* srun_args;
  const char* message;
};

class PluginBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(PluginBadInput, ClearErrorNonZeroExitNodesStayIdle) {
  REQUIRE_CLUSTER();
  // Both tasks fail; Slurm must not end the step at the first, which can
  // lose the other's message on its way to srun.
  Result r = run(std::string("srun --kill-on-bad-exit=0 -N 2 -n 2 ") + GetParam().srun_args + " " +
                 probe());
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr(GetParam().message));
  EXPECT_THAT(r.out, Not(HasSubstr("RANK=")));
  expect_nodes_idle();
}

INSTANTIATE_TEST_SUITE_P(
    Options, PluginBadInput,
    ::testing::Values(
        BadInput{"--ddp-port=abc",
                 "slurm-ddp: options: invalid --ddp-port='abc': expected a TCP port number"},
        BadInput{"--ddp-port=70000", "invalid --ddp-port='70000'"},
        BadInput{"--ddp-addr=no-such-host.invalid",
                 "failed to resolve host 'no-such-host.invalid'"},
        BadInput{"--ddp-addr='bad;host'", "invalid --ddp-addr='bad;host'"}));

TEST(PluginSystem, InvalidPlugstackArgumentFailsTheStepNotTheNodes) {
  REQUIRE_CLUSTER();
  {
    PlugstackArgs args("colour=blue");
    Result r = run("srun --kill-on-bad-exit=0 -N 2 -n 2 " + probe());
    EXPECT_NE(r.rc, 0);
    EXPECT_THAT(r.err, HasSubstr("unknown plugstack argument 'colour'"));
    EXPECT_THAT(r.err, HasSubstr("accepted keys: default, port_range"));
    expect_nodes_idle();
  }
  {
    PlugstackArgs args("port_range=9-1");
    Result r = run("srun --kill-on-bad-exit=0 -N 2 -n 2 " + probe());
    EXPECT_NE(r.rc, 0);
    EXPECT_THAT(r.err, HasSubstr("invalid plugstack argument port_range='9-1'"));
    expect_nodes_idle();
  }
  // and the cluster still works afterwards
  EXPECT_EQ(probe_step("-N 2 -n 2").size(), 2u);
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
