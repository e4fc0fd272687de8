// Small POSIX socket helpers for the TCP store: an owning fd, listening,
// one connect attempt with a deadline, and names for messages.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace slurmddp::store {

using Clock = std::chrono::steady_clock;

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// "host:port", with brackets around IPv6 literals.
std::string format_endpoint(const std::string& host, uint16_t port);

// An IPv4/IPv6 socket address as "addr:port" ("?" if it cannot be formatted).
std::string format_address(const sockaddr* addr, socklen_t len);

// The peer address of a connected socket as "addr:port" ("?" if unknown).
std::string peer_name(int fd);

// A non-blocking listening socket on bind_host:port (empty host: every
// interface, IPv6 and IPv4). Writes the bound port to *bound. Throws Error.
Fd listen_tcp(const std::string& bind_host, uint16_t port, uint16_t* bound);

// One attempt to connect to every address of host:port in turn, each bounded by
// `deadline`. Returns a connected non-blocking socket with TCP_NODELAY, or an
// invalid Fd with the cause in *why.
Fd connect_once(const std::string& host, uint16_t port, Clock::time_point deadline,
                std::string* why);

// Sends all `n` bytes on the non-blocking socket `fd`, waiting in poll(2)
// while its send buffer is full, until `deadline`. Returns "" once every byte
// is sent, else why not, naming the peer as "addr:port" and how far it got.
std::string send_before(int fd, const uint8_t* data, size_t n, Clock::time_point deadline);

// Milliseconds from now until `deadline` for poll(2): 0 when past, capped.
int poll_timeout(Clock::time_point deadline);

// Sets O_NONBLOCK; throws Error on failure.
void set_nonblocking(int fd);

}  // namespace slurmddp::store
