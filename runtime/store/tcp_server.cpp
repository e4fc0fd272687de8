// The TCP store server: one thread, epoll (level-triggered), non-blocking
// sockets. Blocked get/wait requests are parked in the state (server_state.h)
// and answered when their keys appear or their deadline passes; clients never
// poll.
//
// Note [Store server bounds]
// Nothing a client sends can make the server allocate more than it has
// accepted as input, and what it accepts is bounded per connection:
//  - before the handshake a connection may send one frame of at most
//    kMaxHandshakeFrame bytes; a longer length field closes it unread, and it
//    must finish the handshake within handshake_timeout;
//  - at most max_unauthenticated connections may be in the handshake; each
//    new one beyond that closes the one that has waited longest;
//  - after it, frames are bounded by kMaxFrame and buffered only as their bytes
//    arrive (a length field alone allocates nothing); a partial frame that
//    makes no progress for stall_timeout closes the connection;
//  - a connection's pending replies above output_high_water stop its reads,
//    and at most max_parked_per_connection requests may be parked per
//    connection; replies to get point at the stored value instead of copying it;
//  - out of file descriptors, one spare fd lets the server accept and close
//    the newest connection instead of spinning on EMFILE (and without the
//    spare it stops watching the listening socket for kAcceptPause).
// So with a token, hostile clients cost at most max_unauthenticated *
// kMaxHandshakeFrame bytes of buffers plus their sockets. Without a token
// anyone who connects is a client, as with torch's store.
//
// Note [Store server logging]
// Each refused connection is logged once, at warn, naming the peer and the
// reason and never the token. So that a flood cannot flood the log, only the
// first kLogBurst refusals of each reason are logged; the rest are counted
// (TcpStoreServerStats) and summarized when the server stops.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "common/log.h"
#include "slurmddp/error.h"
#include "slurmddp/tcp_store.h"
#include "slurmddp/tcp_store_limits.h"
#include "store/auth.h"
#include "store/kv_table.h"
#include "store/refusal.h"
#include "store/server_handshake.h"
#include "store/server_state.h"
#include "store/socket.h"
#include "store/wire.h"

namespace slurmddp {

namespace {

using store::Clock;
using store::Fd;
using store::Refusal;
using store::refusal_name;
using store::Value;
namespace wire = store::wire;
namespace auth = store::auth;

constexpr const char* kComponent = "store";
constexpr uint64_t kListenId = 1;
constexpr uint64_t kWakeId = 2;
constexpr uint64_t kFirstConnId = 16;
constexpr size_t kReadChunk = 64 * 1024;
// Bytes read from one connection per readiness event, so that one busy
// connection cannot starve the others.
constexpr size_t kReadBudget = 1 << 20;
constexpr int kAcceptBatch = 256;
constexpr int kLogBurst = 16;
constexpr Millis kAcceptPause{100};

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

}  // namespace

struct TcpStoreServer::Impl {
  explicit Impl(const TcpStoreServerOptions& o) : opts(o) {}
  ~Impl();

  void start();
  void run();

  // Events.
  void on_accept();
  void on_readable(Conn& c);
  void on_writable(Conn& c);
  void on_timer(const Timer& t);
  void fire_timers(Clock::time_point now);

  // Input.
  size_t consume(Conn& c, const uint8_t* p, size_t n, bool* alive);
  bool consume_buffered(Conn& c);
  void arm_stall(Conn& c);
  bool on_frame(Conn& c, const uint8_t* frame, size_t size);
  bool on_handshake(Conn& c, const wire::Header& h, const uint8_t* payload, size_t n);
  void authenticate(Conn& c);

  // Output.
  void send(Conn& c, std::vector<uint8_t> frame);
  void send_value(Conn& c, uint32_t id, const Value& v);
  void send_error(Conn& c, uint32_t id, wire::ErrorCode code, const std::string& msg);
  void send_timeout(Conn& c, uint32_t id, const std::vector<uint32_t>& missing);
  bool flush(Conn& c);
  void update_events(Conn& c);
  bool over_water(const Conn& c) const { return c.out_bytes >= opts.output_high_water; }

  // Queues the state's answers on their connections.
  struct Answers final : store::Replies {
    explicit Answers(Impl* owner) : impl(owner) {}
    void ok(uint64_t conn, uint32_t request) override;
    void value(uint64_t conn, uint32_t request, const Value& v) override;
    void integer(uint64_t conn, uint32_t request, int64_t n) override;
    void boolean(uint64_t conn, uint32_t request, bool b) override;
    void timeout(uint64_t conn, uint32_t request, const std::vector<uint32_t>& missing) override;
    void error(uint64_t conn, uint32_t request, wire::ErrorCode code,
               const std::string& message) override;
    Impl* impl;
  };

  // Lifetime.
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
  std::unique_ptr<auth::Prover> prover;  // with a token
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
  std::set<uint64_t> unauthenticated;  // ids ascend with age: begin() is the oldest
  uint64_t next_conn = kFirstConnId;
  std::set<Timer> timers;
  std::vector<uint64_t> dirty;    // connections with output to flush
  std::vector<uint64_t> resumed;  // connections back under their output bound
  std::vector<uint8_t> scratch = std::vector<uint8_t>(kReadChunk);
  uint64_t buffered = 0;
  std::array<uint64_t, static_cast<size_t>(Refusal::kCount)> refused{};

  // Published counters (written by the loop thread only).
  struct Counters {
    std::atomic<uint64_t> accepted{0}, open{0}, unauthenticated{0}, peak_unauthenticated{0},
        authenticated{0}, requests{0}, parked{0}, keys{0}, buffered{0}, peak_buffered{0},
        clients{0};  // authenticated connections open now
    std::array<std::atomic<uint64_t>, static_cast<size_t>(Refusal::kCount)> refused{};
  } counters;
};

TcpStoreServer::Impl::~Impl() {
  if (thread.joinable()) {
    stopping.store(true);
    uint64_t one = 1;
    ssize_t n = ::write(wake_fd.get(), &one, sizeof one);
    (void)n;
    thread.join();
  }
}

void TcpStoreServer::Impl::start() {
  if (!opts.token.empty()) prover = std::make_unique<auth::Prover>(opts.token);
  listen_fd = store::listen_tcp(opts.bind_host, opts.port, &port);
  epoll_fd = Fd(epoll_create1(EPOLL_CLOEXEC));
  wake_fd = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  spare_fd = Fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!epoll_fd.valid() || !wake_fd.valid()) {
    throw Error(std::string("store: failed to start the server: ") + std::strerror(errno) +
                "; port=" + std::to_string(port));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, listen_fd.get(), &ev);
  ev.data.u64 = kWakeId;
  epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, wake_fd.get(), &ev);
  if (opts.token.empty()) {
    SLURMDDP_LOG_DEBUG(kComponent, "server on port " << port
                                                     << " runs without a token: any client that "
                                                        "can reach the port may use the store");
  }
  thread = std::thread([this] {
    pthread_setname_np(pthread_self(), "ddp-store");  // shows in top -H, ps -L
    run();
  });
}

void TcpStoreServer::Impl::run() {
  std::array<epoll_event, 256> events{};
  while (!stopping.load(std::memory_order_relaxed)) {
    Clock::time_point next = state.next_deadline();
    if (!timers.empty()) next = std::min(next, std::get<0>(*timers.begin()));
    const int timeout = next == Clock::time_point::max() ? -1 : store::poll_timeout(next);
    int n = epoll_wait(epoll_fd.get(), events.data(), static_cast<int>(events.size()), timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      SLURMDDP_LOG_ERROR(kComponent, "server loop failed: epoll_wait: " << std::strerror(errno)
                                                                        << "; port=" << port);
      break;
    }
    for (int i = 0; i < n; ++i) {
      uint64_t id = events[i].data.u64;
      if (id == kListenId) {
        on_accept();
      } else if (id == kWakeId) {
        // Only stop() writes it.
      } else if (Conn* c = find(id)) {
        uint32_t ev = events[i].events;
        if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(*c);
        if ((c = find(id)) != nullptr && (ev & EPOLLOUT)) on_writable(*c);
      }
    }
    fire_timers(Clock::now());
    // Published before the replies go out as well, so that a client that
    // sees a reply sees counters at least as new as it.
    publish();
    // Flushing may resume a paused connection, whose buffered frames may
    // queue more output; each round stops at the output bound again.
    while (!dirty.empty() || !resumed.empty()) {
      std::vector<uint64_t> ids;
      ids.swap(dirty);
      for (uint64_t id : ids) {
        if (Conn* c = find(id)) {
          c->dirty = false;
          flush(*c);
        }
      }
      ids.clear();
      ids.swap(resumed);
      for (uint64_t id : ids) {
        if (Conn* c = find(id)) consume_buffered(*c);
      }
    }
    publish();
  }
  for (size_t i = 0; i < refused.size(); ++i) {
    if (refused[i] > static_cast<uint64_t>(kLogBurst)) {
      SLURMDDP_LOG_WARN(kComponent, "server on port "
                                        << port << " refused " << refused[i] << " connections as "
                                        << refusal_name(static_cast<Refusal>(i)) << " in total");
    }
  }
}

void TcpStoreServer::Impl::on_accept() {
  for (int i = 0; i < kAcceptBatch; ++i) {
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof addr;
    int fd = accept4(listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), &addr_len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if ((errno == EMFILE || errno == ENFILE) && spare_fd.valid()) {
        // Free the spare fd to take the connection off the queue and close it.
        spare_fd.reset();
        Fd victim(accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (victim.valid()) {
          count_refusal(Refusal::kOverCapacity, store::peer_name(victim.get()),
                        "out of file descriptors");
        }
        victim.reset();
        spare_fd = Fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // Out of fds without a spare (another thread took it), or out of
        // memory: stop watching the listening socket for a moment instead of
        // spinning on it; the kernel keeps the connections queued meanwhile.
        SLURMDDP_LOG_WARN(kComponent, "cannot accept connections for now: "
                                          << std::strerror(errno)
                                          << "; retrying in 100 ms; port=" << port);
        epoll_event ev{};
        ev.data.u64 = kListenId;
        epoll_ctl(epoll_fd.get(), EPOLL_CTL_MOD, listen_fd.get(), &ev);
        timers.emplace(Clock::now() + kAcceptPause, TimerKind::kResumeAccept, kListenId);
      }
      return;
    }
    auto conn = std::make_unique<Conn>();
    Conn& c = *conn;
    c.id = next_conn++;
    c.fd = Fd(fd);
    c.addr = addr;  // TCP_NODELAY comes from the listening socket
    c.addr_len = addr_len;
    conns.emplace(c.id, std::move(conn));
    unauthenticated.insert(c.id);
    counters.accepted.fetch_add(1, std::memory_order_relaxed);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = c.id;
    c.epoll_events = EPOLLIN;
    epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev);
    c.handshake_due = Clock::now() + opts.handshake_timeout;
    timers.emplace(c.handshake_due, TimerKind::kHandshake, c.id);

    if (unauthenticated.size() > opts.max_unauthenticated) {
      Conn* oldest = find(*unauthenticated.begin());
      refuse(*oldest, Refusal::kOverCapacity,
             "more than " + std::to_string(opts.max_unauthenticated) +
                 " connections in the handshake; closed the oldest");
    }
    uint64_t pending = unauthenticated.size();
    if (pending > counters.peak_unauthenticated.load(std::memory_order_relaxed)) {
      counters.peak_unauthenticated.store(pending, std::memory_order_relaxed);
    }
  }
}

void TcpStoreServer::Impl::on_readable(Conn& c) {
  const uint64_t id = c.id;
  size_t budget = kReadBudget;
  while (budget > 0 && !c.paused) {
    // Read into the shared scratch buffer and parse in place; only the bytes
    // of a partial frame are kept in c.in, so idle connections hold no input
    // buffer and a partial one holds what has arrived. Before the handshake,
    // never read past one handshake frame.
    size_t want = c.authenticated ? scratch.size() : wire::kMaxHandshakeFrame - c.in_len;
    if (want == 0) {  // cannot happen: a complete handshake frame was consumed
      refuse(c, Refusal::kOversized, "sent more than a handshake frame before authenticating");
      return;
    }
    ssize_t n = ::recv(c.fd.get(), scratch.data(), want, 0);
    if (n == 0) {
      SLURMDDP_LOG_DEBUG(kComponent, "connection from " << c.peer() << " closed by the client");
      close_conn(c);
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      SLURMDDP_LOG_DEBUG(kComponent,
                         "connection from " << c.peer() << " failed: " << std::strerror(errno));
      close_conn(c);
      return;
    }
    const auto got = static_cast<size_t>(n);
    c.last_progress = Clock::now();
    budget -= std::min(budget, got);
    if (c.in_len == 0) {
      bool alive = true;
      size_t used = consume(c, scratch.data(), got, &alive);
      if (!alive) return;
      c.in.assign(scratch.data() + used, scratch.data() + got);
      c.in_len = c.in.size();
    } else {
      c.in.resize(c.in_len);
      // Grow geometrically, but never past the frame the length field
      // announced (consume() has checked it against the limit).
      size_t need = c.in_len + got;
      if (need > c.in.capacity() && c.in_len >= wire::kLengthSize) {
        size_t frame = wire::kLengthSize + wire::load_u32(c.in.data());
        c.in.reserve(std::max(need, std::min(frame, 2 * c.in.capacity())));
      }
      c.in.insert(c.in.end(), scratch.data(), scratch.data() + got);
      c.in_len = c.in.size();
      if (!consume_buffered(c)) return;
    }
    if (find(id) == nullptr) return;
    if (got < want) break;  // drained: level-triggered epoll reports more
  }
  if (c.in_len > 0) arm_stall(c);
  account(c);
}

// Handles the frames buffered in c.in. Returns false when it closed c.
bool TcpStoreServer::Impl::consume_buffered(Conn& c) {
  bool alive = true;
  size_t used = consume(c, c.in.data(), c.in_len, &alive);
  if (!alive) return false;
  if (used > 0) {
    std::memmove(c.in.data(), c.in.data() + used, c.in_len - used);
    c.in_len -= used;
  }
  if (c.in_len == 0 && c.in.capacity() > kReadChunk) {
    std::vector<uint8_t>().swap(c.in);  // give a large frame's buffer back
  }
  return true;
}

// Handles every complete frame in p[0, n) and returns how many bytes it used;
// stops early when the connection goes over its output bound. Sets *alive to
// false when it closed c.
size_t TcpStoreServer::Impl::consume(Conn& c, const uint8_t* p, size_t n, bool* alive) {
  size_t pos = 0;
  while (n - pos >= wire::kLengthSize) {
    if (over_water(c)) {
      c.paused = true;
      break;
    }
    const uint8_t* f = p + pos;
    const size_t limit = c.authenticated ? wire::kMaxFrame : wire::kMaxHandshakeFrame;
    size_t total = 0;
    switch (wire::next_frame(f, n - pos, limit, &total)) {
      case wire::FrameStatus::kBadVersion:
        refuse(c, Refusal::kMalformed,
               "sent bytes that are not this protocol (version byte " +
                   std::to_string(f[wire::kLengthSize]) + ", expected " +
                   std::to_string(wire::kVersion) + ")");
        *alive = false;
        return pos;
      case wire::FrameStatus::kTooShort:
        refuse(c, Refusal::kMalformed, "sent a frame shorter than its header");
        *alive = false;
        return pos;
      case wire::FrameStatus::kTooLong:
        refuse(c, Refusal::kOversized,
               "sent a length field of " + std::to_string(wire::load_u32(f)) + " bytes " +
                   (c.authenticated ? "" : "before authenticating ") + "(limit " +
                   std::to_string(limit - wire::kLengthSize) + ")");
        *alive = false;
        return pos;
      case wire::FrameStatus::kPartial:
        return pos;
      case wire::FrameStatus::kComplete:
        break;
    }
    if (!on_frame(c, f, total)) {
      *alive = false;
      return pos;
    }
    pos += total;
  }
  return pos;
}

// A partial frame must keep arriving (Note [Store server bounds]).
void TcpStoreServer::Impl::arm_stall(Conn& c) {
  if (!c.authenticated || c.stall_armed || c.paused) return;
  c.stall_armed = true;
  c.stall_due = c.last_progress + opts.stall_timeout;
  timers.emplace(c.stall_due, TimerKind::kStall, c.id);
}

bool TcpStoreServer::Impl::on_frame(Conn& c, const uint8_t* frame, size_t size) {
  wire::Header h = wire::decode_header(frame);
  const uint8_t* payload = frame + wire::kHeaderSize;
  const size_t n = size - wire::kHeaderSize;
  if (!c.authenticated) return on_handshake(c, h, payload, n);
  wire::Request req;
  std::string why;
  if (!wire::is_request(h.type) || !wire::decode_request(h, payload, n, &req, &why)) {
    if (why.empty()) {
      why = "sent a frame of type " + std::to_string(static_cast<unsigned>(h.type)) + " (" +
            wire::type_name(h.type) + "), which is not a request";
    }
    send_error(c, h.id, wire::ErrorCode::kProtocol, "store: malformed request: " + why);
    if (flush(c)) refuse(c, Refusal::kMalformed, why);
    return false;
  }
  counters.requests.fetch_add(1, std::memory_order_relaxed);
  state.handle(c.id, std::move(req), Clock::now());
  return true;
}

// The server's side of the handshake (Note [Store wire protocol]): the frame's
// outcome, applied to the connection.
bool TcpStoreServer::Impl::on_handshake(Conn& c, const wire::Header& h, const uint8_t* payload,
                                        size_t n) {
  store::ServerHandshake::Step step = c.handshake.on_frame(prover.get(), h, payload, n);
  const bool replied = !step.reply.empty();
  if (replied) send(c, std::move(step.reply));
  switch (step.result) {
    case store::ServerHandshake::Step::kContinue:
      return true;
    case store::ServerHandshake::Step::kAuthenticated:
      authenticate(c);
      return true;
    case store::ServerHandshake::Step::kRefused:
      // A refusal the client is told about goes out before the connection closes.
      if (!replied || flush(c)) refuse(c, step.why, step.detail);
      return false;
  }
  return false;
}

// The handshake is done: the connection is a client from now on.
void TcpStoreServer::Impl::authenticate(Conn& c) {
  c.authenticated = true;
  unauthenticated.erase(c.id);
  timers.erase(Timer{c.handshake_due, TimerKind::kHandshake, c.id});
  counters.authenticated.fetch_add(1, std::memory_order_relaxed);
}

// Fires the loop's timers and the state's deadlines that are due, in the order
// of their time; at the same instant, handshake and stall timers come before
// deadlines, and deadlines before resuming accept.
void TcpStoreServer::Impl::fire_timers(Clock::time_point now) {
  for (;;) {
    const Clock::time_point deadline = state.next_deadline();
    if (!timers.empty()) {
      const Timer t = *timers.begin();
      const Clock::time_point at = std::get<0>(t);
      if (at <= now &&
          (at < deadline || (at == deadline && std::get<1>(t) != TimerKind::kResumeAccept))) {
        timers.erase(timers.begin());
        on_timer(t);
        continue;
      }
    }
    if (deadline > now) break;
    state.expire_next();
  }
}

void TcpStoreServer::Impl::on_timer(const Timer& t) {
  const uint64_t id = std::get<2>(t);
  switch (std::get<1>(t)) {
    case TimerKind::kResumeAccept: {
      if (!spare_fd.valid()) spare_fd = Fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenId;
      epoll_ctl(epoll_fd.get(), EPOLL_CTL_MOD, listen_fd.get(), &ev);
      break;
    }
    case TimerKind::kHandshake:
      if (Conn* c = find(id); c != nullptr && !c->authenticated) {
        refuse(*c, Refusal::kHandshakeTimeout,
               "did not complete the handshake within " +
                   std::to_string(opts.handshake_timeout.count()) + " ms");
      }
      break;
    case TimerKind::kStall:
      if (Conn* c = find(id)) {
        c->stall_armed = false;
        if (c->in_len == 0 || c->paused) break;
        if (c->last_progress + opts.stall_timeout <= Clock::now()) {
          refuse(*c, Refusal::kStalled,
                 "held a partial frame (" + std::to_string(c->in_len) +
                     " bytes) without progress "
                     "for " +
                     std::to_string(opts.stall_timeout.count()) + " ms");
        } else {
          arm_stall(*c);
        }
      }
      break;
  }
}

void TcpStoreServer::Impl::send(Conn& c, std::vector<uint8_t> frame) {
  c.out_bytes += frame.size();
  OutChunk chunk;
  chunk.owned = std::move(frame);
  c.out.push_back(std::move(chunk));
  if (!c.dirty) {
    c.dirty = true;
    dirty.push_back(c.id);
  }
}

void TcpStoreServer::Impl::send_value(Conn& c, uint32_t id, const Value& v) {
  wire::Writer w(wire::Type::kValue, id);
  w.u32(static_cast<uint32_t>(v->size()));
  send(c, w.finish_with_tail(v->size()));
  if (v->empty()) return;
  OutChunk chunk;
  chunk.shared = v;
  c.out_bytes += v->size();
  c.out.push_back(std::move(chunk));
}

void TcpStoreServer::Impl::send_timeout(Conn& c, uint32_t id,
                                        const std::vector<uint32_t>& missing) {
  wire::Writer w(wire::Type::kTimeout, id);
  w.u32(static_cast<uint32_t>(missing.size()));
  for (uint32_t i : missing) w.u32(i);
  send(c, w.finish());
}

void TcpStoreServer::Impl::send_error(Conn& c, uint32_t id, wire::ErrorCode code,
                                      const std::string& msg) {
  wire::Writer w(wire::Type::kError, id);
  w.u8(static_cast<uint8_t>(code));
  w.str(msg);
  send(c, w.finish());
}

// Writes what the socket takes. Returns false when it closed c.
bool TcpStoreServer::Impl::flush(Conn& c) {
  while (!c.out.empty()) {
    std::array<iovec, 64> iov{};
    size_t k = 0;
    for (auto it = c.out.begin(); it != c.out.end() && k < iov.size(); ++it, ++k) {
      iov[k].iov_base = const_cast<uint8_t*>(it->data() + it->offset);
      iov[k].iov_len = it->size() - it->offset;
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = k;
    ssize_t n = ::sendmsg(c.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      SLURMDDP_LOG_DEBUG(kComponent,
                         "connection from " << c.peer() << " failed: " << std::strerror(errno));
      close_conn(c);
      return false;
    }
    auto left = static_cast<size_t>(n);
    c.out_bytes -= left;
    while (left > 0) {
      OutChunk& front = c.out.front();
      size_t rest = front.size() - front.offset;
      if (left < rest) {
        front.offset += left;
        left = 0;
      } else {
        left -= rest;
        c.out.pop_front();
      }
    }
  }
  update_events(c);
  account(c);
  return true;
}

// Reads are enabled while the pending output is under the high-water mark;
// writes are watched while output is pending.
void TcpStoreServer::Impl::update_events(Conn& c) {
  uint32_t want = 0;
  if (!over_water(c)) {
    want |= EPOLLIN;
    if (c.paused) {
      // Frames that arrived before the pause are still buffered: the loop
      // handles them once this round of flushing is done.
      c.paused = false;
      resumed.push_back(c.id);
    }
  }
  if (!c.out.empty()) want |= EPOLLOUT;
  if (want == c.epoll_events) return;
  c.epoll_events = want;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c.id;
  epoll_ctl(epoll_fd.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
}

void TcpStoreServer::Impl::on_writable(Conn& c) {
  flush(c);
}

void TcpStoreServer::Impl::Answers::ok(uint64_t conn, uint32_t request) {
  if (Conn* c = impl->find(conn)) impl->send(*c, wire::Writer(wire::Type::kOk, request).finish());
}

void TcpStoreServer::Impl::Answers::value(uint64_t conn, uint32_t request, const Value& v) {
  if (Conn* c = impl->find(conn)) impl->send_value(*c, request, v);
}

void TcpStoreServer::Impl::Answers::integer(uint64_t conn, uint32_t request, int64_t n) {
  if (Conn* c = impl->find(conn)) {
    wire::Writer w(wire::Type::kInt, request);
    w.i64(n);
    impl->send(*c, w.finish());
  }
}

void TcpStoreServer::Impl::Answers::boolean(uint64_t conn, uint32_t request, bool b) {
  if (Conn* c = impl->find(conn)) {
    wire::Writer w(wire::Type::kBool, request);
    w.u8(b ? 1 : 0);
    impl->send(*c, w.finish());
  }
}

void TcpStoreServer::Impl::Answers::timeout(uint64_t conn, uint32_t request,
                                            const std::vector<uint32_t>& missing) {
  if (Conn* c = impl->find(conn)) impl->send_timeout(*c, request, missing);
}

void TcpStoreServer::Impl::Answers::error(uint64_t conn, uint32_t request, wire::ErrorCode code,
                                          const std::string& message) {
  if (Conn* c = impl->find(conn)) impl->send_error(*c, request, code, message);
}

void TcpStoreServer::Impl::refuse(Conn& c, Refusal why, const std::string& detail) {
  count_refusal(why, c.peer(), detail);
  close_conn(c);
}

void TcpStoreServer::Impl::count_refusal(Refusal why, const std::string& peer,
                                         const std::string& detail) {
  auto k = static_cast<size_t>(why);
  ++refused[k];
  counters.refused[k].store(refused[k], std::memory_order_relaxed);
  if (refused[k] <= static_cast<uint64_t>(kLogBurst)) {
    SLURMDDP_LOG_WARN(kComponent, "refused connection from " << peer << ": " << detail
                                                             << "; reason=" << refusal_name(why)
                                                             << ", port=" << port);
    if (refused[k] == static_cast<uint64_t>(kLogBurst)) {
      SLURMDDP_LOG_WARN(kComponent, "further "
                                        << refusal_name(why)
                                        << " refusals are counted, not logged; port=" << port);
    }
  }
}

void TcpStoreServer::Impl::close_conn(Conn& c) {
  state.drop_connection(c.id);
  unauthenticated.erase(c.id);
  timers.erase(Timer{c.handshake_due, TimerKind::kHandshake, c.id});
  if (c.stall_armed) timers.erase(Timer{c.stall_due, TimerKind::kStall, c.id});
  buffered -= c.accounted;
  auto it = conns.find(c.id);
  if (it != conns.end()) conns.erase(it);  // closes the fd, which leaves the epoll set
}

void TcpStoreServer::Impl::account(Conn& c) {
  size_t now = c.in.capacity() + c.out_bytes;
  buffered += now;
  buffered -= c.accounted;
  c.accounted = now;
  if (buffered > counters.peak_buffered.load(std::memory_order_relaxed)) {
    counters.peak_buffered.store(buffered, std::memory_order_relaxed);
  }
}

void TcpStoreServer::Impl::publish() {
  counters.open.store(conns.size(), std::memory_order_relaxed);
  counters.unauthenticated.store(unauthenticated.size(), std::memory_order_relaxed);
  counters.parked.store(state.parked(), std::memory_order_relaxed);
  counters.keys.store(state.keys(), std::memory_order_relaxed);
  counters.buffered.store(buffered, std::memory_order_relaxed);
  const size_t clients = conns.size() - unauthenticated.size();
  counters.clients.store(clients, std::memory_order_relaxed);
  if (clients == 0) {
    std::lock_guard<std::mutex> lock(drain_mu);
    drained.notify_all();
  }
}

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const TcpStoreServerOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  impl->start();
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(impl)));
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStoreServer::~TcpStoreServer() = default;

uint16_t TcpStoreServer::port() const {
  return impl_->port;
}

bool TcpStoreServer::drain(Millis timeout) {
  Impl& m = *impl_;
  auto idle = [&m] { return m.counters.clients.load(std::memory_order_relaxed) == 0; };
  std::unique_lock<std::mutex> lock(m.drain_mu);
  return m.drained.wait_for(lock, std::max(timeout, Millis(0)), idle);
}

TcpStoreServerStats TcpStoreServer::stats() const {
  const auto& k = impl_->counters;
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  auto refused = [&](Refusal r) { return get(k.refused[static_cast<size_t>(r)]); };
  TcpStoreServerStats s;
  s.accepted = get(k.accepted);
  s.open = get(k.open);
  s.unauthenticated = get(k.unauthenticated);
  s.peak_unauthenticated = get(k.peak_unauthenticated);
  s.authenticated = get(k.authenticated);
  s.requests = get(k.requests);
  s.parked = get(k.parked);
  s.keys = get(k.keys);
  s.buffered_bytes = get(k.buffered);
  s.peak_buffered_bytes = get(k.peak_buffered);
  s.refused_malformed = refused(Refusal::kMalformed);
  s.refused_oversized = refused(Refusal::kOversized);
  s.refused_no_token = refused(Refusal::kNoToken);
  s.refused_wrong_token = refused(Refusal::kWrongToken);
  s.refused_handshake_timeout = refused(Refusal::kHandshakeTimeout);
  s.refused_stalled = refused(Refusal::kStalled);
  s.refused_over_capacity = refused(Refusal::kOverCapacity);
  return s;
}

}  // namespace slurmddp
