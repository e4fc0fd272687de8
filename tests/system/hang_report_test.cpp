// The hang report on the real test cluster (Note [Progress records]): a rank
// slow in its own code, a frozen rank, and the report signal sent with
// scancel, for the C++ runtime and for PyTorch (slurmddp.torch.Progress); and
// the straggler report (Note [Straggler windows]). The reports' text is
// asserted: the rank, its node, where it is.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "cluster.h"
#include "process.h"

namespace slurmddp::systest {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

std::string probe() {
  return env_or_empty("SLURMDDP_RUNTIME_PROBE");
}
std::string progress_rank() {
  return python() + " '" + source_dir() + "/tests/python/progress_rank.py'";
}

// srun in the background, stderr and stdout on one pipe (the reports are
// logged on stderr), with `env` added.
std::unique_ptr<slurmddp::support::Process> start_srun(
    const std::string& args, const std::map<std::string, std::string>& env) {
  std::string cmd = "cd '" + jobs_dir() + "' && exec srun " + args + " 2>&1";
  return std::make_unique<slurmddp::support::Process>(
      std::vector<std::string>{"/bin/bash", "-c", cmd}, env);
}

// Reads lines until one contains `text` (or the deadline); returns all read.
std::string read_until(slurmddp::support::Process& p, const std::string& text,
                       std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  std::string all;
  while (std::chrono::steady_clock::now() < deadline) {
    auto line = p.read_line(deadline);
    if (!line) break;
    all += *line + "\n";
    if (line->find(text) != std::string::npos) break;
  }
  return all;
}

// Reads lines until one matches `pattern` (or the deadline); returns all read.
// A report that came earlier than the one looked for (a slow start on a busy
// machine) is read past, not taken for it.
std::string read_until_match(slurmddp::support::Process& p, const std::string& pattern,
                             std::chrono::seconds within) {
  const std::regex re(pattern);
  const auto deadline = std::chrono::steady_clock::now() + within;
  std::string all;
  while (auto line = p.read_line(deadline)) {
    all += *line + "\n";
    if (std::regex_search(*line, re)) break;
  }
  return all;
}

// Reads everything until the end of the output (or the deadline).
std::string read_rest(slurmddp::support::Process& p, std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  std::string all;
  while (auto line = p.read_line(deadline)) all += *line + "\n";
  return all;
}

// The host= of "<prefix>R ... host=H" lines, by rank.
std::map<int, std::string> hosts(const std::string& out, const std::string& prefix) {
  std::map<int, std::string> h;
  const std::regex re(prefix + R"((\d+) .*host=(\S+))");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    h[std::stoi((*it)[1])] = (*it)[2];
  }
  return h;
}

const std::map<std::string, std::string> kQuick = {{"SLURMDDP_TIMEOUT", "30s"},
                                                   {"SLURMDDP_HANG_AFTER", "1s"}};

TEST(HangReport, CxxARankSlowInItsOwnCodeIsNamedWithItsNode) {
  REQUIRE_CLUSTER();
  // Rank 2 (on the second node) sleeps 4 s before step 5; the others wait
  // in the allreduce after step 4.
  auto srun = start_srun("-N 2 -n 4 --ntasks-per-node=2 " + probe() +
                             " --steps 10 --fault sleep --fault-rank 2 --fault-step 5 "
                             "--sleep-seconds 4",
                         kQuick);
  const std::string out = read_rest(*srun, 120s);
  auto code = srun->wait(10s);
  ASSERT_TRUE(code.has_value()) << "srun hung";
  ASSERT_EQ(*code, 0) << out;
  const auto host = hosts(out, "runtime rank=");
  ASSERT_EQ(host.size(), 4u) << out;
  EXPECT_THAT(out,
              ContainsRegex("hang report [0-9]+: step 5: 3/4 ranks waiting in allreduce #[0-9]+; "
                            "rank 2 on " +
                            host.at(2) + " at step 5 for [0-9]+ s in user code"))
      << out;
}

TEST(HangReport, CxxAFrozenRankIsNamedFromItsLastHeartbeat) {
  REQUIRE_CLUSTER();
  auto env = kQuick;
  env["SLURMDDP_TIMEOUT"] = "10s";
  // Rank 1 stops itself before step 20 (19 done); its last heartbeat is older.
  auto srun = start_srun("-K0 -J sddp-hang-frozen -N 2 -n 4 --ntasks-per-node=2 " + probe() +
                             " --steps 100000 --fault stop --fault-rank 1 --fault-step 20",
                         env);
  const std::string report =
      "hang report [0-9]+: step 20: 3/4 ranks waiting in allreduce #[0-9]+; rank 1 on n[0-9]+ "
      "did not answer; last seen at step [0-9]+ in (user code|allreduce #[0-9]+), [0-9]+ s ago";
  const std::string out = read_until_match(*srun, report, 60s);
  run("scancel -n sddp-hang-frozen");
  const std::string rest = read_rest(*srun, 60s);
  ASSERT_TRUE(srun->wait(30s).has_value()) << "srun hung";
  EXPECT_THAT(out, ContainsRegex(report)) << out << rest;
}

TEST(HangReport, CxxScancelWithTheReportSignalPrintsOneReportAndTrainingGoesOn) {
  REQUIRE_CLUSTER();
  auto env = kQuick;
  env["SLURMDDP_HANG_AFTER"] = "0";  // no report but the one asked for
  auto srun = start_srun(
      "-J sddp-report -N 2 -n 4 --ntasks-per-node=2 " + probe() + " --steps 1000 --step-ms 20",
      env);
  std::string out;
  for (int i = 0; i < 4; ++i) out += read_until(*srun, " training", 60s);
  ASSERT_EQ(captures(out, R"((runtime rank=\d training))").size(), 4u) << out;
  Result sent = run("scancel --signal=URG -n sddp-report");
  ASSERT_EQ(sent.rc, 0) << sent.out << sent.err;
  out += read_until(*srun, "hang report 1: ", 60s);
  out += read_rest(*srun, 120s);
  auto code = srun->wait(10s);
  ASSERT_TRUE(code.has_value()) << "srun hung";
  EXPECT_EQ(*code, 0) << out;
  EXPECT_THAT(out, ContainsRegex("hang report 1: step [0-9]+: [1-4]/4 ranks ")) << out;
  // Every rank got the signal; one round, one report, and no second one.
  EXPECT_EQ(captures(out, R"((hang report \d+): step)"), std::set<std::string>{"hang report 1"})
      << out;
  EXPECT_EQ(hosts(out, "runtime rank=").size(), 4u) << "training did not go on:\n" << out;
}

// The Python package is built with the extension (meson's python option).
#define REQUIRE_PACKAGE()                                                          \
  do {                                                                             \
    if (!python_package_available()) {                                             \
      if (system_tests_required()) FAIL() << "the Python package was not built";   \
      GTEST_SKIP() << "the Python package was not built (meson -Dpython=enabled)"; \
    }                                                                              \
  } while (0)

TEST(HangReport, PyTorchASlowDataLoaderIsNamedWithItsNodeLineAndStack) {
  REQUIRE_CLUSTER();
  REQUIRE_PACKAGE();
  Result r = run(with_package() + "SLURMDDP_HANG_AFTER=1s srun -N 2 -n 4 --ntasks-per-node=2 " +
                     progress_rank() + " loader 10 4 2>&1",
                 std::chrono::seconds(180));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const auto host = hosts(r.out, "rank ");
  ASSERT_EQ(host.size(), 4u) << r.out;
  EXPECT_THAT(r.out,
              ContainsRegex("hang report [0-9]+: step 5: 3/4 ranks waiting in all_reduce "
                            "\\(progress_rank\\.py:[0-9]+ \\(dist\\.all_reduce\\(t\\)\\)\\); "
                            "rank 2 on " +
                            host.at(2) +
                            " at step 5 for [0-9]+ s in progress_rank\\.py:[0-9]+ "
                            "\\(time\\.sleep\\(slow_seconds\\)\\)"))
      << r.out;
  EXPECT_THAT(r.out, ContainsRegex("hang report [0-9]+: rank 2 on " + host.at(2) + ":\n"));
  EXPECT_THAT(r.out, ContainsRegex("progress_rank\\.py\", line [0-9]+ in batches\n"));
}

TEST(HangReport, PyTorchScancelWithTheReportSignalPrintsOneReport) {
  REQUIRE_CLUSTER();
  REQUIRE_PACKAGE();
  std::map<std::string, std::string> env{{"SLURMDDP_HANG_AFTER", "0"}};
  if (!with_package().empty()) env["PYTHONPATH"] = env_or_empty("SLURMDDP_PYTHONPATH");
  auto srun = start_srun(
      "-J sddp-report-py -N 2 -n 4 --ntasks-per-node=2 " + progress_rank() + " compute 1000", env);
  std::string out;
  for (int i = 0; i < 4; ++i) out += read_until(*srun, " training", 120s);
  ASSERT_EQ(captures(out, R"((rank \d training))").size(), 4u) << out;
  Result sent = run("scancel --signal=URG -n sddp-report-py");
  ASSERT_EQ(sent.rc, 0) << sent.out << sent.err;
  out += read_until(*srun, "hang report 1: ", 60s);
  out += read_rest(*srun, 120s);
  auto code = srun->wait(10s);
  ASSERT_TRUE(code.has_value()) << "srun hung";
  EXPECT_EQ(*code, 0) << out;
  EXPECT_THAT(out, ContainsRegex("hang report 1: step [0-9]+: [1-4]/4 ranks (at|waiting in) "
                                 "\\S*progress_rank|all_reduce"))
      << out;
  EXPECT_EQ(captures(out, R"((hang report \d+): step)"), std::set<std::string>{"hang report 1"})
      << out;
  EXPECT_EQ(captures(out, R"((rank \d done steps=1000))").size(), 4u) << out;
}

TEST(StragglerReport, CxxASlowRankIsNamedWithItsNode) {
  REQUIRE_CLUSTER();
  // Rank 3 (second node) computes 25 ms a step where the others compute 5.
  Result r = run("SLURMDDP_STRAGGLER_EVERY=20 srun -N 2 -n 4 --ntasks-per-node=2 " + probe() +
                     " --steps 61 --step-ms 5 --fault slow --fault-rank 3 --slow-ms 20 2>&1",
                 std::chrono::seconds(120));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const auto host = hosts(r.out, "runtime rank=");
  ASSERT_EQ(host.size(), 4u) << r.out;
  EXPECT_THAT(r.out, ContainsRegex("straggler report, steps 1-20: rank 3 on " + host.at(3) +
                                   ": [0-9.]+x the median \\(compute [0-9.]+ vs [0-9.]+ ms a "
                                   "step\\) for 20 steps; the others wait for it in allreduce"))
      << r.out;
  EXPECT_EQ(captures(r.out, R"(straggler report, steps \d+-\d+: (rank \d+ on))"),
            std::set<std::string>{"rank 3 on"})
      << r.out;
}

TEST(StragglerReport, PyTorchARankSlowToLoadItsDataIsNamedWithItsNode) {
  REQUIRE_CLUSTER();
  REQUIRE_PACKAGE();
  // Rank 1's batches take 30 ms each (progress_rank.py straggler).
  Result r = run(with_package() + "SLURMDDP_STRAGGLER_EVERY=20 srun -N 2 -n 4 " + progress_rank() +
                     " straggler 41 2>&1",
                 std::chrono::seconds(180));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const auto host = hosts(r.out, "rank ");
  ASSERT_EQ(host.size(), 4u) << r.out;
  EXPECT_THAT(r.out, ContainsRegex("straggler report, steps 1-20: rank 1 on " + host.at(1) +
                                   ": [0-9.]+x the median \\(data 3[0-9.]+ vs [0-9.]+ ms a "
                                   "step\\) for 20 steps; the others wait for it in all_reduce"))
      << r.out;
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
