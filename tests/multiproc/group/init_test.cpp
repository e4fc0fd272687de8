// slurmddp::init() with ranks as separate processes on loopback, torchrun-style
// environment: success, and every failure ends within the configured timeout
// with an error that names what is wrong and who is missing.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <csignal>
#include <memory>
#include <regex>
#include <set>
#include <thread>

#include "loopback_port.h"
#include "plugin_env.h"
#include "process.h"
#include "rank_group.h"
#include "time_scale.h"

namespace slurmddp {
namespace {

using support::Process;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

std::string probe() {
  const char* p = std::getenv("SLURMDDP_RUNTIME_PROBE");
  return p != nullptr ? p : "";
}

struct Rank {
  Rank(int r, int w) : rank(r), world(w) {}
  int rank;
  int world;
  std::string token = "0123456789abcdef0123456789abcdef";
};

using Extra = std::map<std::string, std::string>;

// The runtime probe as rank r (the plugin's variables for a loopback task).
support::RankLaunch launch(const Rank& r, uint16_t port, const std::string& timeout = "3s",
                           const Extra& extra = {}) {
  auto env = support::plugin_env(r.rank, r.world, port,
                                 {{"SLURMDDP_TOKEN", r.token}, {"SLURMDDP_TIMEOUT", timeout}});
  for (const auto& [k, v] : extra) env[k] = v;
  return {{probe()}, env};
}

// One such process by itself (a rank of its own world size, or the only one).
std::unique_ptr<Process> start(const Rank& r, uint16_t port, const std::string& timeout = "3s",
                               const Extra& extra = {}) {
  const auto l = launch(r, port, timeout, extra);
  return std::make_unique<Process>(l.argv, l.env);
}

// Ranks `which` (all when not given) of a group of `world`; rank r with extra_of(r).
support::RankGroup start_group(int world, uint16_t port, const std::string& timeout,
                               const std::function<Extra(int)>& extra_of = nullptr,
                               const std::optional<std::vector<int>>& which = std::nullopt) {
  return support::RankGroup(
      world,
      [&](int r, int w) {
        return launch({r, w}, port, timeout, extra_of ? extra_of(r) : Extra{});
      },
      support::Output::kCaptured, which);
}

bool built_with_nccl() {
  const char* v = std::getenv("SLURMDDP_TEST_HAVE_NCCL");
  return v != nullptr && std::string(v) == "1";
}

// SLURMDDP_BACKEND=nccl where no device is visible (CUDA_VISIBLE_DEVICES=-1
// hides every device, so this holds on GPU machines too): init() goes the
// whole way to the NCCL communicator (rendezvous, options, make_nccl_communicator)
// and fails at its first CUDA call, with the communicator's reason ("nccl: ...")
// and init()'s context: the device variables and the way out. A broken wiring
// (NCCL refused before the communicator, or Gloo made instead) fails here on a
// CPU machine.
TEST(InitMultiproc, NcclBackendWithoutVisibleDeviceSaysWhy) {
  uint16_t port = slurmddp::support::free_loopback_port();
  auto ranks = start_group(2, port, "20s", [](int r) {
    return Extra{{"SLURMDDP_BACKEND", "nccl"},
                 {"CUDA_VISIBLE_DEVICES", "-1"},
                 {"SLURMDDP_LOCAL_DEVICE", std::to_string(r)}};
  });
  for (int r = 0; r < 2; ++r) {
    auto code = ranks.rank(r).wait(15s);
    ASSERT_TRUE(code.has_value()) << "rank " << r << " hung";
    EXPECT_NE(*code, 0);
    const std::string err = ranks.rank(r).stderr_text();
    EXPECT_THAT(err, HasSubstr("init: failed to create the NCCL communicator: nccl: failed to "));
    if (built_with_nccl()) {
      EXPECT_THAT(err, ::testing::ContainsRegex("cudaError(NoDevice|InsufficientDriver)"));
    } else {
      EXPECT_THAT(err, HasSubstr("built without NCCL"));
    }
    EXPECT_THAT(err, HasSubstr("rank=" + std::to_string(r)));
    EXPECT_THAT(err, HasSubstr("SLURMDDP_BACKEND='nccl'"));
    EXPECT_THAT(err, HasSubstr("CUDA_VISIBLE_DEVICES='-1'"));
    EXPECT_THAT(err, HasSubstr("SLURMDDP_LOCAL_DEVICE='" + std::to_string(r) + "'"));
    EXPECT_THAT(err, HasSubstr("SLURMDDP_BACKEND=gloo"));
    EXPECT_LT(ranks.rank(r).ran(), support::scaled(10s));
  }
}

// auto picks Gloo where no device is visible, even with a device index set.
TEST(InitMultiproc, AutoBackendWithoutVisibleDeviceUsesGloo) {
  uint16_t port = slurmddp::support::free_loopback_port();
  auto ranks = start_group(2, port, "10s", [](int r) {
    return Extra{{"SLURMDDP_BACKEND", "auto"},
                 {"CUDA_VISIBLE_DEVICES", "-1"},
                 {"SLURMDDP_LOCAL_DEVICE", std::to_string(r)}};
  });
  for (int r = 0; r < 2; ++r) {
    auto line = ranks.rank(r).read_line(20s);
    ASSERT_TRUE(line) << "rank " << r << ": " << ranks.rank(r).stderr_text();
    EXPECT_THAT(*line, HasSubstr("backend=gloo"));
    EXPECT_THAT(*line, HasSubstr("ok=1"));
    EXPECT_EQ(ranks.rank(r).wait(20s), 0) << ranks.rank(r).stderr_text();
  }
}

// Note [One backend]: ranks that chose different backends (here one told
// SLURMDDP_BACKEND=nccl among Gloo ranks, as a node with a broken driver or a
// mixed allocation would make auto do) fail at the join, at once and long
// before the timeout, every rank naming both choices and why each was made.
TEST(InitMultiproc, RanksThatChoseDifferentBackendsFailAtOnceNamingBoth) {
  uint16_t port = slurmddp::support::free_loopback_port();
  auto ranks = start_group(3, port, "60s", [](int r) {
    return Extra{{"SLURMDDP_BACKEND", r == 1 ? "nccl" : "auto"}, {"CUDA_VISIBLE_DEVICES", "-1"}};
  });
  for (int r = 0; r < 3; ++r) {
    auto code = ranks.rank(r).wait(30s);
    ASSERT_TRUE(code.has_value()) << "rank " << r << " hung";
    EXPECT_NE(*code, 0);
    const std::string err = ranks.rank(r).stderr_text();
    EXPECT_THAT(err, HasSubstr("init: failed to join the process group: ranks disagree on "
                               "backend: rank 0 on "));
    EXPECT_THAT(err, ::testing::ContainsRegex("has backend=gloo \\(auto: [^)]+\\), rank 1 on "));
    EXPECT_THAT(err, HasSubstr("has backend=nccl (SLURMDDP_BACKEND=nccl); 1 of 3 ranks differ"));
    EXPECT_LT(ranks.rank(r).ran(), support::scaled(20s)) << "waited for the 60 s timeout";
  }
}

TEST(InitMultiproc, WorldSizesOneToFour) {
  for (int world : {1, 2, 3, 4}) {
    uint16_t port = slurmddp::support::free_loopback_port();
    auto ranks = start_group(world, port, "3s");
    for (int r = 0; r < world; ++r) {
      auto line = ranks.rank(r).read_line(20s);
      ASSERT_TRUE(line) << "rank " << r << ": " << ranks.rank(r).stderr_text();
      EXPECT_THAT(*line, HasSubstr("runtime rank=" + std::to_string(r) +
                                   " world=" + std::to_string(world)));
      EXPECT_THAT(*line, HasSubstr("ok=1"));
      EXPECT_EQ(ranks.rank(r).wait(20s), 0) << ranks.rank(r).stderr_text();
    }
  }
}

// Note [Progress records]: one rank stuck in its own code (a slow data
// loader) while the others wait in an allreduce: one rank prints where
// everyone is, and training goes on once it wakes.
support::RankGroup start_training(
    int world, uint16_t port,
    const std::vector<std::string>& fault = {"--steps", "10", "--fault", "sleep", "--fault-rank",
                                             "2", "--fault-step", "5", "--sleep-seconds", "4"},
    const Extra& more = {}) {
  return support::RankGroup(world, [&](int r, int w) {
    std::vector<std::string> argv{probe()};
    argv.insert(argv.end(), fault.begin(), fault.end());
    auto env = support::plugin_env(r, w, port,
                                   {{"SLURMDDP_TIMEOUT", "30s"},
                                    {"SLURMDDP_HANG_AFTER", "1s"},
                                    {"SLURMD_NODENAME", r < 2 ? "node-a" : "node-b"}});
    for (const auto& [k, v] : more) env[k] = v;
    return support::RankLaunch{argv, env};
  });
}

TEST(InitMultiproc, ARankStuckInItsOwnCodeIsNamedByTheHangReport) {
  uint16_t port = slurmddp::support::free_loopback_port();
  auto ranks = start_training(3, port);
  std::string reports;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ranks.rank(r).wait(60s), 0) << ranks.rank(r).stderr_text();
    reports += ranks.rank(r).stderr_text();
  }
  // Step 5 done by everyone (0-based steps: 5 completed is "step 5" done,
  // the others wait in step 6's allreduce; rank 2 sleeps before step 5).
  EXPECT_THAT(reports,
              ::testing::ContainsRegex(
                  "hang report [0-9]+: step 5: 2/3 ranks waiting in allreduce #[0-9]+; rank 2 "
                  "on node-b at step 5 for [0-9]+ s in user code"))
      << reports;
}

// Waits (polling its stderr file) until one of `ranks` has logged a line
// that matches `pattern` (ECMAScript regex).
bool wait_for_log(support::RankGroup& ranks, const std::string& pattern,
                  std::chrono::seconds within) {
  const std::regex re(pattern);
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < ranks.size(); ++r) {
      if (std::regex_search(ranks.rank(r).stderr_text(), re)) return true;
    }
    std::this_thread::sleep_for(20ms);  // polling the log files for the event
  }
  return false;
}

// issue: a rank stopped inside a collective. Ranks 0 and 1 wait in step 5's
// allreduce for rank 2 (6 s in its own code); after the report of that wait
// rank 1 is stopped (SIGSTOP) where it waits. A later report names it from
// the beat it wrote in that wait; SIGCONT, and training finishes. Reports are
// matched by step, not by number: a slow start (a sanitizer build) may be
// reported before step 5 is.
TEST(InitMultiproc, ARankStoppedInsideACollectiveIsNamedWhereItStopped) {
  uint16_t port = slurmddp::support::free_loopback_port();
  auto ranks = start_training(3, port,
                              {"--steps", "10", "--fault", "sleep", "--fault-rank", "2",
                               "--fault-step", "5", "--sleep-seconds", "6"});
  ASSERT_TRUE(wait_for_log(ranks, "hang report [0-9]+: step 5: ", 30s));
  ranks.rank(1).signal(SIGSTOP);
  const bool named = wait_for_log(ranks, "rank 1 on node-a did not answer", 30s);
  ranks.rank(1).signal(SIGCONT);
  ASSERT_TRUE(named);
  std::string reports;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ranks.rank(r).wait(60s), 0) << ranks.rank(r).stderr_text();
    reports += ranks.rank(r).stderr_text();
  }
  EXPECT_THAT(reports,
              ::testing::ContainsRegex(
                  "hang report [0-9]+: step 5: 1/3 ranks (waiting in allreduce #[0-9]+|in user "
                  "code); rank 1 on node-a did not answer; last seen at step 5 in "
                  "allreduce #[0-9]+, [0-9]+ s ago"))
      << reports;
}

// Note [Report signal]: a report on demand while nothing hangs; the training
// goes on (100 steps of 50 ms; the report takes about two polls of 0.75 s).
// The 3 s threshold is above any step here, but on a busy machine (a
// sanitizer build, other work beside) a slow start can stall past it and be
// reported by itself, before the signal's report: so the signal's is the one
// rank 1 printed, whatever its number, and no report is printed twice.
TEST(InitMultiproc, TheReportSignalPrintsWhereEveryRankIsAndTrainingGoesOn) {
  uint16_t port = slurmddp::support::free_loopback_port();
  auto ranks = start_training(3, port,
                              {"--steps", "100", "--step-ms", "50", "--fault", "report",
                               "--fault-rank", "1", "--fault-step", "5"},
                              {{"SLURMDDP_HANG_AFTER", "3s"}});
  std::string all;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ranks.rank(r).wait(60s), 0) << ranks.rank(r).stderr_text();
    all += ranks.rank(r).stderr_text();
  }
  // The rank that received the signal asked, and printed the report.
  EXPECT_THAT(ranks.rank(1).stderr_text(),
              ::testing::ContainsRegex("hang report [0-9]+: step [0-9]+: [1-3]/3 ranks (in user "
                                       "code|waiting in allreduce #[0-9]+)"))
      << all;
  // One rank prints each report.
  const std::regex numbered("hang report ([0-9]+): step");
  std::vector<std::string> numbers;
  for (std::sregex_iterator it(all.begin(), all.end(), numbered), end; it != end; ++it) {
    numbers.push_back((*it)[1]);
  }
  EXPECT_EQ(std::set<std::string>(numbers.begin(), numbers.end()).size(), numbers.size()) << all;
}

// Note [Straggler windows]: rank 2 computes 20 ms a step where the others
// compute 5; every 20 steps rank 0 names it (the last window's report may
// not make it before the program ends: the two before it are asserted).
TEST(InitMultiproc, AStragglerIsNamedWithItsNodeAndWhereTheOthersWait) {
  uint16_t port = slurmddp::support::free_loopback_port();
  auto ranks = start_training(3, port,
                              {"--steps", "61", "--step-ms", "5", "--fault", "slow", "--fault-rank",
                               "2", "--slow-ms", "15"},
                              {{"SLURMDDP_STRAGGLER_EVERY", "20"}});
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ranks.rank(r).wait(60s), 0) << ranks.rank(r).stderr_text();
  const std::string report = ranks.rank(0).stderr_text();
  EXPECT_THAT(report, ::testing::ContainsRegex(
                          "straggler report, steps 1-20: rank 2 on node-b: [0-9.]+x the median "
                          "\\(compute [0-9.]+ vs [0-9.]+ ms a step\\) for 20 steps; the others "
                          "wait for it in allreduce \\(median [0-9.]+ ms a step\\)"))
      << report;
  EXPECT_THAT(report, HasSubstr("straggler report, steps 21-40: rank 2 on node-b"));
  EXPECT_THAT(report, ::testing::Not(HasSubstr("rank 0 on"))) << report;
  EXPECT_THAT(report, ::testing::Not(HasSubstr("rank 1 on"))) << report;
}

TEST(InitMultiproc, MissingRankIsNamedWithinTheTimeout) {
  uint16_t port = slurmddp::support::free_loopback_port();
  auto ranks = start_group(4, port, "3s", nullptr, std::vector<int>{0, 1, 3});
  for (int r : {0, 1, 3}) {
    auto code = ranks.rank(r).wait(15s);
    ASSERT_TRUE(code.has_value()) << "rank " << r << " hung";
    EXPECT_NE(*code, 0);
    EXPECT_THAT(ranks.rank(r).stderr_text(), HasSubstr("3/4 ranks joined; missing: [2]"));
    EXPECT_LT(ranks.rank(r).ran(), support::scaled(10s));
  }
}

TEST(InitMultiproc, WorldSizeDisagreementNamesBothValues) {
  uint16_t port = slurmddp::support::free_loopback_port();
  auto r0 = start({0, 2}, port);
  auto r1 = start({1, 3}, port);
  auto c1 = r1->wait(15s);
  ASSERT_TRUE(c1.has_value());
  EXPECT_NE(*c1, 0);
  std::string err = r1->stderr_text();
  EXPECT_THAT(err, HasSubstr("WORLD_SIZE differs between ranks"));
  EXPECT_THAT(err, HasSubstr("has WORLD_SIZE=3, another rank registered WORLD_SIZE=2"));
  auto c0 = r0->wait(15s);
  ASSERT_TRUE(c0.has_value()) << "rank 0 hung";
  EXPECT_NE(*c0, 0);
}

TEST(InitMultiproc, WrongTokenIsRefusedAndSaysWhy) {
  uint16_t port = slurmddp::support::free_loopback_port();
  auto r0 = start({0, 2}, port);
  Rank bad{1, 2};
  bad.token = "ffffffffffffffffffffffffffffffff";
  auto r1 = start(bad, port);
  auto c1 = r1->wait(15s);
  ASSERT_TRUE(c1.has_value());
  EXPECT_NE(*c1, 0);
  EXPECT_THAT(r1->stderr_text(), HasSubstr("auth"));
  EXPECT_THAT(r1->stderr_text(), ::testing::Not(HasSubstr("ffffffffffffffffffffffffffffffff")));
  auto c0 = r0->wait(15s);
  ASSERT_TRUE(c0.has_value()) << "rank 0 hung";
  EXPECT_THAT(r0->stderr_text(), HasSubstr("1/2 ranks joined; missing: [1]"));
}

TEST(InitMultiproc, UnreachableStoreNamesHostAndPort) {
  uint16_t port = slurmddp::support::free_loopback_port();
  auto r1 = start({1, 2}, port, "2s");  // rank 0 never starts: nothing listens
  auto c1 = r1->wait(15s);
  ASSERT_TRUE(c1.has_value()) << "hung";
  EXPECT_NE(*c1, 0);
  EXPECT_THAT(r1->stderr_text(), HasSubstr("127.0.0.1:" + std::to_string(port)));
  EXPECT_LT(r1->ran(), support::scaled(8s));
}

TEST(InitMultiproc, BadTimeoutVariableIsNamed) {
  uint16_t port = slurmddp::support::free_loopback_port();
  auto r0 = start({0, 1}, port, "soon");
  auto c = r0->wait(15s);
  ASSERT_TRUE(c.has_value());
  EXPECT_NE(*c, 0);
  EXPECT_THAT(r0->stderr_text(), HasSubstr("invalid SLURMDDP_TIMEOUT='soon'"));
}

}  // namespace
}  // namespace slurmddp
