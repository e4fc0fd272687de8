// A hand-driven store client for tests: raw sockets speaking the wire protocol
// byte by byte, so tests can send what a real client never would (garbage,
// oversized length fields, half frames, replayed handshakes) and watch what
// the server does.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "store/auth.h"
#include "store/socket.h"
#include "store/wire.h"

namespace slurmddp::testing {

using std::chrono::steady_clock;
namespace wire = store::wire;

// A blocking TCP connection to 127.0.0.1:port (invalid Fd on failure).
inline store::Fd raw_connect(uint16_t port) {
  store::Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return store::Fd();
  return fd;
}

inline bool send_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

inline bool send_all(int fd, const std::vector<uint8_t>& v) { return send_all(fd, v.data(), v.size()); }

// Reads exactly n bytes before `deadline`; false on EOF, error or timeout.
inline bool recv_exact(int fd, uint8_t* p, size_t n, steady_clock::time_point deadline) {
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, store::poll_timeout(deadline)) <= 0) return false;
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

struct RawFrame {
  wire::Type type{};
  uint32_t id = 0;
  std::vector<uint8_t> payload;
};

inline std::optional<RawFrame> read_frame(int fd, std::chrono::milliseconds within) {
  auto deadline = steady_clock::now() + within;
  uint8_t head[wire::kHeaderSize];
  if (!recv_exact(fd, head, sizeof head, deadline)) return std::nullopt;
  wire::Header h = wire::decode_header(head);
  RawFrame f;
  f.type = h.type;
  f.id = h.id;
  f.payload.resize(h.length - (wire::kHeaderSize - wire::kLengthSize));
  if (!recv_exact(fd, f.payload.data(), f.payload.size(), deadline)) return std::nullopt;
  return f;
}

// True once the server has closed the connection (EOF or reset) before `within`.
inline bool closed_by_server(int fd, std::chrono::milliseconds within) {
  auto deadline = steady_clock::now() + within;
  uint8_t buf[4096];
  while (true) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, store::poll_timeout(deadline)) <= 0) return false;
    ssize_t k = ::recv(fd, buf, sizeof buf, 0);
    if (k <= 0) return true;
  }
}

// The server's hello: auth flag and nonce.
struct ServerHello {
  bool auth_required = false;
  store::auth::Nonce nonce{};
};

inline std::optional<ServerHello> read_server_hello(int fd) {
  auto f = read_frame(fd, std::chrono::seconds(5));
  if (!f || f->type != wire::Type::kServerHello || f->payload.size() != 1 + wire::kNonceSize) {
    return std::nullopt;
  }
  ServerHello h;
  h.auth_required = f->payload[0] == 1;
  std::copy(f->payload.begin() + 1, f->payload.end(), h.nonce.begin());
  return h;
}

// A client hello for `server_nonce`, with a proof when `token` is non-empty.
inline std::vector<uint8_t> client_hello(const std::string& token,
                                         const store::auth::Nonce& server_nonce) {
  store::auth::Nonce mine = store::auth::random_nonce();
  wire::Writer w(wire::Type::kClientHello, 0);
  w.raw(mine.data(), mine.size());
  if (token.empty()) {
    w.u8(0);
  } else {
    w.u8(1);
    auto p = store::auth::client_proof(token, server_nonce, mine);
    w.raw(p.data(), p.size());
  }
  return w.finish();
}

// Connects and completes the handshake; returns the socket (invalid on
// failure) and, in *hello_sent, the client hello it sent.
inline store::Fd raw_authenticated(uint16_t port, const std::string& token,
                                   std::vector<uint8_t>* hello_sent = nullptr) {
  store::Fd fd = raw_connect(port);
  if (!fd.valid()) return fd;
  auto hello = read_server_hello(fd.get());
  if (!hello) return store::Fd();
  std::vector<uint8_t> mine = client_hello(token, hello->nonce);
  if (!send_all(fd.get(), mine)) return store::Fd();
  auto answer = read_frame(fd.get(), std::chrono::seconds(5));
  if (!answer || answer->type != wire::Type::kAuthOk) return store::Fd();
  if (hello_sent != nullptr) *hello_sent = mine;
  return fd;
}

// Polls `pred` until it holds or `within` passes; returns its last value.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds within = std::chrono::seconds(10)) {
  auto deadline = steady_clock::now() + within;
  while (!pred()) {
    if (steady_clock::now() >= deadline) return pred();
    pollfd none{-1, 0, 0};
    poll(&none, 0, 2);  // a short pause between polls, not a synchronization
  }
  return true;
}

}  // namespace slurmddp::testing
