// The store server's event loop (see tcp_server.h for how the server is split):
// starting and stopping it, accepting connections (and running out of file
// descriptors), timers, refusing and closing connections, the counters, and
// the public TcpStoreServer.
//
// Note [Store server logging]
// Each refused connection is logged once, at warn, naming the peer and the
// reason and never the token. So that a flood cannot flood the log, only the
// first kLogBurst refusals of each reason are logged; the rest are counted
// (TcpStoreServerStats) and summarized when the server stops.
#include "store/tcp_server.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "slurmddp/error.h"

namespace slurmddp {

using store::Clock;
using store::Fd;
using store::Refusal;
using store::refusal_name;
using store::server::kAcceptBatch;
using store::server::kAcceptPause;
using store::server::kComponent;
using store::server::kListenId;
using store::server::kLogBurst;
using store::server::kWakeId;
using store::server::TimerKind;

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
  if (!opts.token.empty()) prover = std::make_unique<store::auth::Prover>(opts.token);
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
  rlimit rl{};
  fd_limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? rl.rlim_cur : 0;
  for (int i = 0; i < kAcceptBatch; ++i) {
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof addr;
    int fd = accept4(listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), &addr_len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      admit(Fd(fd), addr, addr_len, false);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if ((errno == EMFILE || errno == ENFILE) && spare_fd.valid()) {
      // Free the spare fd to take the connection off the queue; admitting it
      // closes a pending connection (or it), and the spare comes back.
      spare_fd.reset();
      addr_len = sizeof addr;
      Fd next(accept4(listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), &addr_len,
                      SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (next.valid()) admit(std::move(next), addr, addr_len, true);
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
}

// Whether a connection on descriptor `fd` leaves fewer than reserve_fds free:
// the kernel hands out the lowest free number, so every descriptor below `fd`
// is in use (Note [Store server bounds]).
bool TcpStoreServer::Impl::short_of_fds(int fd) const {
  return fd_limit != 0 && static_cast<uint64_t>(fd) + 1 + opts.reserve_fds > fd_limit;
}

// A new connection joins the pending ones; then, over a bound, one pending
// connection is closed to make room (Note [Pending connections]): over
// max_unauthenticated, short of the descriptor reserve, or out of descriptors
// altogether. The new one is closed only when it is the only one pending.
void TcpStoreServer::Impl::admit(Fd fd, const sockaddr_storage& addr, socklen_t addr_len,
                                 bool out_of_fds) {
  const bool short_fds = out_of_fds || short_of_fds(fd.get());
  auto conn = std::make_unique<Conn>();
  Conn& c = *conn;
  c.id = next_conn++;
  c.fd = std::move(fd);
  c.addr = addr;  // TCP_NODELAY comes from the listening socket
  c.addr_len = addr_len;
  c.source = store::source_address(reinterpret_cast<const sockaddr*>(&addr), addr_len);
  const int raw = c.fd.get();
  conns.emplace(c.id, std::move(conn));
  unauthenticated.add(c.id, c.source);
  counters.accepted.fetch_add(1, std::memory_order_relaxed);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = c.id;
  c.epoll_events = EPOLLIN;
  epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, raw, &ev);
  c.handshake_due = Clock::now() + opts.handshake_timeout;
  timers.emplace(c.handshake_due, TimerKind::kHandshake, c.id);

  // Within the reserve, the one connection pending may stay (so that a rank
  // can still join, one at a time); out of descriptors, not even that.
  std::string why;
  bool alone_may_stay = false;
  if (unauthenticated.size() > opts.max_unauthenticated) {
    why = "more than " + std::to_string(opts.max_unauthenticated) + " connections in the handshake";
  } else if (out_of_fds) {
    why = "out of file descriptors";
  } else if (short_fds && opts.reserve_fds > 0) {
    why = "fewer than " + std::to_string(opts.reserve_fds) +
          " file descriptors free (reserve_fds, limit " + std::to_string(fd_limit) + ")";
    alone_may_stay = true;
  }
  const uint64_t victim = *unauthenticated.victim();
  if (!why.empty() && !(victim == c.id && alone_may_stay)) {
    Conn* v = find(victim);
    const size_t crowd = unauthenticated.from(v->source);
    refuse(*v, Refusal::kOverCapacity,
           why + (victim == c.id ? "; closed this one, the only one pending"
                                 : "; closed the oldest of the " + std::to_string(crowd) +
                                       " pending from " + v->source));
  }
  uint64_t pending = unauthenticated.size();
  if (pending > counters.peak_unauthenticated.load(std::memory_order_relaxed)) {
    counters.peak_unauthenticated.store(pending, std::memory_order_relaxed);
  }
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
  unauthenticated.remove(c.id);
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
TcpStoreServer::~TcpStoreServer() {
  // What rank 0's store served in this step: at debug, for sizing and for
  // telling a storm of requests from a slow peer.
  const TcpStoreServerStats s = stats();
  SLURMDDP_LOG_DEBUG(kComponent, "server on port " << impl_->port << " done: " << s.accepted
                                                   << " connections, " << s.requests
                                                   << " requests, " << s.keys << " keys, peak "
                                                   << s.peak_buffered_bytes << " bytes buffered");
}

uint16_t TcpStoreServer::port() const {
  return impl_->port;
}

bool TcpStoreServer::drain(Millis timeout) {
  // Silence as long as the whole wait never ends it before the deadline.
  return drain(timeout, timeout);
}

bool TcpStoreServer::drain(Millis timeout, Millis quiet) {  // Note [Lingering host]
  Impl& m = *impl_;
  using Clock = std::chrono::steady_clock;
  auto gone = [&m] { return m.counters.clients.load(std::memory_order_relaxed) == 0; };
  const auto start = Clock::now();
  const auto deadline = start + std::max(timeout, Millis(0));
  quiet = std::max(quiet, Millis(1));
  // Silence counts from the last request, or from now if it came earlier.
  auto last = [&m, start] {
    const Clock::time_point t{std::chrono::duration_cast<Clock::duration>(
        std::chrono::nanoseconds(m.counters.last_request_ns.load(std::memory_order_relaxed)))};
    return std::max(t, start);
  };
  std::unique_lock<std::mutex> lock(m.drain_mu);
  for (;;) {
    if (gone()) return true;
    const auto until = std::min(deadline, last() + quiet);
    if (Clock::now() >= until) return false;
    m.drained.wait_until(lock, until, gone);
  }
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
