// Differential test: the runtime's hostlist parser (used when the plugin is not
// installed) must expand every expression exactly as Slurm does
// (`scontrol show hostnames`), over many generated expressions with zero
// padding, several ranges, several bracket groups and commas.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "cluster.h"
#include "launch/error.h"
#include "launch/hostlist.h"

namespace slurmddp::systest {
namespace {

std::string number(std::mt19937& rng, uint64_t v, bool pad) {
  std::string s = std::to_string(v);
  if (pad) s.insert(0, std::uniform_int_distribution<int>(1, 3)(rng), '0');
  return s;
}

std::string bracket(std::mt19937& rng) {
  std::uniform_int_distribution<int> items(1, 3), coin(0, 1), start(0, 120), len(0, 12);
  std::string s = "[";
  int n = items(rng);
  for (int i = 0; i < n; ++i) {
    if (i > 0) s += ",";
    uint64_t lo = static_cast<uint64_t>(start(rng));
    bool pad = coin(rng) == 1;
    s += number(rng, lo, pad);
    if (coin(rng) == 1) s += "-" + std::to_string(lo + static_cast<uint64_t>(len(rng)));
  }
  return s + "]";
}

std::string prefix(std::mt19937& rng) {
  static const char* const kPrefixes[] = {"n", "node", "gpu-a", "r1n", "x", "cn-", "a.b"};
  return kPrefixes[std::uniform_int_distribution<int>(0, 6)(rng)];
}

std::string expression(std::mt19937& rng) {
  std::uniform_int_distribution<int> items(1, 3), groups(0, 3);
  std::string e;
  int n = items(rng);
  for (int i = 0; i < n; ++i) {
    if (i > 0) e += ",";
    int g = groups(rng);
    if (g == 0) {
      e += prefix(rng) + std::to_string(std::uniform_int_distribution<int>(0, 99)(rng));
      continue;
    }
    for (int k = 0; k < g; ++k) e += prefix(rng) + bracket(rng);
  }
  return e;
}

std::vector<std::string> slurm_expand(const std::string& conf, const std::string& expr, int* rc) {
  Result r = run("SLURM_CONF='" + conf + "' scontrol show hostnames '" + expr + "'",
                 std::chrono::seconds(30), "/");
  // scontrol exits 0 even when it refuses an expression; it says so instead.
  bool refused = (r.out + r.err).find("Invalid") != std::string::npos;
  *rc = refused ? 1 : r.rc;
  std::vector<std::string> hosts;
  std::istringstream in(r.out);
  std::string h;
  while (in >> h) hosts.push_back(h);
  return hosts;
}

TEST(HostlistDifferential, AgreesWithScontrolShowHostnames) {
  char conf[] = "/tmp/slurmddp-hostlist-XXXXXX";
  int fd = mkstemp(conf);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(conf) << "ClusterName=hostlisttest\nSlurmctldHost=localhost\n";
  std::mt19937 rng(20261202);
  int compared = 0, hosts = 0;
  for (int i = 0; i < 400; ++i) {
    std::string expr = expression(rng);
    int rc = 0;
    auto expected = slurm_expand(conf, expr, &rc);
    ASSERT_EQ(rc, 0) << "scontrol rejected a generated expression: " << expr;
    std::vector<std::string> ours;
    try {
      ours = launch::expand_hostlist("L", expr);
    } catch (const launch::LaunchError& e) {
      ADD_FAILURE() << expr << ": " << e.what();
      continue;
    }
    ASSERT_EQ(ours, expected) << expr;
    ASSERT_EQ(launch::first_host("L", expr), expected.front()) << expr;
    ++compared;
    hosts += static_cast<int>(ours.size());
  }
  // Forms every Slurm refuses are refused too.
  for (const char* bad : {"n[3-1]", "n[]"}) {
    int rc = 0;
    slurm_expand(conf, bad, &rc);
    EXPECT_NE(rc, 0) << bad;
    EXPECT_THROW(launch::expand_hostlist("L", bad), launch::LaunchError) << bad;
  }
  // A suffix after the last bracket: Slurm reads it since 23.02.5 (22.05
  // refuses it). Where this Slurm reads it, the expansions agree; the parser
  // always reads it, so that it follows every current Slurm.
  for (const char* suffixed : {"x[1-2]-ib", "a[1-2]b3", "n[08-10]-int,m[1-2]x[3-4]-s"}) {
    int rc = 0;
    const auto expected = slurm_expand(conf, suffixed, &rc);
    const auto ours = launch::expand_hostlist("L", suffixed);
    if (rc == 0) {
      EXPECT_EQ(ours, expected) << suffixed;
    } else {
      std::printf("this Slurm refuses %s (suffixes came in 23.02.5); ours reads it\n", suffixed);
    }
  }
  std::remove(conf);
  std::printf("compared %d expressions, %d hosts\n", compared, hosts);
  EXPECT_EQ(compared, 400);
}

}  // namespace
}  // namespace slurmddp::systest

// Needs scontrol only (no root, no cluster): skips with the reason where it is
// missing, fails instead where system tests are required.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using slurmddp::systest::run;
  if (run("command -v scontrol", std::chrono::seconds(10), "/").rc != 0) {
    return slurmddp::systest::cannot_run(
        argv[0], "scontrol is not installed (slurm-client); run scripts/install-deps");
  }
  return RUN_ALL_TESTS();
}
