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

namespace slurmddp::support {

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

inline bool send_all(int fd, const std::vector<uint8_t>& v) {
  return send_all(fd, v.data(), v.size());
}

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

// A client hello with a fresh nonce (returned in *nonce).
inline std::vector<uint8_t> client_hello(store::auth::Nonce* nonce) {
  *nonce = store::auth::random_nonce();
  wire::Writer w(wire::Type::kClientHello, 0);
  w.raw(nonce->data(), nonce->size());
  return w.finish();
}

// The server's hello: auth flag, nonce and (with a token) its proof.
struct ServerHello {
  bool auth_required = false;
  store::auth::Nonce nonce{};
  store::auth::Proof proof{};
};

inline std::optional<ServerHello> read_server_hello(int fd) {
  auto f = read_frame(fd, std::chrono::seconds(5));
  if (!f || f->type != wire::Type::kServerHello || f->payload.empty()) return std::nullopt;
  ServerHello h;
  h.auth_required = f->payload[0] == 1;
  if (f->payload.size() != 1 + wire::kNonceSize + (h.auth_required ? wire::kProofSize : 0)) {
    return std::nullopt;
  }
  std::copy(f->payload.begin() + 1, f->payload.begin() + 1 + wire::kNonceSize, h.nonce.begin());
  if (h.auth_required) {
    std::copy(f->payload.begin() + 1 + wire::kNonceSize, f->payload.end(), h.proof.begin());
  }
  return h;
}

// A client proof computed with `token` (right or wrong).
inline std::vector<uint8_t> client_proof(const std::string& token,
                                         const store::auth::Nonce& server_nonce,
                                         const store::auth::Nonce& client_nonce) {
  wire::Writer w(wire::Type::kClientProof, 0);
  auto p = store::auth::Prover(token).client_proof(server_nonce, client_nonce);
  w.raw(p.data(), p.size());
  return w.finish();
}

// What a client without a token sends to a server that asks for one.
inline std::vector<uint8_t> abort_no_token() {
  wire::Writer w(wire::Type::kAuthAbort, 0);
  w.u8(static_cast<uint8_t>(wire::AbortReason::kNoToken));
  return w.finish();
}

// Runs the client's side of the handshake on `fd` with `token` (empty: open
// server); returns the bytes it sent (hello, then proof), empty on failure.
// Success is silent on the wire: the server's stats tell whether it took.
inline std::vector<uint8_t> raw_handshake(int fd, const std::string& token) {
  store::auth::Nonce mine{};
  std::vector<uint8_t> sent = client_hello(&mine);
  if (!send_all(fd, sent)) return {};
  auto hello = read_server_hello(fd);
  if (!hello) return {};
  if (hello->auth_required) {
    std::vector<uint8_t> proof = client_proof(token, hello->nonce, mine);
    if (!send_all(fd, proof)) return {};
    sent.insert(sent.end(), proof.begin(), proof.end());
  }
  return sent;
}

// Connects and completes the handshake; returns the socket (invalid on
// failure) and, in *sent, the handshake bytes it sent.
inline store::Fd raw_authenticated(uint16_t port, const std::string& token,
                                   std::vector<uint8_t>* sent = nullptr) {
  store::Fd fd = raw_connect(port);
  if (!fd.valid()) return fd;
  std::vector<uint8_t> bytes = raw_handshake(fd.get(), token);
  if (bytes.empty()) return store::Fd();
  if (sent != nullptr) *sent = bytes;
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

}  // namespace slurmddp::support
