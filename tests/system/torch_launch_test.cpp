// PyTorch as a client of the plugin on the real test cluster, with the
// interpreter under test (Note [The Python under test] in cluster.cpp:
// Debian's torch in the Debian lanes, the newest from PyPI in the PyPI lane):
// init_process_group() from the plugin's variables (env://, torch's TCPStore,
// with and without libuv), torchrun inside srun and in the example's sbatch
// script, and slurm-ddp's runtime under torchrun's static rendezvous.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "batch_jobs.h"
#include "cluster.h"

namespace slurmddp::systest {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string runtime_probe() {
  return env_or_empty("SLURMDDP_RUNTIME_PROBE");
}

// torchrun of a torch that asks for libuv but was built without it (Debian 13's
// 2.6) cannot start: its rendezvous (agent and workers) creates TCPStores that
// ignore USE_LIBUV. On such a torch a torchrun test checks that failure, the
// one docs/python.md documents, instead of a training that cannot happen; the
// direct launch (srun runs every rank) is tested everywhere.
bool torchrun_cannot_start(const Result& r) {
  if (!torch_lacks_libuv()) return false;
  std::printf("torch without libuv: torchrun cannot start; checking its failure instead\n");
  EXPECT_NE(r.rc, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_THAT(r.out + r.err,
              HasSubstr("use_libuv was requested but PyTorch was build without libuv"));
  return true;
}

// A torch built without libuv (Debian 13's 2.6) fails in env:// unless
// USE_LIBUV=0, which docs/python.md tells its users to export (the cluster
// environment does, for every test): the failure is torch's, and says so.
TEST(TorchLaunch, PytorchWithoutLibuvNeedsUseLibuv0ForEnvInit) {
  REQUIRE_CLUSTER();
  Result r = run("env -u USE_LIBUV srun -N 2 -n 2 " + python() + " '" + source_dir() +
                     "/tests/system/torch_allreduce.py'",
                 std::chrono::seconds(120));
  if (torch_lacks_libuv()) {
    EXPECT_NE(r.rc, 0);
    EXPECT_THAT(r.err, HasSubstr("use_libuv was requested but PyTorch was build without libuv"));
  } else {  // torch before 2.4 or built with libuv: nothing to set
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("torch rank=1 world=2 sum=3"));
  }
}

TEST(TorchLaunch, PytorchInitProcessGroupJustWorks) {
  REQUIRE_CLUSTER();
  Result r =
      run("srun -N 2 -n 4 " + python() + " '" + source_dir() + "/tests/system/torch_allreduce.py'",
          std::chrono::seconds(120));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::set<std::string> lines;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("torch ", 0) == 0) lines.insert(line);
  }
  EXPECT_EQ(lines,
            (std::set<std::string>{"torch rank=0 world=4 sum=10", "torch rank=1 world=4 sum=10",
                                   "torch rank=2 world=4 sum=10", "torch rank=3 world=4 sum=10"}));
}

TEST(TorchLaunch, TorchrunInsideSrunNeedsNoFlags) {
  REQUIRE_CLUSTER();
  // --redirects/--tee 1: Debian's torch 1.13 torchrun cannot parse its own
  // default "0" under Python 3.11 (IntFlag iteration skips the zero member).
  Result r = run(with_python_on_path() +
                     "srun -N 2 --ntasks-per-node=1 --gres=gpu:2 --ddp-launcher=torchrun "
                     "torchrun --redirects 1 --tee 1 '" +
                     source_dir() + "/tests/system/torch_allreduce.py'",
                 std::chrono::seconds(180));
  if (torchrun_cannot_start(r)) return;
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::set<std::string> lines;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    auto at = line.find("torch rank=");
    if (at != std::string::npos) lines.insert(line.substr(at));
  }
  EXPECT_EQ(lines,
            (std::set<std::string>{"torch rank=0 world=4 sum=10", "torch rank=1 world=4 sum=10",
                                   "torch rank=2 world=4 sum=10", "torch rank=3 world=4 sum=10"}));
}

// examples/pytorch/torchrun.sbatch as a user submits it (one epoch, two
// workers per node), with the package installed: one torchrun per node, the
// PyTorch DDP example in each, on torchrun's own rendezvous (env://; the
// slurmddp:// store cannot join torchrun's static one) with slurm-ddp's sampler.
TEST(TorchLaunch, TorchrunSbatchExampleTrains) {
  REQUIRE_CLUSTER();
  std::string dir = fresh_dir("torchrun-sbatch");
  Result r = sbatch_wait("--gres=gpu:2 -o " + dir + "/out.txt torchrun.sbatch",
                         std::chrono::seconds(300), source_dir() + "/examples/pytorch",
                         with_python_on_path() + with_package() + "EPOCHS=1 ");
  std::ifstream in(dir + "/out.txt");
  std::stringstream text;
  text << in.rdbuf();
  if (torchrun_cannot_start(Result{r.rc, text.str(), r.err, r.timed_out})) return;
  ASSERT_EQ(r.rc, 0) << r.out << r.err << text.str();
  std::set<std::string> ranks;
  std::string line;
  double accuracy = -1;
  while (std::getline(text, line)) {
    auto at = line.find("rank ");
    if (at != std::string::npos && line.find("/4 on n") != std::string::npos) {
      ranks.insert(line.substr(at, line.find(' ', at + 5) - at));
      EXPECT_THAT(line, HasSubstr("MASTER_ADDR=" + node_address("n1")));
    }
    auto acc = line.find("test accuracy ");
    if (acc != std::string::npos) accuracy = std::stod(line.substr(acc + 14));
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"rank 0/4", "rank 1/4", "rank 2/4", "rank 3/4"}));
  EXPECT_GE(accuracy, 80.0) << "one epoch of the MLP on Fashion-MNIST";
  EXPECT_THAT(text.str(), HasSubstr("under torchrun: init_method=env:// (torchrun's rendezvous), "
                                    "slurmddp.torch.DistributedSampler"));
  EXPECT_THAT(text.str(), Not(HasSubstr("slurmddp://")));
}

TEST(TorchLaunch, RuntimeUnderTorchrunsStaticRendezvousFailsFastAndClearly) {
  REQUIRE_CLUSTER();
  Result r = run(with_python_on_path() +
                     "srun -N 2 --ntasks-per-node=1 --gres=gpu:2 --ddp-launcher=torchrun "
                     "torchrun --redirects 1 --tee 1 --no_python " +
                     runtime_probe(),
                 std::chrono::seconds(120));
  if (torchrun_cannot_start(r)) return;
  EXPECT_NE(r.rc, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_THAT(r.out + r.err, HasSubstr("TORCHELASTIC_USE_AGENT_STORE=True"));
  EXPECT_THAT(r.out, Not(HasSubstr(" ok=1"))) << "no rank may get through";
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
