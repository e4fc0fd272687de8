// The TCP store server's event loop (TcpStoreServer::Impl): one thread, epoll
// (level-triggered), non-blocking sockets. Its work is split by job:
//  - tcp_server.cpp: the loop, accepting (and running out of file
//    descriptors), timers, closing and counting connections, the public API;
//  - tcp_server_io.cpp: a connection's bytes: framing input, queueing and
//    writing replies, back-pressure;
//  - server_handshake.h: the handshake of each new connection;
//  - server_state.h: the table and the parked requests, without sockets.
// Blocked get/wait requests are parked in the state and answered when their
// keys appear or their deadline passes; clients never poll.
//
// Note [Store server bounds]
// Nothing a client sends can make the server allocate more than it has
// accepted as input, and what it accepts is bounded per connection:
//  - before the handshake a connection may send one frame of at most
//    kMaxHandshakeFrame bytes; a longer length field closes it unread, and it
//    must finish the handshake within handshake_timeout;
//  - at most max_unauthenticated connections may be in the handshake; each
//    new one beyond that closes the oldest of the most crowded source address
//    (Note [Pending connections]), never the new one;
//  - after it, frames are bounded by kMaxFrame and buffered only as their bytes
//    arrive (a length field alone allocates nothing); a partial frame that
//    makes no progress for stall_timeout closes the connection;
//  - a connection's pending replies above output_high_water stop its reads,
//    and at most max_parked_per_connection requests may be parked per
//    connection; replies to get point at the stored value instead of copying it;
//  - descriptors: a connection that arrives with fewer than reserve_fds
//    descriptors free closes a pending one in the same way, so that pending
//    connections never eat into what the process keeps for its own opens;
//    out of descriptors altogether, one spare fd lets the server take the new
//    connection and close a pending one instead of spinning on EMFILE (the
//    new one only when none is pending; without the spare it stops watching
//    the listening socket for kAcceptPause).
// So with a token, hostile clients cost at most max_unauthenticated *
// kMaxHandshakeFrame bytes of buffers plus as many descriptors, and a rank
// that is joining is not the one closed to make room. Without a token anyone
// who connects is a client, as with torch's store.
#pragma once

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "slurmddp/tcp_store.h"
#include "slurmddp/tcp_store_server.h"
#include "store/auth.h"
#include "store/kv_table.h"
#include "store/pending_connections.h"
#include "store/refusal.h"
#include "store/server_handshake.h"
#include "store/server_state.h"
#include "store/socket.h"
#include "store/wire.h"

namespace slurmddp {

namespace store::server {

using store::Clock;
using store::Fd;
using store::Refusal;
using store::Value;

inline constexpr const char* kComponent = "store";
inline constexpr uint64_t kListenId = 1;
inline constexpr uint64_t kWakeId = 2;
inline constexpr uint64_t kFirstConnId = 16;
inline constexpr size_t kReadChunk = size_t{64} * 1024;
// Bytes read from one connection per readiness event, so that one busy
// connection cannot starve the others.
inline constexpr size_t kReadBudget = 1 << 20;
inline constexpr int kAcceptBatch = 256;
inline constexpr int kLogBurst = 16;
inline constexpr Millis kAcceptPause{100};

// One queued piece of output: bytes the connection owns, or a stored value it
// shares with the table.
struct OutChunk {
  std::vector<uint8_t> owned;
  Value shared;
  size_t offset = 0;
  size_t size() const { return shared ? shared->size() : owned.size(); }
  const uint8_t* data() const { return shared ? shared->data() : owned.data(); }
};

struct Conn {
  uint64_t id = 0;
  Fd fd;
  sockaddr_storage addr{};  // the peer, formatted only when logged
  socklen_t addr_len = 0;
  std::string source;  // the peer's address without the port (Note [Pending connections])
  bool authenticated = false;
  store::ServerHandshake handshake;  // until authenticated
  std::string peer() const {
    return store::format_address(reinterpret_cast<const sockaddr*>(&addr), addr_len);
  }
  Clock::time_point handshake_due;
  // Input: in[0, in_len) are received bytes not yet consumed (a partial frame,
  // or whole frames held back while the output is over its bound).
  std::vector<uint8_t> in;
  size_t in_len = 0;
  Clock::time_point last_progress;
  Clock::time_point stall_due;
  bool stall_armed = false;
  bool paused = false;  // over output_high_water: neither read nor parsed
  // Output.
  std::deque<OutChunk> out;
  size_t out_bytes = 0;  // unsent bytes, owned and shared
  bool dirty = false;    // listed in Impl::dirty
  uint32_t epoll_events = 0;
  size_t accounted = 0;  // this connection's share of Impl::buffered
};

// The loop's own timers; the deadlines of parked requests are the state's.
enum class TimerKind : uint8_t { kHandshake, kStall, kResumeAccept };
using Timer = std::tuple<Clock::time_point, TimerKind, uint64_t>;

}  // namespace store::server

// Hidden like the rest of the internals (Note [Exported symbols]); as a member of
// a public class it would otherwise inherit default visibility.
struct __attribute__((visibility("hidden"))) TcpStoreServer::Impl {
  using Conn = store::server::Conn;
  using Timer = store::server::Timer;
  using Refusal = store::Refusal;
  using Fd = store::Fd;
  using Value = store::Value;

  explicit Impl(const TcpStoreServerOptions& o) : opts(o) {}
  ~Impl();

  void start();
  void run();

  // Events (tcp_server.cpp).
  void on_accept();
  void admit(Fd fd, const sockaddr_storage& addr, socklen_t addr_len, bool out_of_fds);
  bool short_of_fds(int fd) const;
  void on_timer(const Timer& t);
  void fire_timers(store::Clock::time_point now);

  // Input (tcp_server_io.cpp).
  void on_readable(Conn& c);
  size_t consume(Conn& c, const uint8_t* p, size_t n, bool* alive);
  bool consume_buffered(Conn& c);
  void arm_stall(Conn& c);
  bool on_frame(Conn& c, const uint8_t* frame, size_t size);
  bool on_handshake(Conn& c, const store::wire::Header& h, const uint8_t* payload, size_t n);
  void authenticate(Conn& c);

  // Output (tcp_server_io.cpp).
  void send(Conn& c, std::vector<uint8_t> frame);
  void send_value(Conn& c, uint32_t id, const Value& v);
  void send_error(Conn& c, uint32_t id, store::wire::ErrorCode code, const std::string& msg);
  void send_timeout(Conn& c, uint32_t id, const std::vector<uint32_t>& missing);
  bool flush(Conn& c);
  void update_events(Conn& c);
  void on_writable(Conn& c);
  bool over_water(const Conn& c) const { return c.out_bytes >= opts.output_high_water; }

  // Queues the state's answers on their connections (tcp_server_io.cpp).
  struct Answers final : store::Replies {
    explicit Answers(Impl* owner) : impl(owner) {}
    void ok(uint64_t conn, uint32_t request) override;
    void value(uint64_t conn, uint32_t request, const Value& v) override;
    void integer(uint64_t conn, uint32_t request, int64_t n) override;
    void boolean(uint64_t conn, uint32_t request, bool b) override;
    void timeout(uint64_t conn, uint32_t request, const std::vector<uint32_t>& missing) override;
    void error(uint64_t conn, uint32_t request, store::wire::ErrorCode code,
               const std::string& message) override;
    Impl* impl;
  };

  // Lifetime (tcp_server.cpp).
  void count_refusal(Refusal why, const std::string& peer, const std::string& detail);
  void refuse(Conn& c, Refusal why, const std::string& detail);
  void close_conn(Conn& c);
  void account(Conn& c);
  void publish();
  Conn* find(uint64_t id) {
    auto it = conns.find(id);
    return it == conns.end() ? nullptr : it->second.get();
  }

  TcpStoreServerOptions opts;
  std::unique_ptr<store::auth::Prover> prover;  // with a token
  Fd listen_fd;
  Fd epoll_fd;
  Fd wake_fd;
  Fd spare_fd;
  uint16_t port = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};
  // drain() sleeps here until no authenticated connection is left.
  std::mutex drain_mu;
  std::condition_variable drained;

  // Loop-thread state.
  Answers answers{this};
  store::ServerState state{opts.max_parked_per_connection, &answers};
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  store::PendingConnections unauthenticated;  // ids ascend with age
  uint64_t fd_limit = 0;  // RLIMIT_NOFILE's soft limit, read at each accept; 0: unlimited
  uint64_t next_conn = store::server::kFirstConnId;
  std::set<Timer> timers;
  std::vector<uint64_t> dirty;    // connections with output to flush
  std::vector<uint64_t> resumed;  // connections back under their output bound
  std::vector<uint8_t> scratch = std::vector<uint8_t>(store::server::kReadChunk);
  uint64_t buffered = 0;
  std::array<uint64_t, static_cast<size_t>(Refusal::kCount)> refused{};

  // Published counters (written by the loop thread only).
  struct Counters {
    std::atomic<uint64_t> accepted{0}, open{0}, unauthenticated{0}, peak_unauthenticated{0},
        authenticated{0}, requests{0}, parked{0}, keys{0}, buffered{0}, peak_buffered{0},
        clients{0};  // authenticated connections open now
    // When the last request came (steady_clock, ns since its epoch): what
    // drain(timeout, quiet) measures silence from (Note [Lingering host]).
    std::atomic<int64_t> last_request_ns{0};
    std::array<std::atomic<uint64_t>, static_cast<size_t>(Refusal::kCount)> refused{};
  } counters;
};

}  // namespace slurmddp
