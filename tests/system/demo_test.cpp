// The README's main job, run as a newcomer runs it: a fresh `git clone` of this
// checkout in a scratch directory, then its scripts/demo, unchanged. The demo
// starts its own cluster (state in the clone), so no other test cluster may be
// running; the build directory of this test run is reused (SLURMDDP_BUILDDIR)
// to keep CI time down: the script still configures nothing, builds its two
// targets (a no-op) and runs them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "cluster.h"

namespace slurmddp::systest {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string build_dir() {
  return env_or_empty("SLURMDDP_BUILD_DIR");
}

// Process ids whose command line mentions `needle`.
std::vector<pid_t> processes_mentioning(const std::string& needle) {
  std::vector<pid_t> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(entry.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmd.find(needle) != std::string::npos) found.push_back(std::stoi(name));
  }
  return found;
}

bool alive(pid_t pid) {
  if (kill(pid, 0) != 0) return errno != ESRCH;
  // a zombie is gone for our purposes; anything else still runs
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  return close == std::string::npos || stat.size() < close + 3 || stat[close + 2] != 'Z';
}

// "munged=12 slurmctld=34 slurmd-n1=56 ..." from the harness's "pids:" line.
std::map<std::string, pid_t> daemon_pids(const std::string& text) {
  std::map<std::string, pid_t> pids;
  std::regex line("slurm-cluster: pids: ([^\n]*)");
  std::smatch m;
  if (!std::regex_search(text, m, line)) return pids;
  std::istringstream words(m[1].str());
  std::string w;
  while (words >> w) {
    auto eq = w.find('=');
    if (eq != std::string::npos) pids[w.substr(0, eq)] = std::stoi(w.substr(eq + 1));
  }
  return pids;
}

TEST(Demo, FreshCloneRunsTheReadmeMainJob) {
  ASSERT_FALSE(build_dir().empty());
  // The demo's cluster takes this test's instance (SLURMDDP_CLUSTER_INSTANCE).
  const std::string ns = network_prefix() + "-n1";
  Result busy = run("ip netns list | grep -w " + ns, std::chrono::seconds(10), "/");
  ASSERT_NE(busy.rc, 0) << "a test cluster is already running (network namespace " << ns
                        << "); the demo starts its own: stop the other one first "
                           "(slurm-cluster down)";

  // A scratch directory outside the checkout, like a newcomer's clone.
  char tmpl[] = "/tmp/slurmddp-demo-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr) << std::strerror(errno);
  const std::string scratch = tmpl;
  const std::string clone = scratch + "/slurm-ddp";
  Result c = run("git clone -q '" + source_dir() + "' '" + clone + "' && git -C '" + clone +
                     "' log -1 --format=%h",
                 std::chrono::seconds(120), "/");
  ASSERT_EQ(c.rc, 0) << c.out << c.err;
  std::printf("demo: fresh clone of %s at commit %s", source_dir().c_str(), c.out.c_str());

  // Exactly what the README says, from the clone, with a clean environment
  // apart from the reused build directory.
  Result d = run("env -u SLURMDDP_CLUSTER_DIR -u SLURM_CONF SLURMDDP_BUILDDIR='" + build_dir() +
                     "' scripts/demo",
                 std::chrono::seconds(600), clone);
  const std::string all = d.out + d.err;
  std::printf("%s\n", d.out.c_str());
  EXPECT_EQ(d.rc, 0) << d.err;

  // 8 ranks, each on the expected layout, each ending with the same parameters
  std::regex rank_re("rank ([0-9]+)/8 on (n[12]):");
  std::set<int> ranks;
  for (std::sregex_iterator it(d.out.begin(), d.out.end(), rank_re), end; it != end; ++it) {
    ranks.insert(std::stoi((*it)[1]));
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7})) << d.out;
  std::regex sum_re("rank ([0-9]+): [0-9]+ steps, parameter checksum ([0-9a-f]{16})");
  std::set<int> summed;
  std::set<std::string> sums;
  for (std::sregex_iterator it(d.out.begin(), d.out.end(), sum_re), end; it != end; ++it) {
    summed.insert(std::stoi((*it)[1]));
    sums.insert((*it)[2]);
  }
  EXPECT_EQ(summed.size(), 8u) << d.out;
  EXPECT_EQ(sums.size(), 1u) << "ranks ended with different parameters:\n" << d.out;

  // the last epoch's test accuracy
  std::regex acc_re("epoch ([0-9]+): loss [0-9.]+ test accuracy ([0-9.]+)%");
  double accuracy = -1;
  int last_epoch = -1;
  for (std::sregex_iterator it(d.out.begin(), d.out.end(), acc_re), end; it != end; ++it) {
    last_epoch = std::stoi((*it)[1]);
    accuracy = std::stod((*it)[2]);
  }
  EXPECT_EQ(last_epoch, 3) << d.out;
  EXPECT_GE(accuracy, 85.0) << d.out;
  std::printf("demo: final test accuracy %.2f%%, %zu distinct checksum(s)\n", accuracy,
              sums.size());

  // Nothing of the demo's cluster is left: each daemon it reported, by pid, and
  // any process that still names the clone's cluster directory.
  auto pids = daemon_pids(all);
  EXPECT_GE(pids.size(), 4u) << "the harness did not report its daemons:\n" << all;
  EXPECT_TRUE(pids.count("slurmctld") && pids.count("slurmd-n1") && pids.count("slurmd-n2") &&
              pids.count("munged"))
      << all;
  for (const auto& [name, pid] : pids) {
    EXPECT_FALSE(alive(pid)) << name << " (pid " << pid << ") still runs after the demo";
  }
  EXPECT_THAT(processes_mentioning(clone + "/.cluster"), ::testing::IsEmpty());
  Result left = run("ip netns list | grep '^" + network_prefix() + "-' || true",
                    std::chrono::seconds(10), "/");
  EXPECT_EQ(left.out, "") << "network namespaces left behind";
  EXPECT_THAT(all, HasSubstr("slurm-cluster: down"));

  if (!HasFailure()) fs::remove_all(scratch);
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  // The demo brings its own cluster up and down.
  return slurmddp::systest::system_test_main(argc, argv, /*with_cluster=*/false);
}
