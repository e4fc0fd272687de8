// PyTorch Lightning on the real test cluster with slurm-ddp's callback
// (slurmddp.lightning.SlurmDDP): the Lightning example
// (examples/jobs/preemptible-lightning.sbatch) interrupted by scancel --signal
// mid-epoch, requeued by rank 0, resumed through Trainer.fit(ckpt_path=), ends
// with the parameters of an uninterrupted run, bit for bit (Gloo,
// --deterministic); a Lightning rank that hangs is named with its node and
// line. Needs Lightning for the Python under test (the PyPI lane's venv has
// it, tests/pypi/requirements.txt); elsewhere the tests say so and skip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>

#include "batch_jobs.h"
#include "cluster.h"

namespace slurmddp::systest {
namespace {

namespace fs = std::filesystem;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// 2 epochs of 469 steps on 4 ranks (2 nodes x 2).
const char* const kArgs = " --epochs 2 --batch-size 32 --log-every 50 --deterministic";

#define REQUIRE_LIGHTNING()                                                           \
  do {                                                                                \
    Result probe = run(with_package() + python() +                                    \
                       " -c 'import lightning.pytorch as L, slurmddp.lightning; "     \
                       "print(L.__version__)'");                                      \
    if (probe.rc != 0) {                                                              \
      GTEST_SKIP() << "SKIP: " << python() << " cannot import lightning.pytorch and " \
                   << "slurmddp.lightning (the PyPI lane's venv has Lightning: "      \
                   << "tests/pypi/requirements.txt): " << probe.err.substr(0, 300);   \
    }                                                                                 \
  } while (0)

std::set<std::string> digests(const std::string& out) {
  return captures(out, "rank [0-9]+: parameter sha256 ([0-9a-f]+) after step 938");
}

std::string job_dir(const std::string& name) {
  std::string dir = fresh_dir(name);
  for (const char* f : {"train.py", "lightning_train.py"}) {
    fs::create_symlink(source_dir() + "/examples/pytorch/" + f, dir + "/" + f);
  }
  return dir;
}

std::string submit(const std::string& dir, const std::string& sbatch_args) {
  return systest::submit(dir, source_dir() + "/examples/jobs/preemptible-lightning.sbatch",
                         python_exports() + " " + sbatch_args, kArgs);
}

TEST(LightningSystem, ScancelSignalMidEpochRequeuesAndResumesBitIdentical) {
  REQUIRE_CLUSTER();
  REQUIRE_LIGHTNING();
  // The uninterrupted run first (the test cluster's nodes fit one such job).
  std::string ref_dir = job_dir("lightning-reference");
  std::string ref_id = submit(ref_dir, "");
  ASSERT_TRUE(poll_until(std::chrono::seconds(400), [&] { return finished(ref_id); }));
  std::string ref = slurp(ref_dir + "/out.txt");
  EXPECT_EQ(job_state(ref_id), "COMPLETED") << ref;
  const auto want = digests(ref);
  ASSERT_EQ(want.size(), 1u) << ref;

  std::string dir = job_dir("lightning-scancel");
  std::string id = submit(dir, "");
  // Mid-epoch in the second epoch (469 steps an epoch).
  ASSERT_NO_FATAL_FAILURE(stop_requeue_and_rerun(id, dir, 600, "USR1", std::chrono::seconds(240)));
  std::string out = slurp(dir + "/out.txt");
  EXPECT_EQ(job_state(id), "COMPLETED") << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m,
      std::regex("rank 0: stopped after step ([0-9]+) on SIGUSR1, checkpoint in checkpoints/job-" +
                 id)))
      << out;
  const std::string step = m[1].str();
  EXPECT_EQ(count(out, "stopped after step " + step + " on SIGUSR1"), 4u) << out;
  EXPECT_GT(std::stoi(step), 469) << "stopped in the second epoch";
  EXPECT_LT(std::stoi(step), 938) << "stopped before the end";
  // Lightning's own handlers gave way, its restore took SlurmDDP's checkpoint.
  EXPECT_THAT(out, HasSubstr("Lightning's handlers for SIGTERM, SIGUSR1 are replaced by "
                             "SlurmDDP's agreed stop"));
  EXPECT_THAT(out, HasSubstr("resuming from checkpoints/job-" + id + "/step-" + step + " at step " +
                             step + ", run " + id + ", restart count 1"));
  EXPECT_THAT(out, HasSubstr("Restored all states from the checkpoint at checkpoints/job-" + id));
  EXPECT_THAT(out, Not(HasSubstr("dataloader is not resumable")));
  EXPECT_EQ(digests(out), want) << out;
}

TEST(LightningSystem, ARankThatHangsIsNamedWithItsNodeAndLine) {
  REQUIRE_CLUSTER();
  REQUIRE_LIGHTNING();
  std::string dir = fresh_dir("lightning-hang");
  Result r =
      run(with_package() + "SLURMDDP_HANG_AFTER=2s srun -N 2 -n 4 --ntasks-per-node=2 " + python() +
              " '" + source_dir() + "/tests/python/lightning_rank.py' hang 2 5 2>&1",
          std::chrono::seconds(240), dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const auto host = captures(r.out, "rank 2 on (\\S+) ready");
  ASSERT_EQ(host.size(), 1u) << r.out;
  EXPECT_THAT(r.out, ContainsRegex("hang report [0-9]+: step 6: .*; rank 2 on " + *host.begin() +
                                   " at step 6 for [0-9]+ s in lightning_rank\\.py:[0-9]+ "
                                   "\\(time\\.sleep\\(seconds\\)\\)"))
      << r.out;
  EXPECT_EQ(captures(r.out, R"((rank \d done at step \d+))").size(), 4u) << r.out;
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
