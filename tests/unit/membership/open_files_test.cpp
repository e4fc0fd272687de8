// Note [Open files at scale]: init() raises the soft limit of open files to
// what its connections need, and says why and how when it cannot.
#include "group/open_files.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

namespace slurmddp {
namespace {

rlim_t soft() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  return rl.rlim_cur;
}

// Runs `check` in a child whose limits are {soft, hard} (lowering a hard
// limit is for good, so never in the test process); its exit status.
int in_child(rlim_t soft_limit, rlim_t hard_limit, const std::function<bool()>& check) {
  const pid_t pid = fork();
  if (pid == 0) {
    const rlimit rl{soft_limit, hard_limit};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(3);
    _exit(check() ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// The host also holds the connections still authenticating (Note [Store host
// bounds]): up to two per rank, at least 64.
TEST(OpenFiles, TheStoresHostNeedsAConnectionPerRankMore) {
  EXPECT_EQ(open_files_needed(1000, false), 2000u + 256);
  EXPECT_EQ(open_files_needed(1000, true), 3000u + 256 + 2000);
  EXPECT_EQ(open_files_needed(0, true), 3u + 256 + 64);
}

TEST(OpenFiles, TheSoftLimitIsRaisedToWhatIsNeededAndNeverLowered) {
  EXPECT_EQ(in_child(300, 600,
                     [] {
                       return ensure_open_files(500, "rank 0").empty() && soft() == 500 &&
                              ensure_open_files(400, "rank 0").empty() && soft() == 500;
                     }),
            0);
}

TEST(OpenFiles, AShortHardLimitIsNamedWithTheWayOut) {
  EXPECT_EQ(in_child(300, 400,
                     [] {
                       const std::string w = ensure_open_files(3256, "rank 0 of 1000 on n1");
                       return w.find("rank 0 of 1000 on n1 needs about 3256 open files") == 0 &&
                              w.find("may open only 400 (RLIMIT_NOFILE soft, hard 400)") !=
                                  std::string::npos &&
                              w.find("PropagateResourceLimitsExcept=NOFILE") != std::string::npos &&
                              soft() == 400;
                     }),
            0);
}

}  // namespace
}  // namespace slurmddp
