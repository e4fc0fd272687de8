// The store across processes: ranks as separate processes (store_helper) on
// loopback, with missing ranks, wrong tokens, unreachable and killed servers,
// and hostile clients. Every wait has a deadline; the meson test around each
// case adds a hard timeout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <regex>
#include <thread>

#include "process.h"
#include "rank_args.h"
#include "rank_group.h"
#include "raw_client.h"
#include "time_scale.h"

namespace slurmddp {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using support::Process;
using ::testing::HasSubstr;
using ::testing::Not;
namespace wire = store::wire;

std::string helper() {
  const char* h = std::getenv("STORE_HELPER");
  return h != nullptr ? h : "";
}

using Env = std::map<std::string, std::string>;

std::unique_ptr<Process> spawn(std::vector<std::string> args, const Env& env = {}) {
  args.insert(args.begin(), helper());
  Env e = env;
  if (e.count("SLURMDDP_TOKEN") == 0) e["SLURMDDP_TOKEN"] = "";
  return std::make_unique<Process>(args, e);
}

std::unique_ptr<Process> rank(int r, int world, uint16_t port, long timeout_ms,
                              const Env& env = {}) {
  return spawn(
      support::with_rank({"rank", "--timeout-ms", std::to_string(timeout_ms)}, r, world, port),
      env);
}

// Ranks `which` (all when not given) of a group of `world` as store_helper
// rank clients of the store at `port`, each with `args` after the rank's
// command line.
support::RankGroup clients(int world, uint16_t port, long timeout_ms, const Env& env,
                           const std::optional<std::vector<int>>& which = std::nullopt,
                           const std::vector<std::string>& args = {}) {
  return support::RankGroup(
      world,
      [&](int r, int w) {
        std::vector<std::string> argv{helper(), "rank", "--timeout-ms", std::to_string(timeout_ms)};
        argv.insert(argv.end(), args.begin(), args.end());
        Env e = env;
        if (e.count("SLURMDDP_TOKEN") == 0) e["SLURMDDP_TOKEN"] = "";
        return support::RankLaunch{support::with_rank(argv, r, w, port), e};
      },
      support::Output::kCaptured, which);
}

// Ranks 1 .. world-1 (rank 0 hosts).
std::vector<int> but_rank_0(int world) {
  std::vector<int> r;
  for (int i = 1; i < world; ++i) r.push_back(i);
  return r;
}

uint16_t read_port(Process& p) {
  auto line = p.read_line(seconds(10));
  if (!line || line->rfind("port ", 0) != 0) {
    ADD_FAILURE() << "no port line; stderr: " << p.stderr_text();
    return 0;
  }
  return static_cast<uint16_t>(std::stoi(line->substr(5)));
}

// The counters of a `store_helper server`, by name.
std::map<std::string, uint64_t> server_stats(Process& server) {
  server.write_line("stats");
  auto line = server.read_line(seconds(10));
  std::map<std::string, uint64_t> out;
  if (!line) return out;
  std::regex kv("(\\w+)=(\\d+)");
  for (std::sregex_iterator it(line->begin(), line->end(), kv), end; it != end; ++it) {
    out[(*it)[1]] = std::stoull((*it)[2]);
  }
  return out;
}

template <typename Pred>
bool eventually(Pred pred, milliseconds within = seconds(15)) {
  return support::eventually(pred, within);
}

// ---- rendezvous ----

class Rendezvous : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(Rendezvous, EveryRankJoinsExchangesAndLeaves) {
  const auto [world, with_token] = GetParam();
  Env env;
  if (with_token) env["SLURMDDP_TOKEN"] = "rendezvous-token-0123456789";
  auto host = spawn(
      {"rank", "--rank", "0", "--world", std::to_string(world), "--timeout-ms", "20000", "--serve"},
      env);
  const uint16_t port = read_port(*host);
  ASSERT_NE(port, 0);
  auto others = clients(world, port, 20000, env, but_rank_0(world));
  for (int r = 0; r < world; ++r) {
    Process& p = r == 0 ? *host : others.rank(r);
    auto code = p.wait(seconds(30));
    ASSERT_EQ(code, std::optional<int>(0)) << "rank " << r << ": " << p.stderr_text();
    EXPECT_EQ(p.read_line(seconds(1)),
              "ok rank=" + std::to_string(r) + " world=" + std::to_string(world));
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Rendezvous,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8), ::testing::Bool()),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_token" : "_open");
                         });

TEST(StoreFailures, ARankThatNeverStartsIsNamed) {
  auto host = spawn({"rank", "--rank", "0", "--world", "4", "--timeout-ms", "2000", "--serve"});
  const uint16_t port = read_port(*host);
  ASSERT_NE(port, 0);
  auto r1 = rank(1, 4, port, 2000);
  auto r3 = rank(3, 4, port, 2000);
  // Rank 2 is never started.
  for (Process* p : {host.get(), r1.get(), r3.get()}) {
    auto code = p->wait(seconds(10));
    ASSERT_EQ(code, std::optional<int>(2)) << p->stderr_text();
    EXPECT_EQ(p->stderr_text(),
              "error timeout: store barrier 'init': 3/4 ranks joined; missing: [2]\n");
    EXPECT_LT(p->ran(), support::scaled(milliseconds(2000 + 3000)));
  }
}

TEST(StoreFailures, AWrongTokenIsRefusedOnBothSidesWithoutTheToken) {
  auto server = spawn({"server"}, {{"SLURMDDP_TOKEN", "server-secret-XYZZY"}});
  const uint16_t port = read_port(*server);
  ASSERT_NE(port, 0);
  auto wrong = rank(0, 1, port, 5000, {{"SLURMDDP_TOKEN", "client-secret-PLUGH"}});
  ASSERT_EQ(wrong->wait(seconds(10)), std::optional<int>(4));
  EXPECT_EQ(
      wrong->stderr_text(),
      "error protocol: store: failed to authenticate to server 127.0.0.1:" + std::to_string(port) +
          ": authentication refused: the server's proof does not match this client's token "
          "(SLURMDDP_TOKEN differs between this rank and the server, or the port belongs to "
          "another job's server)\n");
  auto none = rank(0, 1, port, 5000);
  ASSERT_EQ(none->wait(seconds(10)), std::optional<int>(4));
  EXPECT_THAT(none->stderr_text(),
              HasSubstr("authentication refused: the server requires a token and this client "
                        "has none"));
  ASSERT_TRUE(eventually([&] {
    auto s = server_stats(*server);
    return s["wrong_token"] == 1 && s["no_token"] == 1;
  }));
  server->close_stdin();
  ASSERT_EQ(server->wait(seconds(10)), std::optional<int>(0));
  const std::string log = server->stderr_text();
  std::istringstream lines(log);
  std::string line;
  int wrong_lines = 0;
  int none_lines = 0;
  while (std::getline(lines, line)) {
    if (line.find("reason=wrong-token") != std::string::npos) ++wrong_lines;
    if (line.find("reason=no-token") != std::string::npos) ++none_lines;
  }
  EXPECT_EQ(wrong_lines, 1) << log;
  EXPECT_EQ(none_lines, 1) << log;
  for (const char* secret : {"XYZZY", "PLUGH"}) {
    EXPECT_THAT(log, Not(HasSubstr(secret)));
    EXPECT_THAT(wrong->stderr_text() + none->stderr_text(), Not(HasSubstr(secret)));
  }
}

TEST(StoreFailures, WithoutATokenBothSidesSaySoAtDebugLevel) {
  Env debug{{"SLURMDDP_LOG_LEVEL", "debug"}};
  auto server = spawn({"server"}, debug);
  const uint16_t port = read_port(*server);
  ASSERT_NE(port, 0);
  auto r = rank(0, 1, port, 5000, debug);
  ASSERT_EQ(r->wait(seconds(10)), std::optional<int>(0)) << r->stderr_text();
  EXPECT_THAT(r->stderr_text(), HasSubstr("store: server 127.0.0.1:" + std::to_string(port) +
                                          " runs without a token: the connection is not "
                                          "authenticated"));
  // At the default level (warn) a client and its hosted server say nothing.
  auto quiet = spawn({"rank", "--rank", "0", "--world", "1", "--timeout-ms", "5000", "--serve"});
  ASSERT_EQ(quiet->wait(seconds(10)), std::optional<int>(0)) << quiet->stderr_text();
  EXPECT_EQ(quiet->stderr_text(), "");
  server->close_stdin();
  ASSERT_EQ(server->wait(seconds(10)), std::optional<int>(0));
  EXPECT_THAT(server->stderr_text(),
              HasSubstr("store: server on port " + std::to_string(port) +
                        " runs without a token: any client that can reach the port may use "
                        "the store"));
}

// Note [Open store]: init()'s rendezvous without a token is not silent: rank 0
// warns at the default level (the others leave it to rank 0), and
// SLURMDDP_REQUIRE_TOKEN=1 refuses it on every rank.
TEST(StoreFailures, InitsOpenStoreIsWarnedAboutOnRankZeroAndRefusedWhenATokenIsRequired) {
  auto host = spawn(
      {"rank", "--rank", "0", "--world", "2", "--timeout-ms", "10000", "--serve", "--as-init"});
  const uint16_t port = read_port(*host);
  ASSERT_NE(port, 0);
  auto other =
      spawn(support::with_rank({"rank", "--timeout-ms", "10000", "--as-init"}, 1, 2, port));
  ASSERT_EQ(host->wait(seconds(20)), std::optional<int>(0)) << host->stderr_text();
  ASSERT_EQ(other->wait(seconds(20)), std::optional<int>(0)) << other->stderr_text();
  const std::string warning = host->stderr_text();
  EXPECT_THAT(warning, HasSubstr("slurm-ddp[warn "));
  EXPECT_THAT(warning, HasSubstr("no SLURMDDP_TOKEN: the rendezvous store at 127.0.0.1:"));
  EXPECT_THAT(warning, HasSubstr("runs without authentication"));
  EXPECT_THAT(warning, HasSubstr("SLURMDDP_REQUIRE_TOKEN=1 refuses to run without one"));
  EXPECT_EQ(std::count(warning.begin(), warning.end(), '\n'), 1) << warning;
  EXPECT_EQ(other->stderr_text(), "");

  for (int r : {0, 1}) {
    auto refused =
        spawn(support::with_rank({"rank", "--timeout-ms", "5000", "--as-init"}, r, 2, port),
              {{"SLURMDDP_REQUIRE_TOKEN", "1"}});
    ASSERT_EQ(refused->wait(seconds(10)), std::optional<int>(5)) << refused->stderr_text();
    EXPECT_THAT(refused->stderr_text(),
                HasSubstr("init: refusing to run the rendezvous store at 127.0.0.1:" +
                          std::to_string(port) +
                          " without authentication: SLURMDDP_REQUIRE_TOKEN=1 requires a token, "
                          "but SLURMDDP_TOKEN is not set"));
    EXPECT_THAT(refused->stderr_text(), HasSubstr("rank=" + std::to_string(r) + ", host="));
  }
}

TEST(StoreFailures, AClosedPortIsNamedWithinTheTimeout) {
  store::Fd hold(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(hold.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(hold.get(), reinterpret_cast<sockaddr*>(&a), &len);
  const uint16_t port = ntohs(a.sin_port);
  auto r = rank(0, 2, port, 1000);
  ASSERT_EQ(r->wait(seconds(10)), std::optional<int>(2));
  EXPECT_THAT(r->stderr_text(),
              HasSubstr("error timeout: store: failed to connect to server "
                        "127.0.0.1:" +
                        std::to_string(port) + ": Connection refused; tried for 1."));
  EXPECT_LT(r->ran(), support::scaled(milliseconds(1000 + 2000)));
}

TEST(StoreFailures, KillingTheServerFailsEveryWaitingClientNamingIt) {
  auto server = spawn({"server"}, {{"SLURMDDP_TOKEN", "kill-test-token"}});
  const uint16_t port = read_port(*server);
  ASSERT_NE(port, 0);
  Env env{{"SLURMDDP_TOKEN", "kill-test-token"}};
  auto ranks = clients(4, port, 30000, env, std::vector<int>{0, 1, 2});
  // All three are parked in the barrier, waiting for rank 3.
  ASSERT_TRUE(eventually([&] { return server_stats(*server)["parked"] == 3; }));
  server->kill_now();
  for (int r = 0; r < 3; ++r) {
    auto code = ranks.rank(r).wait(seconds(5));
    ASSERT_EQ(code, std::optional<int>(3)) << ranks.rank(r).stderr_text();
    EXPECT_THAT(ranks.rank(r).stderr_text(),
                HasSubstr("lost the connection to server 127.0.0.1:" + std::to_string(port) +
                          ": the server closed the connection"));
  }
}

// ---- hostile clients ----

// Raises the soft limit on open files as far as the hard limit allows.
size_t raise_nofile() {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_NOFILE, &r);
  getrlimit(RLIMIT_NOFILE, &r);
  return r.rlim_cur;
}

TEST(HostileClients, TheServerStaysUpBoundedAndLegitimateRanksComplete) {
  const std::string token = "hostile-multiproc-token-7f3a";
  const size_t nofile = raise_nofile();
  const int idle_count =
      static_cast<int>(std::min<size_t>(2000, nofile > 600 ? nofile - 500 : 100));
  auto server =
      spawn({"server", "--handshake-ms", "1500", "--stall-ms", "1500", "--max-unauth", "256"},
            {{"SLURMDDP_TOKEN", token}});
  const uint16_t port = read_port(*server);
  ASSERT_NE(port, 0);
  const long rss_before = support::rss_kib(server->pid());

  std::vector<store::Fd> held;
  auto open = [&] {
    held.push_back(support::raw_connect(port));
    return held.back().get();
  };
  // Thousands of idle connections.
  for (int i = 0; i < idle_count; ++i) ASSERT_GE(open(), 0);
  // Garbage bytes.
  const uint8_t garbage[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
                             'n',  'o',  't',  ' ',  'a',  ' ',  's',  't',  'o',  'r',  'e'};
  for (int i = 0; i < 50; ++i) support::send_all(open(), garbage, sizeof garbage);
  // Oversized length fields.
  const uint8_t huge[] = {0xff, 0xff, 0xff, 0xff, wire::kVersion, 2, 0, 0, 0, 0};
  for (int i = 0; i < 50; ++i) support::send_all(open(), huge, sizeof huge);
  // Half-sent frames held open, before the handshake...
  const uint8_t half[] = {0, 0, 0, 75, wire::kVersion};
  for (int i = 0; i < 50; ++i) support::send_all(open(), half, sizeof half);
  // ... and after it.
  for (int i = 0; i < 10; ++i) {
    held.push_back(support::raw_authenticated(port, token));
    ASSERT_TRUE(held.back().valid());
    const uint8_t part[] = {0, 0, 1, 0, wire::kVersion, static_cast<uint8_t>(wire::Type::kSet)};
    support::send_all(held.back().get(), part, sizeof part);
  }
  // Wrong tokens (a proof made with another token) and missing ones.
  for (int i = 0; i < 20; ++i)
    ASSERT_FALSE(support::raw_handshake(open(), "not-the-token").empty());
  for (int i = 0; i < 20; ++i) {
    int fd = open();
    store::auth::Nonce mine{};
    support::send_all(fd, support::client_hello(&mine));
    ASSERT_TRUE(support::read_server_hello(fd));
    support::send_all(fd, support::abort_no_token());
  }
  // Replayed handshakes: a recorded valid hello and proof sent on new connections.
  std::vector<uint8_t> recorded;
  held.push_back(support::raw_authenticated(port, token, &recorded));
  ASSERT_TRUE(held.back().valid());
  for (int i = 0; i < 20; ++i) support::send_all(open(), recorded);

  // With all of that still open, eight ranks rendezvous.
  Env env{{"SLURMDDP_TOKEN", token}};
  auto ranks = clients(8, port, 20000, env);
  for (int r = 0; r < 8; ++r) {
    ASSERT_EQ(ranks.rank(r).wait(seconds(30)), std::optional<int>(0))
        << ranks.rank(r).stderr_text();
  }

  // Every hostile connection ends up refused, each for its reason.
  const uint64_t hostile = static_cast<uint64_t>(idle_count) + 50 + 50 + 50 + 10 + 40 + 20;
  std::map<std::string, uint64_t> s;
  ASSERT_TRUE(eventually(
      [&] {
        s = server_stats(*server);
        return s["malformed"] + s["oversized"] + s["no_token"] + s["wrong_token"] +
                   s["handshake_timeout"] + s["stalled"] + s["over_capacity"] ==
               hostile;
      },
      seconds(20)))
      << "refusals do not add up to " << hostile;
  EXPECT_EQ(s["malformed"], 50u);
  EXPECT_EQ(s["oversized"], 50u);
  EXPECT_EQ(s["no_token"], 20u);
  EXPECT_EQ(s["wrong_token"], 40u);  // 20 wrong tokens + 20 replays
  EXPECT_EQ(s["stalled"], 10u);
  EXPECT_EQ(s["handshake_timeout"] + s["over_capacity"], static_cast<uint64_t>(idle_count) + 50);
  EXPECT_LE(s["peak_unauthenticated"], 256u);
  EXPECT_LT(s["peak_buffered"], 1u << 20);
  EXPECT_EQ(s["authenticated"], 10u + 1 + 8);
  // Memory: the flood costs the server a few MiB at most.
  const long rss_after = support::rss_kib(server->pid());
  std::printf("# server RSS %ld KiB before the flood, %ld KiB after; peak buffered %llu bytes\n",
              rss_before, rss_after, static_cast<unsigned long long>(s["peak_buffered"]));
  EXPECT_LT(rss_after - rss_before, 32 * 1024)
      << "RSS " << rss_before << " -> " << rss_after << " KiB";

  server->close_stdin();
  ASSERT_EQ(server->wait(seconds(10)), std::optional<int>(0));
  // Each refusal logged once, floods summarized, the token never.
  const std::string log = server->stderr_text();
  EXPECT_THAT(log, Not(HasSubstr(token)));
  for (const char* reason : {"malformed", "oversized", "no-token", "wrong-token", "stalled"}) {
    std::string tag = std::string("reason=") + reason;
    size_t lines = 0;
    for (size_t at = log.find(tag); at != std::string::npos; at = log.find(tag, at + 1)) ++lines;
    EXPECT_EQ(lines, std::min<size_t>(16, s[reason == std::string("no-token")      ? "no_token"
                                            : reason == std::string("wrong-token") ? "wrong_token"
                                                                                   : reason]))
        << reason;
  }
  EXPECT_THAT(log, HasSubstr("further malformed refusals are counted, not logged"));
  EXPECT_THAT(log, HasSubstr("refused 50 connections as malformed in total"));
}

// Out of descriptors altogether (no reserve here): the server takes each new
// connection with its spare descriptor and closes the oldest pending one, so
// that a rank that connects during the flood gets in without waiting for the
// flood's handshake deadline (Note [Store server bounds]).
TEST(HostileClients, RunningOutOfFileDescriptorsDoesNotStopTheServer) {
  const std::string token = "fd-exhaustion-token";
  auto server =
      spawn({"server", "--nofile", "64", "--handshake-ms", "60000"}, {{"SLURMDDP_TOKEN", token}});
  const uint16_t port = read_port(*server);
  ASSERT_NE(port, 0);
  // Far more idle connections than the server has descriptors for.
  std::vector<store::Fd> idle;
  for (int i = 0; i < 200; ++i) {
    idle.push_back(support::raw_connect(port));
    ASSERT_TRUE(idle.back().valid());
  }
  std::map<std::string, uint64_t> s;
  // every connection accepted and then either pending or closed (the server
  // counts the two a moment apart)
  ASSERT_TRUE(eventually([&] {
    s = server_stats(*server);
    return s["accepted"] == 200 && s["unauthenticated"] + s["over_capacity"] == 200;
  })) << "accepted="
      << s["accepted"] << " unauthenticated=" << s["unauthenticated"]
      << " over_capacity=" << s["over_capacity"];
  EXPECT_GT(s["over_capacity"], 100u);  // at most 64 descriptors: most were closed
  // The oldest went, the newest still wait.
  EXPECT_TRUE(support::closed_by_server(idle.front().get(), seconds(5)));
  EXPECT_FALSE(support::closed_by_server(idle.back().get(), milliseconds(200)));
  // Long before the flood's deadline (60 s), a rank gets through.
  auto r = rank(0, 1, port, 10000, {{"SLURMDDP_TOKEN", token}});
  ASSERT_EQ(r->wait(seconds(20)), std::optional<int>(0)) << r->stderr_text();
  EXPECT_LT(r->ran(), support::scaled(seconds(5)));
  s = server_stats(*server);
  EXPECT_EQ(s["authenticated"], 1u);
  EXPECT_EQ(s["handshake_timeout"], 0u);
  server->close_stdin();
  ASSERT_EQ(server->wait(seconds(10)), std::optional<int>(0));
}

// Note [Store host bounds]: a peer on the network holds a thousand idle
// connections to rank 0's store (and keeps opening more) while the ranks join,
// under the bounds init() gives the store and the limit of open files srun
// commonly passes (1,024). The group still forms, and rank 0 can still open
// the files and sockets its process needs (the reserve: 2 per rank + 256).
TEST(HostileClients, ADescriptorFloodStarvesNeitherTheJoinNorRankZerosOwnOpens) {
  const std::string token = "descriptor-flood-token";
  raise_nofile();
  const int world = 8;
  Env env{{"SLURMDDP_TOKEN", token}};
  const std::string open_count = std::to_string(2 * world + 256);
  auto host =
      spawn({"rank", "--rank", "0", "--world", std::to_string(world), "--timeout-ms", "30000",
             "--serve", "--as-init", "--nofile", "1024", "--open-files", open_count},
            env);
  const uint16_t port = read_port(*host);
  ASSERT_NE(port, 0);
  std::deque<store::Fd> flood;
  for (int i = 0; i < 1000; ++i) {
    flood.push_back(support::raw_connect(port));
    ASSERT_TRUE(flood.back().valid()) << "connection " << i;
  }
  // The flood goes on while the ranks join.
  std::atomic<bool> joined{false};
  std::thread flooder([&] {
    while (!joined.load()) {
      flood.push_back(support::raw_connect(port));
      if (flood.size() > 1200) flood.pop_front();
      std::this_thread::sleep_for(milliseconds(2));
    }
  });
  host->write_line("go");
  auto ranks = clients(world, port, 30000, env, but_rank_0(world), {"--as-init"});
  auto line = host->read_line(seconds(30));
  EXPECT_EQ(line, "opened " + open_count + " files") << host->stderr_text();
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(ranks.rank(r).wait(seconds(40)), std::optional<int>(0))
        << ranks.rank(r).stderr_text();
  }
  EXPECT_EQ(host->wait(seconds(40)), std::optional<int>(0)) << host->stderr_text();
  joined.store(true);
  flooder.join();
  EXPECT_EQ(host->read_line(seconds(1)), "ok rank=0 world=" + std::to_string(world));
}

}  // namespace
}  // namespace slurmddp
