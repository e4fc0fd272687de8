#include "store/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "slurmddp/error.h"

namespace slurmddp::store {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string format_endpoint(const std::string& host, uint16_t port) {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string format_address(const sockaddr* addr, socklen_t len) {
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (len == 0 || getnameinfo(addr, len, host, sizeof host, serv, sizeof serv,
                              NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return format_endpoint(host, static_cast<uint16_t>(std::atoi(serv)));
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return format_address(reinterpret_cast<sockaddr*>(&ss), len);
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw Error(std::string("store: failed to make a socket non-blocking: ") +
                std::strerror(errno));
  }
}

int poll_timeout(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  // Round up so that a wait never ends a fraction of a millisecond early.
  return static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
}

namespace {

std::string errno_text(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

}  // namespace

std::string send_before(int fd, const uint8_t* data, size_t n, Clock::time_point deadline) {
  size_t sent = 0;
  const auto progress = [&] {
    return "; peer=" + peer_name(fd) + ", sent " + std::to_string(sent) + " of " +
           std::to_string(n) + " bytes";
  };
  while (sent < n) {
    ssize_t k = ::send(fd, data + sent, n - sent, MSG_NOSIGNAL);
    if (k > 0) {
      sent += static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return errno_text("send", errno) + progress();
    }
    // The buffer is full: wait until the peer reads, at most until the deadline.
    pollfd p{fd, POLLOUT, 0};
    int r = poll(&p, 1, poll_timeout(deadline));
    if (r < 0 && errno != EINTR) return errno_text("poll", errno) + progress();
    if (r == 0) return "the peer did not read what was sent before the deadline" + progress();
  }
  return "";
}

Fd listen_tcp(const std::string& bind_host, uint16_t port, uint16_t* bound) {
  const std::string where = format_endpoint(bind_host.empty() ? "*" : bind_host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc =
      getaddrinfo(bind_host.empty() ? nullptr : bind_host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    throw Error("store: failed to listen on " + where +
                ": cannot resolve the address: " + gai_strerror(rc));
  }
  // With an empty host prefer the IPv6 wildcard, which also accepts IPv4
  // once IPV6_V6ONLY is off; fall back to whatever binds.
  std::string last = "no usable address";
  Fd fd;
  for (int pass = 0; pass < 2 && !fd.valid(); ++pass) {
    for (addrinfo* ai = res; ai != nullptr && !fd.valid(); ai = ai->ai_next) {
      if ((pass == 0) != (ai->ai_family == AF_INET6)) continue;
      Fd s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!s.valid()) {
        last = errno_text("socket", errno);
        continue;
      }
      int one = 1;
      int zero = 0;
      setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      // Accepted sockets inherit it: replies are single writes, never delayed.
      setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (ai->ai_family == AF_INET6) {
        setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      }
      if (bind(s.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
        last = errno_text("bind", errno);
        continue;
      }
      if (listen(s.get(), SOMAXCONN) != 0) {
        last = errno_text("listen", errno);
        continue;
      }
      fd = std::move(s);
    }
  }
  freeaddrinfo(res);
  if (!fd.valid()) throw Error("store: failed to listen on " + where + ": " + last);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  *bound = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

Fd connect_once(const std::string& host, uint16_t port, Clock::time_point deadline,
                std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    *why = std::string("cannot resolve the host: ") + gai_strerror(rc);
    return Fd();
  }
  Fd result;
  for (addrinfo* ai = res; ai != nullptr && !result.valid(); ai = ai->ai_next) {
    Fd s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s.valid()) {
      *why = errno_text("socket", errno);
      continue;
    }
    if (connect(s.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        *why = std::strerror(errno);
        continue;
      }
      pollfd p{s.get(), POLLOUT, 0};
      int n;
      do {
        n = poll(&p, 1, poll_timeout(deadline));
      } while (n < 0 && errno == EINTR);
      if (n <= 0) {
        *why = n == 0 ? "no answer to the connection request" : errno_text("poll", errno);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        *why = std::strerror(err);
        continue;
      }
    }
    int one = 1;
    setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    result = std::move(s);
  }
  freeaddrinfo(res);
  return result;
}

}  // namespace slurmddp::store
