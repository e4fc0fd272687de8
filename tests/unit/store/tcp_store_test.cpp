// The TCP backend beyond the shared contract: connecting, retrying,
// authentication, losing the server.
#include "slurmddp/tcp_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "raw_client.h"
#include "slurmddp/error.h"
#include "slurmddp/tcp_store_server.h"
#include "time_scale.h"

namespace slurmddp {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using support::eventually;
using ::testing::HasSubstr;
using ::testing::Not;

Bytes B(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

std::unique_ptr<TcpStoreServer> start_server(const std::string& token = "") {
  TcpStoreServerOptions o;
  o.bind_host = "127.0.0.1";
  o.token = token;
  return TcpStoreServer::start(o);
}

TcpStoreOptions client_options(uint16_t port, const std::string& token = "",
                               milliseconds timeout = seconds(5)) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = token;
  o.timeout = timeout;
  return o;
}

// A bound socket that does not listen: connections to its port are refused,
// and nobody else can take the port while it lives.
store::Fd reserve_port(uint16_t* port) {
  store::Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

TEST(TcpStore, HostedServerPicksAFreePortAndServesItsOwnRank) {
  TcpStoreOptions o;
  o.is_server = true;
  o.port = 0;
  o.server.bind_host = "127.0.0.1";
  auto store = make_tcp_store(o);
  ASSERT_NE(store->server(), nullptr);
  EXPECT_NE(store->port(), 0);
  EXPECT_EQ(store->port(), store->server()->port());
  EXPECT_EQ(store->endpoint(), "127.0.0.1:" + std::to_string(store->port()));
  auto other = make_tcp_store(client_options(store->port()));
  EXPECT_EQ(other->server(), nullptr);
  other->set("k", B("v"));
  EXPECT_EQ(store->get("k", milliseconds(0)), B("v"));
}

TEST(TcpStore, HostedServerBindsEveryInterfaceByDefault) {
  TcpStoreOptions o;
  o.is_server = true;
  auto store = make_tcp_store(o);
  auto v4 = make_tcp_store(client_options(store->port()));
  v4->set("k", B("v"));
  TcpStoreOptions c6 = client_options(store->port());
  c6.host = "::1";
  try {
    auto v6 = make_tcp_store(c6);
    EXPECT_EQ(v6->get("k", milliseconds(0)), B("v"));
    EXPECT_EQ(v6->endpoint(), "[::1]:" + std::to_string(store->port()));
  } catch (const TimeoutError&) {
    GTEST_SKIP() << "no IPv6 loopback on this machine";
  }
}

TEST(TcpStore, ARefusedPortFailsWithinTheTimeoutNamingHostAndPort) {
  uint16_t port = 0;
  store::Fd hold = reserve_port(&port);
  auto start = steady_clock::now();
  try {
    make_tcp_store(client_options(port, "", milliseconds(600)));
    FAIL() << "connected to a closed port";
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_THAT(m, HasSubstr("store: failed to connect to server 127.0.0.1:" +
                             std::to_string(port) + ": Connection refused; tried for "));
    EXPECT_THAT(m, HasSubstr("timeout_ms=600"));
    // 10, 20, 40, 80, 160, 320 ms of backoff fit into 600 ms: several attempts.
    EXPECT_THAT(m, Not(HasSubstr("attempts=1,")));
  }
  auto took = steady_clock::now() - start;
  EXPECT_GE(took, milliseconds(600));
  EXPECT_LT(took, support::scaled(milliseconds(1600)));
}

TEST(TcpStore, AServerThatNeverAnswersTimesOutNamingHostAndPort) {
  // Listening, so connect() succeeds, but nobody accepts or speaks.
  uint16_t port = 0;
  store::Fd hole = reserve_port(&port);
  ASSERT_EQ(listen(hole.get(), 16), 0);
  auto start = steady_clock::now();
  try {
    make_tcp_store(client_options(port, "", milliseconds(500)));
    FAIL() << "connected to a silent port";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("store: failed to connect to server 127.0.0.1:" + std::to_string(port) +
                          ": the server accepted the connection but sent no handshake"));
  }
  EXPECT_LT(steady_clock::now() - start, support::scaled(milliseconds(1500)));
}

TEST(TcpStore, TheClientRetriesUntilTheServerIsUp) {
  // A stand-in accepts the client's first attempt and hangs up, like a server
  // that is restarting; then the real server takes the port.
  uint16_t port = 0;
  store::Fd standin = reserve_port(&port);
  int one = 1;
  setsockopt(standin.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  ASSERT_EQ(listen(standin.get(), 16), 0);
  auto client = std::async(std::launch::async,
                           [&] { return make_tcp_store(client_options(port, "", seconds(10))); });
  {
    pollfd p{standin.get(), POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 10000), 1);
    store::Fd first(accept(standin.get(), nullptr, nullptr));
    ASSERT_TRUE(first.valid());
  }
  standin.reset();
  TcpStoreServerOptions so;
  so.bind_host = "127.0.0.1";
  so.port = port;
  auto server = TcpStoreServer::start(so);
  auto store = client.get();
  store->set("k", B("v"));
  EXPECT_EQ(server->stats().authenticated, 1u);
}

TEST(TcpStore, TheRightTokenAuthenticatesBothWays) {
  auto server = start_server("s3cret-token-value");
  auto store = make_tcp_store(client_options(server->port(), "s3cret-token-value"));
  store->set("k", B("v"));
  EXPECT_EQ(store->get("k", milliseconds(0)), B("v"));
  EXPECT_EQ(server->stats().authenticated, 1u);
  EXPECT_EQ(server->stats().refused_wrong_token, 0u);
}

TEST(TcpStore, AWrongTokenIsRefusedAndTheErrorSaysWhy) {
  auto server = start_server("server-token-AAAA");
  try {
    make_tcp_store(client_options(server->port(), "client-token-BBBB"));
    FAIL() << "a wrong token was accepted";
  } catch (const ProtocolError& e) {
    std::string m = e.what();
    EXPECT_EQ(
        m, "store: failed to authenticate to server 127.0.0.1:" + std::to_string(server->port()) +
               ": authentication refused: the server's proof does not match this client's "
               "token (SLURMDDP_TOKEN differs between this rank and the server, or the port "
               "belongs to another job's server)");
    EXPECT_THAT(m, Not(HasSubstr("AAAA")));
    EXPECT_THAT(m, Not(HasSubstr("BBBB")));
  }
  EXPECT_TRUE(eventually([&] { return server->stats().refused_wrong_token == 1; }));
  EXPECT_EQ(server->stats().authenticated, 0u);
}

TEST(TcpStore, AMissingTokenIsRefusedAndTheErrorSaysWhy) {
  auto server = start_server("server-token");
  try {
    make_tcp_store(client_options(server->port(), ""));
    FAIL() << "a client without a token was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr("authentication refused: the server requires a token and this "
                                    "client has none"));
  }
  EXPECT_TRUE(eventually([&] { return server->stats().refused_no_token == 1; }));
}

TEST(TcpStore, AClientWithATokenRefusesAnOpenServer) {
  auto server = start_server("");
  try {
    make_tcp_store(client_options(server->port(), "my-token"));
    FAIL() << "the client used a server that cannot prove the token";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the server does not ask for a token but this client has one"));
    EXPECT_THAT(e.what(), Not(HasSubstr("my-token")));
  }
}

TEST(TcpStore, AClientNeverProvesItselfToAServerThatCannotProveTheToken) {
  // An impostor asks for a token and offers a made-up proof of its own.
  uint16_t port = 0;
  store::Fd fake = reserve_port(&port);
  ASSERT_EQ(listen(fake.get(), 4), 0);
  auto impostor = std::async(std::launch::async, [&] {
    store::Fd c(accept(fake.get(), nullptr, nullptr));
    auto hello = support::read_frame(c.get(), seconds(5));
    store::wire::Writer w(store::wire::Type::kServerHello, 0);
    w.u8(1);
    auto nonce = store::auth::random_nonce();
    w.raw(nonce.data(), nonce.size());
    store::auth::Proof bogus{};
    w.raw(bogus.data(), bogus.size());
    support::send_all(c.get(), w.finish());
    // What the client sends next: an abort, never its proof.
    auto next = support::read_frame(c.get(), seconds(5));
    return next ? next->type : store::wire::Type::kError;
  });
  try {
    make_tcp_store(client_options(port, "real-token"));
    FAIL() << "the client trusted an impostor";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr("authentication refused: the server's proof does not match "
                                    "this client's token"));
  }
  EXPECT_EQ(impostor.get(), store::wire::Type::kAuthAbort);
}

TEST(TcpStore, AReplayedHandshakeIsRefused) {
  auto server = start_server("replay-token");
  std::vector<uint8_t> recorded;
  store::Fd first = support::raw_authenticated(server->port(), "replay-token", &recorded);
  ASSERT_TRUE(first.valid());
  ASSERT_TRUE(eventually([&] { return server->stats().authenticated == 1; }));
  // The recorded hello and proof on a new connection: the server's nonce is
  // new, so the old proof does not match it.
  store::Fd second = support::raw_connect(server->port());
  ASSERT_TRUE(support::send_all(second.get(), recorded));
  ASSERT_TRUE(support::read_server_hello(second.get()));
  auto answer = support::read_frame(second.get(), seconds(5));
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->type, store::wire::Type::kAuthRefused);
  EXPECT_TRUE(support::closed_by_server(second.get(), seconds(5)));
  EXPECT_TRUE(eventually([&] { return server->stats().refused_wrong_token == 1; }));
  EXPECT_EQ(server->stats().authenticated, 1u);
}

TEST(TcpStore, ClientsBlockedInGetFailWithPeerErrorWhenTheServerStops) {
  auto server = start_server("tok");
  const uint16_t port = server->port();
  auto a = make_tcp_store(client_options(port, "tok"));
  auto b = make_tcp_store(client_options(port, "tok"));
  auto fa = std::async(std::launch::async, [&] { a->get("never", seconds(30)); });
  auto fb = std::async(std::launch::async, [&] { b->wait({"never"}, seconds(30)); });
  ASSERT_TRUE(eventually([&] { return server->stats().parked == 2; }));
  auto start = steady_clock::now();
  server.reset();
  for (auto* f : {&fa, &fb}) {
    try {
      f->get();
      FAIL() << "a blocked call returned after the server stopped";
    } catch (const PeerError& e) {
      EXPECT_THAT(e.what(), HasSubstr("lost the connection to server 127.0.0.1:" +
                                      std::to_string(port) + ": the server closed the connection"));
    }
  }
  EXPECT_LT(steady_clock::now() - start, support::scaled(seconds(2)));
  // Every later call fails the same way, at once.
  EXPECT_THROW(a->set("k", B("v")), PeerError);
}

// Note [Lingering host]: the host waits for its clients' last requests, not
// for a client that is connected but asks nothing (a stopped process).
TEST(TcpStore, TheHostLingersWhileClientsAskAndNotForASilentOne) {
  auto server = start_server();
  const uint16_t port = server->port();
  auto silent = make_tcp_store(client_options(port));
  silent->set("hello", B("1"));
  // A client that keeps asking for 600 ms, then goes.
  auto busy = std::async(std::launch::async, [&] {
    auto c = make_tcp_store(client_options(port));
    const auto until = steady_clock::now() + milliseconds(600);
    while (steady_clock::now() < until) c->check({"hello"});
  });
  ASSERT_TRUE(eventually([&] { return server->stats().open == 2; }));
  auto start = steady_clock::now();
  // The busy client holds the drain past several quiet periods...
  EXPECT_FALSE(server->drain(seconds(20), milliseconds(150)));
  busy.get();
  EXPECT_GE(steady_clock::now() - start, milliseconds(500));
  // ...and then only the silent one is left: one quiet period, not the linger.
  start = steady_clock::now();
  EXPECT_FALSE(server->drain(seconds(20), milliseconds(150)));
  EXPECT_LT(steady_clock::now() - start, support::scaled(seconds(5)));
  silent.reset();
  EXPECT_TRUE(server->drain(seconds(20), seconds(10)));
}

TEST(TcpStore, ClientSideLimitsNeverReachTheServer) {
  auto server = start_server();
  auto store = make_tcp_store(client_options(server->port()));
  EXPECT_THROW(store->set(std::string(kMaxKeySize + 1, 'k'), B("v")), InvalidArgument);
  EXPECT_EQ(server->stats().requests, 0u);
}

}  // namespace
}  // namespace slurmddp
