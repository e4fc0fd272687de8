// How rank 0 hosts the rendezvous store: its bounds from the world size and
// the limit of open files (Note [Store host bounds]), where it listens (Note
// [Store listen address]), and what happens without a token (Note [Open store]).
#include "group/store_host.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "group/open_store.h"
#include "slurmddp/error.h"

namespace slurmddp {
namespace {

using launch::InterfaceAddress;
using launch::IpAddress;
using ::testing::HasSubstr;

IpAddress ip(const char* text) {
  return *IpAddress::parse(text);
}

const std::vector<InterfaceAddress> kHere = {
    {"lo", ip("127.0.0.1"), 8}, {"eth0", ip("10.1.0.7"), 16}, {"ib0", ip("192.168.8.7"), 24}};

TEST(StoreBounds, PendingConnectionsFollowTheWorldSizeWithinTheirLimits) {
  EXPECT_EQ(store_bounds(1, 0).max_unauthenticated, 64u);
  EXPECT_EQ(store_bounds(8, 0).max_unauthenticated, 64u);
  EXPECT_EQ(store_bounds(1000, 0).max_unauthenticated, 2000u);
  EXPECT_EQ(store_bounds(100000, 0).max_unauthenticated, 4096u);
  EXPECT_EQ(store_bounds(8, 0).reserve_fds, 2u * 8 + 256);
  EXPECT_EQ(store_bounds(1000, 0).reserve_fds, 2u * 1000 + 256);
}

TEST(StoreBounds, PendingConnectionsFitTheLimitOfOpenFiles) {
  // 8 ranks under 1,024: 8 connections and a reserve of 272 leave 744, more than wanted.
  EXPECT_EQ(store_bounds(8, 1024).max_unauthenticated, 64u);
  // 300 ranks under 1,024: 300 + 856 already exceed it; a floor still lets ranks in.
  EXPECT_EQ(store_bounds(300, 1024).max_unauthenticated, 16u);
  // 100 ranks under 1,024: 1,024 - 100 - 456 = 468 > 200 wanted.
  EXPECT_EQ(store_bounds(100, 1024).max_unauthenticated, 200u);
  // 200 ranks under 1,024: 1,024 - 200 - 656 = 168 < 400 wanted.
  EXPECT_EQ(store_bounds(200, 1024).max_unauthenticated, 168u);
  // What init() raises the limit to always holds the whole wish.
  for (int n : {1, 3, 8, 100, 1000, 5000}) {
    const uint64_t limit = pending_wanted(n) + static_cast<uint64_t>(n) + reserve_wanted(n);
    EXPECT_EQ(store_bounds(n, limit).max_unauthenticated, pending_wanted(n)) << n;
  }
}

TEST(StoreListen, AnAddressOfThisHostIsListenedOnAlone) {
  EXPECT_EQ(store_listen_address("10.1.0.7", {ip("10.1.0.7")}, kHere).host, "10.1.0.7");
  EXPECT_EQ(store_listen_address("192.168.8.7", {ip("192.168.8.7")}, kHere).host, "192.168.8.7");
  EXPECT_EQ(store_listen_address("127.0.0.1", {ip("127.0.0.1")}, kHere).host, "127.0.0.1");
  const ListenChoice named = store_listen_address("n7", {ip("10.1.0.7")}, kHere);
  EXPECT_EQ(named.host, "10.1.0.7");
  EXPECT_THAT(named.why, HasSubstr("listening on 10.1.0.7 (MASTER_ADDR=n7) only"));
}

TEST(StoreListen, OtherwiseEveryInterfaceAndWhy) {
  auto all = [](const std::string& addr, const std::vector<IpAddress>& resolved) {
    const ListenChoice c = store_listen_address(addr, resolved, kHere);
    EXPECT_EQ(c.host, "") << addr;
    EXPECT_THAT(c.why, HasSubstr("listening on every interface: MASTER_ADDR=" + addr)) << addr;
    return c.why;
  };
  EXPECT_THAT(all("10.9.9.9", {ip("10.9.9.9")}), HasSubstr("not an address of this host"));
  // Debian's /etc/hosts: the host's own name is 127.0.1.1 here, DNS elsewhere.
  EXPECT_THAT(all("n7", {ip("127.0.1.1")}), HasSubstr("resolves to loopback here (127.0.1.1)"));
  EXPECT_THAT(all("n7", {ip("10.1.0.7"), ip("192.168.8.7")}), HasSubstr("several addresses"));
  EXPECT_THAT(all("n7", {ip("10.1.0.7"), ip("10.9.9.9")}), HasSubstr("not all of them"));
  EXPECT_THAT(all("nowhere", {}), HasSubstr("does not resolve here"));
}

ProcessIdentity identity(int rank, const std::string& token) {
  ProcessIdentity id;
  id.rank = rank;
  id.world_size = 4;
  id.master_addr = "10.1.0.7";
  id.master_port = 61234;
  id.token = token;
  return id;
}

std::string refusal(const ProcessIdentity& id, const std::optional<std::string>& require) {
  try {
    check_open_store(id, require, "n7", "init: ");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(OpenStore, RankZeroWarnsOnceNamingTheRiskAndTheWayOut) {
  const std::string w = check_open_store(identity(0, ""), std::nullopt, "n7", "init: ");
  EXPECT_THAT(w, HasSubstr("no SLURMDDP_TOKEN: the rendezvous store at 10.1.0.7:61234 runs "
                           "without authentication"));
  EXPECT_THAT(w, HasSubstr("take the port first and pose as rank 0's server"));
  EXPECT_THAT(w, HasSubstr("SPANK plugin draws a token"));
  EXPECT_THAT(w, HasSubstr("set SLURMDDP_TOKEN to the same secret in every rank's environment"));
  EXPECT_THAT(w, HasSubstr("SLURMDDP_REQUIRE_TOKEN=1 refuses"));
  EXPECT_THAT(w, HasSubstr("rank=0, host=n7"));
  // The other ranks leave it to rank 0; with a token nobody says anything.
  EXPECT_EQ(check_open_store(identity(3, ""), std::nullopt, "n7", "init: "), "");
  EXPECT_EQ(check_open_store(identity(0, "secret"), std::nullopt, "n7", "init: "), "");
  EXPECT_EQ(check_open_store(identity(0, ""), std::string("0"), "n7", "init: "), w);
  EXPECT_EQ(check_open_store(identity(0, ""), std::string(""), "n7", "init: "), w);
}

TEST(OpenStore, ARequiredTokenThatIsMissingIsRefusedOnEveryRank) {
  for (int rank : {0, 2}) {
    const std::string e = refusal(identity(rank, ""), std::string("1"));
    EXPECT_THAT(e, HasSubstr("init: refusing to run the rendezvous store at 10.1.0.7:61234 "
                             "without authentication: SLURMDDP_REQUIRE_TOKEN=1 requires a "
                             "token, but SLURMDDP_TOKEN is not set"));
    EXPECT_THAT(e, HasSubstr("rank=" + std::to_string(rank) + ", host=n7"));
  }
  EXPECT_THAT(refusal(identity(1, ""), std::string("yes")),
              HasSubstr("SLURMDDP_REQUIRE_TOKEN=yes"));
  EXPECT_EQ(refusal(identity(0, "secret"), std::string("1")), "(no error)");
  EXPECT_THAT(refusal(identity(0, "secret"), std::string("sometimes")),
              HasSubstr("SLURMDDP_REQUIRE_TOKEN='sometimes'"));
}

}  // namespace
}  // namespace slurmddp
