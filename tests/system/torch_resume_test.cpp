// Preemption and requeue of the PyTorch example on the real test cluster,
// through slurm-ddp's Python package (slurmddp.StopSignal, Checkpointer,
// requeue_and_exit): examples/jobs/preemptible-pytorch.sbatch interrupted by
// scancel --signal and by its time limit, requeued by rank 0 and resumed, ends
// with the parameters of an uninterrupted run, bit for bit (Gloo,
// --deterministic; DDP's first-iteration bucket layout spent by
// slurmddp.torch.settle_ddp on resume); a rank killed mid-run leaves the
// last complete checkpoint, which resumes exactly; a damaged checkpoint is
// refused naming file and rank, and the previous one resumes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "batch_jobs.h"
#include "cluster.h"

namespace slurmddp::systest {
namespace {

namespace fs = std::filesystem;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// 2 epochs of 469 steps on 4 ranks (2 nodes x 2): stopped at step 100 by
// scancel, 838 steps (10-40 s) are left for the signal to arrive mid-run;
// the time-limit warning holds the ranks until it came (Note [Holding ranks
// for a signal]).
const char* const kArgs = " --epochs 2 --batch-size 32 --log-every 50 --deterministic";
constexpr int kSteps = 2 * 469;

// The 16 hex digits train.py prints: under torchrun, whose --tee copies the
// workers' output in chunks, another line may follow a digest without a
// line break.
std::set<std::string> digests(const std::string& out) {
  return captures(out, "rank [0-9]+: parameter sha256 ([0-9a-f]{16})");
}

// A job directory with train.py (the example) for the sbatch script.
std::string job_dir(const std::string& name) {
  std::string dir = fresh_dir(name);
  fs::create_symlink(source_dir() + "/examples/pytorch/train.py", dir + "/train.py");
  return dir;
}

std::string submit(const std::string& dir, const std::string& sbatch_args) {
  return systest::submit(dir, source_dir() + "/examples/jobs/preemptible-pytorch.sbatch",
                         python_exports() + " " + sbatch_args, kArgs);
}

// The digest of the uninterrupted run, computed once for the suite.
const std::string& reference() {
  static const std::string sum = [] {
    std::string dir = job_dir("torch-resume-reference");
    std::string id = submit(dir, "");
    EXPECT_TRUE(poll_until(std::chrono::seconds(400), [&] { return finished(id); }));
    std::string out = slurp(dir + "/out.txt");
    EXPECT_EQ(job_state(id), "COMPLETED") << out;
    auto sums = digests(out);
    EXPECT_EQ(sums.size(), 1u) << out;
    EXPECT_THAT(out, HasSubstr("run 0 of job " + id));
    EXPECT_THAT(out, Not(HasSubstr("resumed")));
    return sums.empty() ? std::string("(none)") : *sums.begin();
  }();
  return sum;
}

TEST(TorchResumeSystem, ScancelSignalMidEpochRequeuesAndResumesBitIdentical) {
  REQUIRE_CLUSTER();
  const std::string ref = reference();
  std::string dir = job_dir("torch-resume-scancel");
  std::string id = submit(dir, "");
  ASSERT_NO_FATAL_FAILURE(stop_requeue_and_rerun(id, dir, 100, "USR1", std::chrono::seconds(180)));
  std::string out = slurp(dir + "/out.txt");
  EXPECT_EQ(job_state(id), "COMPLETED") << out;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(out, m,
                        std::regex("rank 0: stopped after step ([0-9]+) on SIGUSR1, checkpoint in "
                                   "checkpoints/job-" +
                                   id)))
      << out;
  const std::string step = m[1].str();
  EXPECT_EQ(count(out, "stopped after step " + step + " on SIGUSR1"), 4u) << out;
  EXPECT_LT(std::stoi(step), kSteps) << "stopped before the end";
  EXPECT_THAT(
      out, HasSubstr("resumed from checkpoints/job-" + id + "/step-" + step + " at step " + step));
  EXPECT_THAT(out, HasSubstr("run " + id + ", restart count 1"));
  EXPECT_EQ(digests(out), std::set<std::string>{ref}) << out;
}

// The job's time limit approaching, as Slurm tells it: submitted with a
// 10-minute limit and --signal=USR1@120; once it trains (step 100: the ranks'
// handlers are in), its limit is brought within 120 s (bring_time_limit_close),
// so Slurm's own warning comes at its next time-limit check, while the ranks
// are held (Note [Holding ranks for a signal]). The training stops, requeues itself, gets its 10
// minutes back when released, and ends with the reference's parameters. (A short limit from the
// start, as
// --time=1 --signal=USR1@59, lets the warning come in the first seconds of the
// job, up to 30 s early by Slurm's resolution, before the step or the ranks'
// handlers exist: lost, or ending the ranks by the signal's default action.)
TEST(TorchResumeSystem, TimeLimitWarningStopsRequeuesAndResumesBitIdentical) {
  REQUIRE_CLUSTER();
  const std::string ref = reference();
  std::string dir = job_dir("torch-resume-timelimit");
  std::string id = submit(dir, "--time=10 --signal=USR1@120");
  ASSERT_TRUE(poll_until(std::chrono::seconds(180), [&] {
    return slurp(dir + "/out.txt").find("\nstep 100\n") != std::string::npos;
  })) << slurp(dir + "/out.txt");
  // Note [Holding ranks for a signal] (batch_jobs.h)
  ASSERT_TRUE(hold_until_pending(id, "train.py", 4, SIGUSR1, std::chrono::seconds(90),
                                 [&] { return bring_time_limit_close(id); }))
      << "the time limit of job " << id << " was not brought close, or its warning did not "
      << "reach the ranks within 90 s\n"
      << slurp(dir + "/out.txt");
  release_after_requeue(id, dir, "rank 0: stopped after step", "TimeLimit=10");
  ASSERT_TRUE(poll_until(std::chrono::seconds(400), [&] {
    return finished(id) && slurp(dir + "/out.txt").find("run 1 of job") != std::string::npos;
  })) << slurp(dir + "/out.txt");
  std::string out = slurp(dir + "/out.txt");
  EXPECT_EQ(job_state(id), "COMPLETED") << out;
  EXPECT_THAT(out, HasSubstr("on SIGUSR1, checkpoint in checkpoints/job-" + id));
  EXPECT_THAT(out, HasSubstr("restart count 1"));
  EXPECT_THAT(out, Not(HasSubstr("DUE TO TIME LIMIT"))) << out;
  EXPECT_EQ(digests(out), std::set<std::string>{ref}) << out;
}

// Under torchrun (--ddp-launcher=torchrun: one agent per node, 2 workers
// each, the same 4 ranks in the same order as the reference's srun tasks):
// scancel --signal reaches the agents only (proctrack/pgid; the workers are
// in sessions of their own), which send it on to their workers
// (Note [Stop signals through torchrun]): SIGUSR1 where torchrun has
// --signals-to-handle, else SIGTERM, which every torchrun sends on. The
// workers stop after the same step, rank 0 requeues, the job resumes under
// torchrun again and ends with the reference's parameters. The workers'
// stdout is theirs (torchrun's --tee would pass it on through a thread that
// ends with the step, which rank 0's requeue ends); --redirects/--tee 2 (their
// stderr): Debian's torch 1.13 cannot parse torchrun's own default.
TEST(TorchResumeSystem, TorchrunWorkersGetTheStopSignalRequeueAndResumeBitIdentical) {
  REQUIRE_CLUSTER();
  if (torch_lacks_libuv()) {
    GTEST_SKIP() << "SKIP: torchrun of this torch cannot start (it asks for libuv and was built "
                    "without it; tests/system/torch_launch_test.cpp checks that failure)";
  }
  const std::string ref = reference();
  Result help = run(python() + " -m torch.distributed.run --help");
  const bool forwards_usr1 = help.out.find("--signals-to-handle") != std::string::npos;
  const std::string sig = forwards_usr1 ? "USR1" : "TERM";
  std::string dir = job_dir("torch-resume-torchrun");
  std::ofstream(dir + "/torchrun.sbatch")
      << "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1 --requeue --open-mode=append\n"
         "#SBATCH --ddp-launcher=torchrun\n"
         "echo \"run $((SLURM_RESTART_COUNT + 0)) of job $SLURM_JOB_ID\"\n"
         "srun $PYTHON -m torch.distributed.run --nproc_per_node 2 --redirects 2 --tee 2 "
         "train.py --checkpoint-dir=checkpoints --on-stop=requeue"
      << kArgs << "\n";
  std::string id = systest::submit(dir, dir + "/torchrun.sbatch", python_exports(), "");
  ASSERT_NO_FATAL_FAILURE(stop_requeue_and_rerun(id, dir, 100, sig, std::chrono::seconds(180)));
  std::string out = slurp(dir + "/out.txt");
  EXPECT_EQ(job_state(id), "COMPLETED") << out;
  const auto steps = captures(out, "rank [0-3]: stopped after step ([0-9]+) on SIG" + sig);
  ASSERT_EQ(steps.size(), 1u) << out;
  const std::string step = *steps.begin();
  EXPECT_EQ(count(out, "stopped after step " + step + " on SIG" + sig), 4u) << out;
  EXPECT_THAT(out, HasSubstr("under torchrun: init_method=env://"));
  EXPECT_THAT(
      out, HasSubstr("resumed from checkpoints/job-" + id + "/step-" + step + " at step " + step));
  EXPECT_EQ(digests(out), std::set<std::string>{ref}) << out;
}

// In one allocation (one job id, so one checkpoint directory): a rank killed
// at step 150 fails the step and leaves step 100's checkpoint; the next run
// resumes from it and ends; a flipped byte in its newest checkpoint (step
// 200) is refused naming the file and rank, and the run after resumes from
// step 100 and ends with the same parameters.
TEST(TorchResumeSystem, AKilledRankAndADamagedCheckpointFallBackToTheLastGoodOne) {
  REQUIRE_CLUSTER();
  std::string dir = job_dir("torch-resume-faults");
  const std::string train =
      "srun $PYTHON train.py --epochs 1 --batch-size 32 --log-every 50 --deterministic "
      "--checkpoint-dir=checkpoints --checkpoint-every 100 --steps 250";
  const std::string ck = "checkpoints/job-$SLURM_JOB_ID/step-200/rank-1.ckpt";
  Result r = in_one_job(
      dir, "export " + with_package() + "PYTHON=" + python() +
               "\n"
               // (the watcher gives up when the step ended first: nothing hangs)
               "(while [ ! -e killed.done ] && ! grep -q '^step 150$' killed.out 2>/dev/null; "
               "do sleep 0.05; done; [ -e killed.done ] || " +
               kill_one_rank_of_this_job("^[^ ]*python3 train.py --epochs 1 --batch-size 32") +
               ") &\n" + train +
               " > killed.out 2>&1\necho \"killed=$?\"\ntouch killed.done\nwait\n" + train +
               " > again.out 2>&1\necho \"again=$?\"\necho \"ckpt=" + ck + "\"\n" +
               "printf '\\x7f' | dd of=" + ck + " bs=1 seek=100 conv=notrunc 2>/dev/null\n" +
               train + " > flipped.out 2>&1\necho \"flipped=$?\"\n");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ContainsRegex("killed=[1-9]"));
  std::string killed = slurp(dir + "/killed.out");
  EXPECT_THAT(killed, HasSubstr("\nstep 150\n"));
  EXPECT_TRUE(digests(killed).empty()) << killed;

  EXPECT_THAT(r.out, HasSubstr("again=0"));
  std::string again = slurp(dir + "/again.out");
  EXPECT_THAT(again, ContainsRegex("resumed from checkpoints/job-[0-9]+/step-100 at step 100 "));
  const auto want = digests(again);
  EXPECT_EQ(want.size(), 1u) << again;

  EXPECT_THAT(r.out, HasSubstr("flipped=0"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("ckpt=(\\S+)"))) << r.out;
  const std::string victim = m[1].str();
  std::string flipped = slurp(dir + "/flipped.out");
  EXPECT_THAT(flipped,
              HasSubstr("refusing checkpoint " + fs::path(victim).parent_path().string() +
                        ": rank 1: checkpoint " + victim + " is damaged: checksum mismatch"));
  EXPECT_THAT(flipped, ContainsRegex("resumed from checkpoints/job-[0-9]+/step-100 at step 100 "));
  EXPECT_EQ(digests(flipped), want) << flipped;
}

// The docs' five lines over a DataLoader with 2 workers that prefetch
// (tests/python/resume_rank.py "loader"; the same case runs on loopback in
// tests/python/resume_test.py) as a batch job on two nodes: rank 1 signals
// itself before step 7, every rank stops after step 8 mid-epoch, checkpoints,
// requeues; the second run resumes at sample 32 of the epoch and trains on
// exactly the samples of an uninterrupted job, ending with its parameters.
TEST(TorchResumeSystem, TheDocsLinesWithTwoLoaderWorkersResumeExactlyAcrossARequeue) {
  REQUIRE_CLUSTER();
  auto job = [](const std::string& name, int signal_at) {
    std::string dir = fresh_dir(name);
    std::ofstream(dir + "/loader.sbatch")
        << "#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=1 --requeue --open-mode=append\n"
           "echo \"run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID\"\n"
           "srun --open-mode=append -o rank-%t.txt $PYTHON "
        << source_dir() << "/tests/python/resume_rank.py loader slurmddp ck 20 " << signal_at
        << " 2\n";
    return std::make_pair(dir, systest::submit(dir, "loader.sbatch", python_exports(), ""));
  };
  const auto [ref_dir, ref_id] = job("torch-resume-loader-reference", 0);
  const auto [dir, id] = job("torch-resume-loader", 7);
  release_after_requeue(id, dir, "rank 0 stopped at 8", "", "rank-0.txt");
  ASSERT_TRUE(poll_until(std::chrono::seconds(300), [&, id = id, ref_id = ref_id] {
    return finished(id) && finished(ref_id);
  }));
  // Each rank's lines come from its own file, which slurmstepd writes on the
  // rank's node: srun's forwarding to out.txt can drop the lines printed just
  // before the requeue ends the step.
  auto ranks = [](const std::string& d) {
    return slurp(d + "/rank-0.txt") + slurp(d + "/rank-1.txt");
  };
  const std::string ref = ranks(ref_dir);
  const std::string out = ranks(dir);
  EXPECT_EQ(job_state(ref_id), "COMPLETED") << slurp(ref_dir + "/out.txt") << ref;
  EXPECT_EQ(job_state(id), "COMPLETED") << slurp(dir + "/out.txt") << out;
  EXPECT_THAT(slurp(dir + "/out.txt"), HasSubstr("run 1 of job " + id));
  auto lines = [](const std::string& text, const std::string& prefix) {
    std::vector<std::string> got;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(prefix, 0) == 0) got.push_back(line);
    }
    return got;
  };
  for (int r = 0; r < 2; ++r) {
    const std::string rank = "rank " + std::to_string(r);
    EXPECT_THAT(out, HasSubstr(rank + " stopped at 8\n"));
    EXPECT_THAT(out, HasSubstr(rank + " resumed at 8 epoch 0 position 32\n"));
    const auto trained = lines(out, rank + " samples ");
    EXPECT_EQ(trained.size(), 20u) << out;
    EXPECT_EQ(trained, lines(ref, rank + " samples ")) << out << ref;
    const auto sums = lines(out, rank + " sha256 ");
    EXPECT_EQ(sums.size(), 1u) << out;
    EXPECT_EQ(sums, lines(ref, rank + " sha256 ")) << out << ref;
  }
}

// The package's other preemption cases (tests/python/resume_test.py and
// sharded_test.py run them on loopback) as steps of one job on two nodes of
// two tasks: a signal handler that another library installs after
// StopSignal() still sees the stop; a step saved again with a rank killed in
// its write leaves the previous checkpoint, which loads on every rank; and
// torch.distributed.checkpoint state, a DTensor sharded over the four ranks,
// saved and loaded back (on a torch without it, the error that says so).
TEST(TorchResumeSystem, ALateHandlerAKilledResaveAndShardedStateAsStepsOfAJob) {
  REQUIRE_CLUSTER();
  std::string dir = fresh_dir("torch-resume-package-cases");
  const std::string rank = source_dir() + "/tests/python/resume_rank.py";
  const std::string sharded = source_dir() + "/tests/python/sharded_rank.py";
  Result r = in_one_job(
      dir, "export " + with_package() + "PYTHON=" + python() + "\nR=" + rank + "\nS=" + sharded +
               "\n"
               "srun $PYTHON $R late slurmddp late > late.out 2> late.err; echo \"late=$?\"\n"
               "srun $PYTHON $R save slurmddp resave rank0 3 6 > save.out 2>&1\n"
               "echo \"save=$?\"\n"
               "KILL_AT=6 srun $PYTHON $R save slurmddp resave rank0 6 > killed.out 2>&1\n"
               "echo \"killed=$?\"\n"
               "srun $PYTHON $R load slurmddp resave rank0 > load.out 2>&1; echo \"load=$?\"\n"
               "if $PYTHON -c 'import torch.distributed.checkpoint, torch.distributed.tensor' "
               "2>/dev/null; then\n"
               "  srun $PYTHON $S save dcp 3 6 > dsave.out 2>&1; echo \"dsave=$?\"\n"
               "  srun $PYTHON $S load dcp > dload.out 2>&1; echo \"dload=$?\"\n"
               "else\n"
               "  $PYTHON $S old > old.out 2>&1; echo \"old=$?\"\n"
               "fi\n");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;

  EXPECT_THAT(r.out, HasSubstr("late=0"));
  const std::string late = slurp(dir + "/late.out");
  for (int k = 0; k < 4; ++k) {
    // check 2 carries rank 0's signal, check 3 reads it
    EXPECT_THAT(late, HasSubstr("rank " + std::to_string(k) +
                                " stopped at 3 on SIGUSR1; later handler called " +
                                (k == 0 ? "1" : "0") + " times"));
  }
  EXPECT_THAT(slurp(dir + "/late.err"),
              HasSubstr("a handler for SIGUSR1 was installed after StopSignal()"));

  EXPECT_THAT(r.out, HasSubstr("save=0"));
  EXPECT_THAT(r.out, ContainsRegex("killed=[1-9]"));
  EXPECT_FALSE(fs::exists(dir + "/resave/step-6/COMPLETE"));
  EXPECT_THAT(r.out, HasSubstr("load=0"));
  const std::string load = slurp(dir + "/load.out");
  for (int k = 0; k < 4; ++k) {
    EXPECT_THAT(load, HasSubstr("rank " + std::to_string(k) + " loaded 3 state=0,3 position=3"));
  }

  if (r.out.find("old=") != std::string::npos) {
    EXPECT_THAT(slurp(dir + "/old.out"), HasSubstr("torch >= 2.2"));
    return;
  }
  EXPECT_THAT(r.out, HasSubstr("dsave=0"));
  EXPECT_THAT(r.out, HasSubstr("dload=0"));
  const std::string dload = slurp(dir + "/dload.out");
  // 8x4 rows 0..31 + 6000 sharded by rows: 2 rows a rank
  for (int k = 0; k < 4; ++k) {
    int mine = 0;
    for (int v = 8 * k; v < 8 * k + 8; ++v) mine += v;
    EXPECT_THAT(dload, HasSubstr("rank " + std::to_string(k) +
                                 " loaded 6 full=" + std::to_string(496 + 32 * 6000) + " mine=" +
                                 std::to_string(mine + 8 * 6000) + " plain=18 position=6"));
  }
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
