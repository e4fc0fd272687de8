// Fuzz target: a real store server (TcpStoreServer: its epoll loop on its own
// thread, parking, waking, barrier joins, output bounds) fed the input over a
// loopback connection. The pure decoding is fuzzed by store_wire_server; this
// target reaches what the server does with decoded requests and with the way
// bytes arrive. A fresh server per input keeps runs independent.
//
// Input: one byte of setup, then the client's bytes.
//   bit 0: the server holds a token;
//   bit 1: the harness does not handshake (the input must, and cannot prove a
//          token, so with bit 0 this exercises refusals);
//   bit 2: at most 2 parked requests per connection;
//   bit 3: a 64-byte output bound (reads pause and resume).
// After the input the client half-closes and reads until the server closes.
//
// Invariants: a correct handshake is accepted; the server closes the
// connection within seconds of the client's EOF whatever came before; every
// reply is a well-formed frame of a reply type (the last one may be cut short
// by a refusal). ASan and UBSan watch the server thread as well.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "slurmddp/error.h"
#include "slurmddp/tcp_store.h"
#include "slurmddp/tcp_store_server.h"
#include "store/auth.h"
#include "store/socket.h"
#include "store/wire.h"

namespace {

namespace wire = slurmddp::store::wire;
namespace auth = slurmddp::store::auth;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Refusals are logged at warn; an explicit SLURMDDP_LOG_LEVEL still wins.
const int kQuiet = setenv("SLURMDDP_LOG_LEVEL", "error", 0);

constexpr milliseconds kCloseWithin{5000};

// One loopback connection driven without blocking calls (libFuzzer's timer
// signal interrupts those): queued output is written while input is read.
class Connection {
 public:
  explicit Connection(uint16_t port) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    FUZZ_CHECK(fd_.valid(), std::string("socket: ") + std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    // Interrupted, the connection completes in the background; poll sees it.
    FUZZ_CHECK(rc == 0 || errno == EINTR, std::string("connect: ") + std::strerror(errno));
  }
  void queue(const std::vector<uint8_t>& bytes) {
    out_.insert(out_.end(), bytes.begin(), bytes.end());
  }
  void queue(const uint8_t* p, size_t n) { out_.insert(out_.end(), p, p + n); }
  void finish() { finish_ = true; }  // half-close once the queue is written
  const std::vector<uint8_t>& received() const { return in_; }
  bool closed() const { return eof_; }

  // Writes and reads until `done()` holds or the server closes; false when
  // `deadline` passes first.
  template <typename Done>
  bool pump(steady_clock::time_point deadline, Done done) {
    while (!done() && !eof_) {
      if (sent_ == out_.size() && finish_ && !shut_) {
        shutdown(fd_.get(), SHUT_WR);
        shut_ = true;
      }
      const bool want_out = sent_ < out_.size() && !write_failed_;
      pollfd pfd{fd_.get(), static_cast<short>(POLLIN | (want_out ? POLLOUT : 0)), 0};
      const int ready = poll(&pfd, 1, slurmddp::store::poll_timeout(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return false;
      if ((pfd.revents & POLLOUT) != 0 && want_out) {
        const ssize_t k = ::send(fd_.get(), out_.data() + sent_, out_.size() - sent_,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
          sent_ += static_cast<size_t>(k);
        } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
          write_failed_ = true;  // the server closed its side; read what it said
          sent_ = out_.size();
        }
      }
      if ((pfd.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        uint8_t buf[16384];
        const ssize_t k = ::recv(fd_.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (k > 0) {
          in_.insert(in_.end(), buf, buf + k);
        } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
          eof_ = true;
        }
      }
    }
    return true;
  }

 private:
  slurmddp::store::Fd fd_;
  std::vector<uint8_t> out_, in_;
  size_t sent_ = 0;
  bool finish_ = false, shut_ = false, eof_ = false, write_failed_ = false;
};

// The size of the first complete frame in `in`, 0 while incomplete.
size_t first_frame(const std::vector<uint8_t>& in) {
  if (in.size() < wire::kLengthSize) return 0;
  const size_t size = wire::kLengthSize + size_t{wire::load_u32(in.data())};
  return in.size() >= size ? size : 0;
}

// The client's side of the handshake; empty on success, else what went wrong.
std::string handshake(Connection& c, const std::string& token) {
  const auth::Nonce mine = auth::random_nonce();
  wire::Writer hello(wire::Type::kClientHello, 0);
  hello.raw(mine.data(), mine.size());
  c.queue(hello.finish());
  if (!c.pump(steady_clock::now() + kCloseWithin, [&] { return first_frame(c.received()) > 0; })) {
    return "no server hello within " + std::to_string(kCloseWithin.count()) + " ms";
  }
  const size_t size = first_frame(c.received());
  if (size == 0) return "the server closed the connection instead of answering the hello";
  const wire::Header h = wire::decode_header(c.received().data());
  const uint8_t* payload = c.received().data() + wire::kHeaderSize;
  if (h.type != wire::Type::kServerHello || size == wire::kHeaderSize) {
    return std::string("a ") + wire::type_name(h.type) + " frame instead of the server hello";
  }
  if (payload[0] == 0) return {};
  if (size != wire::kHeaderSize + 1 + wire::kNonceSize + wire::kProofSize) {
    return "a server hello of " + std::to_string(size) + " bytes";
  }
  auth::Nonce theirs{};
  std::copy(payload + 1, payload + 1 + wire::kNonceSize, theirs.begin());
  const auth::Proof proof = auth::Prover(token).client_proof(theirs, mine);
  wire::Writer w(wire::Type::kClientProof, 0);
  w.raw(proof.data(), proof.size());
  c.queue(w.finish());
  return {};
}

bool is_reply(wire::Type t) {
  switch (t) {
    case wire::Type::kServerHello:
    case wire::Type::kAuthRefused:
    case wire::Type::kOk:
    case wire::Type::kValue:
    case wire::Type::kInt:
    case wire::Type::kBool:
    case wire::Type::kTimeout:
    case wire::Type::kError:
      return true;
    default:
      return false;
  }
}

void check_replies(const std::vector<uint8_t>& in) {
  size_t pos = 0;
  while (in.size() - pos >= wire::kHeaderSize) {
    const wire::Header h = wire::decode_header(in.data() + pos);
    FUZZ_CHECK(h.version == wire::kVersion, std::to_string(h.version));
    FUZZ_CHECK(h.length >= wire::kHeaderSize - wire::kLengthSize, std::to_string(h.length));
    FUZZ_CHECK(is_reply(h.type), wire::type_name(h.type));
    pos += wire::kLengthSize + size_t{h.length};
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t flags = size > 0 ? data[0] : 0;
  const uint8_t* p = data + (size > 0 ? 1 : 0);
  const size_t n = size > 0 ? size - 1 : 0;

  slurmddp::TcpStoreServerOptions o;
  o.bind_host = "127.0.0.1";
  o.token = (flags & 1) != 0 ? "fuzz-token" : "";
  o.handshake_timeout = kCloseWithin;
  o.stall_timeout = kCloseWithin;
  if ((flags & 4) != 0) o.max_parked_per_connection = 2;
  if ((flags & 8) != 0) o.output_high_water = 64;
  // Every server listens on the port of the first one (SO_REUSEADDR): the
  // client's TIME_WAIT sockets then pile up on one destination, where loopback
  // reuses them, instead of holding a fresh port each until bind() runs out.
  static uint16_t port = 0;
  o.port = port;
  std::unique_ptr<slurmddp::TcpStoreServer> server;
  try {
    server = slurmddp::TcpStoreServer::start(o);
  } catch (const slurmddp::Error&) {
    o.port = 0;  // taken meanwhile by another program
    server = slurmddp::TcpStoreServer::start(o);
  }
  port = server->port();

  Connection c(server->port());
  if ((flags & 2) == 0) {
    const std::string failed = handshake(c, o.token);
    FUZZ_CHECK(failed.empty(), "the server refused a correct handshake: " + failed);
  }
  // The input, then a half-close; the server must close within seconds,
  // whatever the input parked or left unfinished.
  c.queue(p, n);
  c.finish();
  FUZZ_CHECK(c.pump(steady_clock::now() + kCloseWithin, [] { return false; }),
             "the server kept the connection open " + std::to_string(kCloseWithin.count()) +
                 " ms after the client's EOF");
  check_replies(c.received());
  return 0;
}
