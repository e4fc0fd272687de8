// The TCP store client's multiplexer: one connection, any number of threads
// (Note [Store client leader/follower] in tcp_client.h).
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "slurmddp/error.h"
#include "store/kv_table.h"
#include "store/tcp_client.h"

namespace slurmddp::store {

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
      if (poll(&p, 1, poll_timeout(deadline)) > 0) continue;
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
  int k = poll(&p, 1, poll_timeout(deadline));
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

}  // namespace slurmddp::store
