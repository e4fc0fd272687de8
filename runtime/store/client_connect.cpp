// The TCP store client's connection: retry with backoff and jitter until the
// deadline, then the handshake that authenticates both sides.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "common/log.h"
#include "slurmddp/error.h"
#include "store/auth.h"
#include "store/kv_table.h"
#include "store/tcp_client.h"

namespace slurmddp::store {

void TcpClient::connect() {
  const auto start = Clock::now();
  const auto deadline = start + clamp_timeout(opts_.timeout);
  std::minstd_rand jitter(static_cast<uint32_t>(::getpid()) ^
                          static_cast<uint32_t>(start.time_since_epoch().count()));
  Millis backoff = kFirstBackoff;
  std::string why = "no attempt was made";
  int attempts = 0;
  while (true) {
    ++attempts;
    Fd fd = connect_once(host_, port_, deadline, &why);
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
    int k = poll(&pfd, 1, poll_timeout(deadline));
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

// Bounded by the handshake's deadline: a server that never reads (its buffers
// full, or not a store at all) fails the attempt instead of spinning on EAGAIN.
void TcpClient::send_handshake(int fd, const std::vector<uint8_t>& frame,
                               Clock::time_point deadline) {
  const std::string why = send_before(fd, frame.data(), frame.size(), deadline);
  if (!why.empty()) throw RetryableError{"the handshake failed: " + why};
}

// The client's side of the handshake (Note [Store wire protocol]): one round
// trip, then the proof goes out and requests may follow at once.
void TcpClient::handshake(int fd, Clock::time_point deadline) {
  const std::string where = "store: failed to authenticate to server " + endpoint_ + ": ";
  auth::Nonce client_nonce = auth::random_nonce();
  wire::Writer hello(wire::Type::kClientHello, 0);
  hello.raw(client_nonce.data(), client_nonce.size());
  send_handshake(fd, hello.finish(), deadline);

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
      send_handshake(fd, w.finish(), deadline);
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
  send_handshake(fd, proof.finish(), deadline);
}

}  // namespace slurmddp::store
