// A store server connection's bytes (see tcp_server.h): reading and framing its
// input, handing complete frames to the handshake or the state, queueing and
// writing its replies, and the back-pressure between the two
// (Note [Store server bounds] in tcp_server.h).
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/log.h"
#include "store/tcp_server.h"

namespace slurmddp {

using store::Clock;
using store::Value;
using store::server::kComponent;
using store::server::kReadBudget;
using store::server::kReadChunk;
using store::server::OutChunk;
using store::server::TimerKind;
namespace wire = store::wire;

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
  const auto now = Clock::now();
  counters.last_request_ns.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count(),
      std::memory_order_relaxed);
  state.handle(c.id, std::move(req), now);
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
  unauthenticated.remove(c.id);
  timers.erase(Timer{c.handshake_due, TimerKind::kHandshake, c.id});
  counters.authenticated.fetch_add(1, std::memory_order_relaxed);
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

}  // namespace slurmddp
