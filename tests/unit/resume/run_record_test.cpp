// Note [Run identity]: which run a job's own checkpoint directory belongs to.
#include "resume/run_record.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "resume/checkpoint_io.h"
#include "slurmddp/error.h"

namespace slurmddp::resume {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::string fresh(const std::string& name) {
  std::string d = ::testing::TempDir() + "/run-" + name + "-" + std::to_string(::getpid());
  fs::remove_all(d);
  make_private_dirs(d);
  return d;
}

std::string error_of(const std::string& dir, const RunIdentity& id) {
  try {
    claim_run(dir, id);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RunIdentity, FromTheJobsVariables) {
  std::map<std::string, std::string> env = {{"SLURM_CLUSTER_NAME", "north"},
                                            {"SLURM_JOB_ID", "1234"},
                                            {"SLURM_JOB_START_TIME", "1796593217"},
                                            {"SLURM_RESTART_COUNT", "2"}};
  auto get = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  RunIdentity id = run_identity(get);
  EXPECT_EQ(id.cluster, "north");
  EXPECT_EQ(id.job, "1234");
  EXPECT_EQ(id.started, "1796593217");
  EXPECT_EQ(id.restarts, 2);
  env["SLURM_ARRAY_JOB_ID"] = "1200";
  env["SLURM_ARRAY_TASK_ID"] = "7";
  env.erase("SLURM_RESTART_COUNT");
  id = run_identity(get);
  EXPECT_EQ(id.job, "1200_7");
  EXPECT_EQ(id.restarts, 0);
  env["SLURM_RESTART_COUNT"] = "two";
  EXPECT_THROW(
      {
        try {
          run_identity(get);
        } catch (const InvalidArgument& e) {
          EXPECT_THAT(e.what(), HasSubstr("SLURM_RESTART_COUNT='two' is not a count"));
          throw;
        }
      },
      InvalidArgument);
  env["SLURM_RESTART_COUNT"] = "1";
  env["SLURM_JOB_START_TIME"] = "yesterday";
  EXPECT_THROW(run_identity(get), InvalidArgument);
}

TEST(ClaimRun, TheFirstRunWritesItsRecordAndFindsItAgain) {
  const std::string dir = fresh("first");
  const std::string nonce = claim_run(dir, RunIdentity{"north", "1234", "1000", 0});
  EXPECT_THAT(nonce, MatchesRegex("[0-9a-f]{16}"));
  EXPECT_EQ(read_file(dir + "/RUN").value_or(""),
            "run cluster=north job=1234 started=1000 nonce=" + nonce + "\n");
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/RUN").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777u, 0600u);
  // a step started again in the same allocation, and the requeued runs
  EXPECT_EQ(claim_run(dir, RunIdentity{"north", "1234", "1000", 0}), nonce);
  EXPECT_EQ(claim_run(dir, RunIdentity{"north", "1234", "2000", 1}), nonce);
  EXPECT_EQ(claim_run(dir, RunIdentity{"north", "1234", "3000", 2}), nonce);
  // no temporary files left behind
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) entries += e.path().filename() != "" ? 1 : 0;
  EXPECT_EQ(entries, 1u);
}

TEST(ClaimRun, ANewJobWithAnOldJobsIdIsRefusedSayingWhoseTheDirectoryIs) {
  const std::string dir = fresh("reused");
  claim_run(dir, RunIdentity{"north", "1234", "1796593217", 3});
  EXPECT_THAT(error_of(dir, RunIdentity{"north", "1234", "1796600000", 0}),
              MatchesRegex(".*" + dir +
                           " belongs to another job 1234 of cluster north, which started at "
                           "2026-12-06 [0-9:]+ UTC \\(1796593217\\); this job started at "
                           "2026-12-06 [0-9:]+ UTC \\(1796600000\\) and was never requeued .*a "
                           "reset job counter.*Move " +
                           dir + " away.*per_job=False.*"));
}

TEST(ClaimRun, AnotherClustersJobWithTheSameIdIsRefused) {
  const std::string dir = fresh("cluster");
  claim_run(dir, RunIdentity{"north", "1234", "1000", 0});
  std::string why = error_of(dir, RunIdentity{"south", "1234", "1000", 1});
  EXPECT_THAT(why, HasSubstr(dir + " belongs to job 1234 of cluster north, not to this job 1234 "
                                   "of cluster south"));
  EXPECT_THAT(why, HasSubstr("$SLURM_CLUSTER_NAME"));
  EXPECT_THAT(error_of(dir, RunIdentity{"north", "99", "1000", 1}),
              HasSubstr("belongs to job 1234 of cluster north, not to this job 99 of cluster "
                        "north"));
}

TEST(ClaimRun, CheckpointsWithoutARecordAreAnotherJobsUnlessThisJobWasRequeued) {
  const std::string dir = fresh("norecord");
  make_private_dirs(dir + "/step-10");
  write_atomic(dir + "/step-10", "COMPLETE", "complete step=10 world=2\n");
  EXPECT_THAT(error_of(dir, RunIdentity{"north", "1234", "1000", 0}),
              HasSubstr(dir + " holds checkpoints but no record of their run (RUN), and this "
                              "job 1234 of cluster north was never requeued"));
  EXPECT_FALSE(fs::exists(dir + "/RUN"));
  // a requeued job whose first run wrote its checkpoints without a record
  const std::string nonce = claim_run(dir, RunIdentity{"north", "1234", "2000", 1});
  EXPECT_EQ(read_file(dir + "/RUN").value_or(""),
            "run cluster=north job=1234 started=2000 nonce=" + nonce + "\n");
}

TEST(ClaimRun, WithoutAStartTimeOnlyTheClusterAndJobAreCompared) {
  const std::string dir = fresh("nostart");
  const std::string nonce = claim_run(dir, RunIdentity{"", "4242", "", 0});
  EXPECT_EQ(read_file(dir + "/RUN").value_or(""),
            "run cluster= job=4242 started= nonce=" + nonce + "\n");
  EXPECT_EQ(claim_run(dir, RunIdentity{"", "4242", "", 0}), nonce);
  EXPECT_EQ(claim_run(dir, RunIdentity{"", "4242", "5000", 0}), nonce);
}

TEST(ClaimRun, ADamagedRecordIsRefusedNamingWhatItHolds) {
  const std::string dir = fresh("damaged");
  write_atomic(dir, "RUN", "garbage\n");
  EXPECT_THAT(error_of(dir, RunIdentity{"north", "1234", "1000", 1}),
              HasSubstr(dir + "/RUN is damaged: it holds 'garbage', expected 'run cluster=... "
                              "job=... started=... nonce=...'"));
}

TEST(PublishNew, NeverReplacesWhatIsThere) {
  const std::string dir = fresh("publish");
  TempFile a = create_temp(dir, "X");
  write_all(a.fd.get(), "a", 1, a.path);
  EXPECT_TRUE(publish_new(std::move(a), dir, "X"));
  TempFile b = create_temp(dir, "X");
  write_all(b.fd.get(), "b", 1, b.path);
  const std::string b_path = b.path;
  EXPECT_FALSE(publish_new(std::move(b), dir, "X"));
  EXPECT_EQ(read_file(dir + "/X").value_or(""), "a");
  EXPECT_FALSE(fs::exists(b_path));
}

}  // namespace
}  // namespace slurmddp::resume
