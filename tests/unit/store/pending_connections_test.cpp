// Note [Pending connections]: which connection still in the handshake the
// server closes to make room. Pure: ids and source addresses only.
#include "store/pending_connections.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

namespace slurmddp::store {
namespace {

TEST(PendingConnections, OneSourceGivesUpItsOldest) {
  PendingConnections p;
  EXPECT_EQ(p.victim(), std::nullopt);
  for (uint64_t id = 16; id < 20; ++id) p.add(id, "127.0.0.1");
  EXPECT_EQ(p.size(), 4u);
  EXPECT_EQ(p.victim(), std::optional<uint64_t>(16));
  p.remove(16);
  EXPECT_EQ(p.victim(), std::optional<uint64_t>(17));
  p.remove(18);  // authenticated: out of the middle
  p.remove(18);  // twice: nothing
  EXPECT_EQ(p.size(), 2u);
  EXPECT_FALSE(p.contains(18));
  EXPECT_EQ(p.victim(), std::optional<uint64_t>(17));
}

TEST(PendingConnections, TheMostCrowdedSourcePaysNotTheOthers) {
  PendingConnections p;
  p.add(1, "10.0.0.1");                                        // a rank, first of all
  p.add(2, "10.0.0.2");                                        // another rank
  for (uint64_t id = 3; id < 40; ++id) p.add(id, "10.6.6.6");  // a flood
  p.add(40, "10.0.0.3");                                       // a rank joining now
  EXPECT_EQ(p.from("10.6.6.6"), 37u);
  for (uint64_t expected = 3; expected < 39; ++expected) {
    ASSERT_EQ(p.victim(), std::optional<uint64_t>(expected));
    p.remove(expected);
  }
  // One left from each source: the oldest overall goes first.
  EXPECT_EQ(p.from("10.6.6.6"), 1u);
  EXPECT_EQ(p.victim(), std::optional<uint64_t>(1));
  p.remove(1);
  EXPECT_EQ(p.victim(), std::optional<uint64_t>(2));
  p.remove(2);
  EXPECT_EQ(p.victim(), std::optional<uint64_t>(39));
  p.remove(39);
  EXPECT_EQ(p.victim(), std::optional<uint64_t>(40));
  p.remove(40);
  EXPECT_EQ(p.size(), 0u);
  EXPECT_EQ(p.victim(), std::nullopt);
}

TEST(PendingConnections, EqualCrowdsGiveUpTheOlderOfTheirOldest) {
  PendingConnections p;
  p.add(5, "a");
  p.add(6, "b");
  p.add(7, "b");
  p.add(8, "a");
  EXPECT_EQ(p.victim(), std::optional<uint64_t>(5));
  p.add(9, "b");
  EXPECT_EQ(p.victim(), std::optional<uint64_t>(6));
}

TEST(PendingConnections, SourcesAreAddressesWithoutPorts) {
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = htons(4242);
  inet_pton(AF_INET, "10.1.2.3", &v4.sin_addr);
  EXPECT_EQ(source_address(reinterpret_cast<sockaddr*>(&v4), sizeof v4), "10.1.2.3");
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(4243);
  inet_pton(AF_INET6, "::ffff:10.1.2.3", &v6.sin6_addr);
  EXPECT_EQ(source_address(reinterpret_cast<sockaddr*>(&v6), sizeof v6), "::ffff:10.1.2.3");
  sockaddr un{};
  un.sa_family = AF_UNIX;
  EXPECT_EQ(source_address(&un, sizeof un), "?");
}

}  // namespace
}  // namespace slurmddp::store
