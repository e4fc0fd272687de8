// What the TCP store server keeps, without sockets: the key-value table, the
// get/wait/join requests parked until their keys appear or their deadline
// passes, and the server's side of the barrier join (Note [Barrier join] in
// barrier_join.h). The server's event loop (tcp_server.h) hands it the
// decoded requests of authenticated connections, fires its deadlines, and
// queues its answers on the connections; a test drives it with a recording
// Replies and a clock of its choosing.
//
// Not thread-safe: the server owns it on its one event-loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "store/kv_table.h"
#include "store/wire.h"

namespace slurmddp::store {

using Clock = std::chrono::steady_clock;

// Where ServerState's answers go, each addressed to a connection and the id of
// the request it answers. Every call corresponds to one reply frame of
// Note [Store wire protocol].
class Replies {
 public:
  virtual ~Replies() = default;
  virtual void ok(uint64_t conn, uint32_t request) = 0;
  // `v` is the stored value itself (never null), shared rather than copied.
  virtual void value(uint64_t conn, uint32_t request, const Value& v) = 0;
  virtual void integer(uint64_t conn, uint32_t request, int64_t n) = 0;
  virtual void boolean(uint64_t conn, uint32_t request, bool b) = 0;
  // `missing`: indices into the request's keys of those still absent.
  virtual void timeout(uint64_t conn, uint32_t request, const std::vector<uint32_t>& missing) = 0;
  virtual void error(uint64_t conn, uint32_t request, wire::ErrorCode code,
                     const std::string& message) = 0;
};

class ServerState {
 public:
  // A connection may have at most `max_parked_per_connection` requests parked;
  // more are answered with kBusy. Answers go to `replies`, which must outlive
  // this.
  ServerState(size_t max_parked_per_connection, Replies* replies)
      : max_parked_(max_parked_per_connection), replies_(replies) {}

  // Answers `req` (a decoded request of connection `conn`) at once, or parks it
  // until its keys exist or `now` + its timeout (a timeout of 0 answers with
  // kTimeout at once). Wakes and answers the parked requests it completes.
  // Consumes req's keys and value.
  void handle(uint64_t conn, wire::Request&& req, Clock::time_point now);

  // The earliest deadline of a parked request; Clock::time_point::max() when
  // nothing is parked.
  Clock::time_point next_deadline() const {
    return deadlines_.empty() ? Clock::time_point::max() : deadlines_.begin()->first;
  }
  // Answers the parked request of the earliest deadline with kTimeout (the
  // keys still missing) and forgets it. Nothing when nothing is parked.
  void expire_next();

  // Forgets, unanswered, the requests connection `conn` has parked (it closed).
  void drop_connection(uint64_t conn);

  size_t parked() const { return waiters_.size(); }
  size_t keys() const { return table_.size(); }
  const KvTable& table() const { return table_; }

 private:
  struct Waiter {
    uint64_t conn = 0;
    uint32_t request = 0;
    wire::Type type{};
    std::vector<std::string> keys;
    std::vector<std::string> registered;  // keys whose waiting_on_ sets hold us
    Clock::time_point deadline;
    int64_t joined = 0;  // kJoin: the count the reply carries
  };

  void park(uint64_t conn, wire::Request& req, Clock::time_point now);
  void wake(const std::string& key);
  void finish_waiter(uint64_t wid, bool timed_out);
  void unregister(uint64_t wid, Waiter& w);
  void drop_waiter(uint64_t wid);

  const size_t max_parked_;
  Replies* const replies_;
  KvTable table_;
  const Value mark_ = std::make_shared<const Bytes>(Bytes{'1'});  // barrier keys hold "1"
  std::unordered_map<uint64_t, Waiter> waiters_;
  std::unordered_map<std::string, std::unordered_set<uint64_t>> waiting_on_;
  std::unordered_map<uint64_t, std::unordered_set<uint64_t>> parked_by_conn_;
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines_;  // (deadline, waiter)
  uint64_t next_waiter_ = 1;
};

}  // namespace slurmddp::store
