#include "slurmddp/requeue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>

#include "slurmddp/error.h"
#include "time_scale.h"

namespace slurmddp {
namespace {

using ::testing::HasSubstr;

EnvReader env_of(std::map<std::string, std::string> m) {
  return [m](const char* n) -> std::optional<std::string> {
    auto it = m.find(n);
    return it == m.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

TEST(Requeue, TargetIsTheArrayTaskOrTheJob) {
  EXPECT_EQ(requeue_target(env_of({{"SLURM_JOB_ID", "81"}})), "81");
  EXPECT_EQ(
      requeue_target(env_of(
          {{"SLURM_JOB_ID", "81"}, {"SLURM_ARRAY_JOB_ID", "80"}, {"SLURM_ARRAY_TASK_ID", "1"}})),
      "80_1");
  try {
    requeue_target(env_of({}));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("SLURM_JOB_ID is not set"));
  }
}

// A stand-in scontrol that records its arguments and exits with `code`.
std::string fake_scontrol(const std::string& name, int code, const std::string& message) {
  std::string dir = ::testing::TempDir();
  std::string path = dir + "/" + name + "-" + std::to_string(::getpid());
  std::ofstream(path) << "#!/bin/sh\necho \"$@\" > " << path << ".args\necho '" << message
                      << "' >&2\nexit " << code << "\n";
  chmod(path.c_str(), 0755);
  return path;
}

TEST(Requeue, RunsScontrolAndReportsItsError) {
  setenv("SLURM_JOB_ID", "81", 1);
  unsetenv("SLURM_ARRAY_JOB_ID");
  std::string ok = fake_scontrol("scontrol-ok", 0, "");
  requeue_job(ok);
  std::ifstream args(ok + ".args");
  std::string line;
  std::getline(args, line);
  EXPECT_EQ(line, "requeue 81");

  std::string denied = fake_scontrol("scontrol-denied", 1,
                                     "scontrol: error: Requested operation is presently disabled");
  try {
    requeue_job(denied);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("requeue 81' failed (status 1): scontrol: error: Requested "
                                    "operation is presently disabled"));
    EXPECT_THAT(e.what(), HasSubstr("#SBATCH --requeue"));
  }
  try {
    requeue_job("/nonexistent/scontrol");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("scontrol is not installed here"));
    EXPECT_THAT(e.what(), HasSubstr("exit with 75 and let the batch script requeue"));
  }
  unsetenv("SLURM_JOB_ID");
}

// Note [Requeue deadline]: a scontrol that does not answer (slurmctld down) is
// killed after SLURMDDP_REQUEUE_TIMEOUT, with the script's child that holds its
// output pipe open, and the error says what happened and what to do.
TEST(Requeue, AScontrolThatDoesNotAnswerIsKilledAtTheDeadline) {
  setenv("SLURM_JOB_ID", "81", 1);
  unsetenv("SLURM_ARRAY_JOB_ID");
  const std::string path = ::testing::TempDir() + "/scontrol-hangs-" + std::to_string(::getpid());
  std::ofstream(path) << "#!/bin/sh\necho 'slurm_load_jobs error: Socket timed out' >&2\n"
                         "sleep 20\nexit 0\n";
  chmod(path.c_str(), 0755);
  setenv(kRequeueTimeoutVariable, "1", 1);
  const auto started = std::chrono::steady_clock::now();
  try {
    requeue_job(path);
    ADD_FAILURE() << "requeue_job returned";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("requeue 81' did not finish within 1 s "
                                    "(SLURMDDP_REQUEUE_TIMEOUT); it was killed"));
    EXPECT_THAT(e.what(), HasSubstr("exit with 75"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, support::scaled(std::chrono::seconds(10)));

  setenv(kRequeueTimeoutVariable, "soon", 1);
  try {
    requeue_job(path);
    ADD_FAILURE() << "requeue_job returned";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("invalid SLURMDDP_REQUEUE_TIMEOUT='soon'; expected seconds"));
  }
  unsetenv(kRequeueTimeoutVariable);
  unsetenv("SLURM_JOB_ID");
}

}  // namespace
}  // namespace slurmddp
