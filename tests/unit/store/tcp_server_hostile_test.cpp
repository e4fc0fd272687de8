// Hostile and broken clients against the store server (Note [Store server
// bounds]): each is refused for the right reason, counted once, and costs the
// server no more memory than the bounds allow; legitimate clients carry on.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <thread>

#include "raw_client.h"
#include "slurmddp/error.h"
#include "slurmddp/tcp_store.h"
#include "slurmddp/tcp_store_server.h"

namespace slurmddp {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using support::closed_by_server;
using support::eventually;
using support::raw_authenticated;
using support::raw_connect;
using support::raw_handshake;
using support::send_all;
namespace wire = store::wire;

constexpr const char* kToken = "hostile-test-token";

Bytes B(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

class Hostile : public ::testing::Test {
 protected:
  void start(TcpStoreServerOptions o = {}) {
    o.bind_host = "127.0.0.1";
    o.token = kToken;
    server_ = TcpStoreServer::start(o);
  }
  std::shared_ptr<TcpStore> legit() {
    TcpStoreOptions o;
    o.port = server_->port();
    o.token = kToken;
    o.timeout = seconds(10);
    return make_tcp_store(o);
  }
  TcpStoreServerStats stats() const { return server_->stats(); }
  // A legitimate client still gets through.
  void still_serves() {
    auto s = legit();
    s->set("alive", B("yes"));
    EXPECT_EQ(s->get("alive", milliseconds(0)), B("yes"));
  }
  // Sum of all refusal counters.
  static uint64_t refusals(const TcpStoreServerStats& s) {
    return s.refused_malformed + s.refused_oversized + s.refused_no_token + s.refused_wrong_token +
           s.refused_handshake_timeout + s.refused_stalled + s.refused_over_capacity;
  }

  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(Hostile, GarbageBytesAreRefusedAsMalformed) {
  start();
  store::Fd fd = raw_connect(server_->port());
  const std::string http = "GET / HTTP/1.1\r\nHost: store\r\n\r\n";
  ASSERT_TRUE(send_all(fd.get(), http.data(), http.size()));
  EXPECT_TRUE(closed_by_server(fd.get(), seconds(5)));
  ASSERT_TRUE(eventually([&] { return stats().refused_malformed == 1; }));
  EXPECT_EQ(refusals(stats()), 1u);
  still_serves();
}

TEST_F(Hostile, AnOversizedLengthFieldBeforeTheHandshakeIsRefusedUnread) {
  start();
  store::Fd fd = raw_connect(server_->port());
  const uint8_t frame[] = {0xff, 0xff, 0xff, 0xf0, wire::kVersion, 2, 0, 0, 0, 0};
  ASSERT_TRUE(send_all(fd.get(), frame, sizeof frame));
  EXPECT_TRUE(closed_by_server(fd.get(), seconds(5)));
  ASSERT_TRUE(eventually([&] { return stats().refused_oversized == 1; }));
  EXPECT_LT(stats().peak_buffered_bytes, 64u * 1024);
  still_serves();
}

TEST_F(Hostile, AnOversizedLengthFieldAfterTheHandshakeIsRefused) {
  start();
  store::Fd fd = raw_authenticated(server_->port(), kToken);
  ASSERT_TRUE(fd.valid());
  const uint32_t len = static_cast<uint32_t>(wire::kMaxFrame);  // + 4 for the length field: over
  const uint8_t frame[] = {static_cast<uint8_t>(len >> 24),
                           static_cast<uint8_t>(len >> 16),
                           static_cast<uint8_t>(len >> 8),
                           static_cast<uint8_t>(len),
                           wire::kVersion,
                           static_cast<uint8_t>(wire::Type::kSet),
                           0,
                           0,
                           0,
                           1};
  ASSERT_TRUE(send_all(fd.get(), frame, sizeof frame));
  EXPECT_TRUE(closed_by_server(fd.get(), seconds(5)));
  ASSERT_TRUE(eventually([&] { return stats().refused_oversized == 1; }));
  still_serves();
}

TEST_F(Hostile, ALargeFrameIsBufferedOnlyAsItsBytesArrive) {
  start();
  store::Fd fd = raw_authenticated(server_->port(), kToken);
  ASSERT_TRUE(fd.valid());
  // Announce a 100 MB set, send 1 MiB of it, and hold the rest back.
  wire::Writer w(wire::Type::kSet, 1);
  w.str("big");
  std::vector<uint8_t> head = w.finish_with_tail(4 + 100'000'000);
  ASSERT_TRUE(send_all(fd.get(), head));
  std::vector<uint8_t> part(1 << 20, 7);
  ASSERT_TRUE(send_all(fd.get(), part));
  ASSERT_TRUE(eventually([&] { return stats().buffered_bytes >= (1u << 20); }));
  EXPECT_LT(stats().peak_buffered_bytes, 4u << 20);
  still_serves();
}

TEST_F(Hostile, AHalfSentHandshakeIsClosedAtTheDeadline) {
  TcpStoreServerOptions o;
  o.handshake_timeout = milliseconds(300);
  start(o);
  store::Fd fd = raw_connect(server_->port());
  auto start_time = steady_clock::now();
  const uint8_t partial[] = {0, 0, 0};
  ASSERT_TRUE(send_all(fd.get(), partial, sizeof partial));
  EXPECT_TRUE(closed_by_server(fd.get(), seconds(5)));
  EXPECT_GE(steady_clock::now() - start_time, milliseconds(290));
  ASSERT_TRUE(eventually([&] { return stats().refused_handshake_timeout == 1; }));
  EXPECT_EQ(refusals(stats()), 1u);
  still_serves();
}

TEST_F(Hostile, AHalfSentFrameAfterTheHandshakeStallsOut) {
  TcpStoreServerOptions o;
  o.stall_timeout = milliseconds(300);
  start(o);
  store::Fd fd = raw_authenticated(server_->port(), kToken);
  ASSERT_TRUE(fd.valid());
  auto start_time = steady_clock::now();
  const uint8_t partial[] = {0, 0, 3, 0xe8, wire::kVersion, static_cast<uint8_t>(wire::Type::kSet),
                             0};
  ASSERT_TRUE(send_all(fd.get(), partial, sizeof partial));
  EXPECT_TRUE(closed_by_server(fd.get(), seconds(5)));
  EXPECT_GE(steady_clock::now() - start_time, milliseconds(290));
  ASSERT_TRUE(eventually([&] { return stats().refused_stalled == 1; }));
  EXPECT_EQ(refusals(stats()), 1u);
  EXPECT_TRUE(eventually([&] { return stats().buffered_bytes == 0; }));
}

TEST_F(Hostile, AFrameThatKeepsArrivingSlowlyIsNotCutOff) {
  TcpStoreServerOptions o;
  o.stall_timeout = milliseconds(400);
  start(o);
  store::Fd fd = raw_authenticated(server_->port(), kToken);
  ASSERT_TRUE(fd.valid());
  wire::Writer w(wire::Type::kSet, 5);
  w.str("slow");
  w.str("value");
  std::vector<uint8_t> frame = w.finish();
  // One byte at a time, each within the stall timeout, the whole over it.
  auto start_time = steady_clock::now();
  for (uint8_t b : frame) {
    ASSERT_TRUE(send_all(fd.get(), &b, 1));
    pollfd none{-1, 0, 0};
    poll(&none, 0, 25);
  }
  auto reply = support::read_frame(fd.get(), seconds(5));
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->type, wire::Type::kOk);
  EXPECT_EQ(reply->id, 5u);
  EXPECT_GT(steady_clock::now() - start_time, milliseconds(400));
  EXPECT_EQ(stats().refused_stalled, 0u);
}

TEST_F(Hostile, IdleConnectionsBeyondTheCapEvictTheOldest) {
  TcpStoreServerOptions o;
  o.max_unauthenticated = 64;
  start(o);
  std::vector<store::Fd> idle;
  for (int i = 0; i < 500; ++i) {
    idle.push_back(raw_connect(server_->port()));
    ASSERT_TRUE(idle.back().valid());
  }
  // The server counts a connection accepted before it evicts the oldest for
  // it: wait until every accept has been answered both ways.
  ASSERT_TRUE(eventually([&] {
    const auto s = stats();
    return s.accepted == 500 && s.unauthenticated + s.refused_over_capacity == 500;
  }));
  EXPECT_EQ(stats().unauthenticated, 64u);
  EXPECT_EQ(stats().peak_unauthenticated, 64u);
  EXPECT_EQ(stats().refused_over_capacity, 436u);
  // The oldest are gone, the newest still wait.
  EXPECT_TRUE(closed_by_server(idle.front().get(), seconds(5)));
  // A legitimate client gets in (evicting one more idle connection).
  still_serves();
  EXPECT_EQ(stats().refused_over_capacity, 437u);
}

// A blocking TCP connection to 127.0.0.1:port from `source`, another
// loopback address (all of 127.0.0.0/8 is this host's).
store::Fd connect_from(const char* source, uint16_t port) {
  store::Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, source, &a.sin_addr);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return store::Fd();
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return store::Fd();
  return fd;
}

// Note [Pending connections]: a flood from one address evicts its own
// connections, not an older one from another address that is still joining.
TEST_F(Hostile, AFloodFromOneAddressEvictsItsOwnConnectionsNotOthers) {
  TcpStoreServerOptions o;
  o.max_unauthenticated = 32;
  start(o);
  store::Fd joining = connect_from("127.0.0.3", server_->port());
  ASSERT_TRUE(joining.valid());
  ASSERT_TRUE(eventually([&] { return stats().accepted == 1; }));
  std::vector<store::Fd> flood;
  for (int i = 0; i < 200; ++i) {
    flood.push_back(connect_from("127.0.0.2", server_->port()));
    ASSERT_TRUE(flood.back().valid());
  }
  // (every accept answered: kept pending or refused; see the test above)
  ASSERT_TRUE(eventually([&] {
    const auto s = stats();
    return s.accepted == 201 && s.unauthenticated + s.refused_over_capacity == 201;
  }));
  EXPECT_EQ(stats().unauthenticated, 32u);
  EXPECT_EQ(stats().refused_over_capacity, 169u);
  EXPECT_TRUE(closed_by_server(flood.front().get(), seconds(5)));
  // The joining connection, older than all of the flood, is still there and
  // completes its handshake.
  EXPECT_FALSE(raw_handshake(joining.get(), kToken).empty());
  ASSERT_TRUE(eventually([&] { return stats().authenticated == 1; }));
  EXPECT_EQ(stats().refused_over_capacity, 169u);
}

// Note [Store server bounds]: with fewer descriptors free than reserve_fds,
// a new connection replaces a pending one instead of taking one more
// descriptor; the last one pending stays, so that a rank still gets in.
TEST_F(Hostile, ShortOfTheDescriptorReserveANewConnectionReplacesAPendingOne) {
  TcpStoreServerOptions o;
  o.reserve_fds = size_t{1} << 30;  // every descriptor is in the reserve
  start(o);
  std::vector<store::Fd> idle;
  for (int i = 0; i < 20; ++i) {
    idle.push_back(raw_connect(server_->port()));
    ASSERT_TRUE(idle.back().valid());
    // One at a time: each replaces the one before (once it is refused).
    ASSERT_TRUE(eventually([&] {
      const auto s = stats();
      return s.accepted == static_cast<uint64_t>(i) + 1 &&
             s.unauthenticated + s.refused_over_capacity == s.accepted;
    }));
  }
  EXPECT_EQ(stats().unauthenticated, 1u);
  EXPECT_EQ(stats().peak_unauthenticated, 1u);
  EXPECT_EQ(stats().refused_over_capacity, 19u);
  EXPECT_TRUE(closed_by_server(idle.front().get(), seconds(5)));
  EXPECT_FALSE(closed_by_server(idle.back().get(), milliseconds(200)));
  still_serves();
  EXPECT_EQ(stats().refused_over_capacity, 20u);
}

TEST_F(Hostile, AWrongVersionOrUnknownRequestAfterTheHandshakeIsRefused) {
  start();
  {
    store::Fd fd = raw_authenticated(server_->port(), kToken);
    const uint8_t frame[] = {0, 0, 0, 6, 9, static_cast<uint8_t>(wire::Type::kGet), 0, 0, 0, 1};
    ASSERT_TRUE(send_all(fd.get(), frame, sizeof frame));
    EXPECT_TRUE(closed_by_server(fd.get(), seconds(5)));
  }
  {
    store::Fd fd = raw_authenticated(server_->port(), kToken);
    const uint8_t frame[] = {0, 0, 0, 6, wire::kVersion, 99, 0, 0, 0, 1};
    ASSERT_TRUE(send_all(fd.get(), frame, sizeof frame));
    auto reply = support::read_frame(fd.get(), seconds(5));
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->type, wire::Type::kError);
    EXPECT_TRUE(closed_by_server(fd.get(), seconds(5)));
  }
  {
    // A get whose key length runs past the end of the frame.
    store::Fd fd = raw_authenticated(server_->port(), kToken);
    const uint8_t frame[] = {
        0, 0, 0, 10, wire::kVersion, static_cast<uint8_t>(wire::Type::kGet), 0, 0, 0, 1,
        0, 0, 0, 200};
    ASSERT_TRUE(send_all(fd.get(), frame, sizeof frame));
    EXPECT_TRUE(closed_by_server(fd.get(), seconds(5)));
  }
  {
    // A barrier join for a world of zero ranks.
    store::Fd fd = raw_authenticated(server_->port(), kToken);
    wire::Writer w(wire::Type::kJoin, 1);
    w.str("barrier/b/rank/0");
    w.str("barrier/b/count");
    w.str("barrier/b/done");
    w.i64(0);
    w.i64(1000);
    ASSERT_TRUE(send_all(fd.get(), w.finish()));
    auto reply = support::read_frame(fd.get(), seconds(5));
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->type, wire::Type::kError);
    EXPECT_TRUE(closed_by_server(fd.get(), seconds(5)));
  }
  ASSERT_TRUE(eventually([&] { return stats().refused_malformed == 4; }));
  EXPECT_EQ(stats().keys, 0u);  // nothing of the refused join was applied
  still_serves();
}

TEST_F(Hostile, AClientThatNeverReadsStopsBeingRead) {
  TcpStoreServerOptions o;
  o.output_high_water = 4 << 20;
  start(o);
  auto writer = legit();
  writer->set("value", Bytes(1 << 20, 1));
  store::Fd fd = raw_authenticated(server_->port(), kToken);
  ASSERT_TRUE(fd.valid());
  // 1000 gets of a 1 MiB value, never reading the replies.
  std::vector<uint8_t> burst;
  for (uint32_t i = 0; i < 1000; ++i) {
    wire::Writer w(wire::Type::kGet, i);
    w.str("value");
    w.i64(0);
    auto f = w.finish();
    burst.insert(burst.end(), f.begin(), f.end());
  }
  ASSERT_TRUE(send_all(fd.get(), burst));
  ASSERT_TRUE(eventually([&] { return stats().buffered_bytes >= (4u << 20); }));
  const uint64_t served = stats().requests;
  EXPECT_LT(served, 1000u);
  EXPECT_LT(stats().peak_buffered_bytes, (4u << 20) + (2u << 20));
  // Reading the replies lets it finish.
  uint64_t got = 0;
  while (got < 1000) {
    auto r = support::read_frame(fd.get(), seconds(10));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->type, wire::Type::kValue);
    ASSERT_EQ(r->id, got);
    ASSERT_EQ(r->payload.size(), 4u + (1u << 20));
    ++got;
  }
  EXPECT_EQ(refusals(stats()), 0u);
}

TEST_F(Hostile, TooManyParkedRequestsOnOneConnectionAreAnsweredBusy) {
  TcpStoreServerOptions o;
  o.max_parked_per_connection = 4;
  start(o);
  store::Fd fd = raw_authenticated(server_->port(), kToken);
  for (uint32_t i = 0; i < 5; ++i) {
    wire::Writer w(wire::Type::kGet, i);
    w.str("never");
    w.i64(60000);
    ASSERT_TRUE(send_all(fd.get(), w.finish()));
  }
  auto r = support::read_frame(fd.get(), seconds(5));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, wire::Type::kError);
  EXPECT_EQ(r->id, 4u);
  EXPECT_EQ(stats().parked, 4u);
  fd.reset();
  // Closing the connection forgets its parked requests.
  EXPECT_TRUE(eventually([&] { return stats().parked == 0 && stats().open == 0; }));
}

}  // namespace
}  // namespace slurmddp
