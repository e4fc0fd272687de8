// The TCP store client (make_tcp_store in tcp_store.h): connects with retry
// and backoff, authenticates, then multiplexes the requests of any number of
// threads over one connection. Split by job:
//   client_connect.cpp   connecting, retry with backoff, the handshake
//   client_mux.cpp       one connection for many threads (the multiplexer)
//   client_requests.cpp  each Store operation's request and its reply
//   tcp_store.cpp        make_tcp_store: a client, and the server it may host
//
// Note [Store client leader/follower]
// Replies carry the request id and may come out of order (a parked get is
// answered after later requests). No background thread reads them: a calling
// thread whose reply has not arrived becomes the reader if nobody else is,
// reads what the socket has, hands each reply to the thread that owns its id,
// and gives up the reader role; the others sleep on a condition variable
// until their reply is handed over or their deadline passes. So a client costs
// one socket and no thread, and a blocked get in one thread never delays
// another thread's set.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "slurmddp/tcp_store.h"
#include "store/barrier_join.h"
#include "store/kv_table.h"
#include "store/socket.h"
#include "store/wire.h"

namespace slurmddp::store {

inline constexpr Millis kFirstBackoff{10};
inline constexpr Millis kMaxBackoff{1000};
// How much longer than a get/wait timeout the client waits for the server's
// own timeout reply before it gives up on the server.
inline constexpr Millis kReplyGrace{5000};

struct Reply {
  wire::Type type{};
  std::vector<uint8_t> payload;
};

// Thrown inside connect() for failures worth another attempt.
struct RetryableError {
  std::string why;
};

class TcpClient final : public TcpStore, public BarrierJoin {
 public:
  TcpClient(const TcpStoreOptions& o, std::string host, uint16_t port,
            std::unique_ptr<TcpStoreServer> server)
      : opts_(o),
        host_(std::move(host)),
        port_(port),
        endpoint_(format_endpoint(host_, port_)),
        server_(std::move(server)) {}

  // Closes the connection, then lets the others finish when this client
  // hosts the server (Note [Lingering host], tcp_store.cpp).
  ~TcpClient() override;

  void connect();

  std::string endpoint() const override { return endpoint_; }
  uint16_t port() const override { return port_; }
  TcpStoreServer* server() const override { return server_.get(); }

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  int64_t barrier_join(const std::string& rank_key, const std::string& count_key,
                       const std::string& done_key, int64_t world, Millis timeout) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool erase(const std::string& key) override;

 private:
  struct Slot {
    bool done = false;
    Reply reply;
  };

  Clock::time_point io_deadline() const { return Clock::now() + clamp_timeout(opts_.timeout); }
  Clock::time_point wait_deadline(Millis timeout) const {
    return Clock::now() + timeout + std::min(clamp_timeout(opts_.timeout), kReplyGrace);
  }

  Reply call(wire::Writer& w, Clock::time_point deadline, const std::string& what);
  void send_frame(const std::vector<uint8_t>& frame, Clock::time_point deadline,
                  const std::string& what);
  // Reads what the socket has (waiting until `deadline` for something) and
  // hands complete replies over. Called by the reader only, without mu_.
  void read_replies(Clock::time_point deadline);
  [[noreturn]] void fail(const std::string& what);
  void mark_dead(bool protocol, const std::string& why);

  // Handshake, on the fresh socket before any request (client_connect.cpp).
  void handshake(int fd, Clock::time_point deadline);
  Reply read_frame(int fd, Clock::time_point deadline, size_t max);
  static void send_handshake(int fd, const std::vector<uint8_t>& frame, Clock::time_point deadline);

  void expect(const Reply& r, wire::Type type);
  [[noreturn]] void protocol_violation(const std::string& what, const std::string& why);
  [[noreturn]] void throw_timeout(const char* op, const std::vector<std::string>& keys,
                                  const Reply& r, Millis timeout);
  Bytes read_value(const Reply& r, const std::string& what);
  int64_t read_int(const Reply& r, const std::string& what);
  bool read_bool(const Reply& r);

  const TcpStoreOptions opts_;
  const std::string host_;
  const uint16_t port_;
  const std::string endpoint_;
  std::unique_ptr<TcpStoreServer> server_;
  Fd fd_;

  std::atomic<uint32_t> next_id_{1};
  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool writing_ = false;  // a thread is sending a frame
  std::condition_variable write_free_;
  std::unordered_map<uint32_t, Slot*> slots_;
  bool reader_active_ = false;
  std::string dead_;  // why the connection is unusable; empty while it works
  bool dead_protocol_ = false;
  // The reader's input buffer (used only by the thread holding the role).
  std::vector<uint8_t> in_;
  size_t in_len_ = 0;
};

}  // namespace slurmddp::store
