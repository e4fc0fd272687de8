// The Gloo communicator with ranks as separate processes on loopback, the TCP
// store hosted by this test process, and failure injection: SIGKILL or SIGSTOP
// one rank in the middle of an allreduce loop.
//
// Every wait here has a deadline; at the end every process this test started
// is killed (by PID) and reaped.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "rank_group.h"
#include "rank_launcher.h"
#include "slurmddp/tcp_store.h"
#include "subprocess.h"
#include "time_scale.h"

namespace {

using namespace std::chrono_literals;

using slurmddp::support::monotonic_ms;

std::string rank_binary() {
  const char* p = std::getenv("COMM_RANK_BIN");
  return p ? p : "";
}

struct Result {
  std::string kind;  // "ok", "wrong", "PeerError", "TimeoutError", ... ; "" = none
  long long at_ms = 0;
  std::string text;
};

Result parse_result(const std::string& line) {
  Result r;
  if (line.empty()) return r;
  std::istringstream is(line.substr(7));  // after "RESULT "
  is >> r.kind;
  if (r.kind != "ok" && r.kind != "wrong") is >> r.at_ms;
  std::getline(is, r.text);
  if (!r.text.empty() && r.text[0] == ' ') r.text.erase(0, 1);
  return r;
}

// A group of rank processes (comm_rank) sharing a TCP store hosted here.
class Group {
 public:
  // nodes[r]: rank r's SLURMD_NODENAME, the node it counts as (Note
  // [Shared-memory tier]); empty: all on this machine's node.
  Group(const std::string& scenario, int size, std::chrono::milliseconds timeout, size_t count,
        const std::vector<int>& ranks_to_start = {}, const std::string& nodes = "",
        const slurmddp::support::Env& extra_env = {})
      : store_(slurmddp::support::host_store()),
        prefix_(next_prefix()),
        ranks_(
            size,
            [&](int r, int world) {
              slurmddp::support::Env env = extra_env;
              if (!nodes.empty()) {
                env["SLURMD_NODENAME"] = std::string("node-") + nodes[static_cast<size_t>(r)];
              }
              return slurmddp::support::RankLaunch{
                  slurmddp::support::with_rank(
                      {rank_binary(), scenario, prefix_, std::to_string(timeout.count()),
                       std::to_string(count)},
                      r, world, store_->port()),
                  env};
            },
            slurmddp::support::Output::kCaptured,
            ranks_to_start.empty() ? std::nullopt
                                   : std::optional<std::vector<int>>(ranks_to_start)) {}

  slurmddp::support::Process& rank(int r) { return ranks_.rank(r); }
  bool started(int r) const { return ranks_.started(r); }
  int size() const { return ranks_.size(); }
  slurmddp::Store& store() { return *store_; }
  // The communicator's keys: "<prefix>/<generation>/..." (one group: 1).
  std::string key(const std::string& name) const { return prefix_ + "/1/" + name; }

  // Rank r's first line starting with `prefix` ("" when none came in time).
  std::string line(int r, const std::string& prefix, std::chrono::milliseconds timeout) {
    return rank(r).wait_line(prefix, timeout).value_or("");
  }
  Result result(int r, std::chrono::milliseconds timeout) {
    return parse_result(line(r, "RESULT ", timeout));
  }

 private:
  static std::string next_prefix() {
    static std::atomic<int> groups{0};
    return "mp" + std::to_string(groups++);
  }

  std::shared_ptr<slurmddp::TcpStore> store_;
  std::string prefix_;
  slurmddp::support::RankGroup ranks_;  // destroyed first: kills and reaps
};

TEST(CommMultiproc, HelperIsThere) {
  ASSERT_FALSE(rank_binary().empty()) << "COMM_RANK_BIN is not set";
  ASSERT_EQ(access(rank_binary().c_str(), X_OK), 0) << rank_binary();
}

class Processes : public ::testing::TestWithParam<int> {};

TEST_P(Processes, EveryCollectiveIsCorrect) {
  const int n = GetParam();
  Group g("collectives", n, 60s, 0);
  for (int r = 0; r < n; ++r) {
    const Result res = g.result(r, 240s);
    EXPECT_EQ(res.kind, "ok") << "rank " << r << ": " << res.text;
  }
}

INSTANTIATE_TEST_SUITE_P(Gloo, Processes, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "ranks" + std::to_string(i.param);
                         });

struct FailureCase {
  int size;
  size_t count;  // elements per allreduce: 1001 blocking tier, 100003 middle, 1048579 ring
  int victim;
};

std::string case_name(const FailureCase& c) {
  return "ranks" + std::to_string(c.size) + "_count" + std::to_string(c.count) + "_victim" +
         std::to_string(c.victim);
}

constexpr auto kTimeout = 3000ms;

// Starts the loop on every rank and waits until each completed one operation.
void start_loop(Group& g) {
  for (int r = 0; r < g.size(); ++r) {
    ASSERT_EQ(g.line(r, "READY", 60s), "READY") << "rank " << r << " never got going";
  }
}

class KillOneRank : public ::testing::TestWithParam<FailureCase> {};

TEST_P(KillOneRank, EveryOtherRankFailsWithinTheTimeoutNamingIt) {
  const FailureCase fc = GetParam();
  Group g("loop", fc.size, kTimeout, fc.count);
  start_loop(g);
  const long long killed_at = monotonic_ms();
  g.rank(fc.victim).kill_now();
  const std::string victim = std::to_string(fc.victim);
  for (int r = 0; r < fc.size; ++r) {
    if (r == fc.victim) continue;
    const Result res = g.result(r, kTimeout * 3);
    ASSERT_TRUE(res.kind == "PeerError" || res.kind == "TimeoutError")
        << "rank " << r << ": " << res.kind << " " << res.text;
    EXPECT_NE(
        res.text.find("gloo: failed to allreduce " + std::to_string(fc.count) + " float32 (sum)"),
        std::string::npos)
        << res.text;
    EXPECT_TRUE(res.text.find("lost peer rank " + victim) != std::string::npos ||
                res.text.find("missing=[" + victim + "]") != std::string::npos)
        << "rank " << r << ": " << res.text;
    EXPECT_LE(res.at_ms - killed_at, slurmddp::support::scaled(kTimeout).count())
        << "rank " << r << " failed " << res.at_ms - killed_at << " ms after the kill";
  }
}

INSTANTIATE_TEST_SUITE_P(Gloo, KillOneRank,
                         ::testing::Values(FailureCase{2, 1048579, 1}, FailureCase{3, 100003, 1},
                                           FailureCase{4, 1001, 2}, FailureCase{4, 1048579, 0},
                                           FailureCase{8, 100003, 5}, FailureCase{8, 1001, 7}),
                         [](const ::testing::TestParamInfo<FailureCase>& i) {
                           return case_name(i.param);
                         });

class StopOneRank : public ::testing::TestWithParam<FailureCase> {};

TEST_P(StopOneRank, EveryOtherRankTimesOutNamingIt) {
  const FailureCase fc = GetParam();
  Group g("loop", fc.size, kTimeout, fc.count);
  start_loop(g);
  const long long stopped_at = monotonic_ms();
  g.rank(fc.victim).signal(SIGSTOP);
  const std::string victim = std::to_string(fc.victim);
  for (int r = 0; r < fc.size; ++r) {
    if (r == fc.victim) continue;
    const Result res = g.result(r, kTimeout * 4);
    EXPECT_EQ(res.kind, "TimeoutError") << "rank " << r << ": " << res.text;
    EXPECT_NE(res.text.find("no response from rank " + victim + " within the timeout"),
              std::string::npos)
        << "rank " << r << ": " << res.text;
    EXPECT_NE(res.text.find("missing=[" + victim + "]"), std::string::npos) << res.text;
    // Gloo's timeout, then at most the diagnosis window (a quarter of it).
    EXPECT_LE(res.at_ms - stopped_at, slurmddp::support::scaled(kTimeout).count() * 2)
        << "rank " << r << " failed " << res.at_ms - stopped_at << " ms after the stop";
  }
  g.rank(fc.victim).kill_now();
}

INSTANTIATE_TEST_SUITE_P(Gloo, StopOneRank,
                         ::testing::Values(FailureCase{2, 1001, 1}, FailureCase{3, 100003, 2},
                                           FailureCase{4, 1048579, 1}),
                         [](const ::testing::TestParamInfo<FailureCase>& i) {
                           return case_name(i.param);
                         });

// Note [Shared-memory tier]: node layouts given as one letter per rank (the
// node of rank r), on this one machine: shared memory within a "node", the
// node leaders' mesh across them.
class Layouts : public ::testing::TestWithParam<std::string> {};

TEST_P(Layouts, EveryCollectiveIsCorrect) {
  const std::string nodes = GetParam();
  const int n = static_cast<int>(nodes.size());
  Group g("collectives", n, 60s, 0, {}, nodes);
  for (int r = 0; r < n; ++r) {
    const Result res = g.result(r, 300s);
    EXPECT_EQ(res.kind, "ok") << "rank " << r << " (node " << nodes[static_cast<size_t>(r)]
                              << "): " << res.text;
  }
}

INSTANTIATE_TEST_SUITE_P(Shm, Layouts,
                         ::testing::Values("aab",       // a node with one rank
                                           "abab",      // cyclic: leaders 0 and 1
                                           "aaaabbbc",  // uneven 4, 3, 1
                                           "ab"),       // one rank per node: no tier
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           return "nodes_" + i.param;
                         });

std::set<std::string> dev_shm() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

struct TierFailure {
  std::string nodes;
  int victim;
};

class KillInTiers : public ::testing::TestWithParam<TierFailure> {};

// A rank killed inside the tiers: every other rank fails within the timeout
// naming it, and nothing is left in /dev/shm (Note [Shared-memory segment]).
TEST_P(KillInTiers, EveryOtherRankFailsNamingItAndNothingIsLeft) {
  const TierFailure tf = GetParam();
  const auto before = dev_shm();
  {
    const int n = static_cast<int>(tf.nodes.size());
    Group g("loop", n, kTimeout, 100003, {}, tf.nodes);
    start_loop(g);
    const long long killed_at = monotonic_ms();
    g.rank(tf.victim).kill_now();
    const std::string victim = std::to_string(tf.victim);
    for (int r = 0; r < n; ++r) {
      if (r == tf.victim) continue;
      const Result res = g.result(r, kTimeout * 3);
      ASSERT_TRUE(res.kind == "PeerError" || res.kind == "TimeoutError")
          << "rank " << r << ": " << res.kind << " " << res.text;
      EXPECT_TRUE(res.text.find("lost peer rank " + victim) != std::string::npos ||
                  res.text.find("missing=[" + victim + "]") != std::string::npos)
          << "rank " << r << ": " << res.text;
      EXPECT_LE(res.at_ms - killed_at, slurmddp::support::scaled(kTimeout).count())
          << "rank " << r << " failed " << res.at_ms - killed_at << " ms after the kill";
    }
  }
  EXPECT_EQ(dev_shm(), before);
}

INSTANTIATE_TEST_SUITE_P(Shm, KillInTiers,
                         ::testing::Values(TierFailure{"aaaa", 2},   // one node
                                           TierFailure{"aabb", 3},   // a node's second rank
                                           TierFailure{"aabb", 2},   // a node's leader
                                           TierFailure{"aabb", 0}),  // the first node.s leader
                         [](const ::testing::TestParamInfo<TierFailure>& i) {
                           return "nodes_" + i.param.nodes + "_victim" +
                                  std::to_string(i.param.victim);
                         });

// Scale (docs/benchmarks.md, init() at scale): 128 ranks, in CI's time. The
// layout "16x8" is 16 nodes of 8 ranks (tiered: only the node leaders
// connect); "64x1" one rank a node (the flat mesh).
std::string layout(int nodes, int per_node) {
  std::string out;
  for (int k = 0; k < nodes * per_node; ++k) {
    const int node = k / per_node;
    out +=
        static_cast<char>(node < 26 ? 'a' + node : (node < 52 ? 'A' + node - 26 : '0' + node - 52));
  }
  return out;
}

class AtScale : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(AtScale, EveryRankStartsAndEveryCollectiveIsRight) {
  const auto [nodes, per_node] = GetParam();
  const int n = nodes * per_node;
  Group g("scale", n, 60s, 0, {}, layout(nodes, per_node));
  for (int r = 0; r < n; ++r) {
    const Result res = g.result(r, 120s);
    EXPECT_EQ(res.kind, "ok") << "rank " << r << ": " << res.text;
  }
}

INSTANTIATE_TEST_SUITE_P(Gloo, AtScale, ::testing::Values(std::pair{16, 8}, std::pair{64, 1}),
                         [](const ::testing::TestParamInfo<std::pair<int, int>>& i) {
                           return std::to_string(i.param.first) + "x" +
                                  std::to_string(i.param.second);
                         });

// Note [Flat mesh only when flat]: one rank a node over flat_mesh_max ranks
// (lowered to 16 here) is a ring of all ranks, not a mesh: every collective is
// still right, and the only mesh records in the store are the ring's.
TEST(FlatGroups, OverTheMeshLimitTheyAreARingOfAllRanks) {
  const int n = 64;
  Group g("scale", n, 60s, 0, {}, layout(n, 1), {{"COMM_RANK_FLAT_MESH_MAX", "16"}});
  for (int r = 0; r < n; ++r) {
    const Result res = g.result(r, 120s);
    EXPECT_EQ(res.kind, "ok") << "rank " << r << ": " << res.text;
  }
  for (int r : {0, 31, 63}) {
    EXPECT_TRUE(g.store().check({g.key("shm/leaders/mesh/" + std::to_string(r))})) << r;
    EXPECT_FALSE(g.store().check({g.key("sync/" + std::to_string(r))})) << r;
  }
}

// One of 128 ranks never starts: every other fails within the timeout of its
// own start, naming it.
TEST(CommMultiproc, AtScaleARankThatNeverStartsIsNamedByEveryOther) {
  const int n = 128, missing = 77;
  std::vector<int> start;
  for (int r = 0; r < n; ++r) {
    if (r != missing) start.push_back(r);
  }
  Group g("scale", n, 5000ms, 0, start, layout(16, 8));
  for (int r : start) {
    const std::string started = g.line(r, "START ", 120s);
    ASSERT_FALSE(started.empty()) << "rank " << r << " never started";
    const Result res = g.result(r, 60s);
    EXPECT_EQ(res.kind, "TimeoutError") << "rank " << r << ": " << res.text;
    EXPECT_NE(res.text.find("127/128 ranks joined; missing: [77]"), std::string::npos)
        << "rank " << r << ": " << res.text;
    // The join's timeout, and a margin for 127 processes on two cores.
    EXPECT_LE(res.at_ms - std::stoll(started.substr(6)), slurmddp::support::scaled(5000.0 + 10000))
        << "rank " << r << " failed late";
  }
}

TEST(CommMultiproc, RankThatNeverStartsIsNamed) {
  Group g("join", 4, 2000ms, 0, {0, 1, 3});
  for (int r : {0, 1, 3}) {
    const Result res = g.result(r, 20s);
    EXPECT_EQ(res.kind, "TimeoutError") << "rank " << r << ": " << res.text;
    EXPECT_NE(res.text.find("3/4 ranks joined; missing: [2]"), std::string::npos) << res.text;
  }
}

}  // namespace
