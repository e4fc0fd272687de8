// Real containers on the test cluster: NVIDIA's pyxis and enroot, built from
// their source archives (tests/cluster/containers), enroot's PyTorch hook on as
// NGC sites have it, and an image whose environment sets PYTORCH_VERSION (as
// NGC's PyTorch images do) holding slurm-ddp's runtime and Python package from
// the .debs of this tree (SLURMDDP_PACKAGES_DIR). pyxis's line is pyxis.conf and
// slurm-ddp's slurm-ddp.conf in the cluster's plugstack.conf.d, the names of
// the default installs, so slurm-ddp runs after pyxis. Checked in containers:
//  - the mission's step: every task gets the plugin's ranks, address, port and
//    thread counts, not the hook's;
//  - threads follow -c, and a user's own value stands;
//  - two container steps of one job at the same time get distinct ports and
//    both rendezvous (C++ init() and a collective);
//  - --ddp-port; the launcher forms master-only and torchrun (no RANK from
//    pyxis's PyTorch handling);
//  - PyTorch's slurmddp:// rendezvous in the container;
//  - with the plugins in the wrong order (slurm-ddp first), the runtime warns
//    and still meets at the plugin's address and port.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cluster.h"
#include "consumer.h"

namespace slurmddp::systest {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string image() {
  return env_or_empty("SLURMDDP_CONTAINER_IMAGE");
}

// srun with the image, the cluster's job directory mounted where it is.
std::string in_container(const std::string& srun_args, const std::string& extra_mounts = "") {
  return "srun --container-image=" + image() + " --container-mounts=" + jobs_dir() + ":" +
         jobs_dir() + extra_mounts + " " + srun_args;
}

// The probe inside the container, with the image's PYTORCH_VERSION in front.
const char* const kProbe =
    "sh -c 'echo \"image PYTORCH_VERSION=$PYTORCH_VERSION\"; exec ddp_probe'";

std::vector<Fields> by_rank(const Result& r) {
  auto tasks = parse_lines(r.out);
  std::sort(tasks.begin(), tasks.end(), [](const Fields& a, const Fields& b) {
    return std::stoi(a.at("SLURM_PROCID")) < std::stoi(b.at("SLURM_PROCID"));
  });
  return tasks;
}

std::string first_port(const std::string& resv) {
  return resv.substr(0, resv.find_first_of("-,"));
}

// OMP_NUM_THREADS of each rank of `srun_args` without a container.
std::map<std::string, std::string> threads_outside(const std::string& srun_args) {
  Result r = run("srun " + srun_args + " " + probe_path(), std::chrono::seconds(120));
  EXPECT_EQ(r.rc, 0) << r.err;
  std::map<std::string, std::string> threads;
  for (const auto& t : parse_lines(r.out)) threads[t.at("RANK")] = t.at("OMP_NUM_THREADS");
  return threads;
}

TEST(Containers, TheMissionsStepGetsThePluginsValuesNotTheHooks) {
  REQUIRE_CLUSTER();
  const auto outside = threads_outside("-n 8 --gres=gpu:4 --ntasks-per-node=4");
  ASSERT_EQ(outside.size(), 8u);
  Result r = run(in_container("-n 8 --gres=gpu:4 --ntasks-per-node=4 ") + kProbe,
                 std::chrono::seconds(300));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(count(r.out, "image PYTORCH_VERSION=2.15.0"), 8u) << "not in the image:\n" << r.out;
  auto tasks = by_rank(r);
  ASSERT_EQ(tasks.size(), 8u) << r.out;
  for (int i = 0; i < 8; ++i) {
    const Fields& t = tasks[i];
    EXPECT_EQ(t.at("RANK"), std::to_string(i));
    EXPECT_EQ(t.at("LOCAL_RANK"), std::to_string(i % 4));
    EXPECT_EQ(t.at("WORLD_SIZE"), "8");
    EXPECT_EQ(t.at("LOCAL_WORLD_SIZE"), "4");
    EXPECT_EQ(t.at("NODE_RANK"), std::to_string(i / 4));
    // the plugin's: n1's address (the hook writes its host name) and the
    // step's reserved port (the hook: job id % 4536 + 61000)
    EXPECT_EQ(t.at("MASTER_ADDR"), node_address("n1"));
    EXPECT_EQ(t.at("MASTER_PORT"), first_port(t.at("SLURM_STEP_RESV_PORTS")));
    // the plugin's rule (Note [Thread counts]), as outside a container
    EXPECT_EQ(t.at("OMP_NUM_THREADS"), outside.at(t.at("RANK")));
    EXPECT_EQ(t.at("NCCL_SOCKET_IFNAME"), "eth0");
    EXPECT_NE(t.at("TOKEN_FP"), "<unset>");
  }
}

// Two tasks on one node with 2 CPUs each: the plugin's rule gives 2 on any
// machine of 2 CPUs or more, enroot's hook 1 (more tasks than nodes).
TEST(Containers, ThreadsFollowCpusPerTaskAndTheUsersOwnValueStands) {
  REQUIRE_CLUSTER();
  Result r = run(in_container("-N 1 -n 2 -c 2 ") + kProbe, std::chrono::seconds(180));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto tasks = by_rank(r);
  ASSERT_EQ(tasks.size(), 2u) << r.out;
  for (const auto& t : tasks) {
    EXPECT_EQ(t.at("OMP_NUM_THREADS"), "2");
    EXPECT_EQ(t.at("MKL_NUM_THREADS"), "2");
  }
  Result own = run("OMP_NUM_THREADS=5 " + in_container("-N 1 -n 2 -c 2 ") + kProbe,
                   std::chrono::seconds(180));
  ASSERT_EQ(own.rc, 0) << own.out << own.err;
  for (const auto& t : by_rank(own)) {
    EXPECT_EQ(t.at("OMP_NUM_THREADS"), "5");  // the user's, over the hook's
    EXPECT_EQ(t.at("MKL_NUM_THREADS"), "2");
  }
}

// Two steps of one job in containers at once: the hook gives both the same
// port (it depends on the job id only); the plugin gives each its own, and
// each step's ranks meet and reduce.
Result two_concurrent_container_steps(const std::string& step_args) {
  std::string dir = fresh_dir("container-steps");
  std::string step = in_container("--overlap -N 2 -n 2 " + step_args) +
                     " sh -c \"ddp_probe --meet " + dir + " 2 && exec ddp-consumer\"";
  return run("salloc -N 2 -n 4 bash -c '" + step + " & a=$!; " + step +
                 " & b=$!; wait $a; ra=$?; wait $b; rb=$?; exit $((ra | rb))'",
             std::chrono::seconds(300));
}

// `key`: where the two steps' rendezvous are (MASTER_PORT, or the plugin's
// SLURMDDP_MASTER when something changed MASTER_PORT after the plugin).
void expect_two_steps_on_their_own_ports(const Result& r, const std::string& key) {
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::map<std::string, std::set<std::string>> ports;
  for (const auto& t : parse_lines(r.out)) ports[t.at("SLURM_STEP_ID")].insert(t.at(key));
  ASSERT_EQ(ports.size(), 2u) << r.out;
  ASSERT_EQ(ports.begin()->second.size(), 1u);
  ASSERT_EQ(ports.rbegin()->second.size(), 1u);
  EXPECT_NE(*ports.begin()->second.begin(), *ports.rbegin()->second.begin());
  auto consumers = parse_lines(r.out, "consumer ");
  ASSERT_EQ(consumers.size(), 4u) << r.out << r.err;
  for (const auto& c : consumers) EXPECT_EQ(c.at("sum"), "3") << "rank " << c.at("rank");
}

TEST(Containers, TwoStepsOfOneJobAtOnceGetTheirOwnPortsAndBothRendezvous) {
  REQUIRE_CLUSTER();
  expect_two_steps_on_their_own_ports(two_concurrent_container_steps(""), "MASTER_PORT");
}

TEST(Containers, DdpPortAndTheLauncherFormsHoldInContainers) {
  REQUIRE_CLUSTER();
  Result port =
      run(in_container("-N 2 -n 2 --ddp-port=29500 ") + kProbe, std::chrono::seconds(180));
  ASSERT_EQ(port.rc, 0) << port.out << port.err;
  for (const auto& t : by_rank(port)) EXPECT_EQ(t.at("MASTER_PORT"), "29500");
  // pyxis puts RANK/LOCAL_RANK back from SLURM_PROCID/SLURM_LOCALID in a PyTorch
  // image; a framework that maps SLURM_* itself must not get them
  Result master_only = run(in_container("-N 2 -n 2 --ddp-launcher=master-only ") + kProbe,
                           std::chrono::seconds(180));
  ASSERT_EQ(master_only.rc, 0) << master_only.out << master_only.err;
  for (const auto& t : by_rank(master_only)) {
    EXPECT_EQ(t.at("RANK"), "<unset>");
    EXPECT_EQ(t.at("LOCAL_RANK"), "<unset>");
    EXPECT_EQ(t.at("WORLD_SIZE"), "<unset>");
    EXPECT_EQ(t.at("MASTER_ADDR"), node_address("n1"));
  }
  // one torchrun agent per node: its PET_* settings, no RANK of its own
  Result agents =
      run(in_container("-N 2 --ntasks-per-node=1 --gres=gpu:2 --ddp-launcher=torchrun ") +
              "sh -c 'echo \"agent PET_NNODES=$PET_NNODES PET_NODE_RANK=$PET_NODE_RANK "
              "PET_NPROC_PER_NODE=$PET_NPROC_PER_NODE RANK=${RANK:-unset}\"'",
          std::chrono::seconds(180));
  ASSERT_EQ(agents.rc, 0) << agents.out << agents.err;
  EXPECT_EQ(captures(agents.out, "(agent .*)"),
            (std::set<std::string>{
                "agent PET_NNODES=2 PET_NODE_RANK=0 PET_NPROC_PER_NODE=2 RANK=unset",
                "agent PET_NNODES=2 PET_NODE_RANK=1 PET_NPROC_PER_NODE=2 RANK=unset"}));
}

TEST(Containers, PyTorchsSlurmddpRendezvousInTheContainer) {
  REQUIRE_CLUSTER();
  const std::string python = env_or_empty("SLURMDDP_TEST_PYTHON");
  if (python.empty()) {
    GTEST_SKIP() << "SKIP: no PyTorch for the image (SLURMDDP_TEST_PYTHON: the PyPI lane's venv, "
                    "mounted into the container)";
  }
  const std::string venv = fs::path(python).parent_path().parent_path().string();
  Result r = run(in_container("-N 2 -n 4 --ntasks-per-node=2 ",
                              "," + venv + ":" + venv + "," + source_dir() + ":" + source_dir()) +
                     python + " '" + source_dir() + "/tests/python/torch_rank.py' allreduce",
                 std::chrono::seconds(300));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(captures(r.out, R"((rank \d/4 sum=10) )"),
            (std::set<std::string>{"rank 0/4 sum=10", "rank 1/4 sum=10", "rank 2/4 sum=10",
                                   "rank 3/4 sum=10"}));
  EXPECT_EQ(captures(r.out, R"(params=([0-9a-f]{16}))").size(), 1u) << r.out;
  EXPECT_THAT(r.err, Not(HasSubstr("differs from")));
}

// The order a site may still have: slurm-ddp's line before pyxis's. pyxis then
// copies the hook's MASTER_ADDR/MASTER_PORT over the plugin's, and two steps
// of a job would collide on the hook's port; the runtime says so and meets at
// the plugin's (Note [A master changed after the plugin]).
TEST(Containers, WithSlurmDdpBeforePyxisTheRuntimeWarnsAndUsesThePluginsValues) {
  REQUIRE_CLUSTER();
  const fs::path conf_d = fs::path(cluster_dir()) / "etc" / "plugstack.conf.d";
  fs::rename(conf_d / "pyxis.conf", conf_d / "zz-pyxis.conf");
  Result probe = run(in_container("-N 2 -n 2 ") + kProbe, std::chrono::seconds(180));
  Result steps = two_concurrent_container_steps("");
  fs::rename(conf_d / "zz-pyxis.conf", conf_d / "pyxis.conf");
  ASSERT_EQ(probe.rc, 0) << probe.out << probe.err;
  for (const auto& t : by_rank(probe)) {
    EXPECT_EQ(t.at("MASTER_ADDR"), "n1") << "the hook's value, as pyxis copies it last";
  }
  // the hook's port, the same in both steps; the plugin's differ, and serve
  std::set<std::string> hooks;
  for (const auto& t : parse_lines(steps.out)) hooks.insert(t.at("MASTER_PORT"));
  EXPECT_EQ(hooks.size(), 1u) << steps.out;
  expect_two_steps_on_their_own_ports(steps, "SLURMDDP_MASTER");
  EXPECT_THAT(steps.err, HasSubstr("differs from"));
  EXPECT_THAT(steps.err, HasSubstr("--container-env=MASTER_ADDR,MASTER_PORT"));
}

}  // namespace
}  // namespace slurmddp::systest

// The containers come first: pyxis's line must be in the plugin stack before
// the cluster's slurmd start, and enroot on their PATH.
int main(int argc, char** argv) {
  using namespace slurmddp::systest;
  const std::string why = why_system_tests_cannot_run();
  if (!why.empty()) return cannot_run(argv[0], why);
  const std::string debs = env_or_empty("SLURMDDP_PACKAGES_DIR");
  if (debs.empty()) {
    return cannot_run(argv[0],
                      "no slurm-ddp packages for the image (SLURMDDP_PACKAGES_DIR: "
                      "scripts/run-tests sets it after scripts/packages deb)");
  }
  const std::string dir = cluster_dir() + "/containers";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/consumer.cpp")
      << consumer_source({"communicator.h", "identity.h", "process_group.h", "sampler.h"});
  Result prepared = run("SLURMDDP_CONSUMER_SOURCE='" + dir + "/consumer.cpp' '" + source_dir() +
                            "/tests/cluster/containers' prepare '" + dir + "' '" + debs + "'",
                        std::chrono::seconds(900), "/");
  if (prepared.rc != 0) {
    std::fprintf(stderr, "FAILED: tests/cluster/containers prepare:\n%s%s\n", prepared.out.c_str(),
                 prepared.err.c_str());
    return 1;
  }
  std::istringstream vars(prepared.out);
  for (std::string line; std::getline(vars, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) setenv(line.substr(0, eq).c_str(), line.c_str() + eq + 1, 1);
  }
  setenv("SLURMDDP_CLUSTER_PATH", env_or_empty("SLURMDDP_ENROOT_BIN").c_str(), 1);
  // The tests' jobs run as root: pyxis reads this from the job's environment
  // (enroot.conf says the same for enroot).
  setenv("ENROOT_ALLOW_SUPERUSER", "yes", 1);
  const std::string conf_d = cluster_dir() + "/etc/plugstack.conf.d";
  std::filesystem::create_directories(conf_d);
  std::ofstream(conf_d + "/pyxis.conf")
      << "required " << env_or_empty("SLURMDDP_PYXIS") << " runtime_path=" << dir << "/pyxis\n";
  const int status = system_test_main(argc, argv);
  // The cluster's other users get the plugin stack without pyxis again.
  std::filesystem::remove(conf_d + "/pyxis.conf");
  return status;
}
