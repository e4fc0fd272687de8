// StopSignal with ranks as processes on loopback: whichever rank is signalled,
// and however, every rank stops after the same step; handlers installed before
// keep working; a rank that dies instead makes the others fail in bounded time.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <set>

#include "loopback_port.h"
#include "plugin_env.h"
#include "rank_group.h"
#include "time_scale.h"

namespace slurmddp {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

support::RankGroup start(int world, const std::vector<std::string>& args,
                         const std::string& timeout = "20s") {
  const uint16_t port = slurmddp::support::free_loopback_port();
  return support::RankGroup(world, [&](int r, int w) {
    std::vector<std::string> argv{std::getenv("SLURMDDP_STOP_RANK")};
    argv.insert(argv.end(), args.begin(), args.end());
    return support::RankLaunch{
        argv, support::plugin_env(r, w, port,
                                  {{"SLURMDDP_TOKEN", "00112233445566778899aabbccddeeff"},
                                   {"SLURMDDP_TIMEOUT", timeout}})};
  });
}

// Every rank's one output line, each exiting 0.
std::set<std::string> outcomes(support::RankGroup& ranks) {
  std::set<std::string> lines;
  for (int r = 0; r < ranks.size(); ++r) {
    auto line = ranks.rank(r).read_line(60s);
    EXPECT_TRUE(line.has_value()) << "rank " << r << ": " << ranks.rank(r).stderr_text();
    if (line) lines.insert(*line);
    EXPECT_EQ(ranks.rank(r).wait(30s), 0) << "rank " << r << ": " << ranks.rank(r).stderr_text();
  }
  return lines;
}

std::set<std::string> stopped_at(int world, int step, const std::string& signal) {
  std::set<std::string> want;
  for (int r = 0; r < world; ++r) {
    want.insert("stopped rank=" + std::to_string(r) + " step=" + std::to_string(step) +
                " signal=" + signal);
  }
  return want;
}

TEST(StopMultiproc, OneSignalledRankStopsEveryRankAfterTheSameStep) {
  auto ranks =
      start(4, {"--raise", std::to_string(SIGUSR1), "--raise-rank", "2", "--raise-step", "5"});
  EXPECT_EQ(outcomes(ranks), stopped_at(4, 5, "SIGUSR1"));
}

TEST(StopMultiproc, CheckEveryDelaysTheStopToTheNextCheck) {
  auto ranks = start(3, {"--raise", std::to_string(SIGTERM), "--raise-rank", "1", "--raise-step",
                         "5", "--check-every", "4"});
  EXPECT_EQ(outcomes(ranks), stopped_at(3, 8, "SIGTERM"));
}

TEST(StopMultiproc, NoSignalRunsToTheEnd) {
  auto ranks = start(2, {"--steps", "20"});
  EXPECT_EQ(outcomes(ranks), (std::set<std::string>{"finished rank=0", "finished rank=1"}));
}

// A real signal from outside (as slurmstepd delivers it) to one rank while it
// waits: that rank's step is where everyone stops, and the signal prints
// nothing else (UCX, loaded with an MPI built on it, takes SIGHUP as its debug
// signal and would switch its trace log on stdout: Note [UCX's debug signal]).
TEST(StopMultiproc, ExternalSignalToOneRank) {
  for (int sig : {SIGTERM, SIGUSR2, SIGHUP}) {
    auto ranks = start(3, {"--pause-rank", "0", "--pause-step", "7"});
    auto paused = ranks.rank(0).read_line(60s);
    ASSERT_EQ(paused, "paused") << ranks.rank(0).stderr_text();
    ranks.rank(0).signal(sig);
    ranks.rank(0).write_line("go");
    std::string name = sig == SIGTERM ? "SIGTERM" : sig == SIGUSR2 ? "SIGUSR2" : "SIGHUP";
    EXPECT_EQ(outcomes(ranks), stopped_at(3, 7, name));
    std::string rest;
    EXPECT_TRUE(ranks.rank(0).read_all(support::Clock::now() + 30s, &rest, nullptr));
    EXPECT_EQ(rest, "") << name;
  }
}

TEST(StopMultiproc, AHandlerInstalledBeforeStillRuns) {
  auto ranks = start(
      2, {"--raise", std::to_string(SIGUSR2), "--raise-rank", "0", "--raise-step", "3", "--chain"});
  auto r0 = ranks.rank(0).read_line(60s);
  auto r1 = ranks.rank(1).read_line(60s);
  EXPECT_EQ(r0, "stopped rank=0 step=3 signal=SIGUSR2 chained=1") << ranks.rank(0).stderr_text();
  EXPECT_EQ(r1, "stopped rank=1 step=3 signal=SIGUSR2");  // not signalled itself
  EXPECT_EQ(ranks.rank(0).wait(30s), 0);
  EXPECT_EQ(ranks.rank(1).wait(30s), 0);
}

TEST(StopMultiproc, ADeadRankFailsTheOthersWithinTheTimeoutNamingIt) {
  auto ranks = start(3, {"--kill-rank", "1", "--kill-step", "4"}, "3s");
  EXPECT_EQ(ranks.rank(1).wait(30s), 128 + SIGKILL);
  for (int r : {0, 2}) {
    auto code = ranks.rank(r).wait(30s);
    EXPECT_EQ(code, 1) << "rank " << r;
    EXPECT_THAT(ranks.rank(r).stderr_text(), HasSubstr("rank 1")) << "rank " << r;
    EXPECT_LT(ranks.rank(r).ran(), support::scaled(25s)) << "rank " << r;
  }
}

}  // namespace
}  // namespace slurmddp
