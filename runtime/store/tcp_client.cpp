// The TCP store client: connects with retry and backoff, authenticates, then
// multiplexes the requests of any number of threads over one connection.
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
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "common/log.h"
#include "common/quote.h"
#include "slurmddp/error.h"
#include "slurmddp/tcp_store.h"
#include "slurmddp/tcp_store_limits.h"
#include "store/auth.h"
#include "store/barrier_join.h"
#include "store/kv_table.h"
#include "store/socket.h"
#include "store/wire.h"

namespace slurmddp {

namespace {

using store::Clock;
using store::Fd;
namespace wire = store::wire;
namespace auth = store::auth;
using common::quote;

constexpr Millis kFirstBackoff{10};
constexpr Millis kMaxBackoff{1000};
// How much longer than a get/wait timeout the client waits for the server's
// own timeout reply before it gives up on the server.
constexpr Millis kReplyGrace{5000};

struct Reply {
  wire::Type type{};
  std::vector<uint8_t> payload;
};

// Thrown inside connect() for failures worth another attempt.
struct RetryableError {
  std::string why;
};

class TcpClient final : public TcpStore, public store::BarrierJoin {
 public:
  TcpClient(const TcpStoreOptions& o, std::string host, uint16_t port,
            std::unique_ptr<TcpStoreServer> server)
      : opts_(o),
        host_(std::move(host)),
        port_(port),
        endpoint_(store::format_endpoint(host_, port_)),
        server_(std::move(server)) {}

  // A hosting store lets the other ranks finish before its server goes
  // (TcpStoreOptions::linger): its own connection closes first.
  //
  // Note [Lingering host]
  //   The host used to wait up to the whole linger (5 s) for every client to
  //   disconnect. A peer that is stopped (SIGSTOP, a hung node) never does,
  //   so rank 0 left 5 s after the others, past the timeout every user
  //   configured. The linger is for the others' last requests (a barrier's
  //   reply, a failure diagnosis), and those are traffic: so it also ends when
  //   no request has come for linger_quiet (0.5 s). A client idle that long
  //   after the host's own end is done, or cannot answer anyway.
  ~TcpClient() override {
    if (!server_) return;
    fd_.reset();
    server_->drain(opts_.linger, opts_.linger_quiet);
  }

  void connect();

  std::string endpoint() const override { return endpoint_; }
  uint16_t port() const override { return port_; }
  TcpStoreServer* server() const override { return server_.get(); }

  void set(const std::string& key, const Bytes& value) override {
    store::validate_key("set", key);
    store::validate_value("set", key, value.size());
    wire::Writer w(wire::Type::kSet, 0);
    w.str(key);
    w.bytes(value.data(), value.size());
    expect(call(w, io_deadline(), "set key " + quote(key)), wire::Type::kOk);
  }

  Bytes get(const std::string& key, Millis timeout) override {
    store::validate_key("get", key);
    timeout = store::clamp_timeout(timeout);
    wire::Writer w(wire::Type::kGet, 0);
    w.str(key);
    w.i64(timeout.count());
    const std::string what = "get key " + quote(key);
    Reply r = call(w, wait_deadline(timeout), what);
    if (r.type == wire::Type::kTimeout) throw_timeout("get", {key}, r, timeout);
    expect(r, wire::Type::kValue);
    return read_value(r, what);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    store::validate_key("add", key);
    wire::Writer w(wire::Type::kAdd, 0);
    w.str(key);
    w.i64(delta);
    const std::string what = "add to key " + quote(key);
    return read_int(call(w, io_deadline(), what), what);
  }

  int64_t barrier_join(const std::string& rank_key, const std::string& count_key,
                       const std::string& done_key, int64_t world, Millis timeout) override {
    for (const std::string* k : {&rank_key, &count_key, &done_key}) store::validate_key("join", *k);
    timeout = store::clamp_timeout(timeout);
    wire::Writer w(wire::Type::kJoin, 0);
    w.str(rank_key);
    w.str(count_key);
    w.str(done_key);
    w.i64(world);
    w.i64(timeout.count());
    const std::string what = "join the barrier of key " + quote(done_key);
    Reply r = call(w, wait_deadline(timeout), what);
    if (r.type == wire::Type::kTimeout) throw_timeout("wait for", {done_key}, r, timeout);
    return read_int(r, what);
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    store::validate_key("compare_set", key);
    store::validate_value("compare_set", key, expected.size());
    store::validate_value("compare_set", key, desired.size());
    wire::Writer w(wire::Type::kCompareSet, 0);
    w.str(key);
    w.bytes(expected.data(), expected.size());
    w.bytes(desired.data(), desired.size());
    const std::string what = "compare_set key " + quote(key);
    Reply r = call(w, io_deadline(), what);
    expect(r, wire::Type::kValue);
    return read_value(r, what);
  }

  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    store::validate_keys("wait for", keys);
    timeout = store::clamp_timeout(timeout);
    wire::Writer w(wire::Type::kWait, 0);
    w.u32(static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) w.str(k);
    w.i64(timeout.count());
    Reply r = call(w, wait_deadline(timeout), "wait for " + store::format_keys(keys));
    if (r.type == wire::Type::kTimeout) throw_timeout("wait for", keys, r, timeout);
    expect(r, wire::Type::kOk);
  }

  bool check(const std::vector<std::string>& keys) override {
    store::validate_keys("check", keys);
    wire::Writer w(wire::Type::kCheck, 0);
    w.u32(static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) w.str(k);
    return read_bool(call(w, io_deadline(), "check " + store::format_keys(keys)));
  }

  bool erase(const std::string& key) override {
    store::validate_key("erase", key);
    wire::Writer w(wire::Type::kErase, 0);
    w.str(key);
    return read_bool(call(w, io_deadline(), "erase key " + quote(key)));
  }

 private:
  struct Slot {
    bool done = false;
    Reply reply;
  };

  Clock::time_point io_deadline() const {
    return Clock::now() + store::clamp_timeout(opts_.timeout);
  }
  Clock::time_point wait_deadline(Millis timeout) const {
    return Clock::now() + timeout + std::min(store::clamp_timeout(opts_.timeout), kReplyGrace);
  }

  Reply call(wire::Writer& w, Clock::time_point deadline, const std::string& what);
  void send_frame(const std::vector<uint8_t>& frame, Clock::time_point deadline,
                  const std::string& what);
  // Reads what the socket has (waiting until `deadline` for something) and
  // hands complete replies over. Called by the reader only, without mu_.
  void read_replies(Clock::time_point deadline);
  [[noreturn]] void fail(const std::string& what);
  void mark_dead(bool protocol, const std::string& why);

  // Handshake, on the fresh socket before any request.
  void handshake(int fd, Clock::time_point deadline);
  Reply read_frame(int fd, Clock::time_point deadline, size_t max);
  static void send_handshake(int fd, const std::vector<uint8_t>& frame);

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

// ---- connecting ----

void TcpClient::connect() {
  const auto start = Clock::now();
  const auto deadline = start + store::clamp_timeout(opts_.timeout);
  std::minstd_rand jitter(static_cast<uint32_t>(::getpid()) ^
                          static_cast<uint32_t>(start.time_since_epoch().count()));
  Millis backoff = kFirstBackoff;
  std::string why = "no attempt was made";
  int attempts = 0;
  while (true) {
    ++attempts;
    Fd fd = store::connect_once(host_, port_, deadline, &why);
    if (fd.valid()) {
      try {
        handshake(fd.get(), deadline);
        fd_ = std::move(fd);
        return;
      } catch (const RetryableError& e) {
        why = e.why;
      }
    }
    auto now = Clock::now();
    if (now >= deadline) break;
    // Exponential backoff with +-25% jitter, so that thousands of ranks that
    // failed together do not all retry together; never past the deadline.
    auto spread =
        std::uniform_int_distribution<int64_t>(-backoff.count() / 4, backoff.count() / 4)(jitter);
    auto pause = std::min<Clock::duration>(backoff + Millis(spread), deadline - now);
    std::this_thread::sleep_for(pause);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  char tried[32];
  std::snprintf(tried, sizeof tried, "%.2f",
                std::chrono::duration<double>(Clock::now() - start).count());
  throw TimeoutError("store: failed to connect to server " + endpoint_ + ": " + why +
                     "; tried for " + tried + " s, attempts=" + std::to_string(attempts) +
                     ", timeout_ms=" + std::to_string(opts_.timeout.count()));
}

Reply TcpClient::read_frame(int fd, Clock::time_point deadline, size_t max) {
  std::vector<uint8_t> buf(max);
  size_t have = 0;
  while (true) {
    if (have >= wire::kLengthSize) {
      uint32_t len = wire::load_u32(buf.data());
      if (wire::check_length(len, max) != wire::LengthCheck::kOk) {
        throw ProtocolError("store: failed to connect to server " + endpoint_ +
                            ": it does not speak this protocol (a frame length of " +
                            std::to_string(len) + " bytes in the handshake)");
      }
      if (have >= wire::kLengthSize + len) break;
    }
    pollfd pfd{fd, POLLIN, 0};
    int k = poll(&pfd, 1, store::poll_timeout(deadline));
    if (k == 0) throw RetryableError{"the server accepted the connection but sent no handshake"};
    if (k < 0) continue;  // EINTR
    // The server sends nothing after its hello until the client answers, so
    // reading up to `max` bytes cannot take bytes of a later frame.
    ssize_t r = ::recv(fd, buf.data() + have, max - have, 0);
    if (r == 0) throw RetryableError{"the server closed the connection during the handshake"};
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw RetryableError{std::string("the handshake failed: ") + std::strerror(errno)};
    }
    have += static_cast<size_t>(r);
  }
  wire::Header h = wire::decode_header(buf.data());
  if (h.version != wire::kVersion) {
    throw ProtocolError("store: failed to connect to server " + endpoint_ +
                        ": it speaks protocol version " + std::to_string(h.version) +
                        ", this client speaks " + std::to_string(wire::kVersion));
  }
  Reply r;
  r.type = h.type;
  r.payload.assign(buf.begin() + wire::kHeaderSize, buf.begin() + wire::kLengthSize + h.length);
  return r;
}

void TcpClient::send_handshake(int fd, const std::vector<uint8_t>& frame) {
  size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t n = ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      throw RetryableError{std::string("the handshake failed: ") + std::strerror(errno)};
    }
  }
}

// The client's side of the handshake (Note [Store wire protocol]): one round
// trip, then the proof goes out and requests may follow at once.
void TcpClient::handshake(int fd, Clock::time_point deadline) {
  const std::string where = "store: failed to authenticate to server " + endpoint_ + ": ";
  auth::Nonce client_nonce = auth::random_nonce();
  wire::Writer hello(wire::Type::kClientHello, 0);
  hello.raw(client_nonce.data(), client_nonce.size());
  send_handshake(fd, hello.finish());

  Reply answer = read_frame(fd, deadline, wire::kMaxHandshakeFrame);
  wire::Reader r(answer.payload.data(), answer.payload.size());
  const uint8_t auth_required = r.u8();
  auth::Nonce server_nonce{};
  r.raw(server_nonce.data(), server_nonce.size());
  auth::Proof server_proof{};
  if (auth_required == 1) r.raw(server_proof.data(), server_proof.size());
  if (answer.type != wire::Type::kServerHello || !r.done() || auth_required > 1) {
    throw ProtocolError("store: failed to connect to server " + endpoint_ +
                        ": it does not speak this protocol (no valid server hello)");
  }
  const bool have_token = !opts_.token.empty();
  if (!auth_required) {
    if (have_token) {
      throw ProtocolError(where +
                          "the server does not ask for a token but this client has one "
                          "(SLURMDDP_TOKEN set here, not on the server?); refusing a server that "
                          "cannot prove it belongs to this job");
    }
    SLURMDDP_LOG_DEBUG("store", "server " << endpoint_
                                          << " runs without a token: the connection is not "
                                             "authenticated");
    return;
  }
  // Never prove anything to a server that has not proved itself first; tell
  // it why, so that it can log the refusal.
  auto abort = [&](wire::AbortReason why, const std::string& msg) {
    wire::Writer w(wire::Type::kAuthAbort, 0);
    w.u8(static_cast<uint8_t>(why));
    try {
      send_handshake(fd, w.finish());
    } catch (const RetryableError&) {
      // The refusal below says everything the caller needs.
    }
    throw ProtocolError(where + "authentication refused: " + msg);
  };
  if (!have_token) {
    abort(wire::AbortReason::kNoToken,
          "the server requires a token and this client has none (is SLURMDDP_TOKEN set for "
          "every rank?)");
  }
  const auth::Prover prover(opts_.token);
  if (!auth::equal(server_proof, prover.server_proof(client_nonce, server_nonce))) {
    abort(wire::AbortReason::kWrongProof,
          "the server's proof does not match this client's token (SLURMDDP_TOKEN differs "
          "between this rank and the server, or the port belongs to another job's server)");
  }
  wire::Writer proof(wire::Type::kClientProof, 0);
  auth::Proof mine = prover.client_proof(server_nonce, client_nonce);
  proof.raw(mine.data(), mine.size());
  send_handshake(fd, proof.finish());
}

// ---- requests ----

// Sends one request and waits for its reply (Note [Store client leader/follower]).
Reply TcpClient::call(wire::Writer& w, Clock::time_point deadline, const std::string& what) {
  const uint32_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  std::vector<uint8_t> frame = w.finish();
  // The id sits after the length, version and type bytes.
  frame[6] = static_cast<uint8_t>(id >> 24);
  frame[7] = static_cast<uint8_t>(id >> 16);
  frame[8] = static_cast<uint8_t>(id >> 8);
  frame[9] = static_cast<uint8_t>(id);
  Slot slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!dead_.empty()) fail(what);
    slots_[id] = &slot;
  }
  struct Unregister {
    TcpClient* self;
    uint32_t id;
    ~Unregister() {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->slots_.erase(id);
    }
  } unregister{this, id};
  send_frame(frame, deadline, what);

  std::unique_lock<std::mutex> lock(mu_);
  while (!slot.done) {
    if (!dead_.empty()) fail(what);
    if (Clock::now() >= deadline) {
      throw TimeoutError("store: failed to " + what + ": no reply from server " + endpoint_ +
                         " in time (is the server overloaded or stopped?)");
    }
    if (reader_active_) {
      cv_.wait_until(lock, deadline);
      continue;
    }
    reader_active_ = true;
    lock.unlock();
    try {
      read_replies(deadline);
    } catch (...) {
      lock.lock();
      reader_active_ = false;
      cv_.notify_all();
      throw;
    }
    lock.lock();
    reader_active_ = false;
    cv_.notify_all();
  }
  return std::move(slot.reply);
}

void TcpClient::send_frame(const std::vector<uint8_t>& frame, Clock::time_point deadline,
                           const std::string& what) {
  // One frame on the wire at a time. (A flag and a condition variable rather
  // than std::timed_mutex, whose timed lock ThreadSanitizer cannot follow.)
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!write_free_.wait_until(lock, deadline, [this] { return !writing_; })) {
      throw TimeoutError("store: failed to " + what + ": could not send to server " + endpoint_ +
                         " in time (another thread's request is still being sent)");
    }
    writing_ = true;
  }
  struct Release {
    TcpClient* self;
    ~Release() {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->writing_ = false;
      self->write_free_.notify_one();
    }
  } release{this};
  size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t n = ::send(fd_.get(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_.get(), POLLOUT, 0};
      if (poll(&p, 1, store::poll_timeout(deadline)) > 0) continue;
      if (Clock::now() < deadline) continue;
      // Part of a frame on the wire and no way to finish it: the stream is lost.
      if (sent > 0) mark_dead(false, "a request was cut off: the server stopped reading");
      throw TimeoutError("store: failed to " + what + ": server " + endpoint_ +
                         " did not take the request in time");
    }
    mark_dead(false, n < 0 ? std::strerror(errno) : "send returned 0");
    std::lock_guard<std::mutex> g(mu_);
    fail(what);
  }
}

void TcpClient::read_replies(Clock::time_point deadline) {
  pollfd p{fd_.get(), POLLIN, 0};
  int k = poll(&p, 1, store::poll_timeout(deadline));
  if (k <= 0) return;  // the caller checks its deadline
  while (true) {
    // Small replies go through a stack buffer; the rest of a large frame
    // whose length is known (and checked) is read straight into place.
    uint8_t small[16 * 1024];
    size_t rest = 0;
    if (in_len_ >= wire::kLengthSize) {
      uint32_t len = wire::load_u32(in_.data());
      if (wire::check_length(len, wire::kMaxFrame) != wire::LengthCheck::kOk) {
        mark_dead(true, "the server sent a malformed frame");
        return;
      }
      rest = wire::kLengthSize + len - std::min<size_t>(in_len_, wire::kLengthSize + len);
    }
    uint8_t* dst = small;
    size_t cap = sizeof small;
    if (rest > sizeof small) {
      if (in_.size() < in_len_ + rest) in_.resize(in_len_ + rest);
      dst = in_.data() + in_len_;
      cap = rest;
    }
    ssize_t n = ::recv(fd_.get(), dst, cap, 0);
    if (n == 0) {
      mark_dead(false, "the server closed the connection");
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      mark_dead(false, std::strerror(errno));
      return;
    }
    if (dst == small) {
      if (in_.size() < in_len_ + static_cast<size_t>(n)) in_.resize(in_len_ + n);
      std::memcpy(in_.data() + in_len_, small, static_cast<size_t>(n));
    }
    in_len_ += static_cast<size_t>(n);
    if (static_cast<size_t>(n) < cap) break;  // drained: do not pay for an EAGAIN
  }
  // Hand over complete frames.
  size_t pos = 0;
  std::vector<std::pair<uint32_t, Reply>> done;
  while (in_len_ - pos >= wire::kHeaderSize) {
    const uint8_t* f = in_.data() + pos;
    uint32_t len = wire::load_u32(f);
    if (wire::check_length(len, wire::kMaxFrame) != wire::LengthCheck::kOk ||
        f[wire::kLengthSize] != wire::kVersion) {
      mark_dead(true, "the server sent a malformed frame");
      return;
    }
    size_t total = wire::kLengthSize + len;
    if (in_len_ - pos < total) break;
    wire::Header h = wire::decode_header(f);
    if (h.type == wire::Type::kAuthRefused) {
      // Only after a proof the server did not accept, which equal tokens never cause.
      wire::Reader rd(f + wire::kHeaderSize, total - wire::kHeaderSize);
      rd.u8();
      mark_dead(true, "authentication refused by the server: " + rd.str(1024));
      return;
    }
    Reply r;
    r.type = h.type;
    r.payload.assign(f + wire::kHeaderSize, f + total);
    done.emplace_back(h.id, std::move(r));
    pos += total;
  }
  if (pos > 0) {
    std::memmove(in_.data(), in_.data() + pos, in_len_ - pos);
    in_len_ -= pos;
  }
  if (in_len_ == 0 && in_.capacity() > (1u << 20)) std::vector<uint8_t>().swap(in_);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, r] : done) {
    auto it = slots_.find(id);
    if (it == slots_.end()) continue;  // its caller gave up already
    it->second->reply = std::move(r);
    it->second->done = true;
  }
}

void TcpClient::mark_dead(bool protocol, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dead_.empty()) {
    dead_ = why;
    dead_protocol_ = protocol;
  }
  cv_.notify_all();
}

// Throws the error of a lost connection. Call with mu_ held.
void TcpClient::fail(const std::string& what) {
  std::string msg =
      "store: failed to " + what + ": lost the connection to server " + endpoint_ + ": " + dead_;
  if (dead_protocol_) throw ProtocolError(msg);
  throw PeerError(msg);
}

void TcpClient::expect(const Reply& r, wire::Type type) {
  if (r.type == type) return;
  if (r.type == wire::Type::kError) {
    wire::Reader rd(r.payload.data(), r.payload.size());
    auto code = static_cast<wire::ErrorCode>(rd.u8());
    std::string msg = rd.str(size_t{64} * 1024);
    if (code == wire::ErrorCode::kInvalidArgument) throw InvalidArgument(msg);
    if (code == wire::ErrorCode::kBusy) throw Error(msg + "; server=" + endpoint_);
    throw ProtocolError(msg + "; server=" + endpoint_);
  }
  protocol_violation(std::string("read a reply"), std::string("expected a ") +
                                                      wire::type_name(type) + " reply, got " +
                                                      wire::type_name(r.type));
}

void TcpClient::protocol_violation(const std::string& what, const std::string& why) {
  mark_dead(true, why);
  throw ProtocolError("store: failed to " + what + ": server " + endpoint_ + " sent " + why);
}

void TcpClient::throw_timeout(const char* op, const std::vector<std::string>& keys, const Reply& r,
                              Millis timeout) {
  wire::Reader rd(r.payload.data(), r.payload.size());
  uint32_t n = rd.u32();
  std::vector<std::string> missing;
  for (uint32_t i = 0; i < n && rd.ok(); ++i) {
    uint32_t k = rd.u32();
    if (k < keys.size()) missing.push_back(keys[k]);
  }
  throw TimeoutError(store::timeout_message(op, keys, missing, timeout, "server=" + endpoint_));
}

Bytes TcpClient::read_value(const Reply& r, const std::string& what) {
  wire::Reader rd(r.payload.data(), r.payload.size());
  Bytes v = rd.bytes(kMaxValueSize);
  if (!rd.done()) protocol_violation(what, "a malformed value reply");
  return v;
}

int64_t TcpClient::read_int(const Reply& r, const std::string& what) {
  expect(r, wire::Type::kInt);
  wire::Reader rd(r.payload.data(), r.payload.size());
  int64_t v = rd.i64();
  if (!rd.done()) protocol_violation(what, "a malformed reply");
  return v;
}

bool TcpClient::read_bool(const Reply& r) {
  expect(r, wire::Type::kBool);
  return !r.payload.empty() && r.payload[0] != 0;
}

}  // namespace

std::shared_ptr<TcpStore> make_tcp_store(const TcpStoreOptions& options) {
  std::unique_ptr<TcpStoreServer> server;
  std::string host = options.host;
  uint16_t port = options.port;
  if (options.is_server) {
    TcpStoreServerOptions so = options.server;
    so.port = options.port;
    so.token = options.token;
    server = TcpStoreServer::start(so);
    port = server->port();
    // The hosting rank talks to its own server over loopback.
    if (so.bind_host.empty() || so.bind_host == "0.0.0.0") {
      host = "127.0.0.1";
    } else if (so.bind_host == "::") {
      host = "::1";
    } else {
      host = so.bind_host;
    }
  }
  auto client = std::make_shared<TcpClient>(options, host, port, std::move(server));
  client->connect();
  return client;
}

}  // namespace slurmddp
