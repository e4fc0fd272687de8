// Preemption and requeue on the real test cluster: examples/jobs/preemptible.sbatch
// with the example training program, interrupted by a signal mid-epoch (scancel
// --signal, and the job's time limit), checkpointing, requeued by rank 0 and
// resumed, ends bit-identical to an uninterrupted run; a damaged checkpoint is
// a clear error; a rank killed instead of stopped leaves the last complete
// checkpoint intact. (The PyTorch example's: torch_resume_test.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "batch_jobs.h"
#include "cluster.h"

namespace slurmddp::systest {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// A short but real training: 2 epochs of 938 steps on 4 ranks (2 nodes x 2).
const char* const kArgs = " --epochs=2 --batch-size=16 --hidden=32 --log-every=50";

std::set<std::string> checksums(const std::string& out) {
  return captures(out, "rank [0-9]+: [0-9]+ steps, parameter checksum ([0-9a-f]+)");
}

// A job directory with ./train (the example program) for the sbatch script.
std::string job_dir(const std::string& name) {
  std::string dir = fresh_dir(name);
  fs::create_symlink(env_or_empty("SLURMDDP_TRAIN"), dir + "/train");
  return dir;
}

std::string script() {
  return source_dir() + "/examples/jobs/preemptible.sbatch";
}

// Submits the script; returns the job id.
std::string submit(const std::string& dir, const std::string& sbatch_args,
                   const std::string& train_args) {
  return systest::submit(dir, script(), sbatch_args, train_args);
}

void release_after_requeue(const std::string& id, const std::string& dir) {
  systest::release_after_requeue(id, dir, "stopped after step");
}

// The checksum of the uninterrupted run, computed once for the suite.
const std::string& reference() {
  static const std::string sum = [] {
    std::string dir = job_dir("resume-reference");
    std::string id = submit(dir, "", kArgs);
    EXPECT_TRUE(poll_until(std::chrono::seconds(300), [&] { return finished(id); }));
    std::string out = slurp(dir + "/out.txt");
    EXPECT_EQ(job_state(id), "COMPLETED") << out;
    auto sums = checksums(out);
    EXPECT_EQ(sums.size(), 1u) << out;
    EXPECT_THAT(out, HasSubstr("run 0 of job " + id));
    EXPECT_THAT(out, Not(HasSubstr("resumed")));
    return sums.empty() ? std::string("(none)") : *sums.begin();
  }();
  return sum;
}

// The run after a stop: resumed at restart count 1, finished with the
// reference checksum on every rank.
void expect_exact_resume(const std::string& id, const std::string& out, const char* signal) {
  EXPECT_EQ(job_state(id), "COMPLETED") << out;
  EXPECT_THAT(out, HasSubstr("run 0 of job " + id));
  EXPECT_THAT(out, HasSubstr("run 1 of job " + id));
  std::smatch m;
  std::regex stopped("rank 0: stopped after step ([0-9]+) on " + std::string(signal));
  ASSERT_TRUE(std::regex_search(out, m, stopped)) << out;
  const std::string step = m[1].str();
  EXPECT_LT(std::stoi(step), 1876) << "stopped before the end";
  EXPECT_THAT(out, HasSubstr("resumed from checkpoints/job-" + id + " at step " + step));
  EXPECT_THAT(out, HasSubstr("restart count 1"));
  EXPECT_EQ(checksums(out), std::set<std::string>{reference()}) << out;
}

TEST(ResumeSystem, ScancelSignalMidEpochRequeuesAndResumesBitIdentical) {
  REQUIRE_CLUSTER();
  const std::string ref = reference();
  std::string dir = job_dir("resume-scancel");
  std::string id = submit(dir, "", kArgs);
  // Once training is under way (rank 0 printed step 100), signal every task.
  ASSERT_TRUE(poll_until(std::chrono::seconds(120), [&] {
    return slurp(dir + "/out.txt").find("step 100\n") != std::string::npos;
  })) << slurp(dir + "/out.txt");
  Result sig = run("scancel --signal=USR1 " + id);
  ASSERT_EQ(sig.rc, 0) << sig.err;
  release_after_requeue(id, dir);
  ASSERT_TRUE(poll_until(std::chrono::seconds(300), [&] {
    return finished(id) && slurp(dir + "/out.txt").find("run 1 of job") != std::string::npos;
  })) << slurp(dir + "/out.txt");
  expect_exact_resume(id, slurp(dir + "/out.txt"), "SIGUSR1");
}

// The job's time limit approaching, as Slurm tells it (see the PyTorch suite's
// test of the same name): a 10-minute limit and --signal=USR1@120; once the
// ranks train (step 100: their handlers are in), the limit is brought within
// 120 s, so Slurm's own warning comes at its next time-limit check, while the
// ranks are held (Note [Holding ranks for a signal]); the training stops,
// requeues itself, gets its 10 minutes back when released, and ends with the
// uninterrupted run's parameters.
TEST(ResumeSystem, TimeLimitWarningStopsRequeuesAndResumesBitIdentical) {
  REQUIRE_CLUSTER();
  const std::string ref = reference();
  std::string dir = job_dir("resume-timelimit");
  std::string id = submit(dir, "--time=10 --signal=USR1@120", kArgs);
  ASSERT_TRUE(poll_until(std::chrono::seconds(120), [&] {
    return slurp(dir + "/out.txt").find("step 100\n") != std::string::npos;
  })) << slurp(dir + "/out.txt");
  ASSERT_TRUE(hold_until_pending(id, "train", 4, SIGUSR1, std::chrono::seconds(90),
                                 [&] { return bring_time_limit_close(id); }))
      << "the time limit of job " << id << " was not brought close, or its warning did not "
      << "reach the ranks within 90 s\n"
      << slurp(dir + "/out.txt");
  systest::release_after_requeue(id, dir, "rank 0: stopped after step", "TimeLimit=10");
  ASSERT_TRUE(poll_until(std::chrono::seconds(300), [&] {
    return finished(id) && slurp(dir + "/out.txt").find("run 1 of job") != std::string::npos;
  })) << slurp(dir + "/out.txt");
  std::string out = slurp(dir + "/out.txt");
  EXPECT_THAT(out, Not(HasSubstr("DUE TO TIME LIMIT"))) << out;
  expect_exact_resume(id, out, "SIGUSR1");
}

std::string train_line(const std::string& extra) {
  return "srun ./train" + std::string(kArgs) + " --checkpoint-dir=checkpoints" + extra;
}

TEST(ResumeSystem, DamagedCheckpointIsAClearErrorNeverAFreshStart) {
  REQUIRE_CLUSTER();
  std::string dir = job_dir("resume-damaged");
  const std::string ck = "checkpoints/job-$SLURM_JOB_ID/step-200/rank-1.ckpt";
  Result r = in_one_job(
      dir, train_line(" --checkpoint-every=100 --steps=250") + " > first.out 2>&1\n" +
               "echo \"first=$?\"; echo \"ckpt=" + ck + "\"\n" +
               // one flipped byte
               "printf '\\x7f' | dd of=" + ck + " bs=1 seek=100 conv=notrunc 2>/dev/null\n" +
               train_line(" --steps=300") + " > flipped.out 2>&1\necho \"flipped=$?\"\n" +
               // cut in half
               "truncate -s /2 " + ck + "\n" + train_line(" --steps=300") +
               " > truncated.out 2>&1\necho \"truncated=$?\"\n");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("first=0"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("flipped=[1-9]"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("truncated=[1-9]"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("ckpt=(\\S+)"))) << r.out;
  const std::string victim = m[1].str();
  std::string flipped = slurp(dir + "/flipped.out");
  EXPECT_THAT(flipped, HasSubstr("checkpoint " + victim + " is damaged: checksum mismatch"));
  EXPECT_THAT(flipped, HasSubstr("rank 1 could not load"));
  EXPECT_THAT(flipped, Not(HasSubstr("steps, parameter checksum")));
  EXPECT_THAT(flipped, Not(HasSubstr("resumed")));
  std::string truncated = slurp(dir + "/truncated.out");
  EXPECT_THAT(truncated, HasSubstr("checkpoint " + victim + " is damaged"));
  EXPECT_THAT(truncated, Not(HasSubstr("steps, parameter checksum")));
}

TEST(ResumeSystem, AKilledRankFailsTheJobAndLeavesTheLastCheckpointIntact) {
  REQUIRE_CLUSTER();
  const std::string ref = reference();
  std::string dir = job_dir("resume-killed");
  // Once step 300 is logged, one training process (a rank) of this job is
  // SIGKILLed: no stop, no checkpoint of its own; the step fails.
  Result r = in_one_job(
      dir,
      // (the watcher gives up when the step ended first: nothing hangs)
      "(while [ ! -e killed.done ] && ! grep -q '^step 300$' killed.out 2>/dev/null; "
      "do sleep 0.05; done; [ -e killed.done ] || " +
          kill_one_rank_of_this_job("^/.*/train --epochs") + ") &\n" +
          train_line(" --checkpoint-every=200") + " > killed.out 2>&1\n" +
          "echo \"killed=$?\"\ntouch killed.done\nwait\n" + train_line(" --checkpoint-every=200") +
          " > again.out 2>&1\necho \"again=$?\"\n");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::string killed = slurp(dir + "/killed.out");
  EXPECT_THAT(r.out, ::testing::ContainsRegex("killed=[1-9]"));
  EXPECT_THAT(killed, Not(HasSubstr("steps, parameter checksum")));
  EXPECT_THAT(r.out, HasSubstr("again=0"));
  std::string again = slurp(dir + "/again.out");
  EXPECT_THAT(again,
              ::testing::ContainsRegex("resumed from checkpoints/job-[0-9]+ at step [24]00 "));
  EXPECT_EQ(checksums(again), std::set<std::string>{ref}) << again;
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
