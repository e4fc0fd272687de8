// The TCP store's server: where it listens, the bounds that keep hostile or
// broken clients from exhausting it, its counters, and the server itself.
// Everyday use needs only tcp_store.h (one rank hosts the server through
// TcpStoreOptions::is_server, with defaults that suit any job); this is for
// tuning a server's limits, monitoring one through stats(), or running one
// apart from any client.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "slurmddp/store.h"

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

// Where a server listens, and the bounds that keep hostile or broken clients
// from exhausting it. Every limit applies per server.
struct TcpStoreServerOptions {
  // Address or host name to bind; empty: all interfaces (IPv6 and IPv4).
  std::string bind_host;
  // 0: let the kernel pick a free port (read it back with TcpStoreServer::port()).
  uint16_t port = 0;
  // The shared secret; empty: open, no authentication.
  std::string token;
  // A connection must complete the handshake within this, or it is closed. A
  // legitimate handshake is one round trip; a client that is closed retries.
  Millis handshake_timeout{3000};
  // After the handshake, a frame that has begun must keep arriving: a
  // connection whose partial frame makes no progress for this long is closed.
  Millis stall_timeout{30000};
  // At most this many connections may be in the handshake at once; each new
  // one beyond it closes the oldest connection of the source address that has
  // the most in the handshake (the oldest overall when every source has as
  // many), never the new one. slurmddp::init() sets it from the world size
  // and the limit of open files.
  size_t max_unauthenticated = 1024;
  // Descriptors the server leaves to the rest of its process (checkpoints,
  // sockets of the communicators, the program's own files): a connection that
  // arrives when fewer than this many are free under RLIMIT_NOFILE closes a
  // connection still in the handshake (chosen as above) instead of holding
  // one more descriptor. "Free" is judged from the descriptor the kernel gives
  // the new connection (always the lowest free number). 0: no reserve.
  size_t reserve_fds = 32;
  // Blocked get/wait requests one connection may have parked at once; more are
  // answered with an error.
  size_t max_parked_per_connection = 1024;
  // A connection whose unsent replies exceed this many bytes is not read until
  // they drain (a client that never reads cannot grow the server's memory).
  size_t output_high_water = size_t{4} << 20;
};

// Counters of a running server (a consistent snapshot is not guaranteed
// between fields; each is exact on its own).
struct TcpStoreServerStats {
  uint64_t accepted = 0;              // connections accepted, in total
  uint64_t open = 0;                  // connections open now
  uint64_t unauthenticated = 0;       // ... of which still in the handshake
  uint64_t peak_unauthenticated = 0;  // the most ever in the handshake at once
  uint64_t authenticated = 0;         // handshakes completed, in total
  uint64_t requests = 0;              // requests answered or parked, in total
  uint64_t parked = 0;                // blocked get/wait requests now
  uint64_t keys = 0;                  // keys stored now
  uint64_t buffered_bytes = 0;        // connection buffers held now (input and output)
  uint64_t peak_buffered_bytes = 0;   // the most ever held at once
  // Connections the server closed, by reason (each is logged once at warn):
  uint64_t refused_malformed = 0;          // bytes that are not this protocol
  uint64_t refused_oversized = 0;          // a length field over the limit
  uint64_t refused_no_token = 0;           // the server needs a token; no proof sent
  uint64_t refused_wrong_token = 0;        // wrong proof (wrong token or replayed handshake)
  uint64_t refused_handshake_timeout = 0;  // no complete handshake in time
  uint64_t refused_stalled = 0;            // a partial frame held open past stall_timeout
  uint64_t refused_over_capacity = 0;      // evicted by max_unauthenticated or reserve_fds,
                                           // or no fds left
};

// A store server running its event loop (epoll, one thread) in the background.
// Thread-safe: port() and stats() may be called from any thread.
class TcpStoreServer {
 public:
  // Binds, listens and starts the loop. Throws Error naming host:port when it
  // cannot bind or listen.
  static std::unique_ptr<TcpStoreServer> start(const TcpStoreServerOptions& options);
  // Stops the loop and closes every connection: clients blocked in get/wait
  // get PeerError.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The port it listens on (the kernel's choice when options.port was 0).
  uint16_t port() const;
  // Its counters (TcpStoreServerStats above).
  TcpStoreServerStats stats() const;

  // Blocks until no authenticated client is connected (connections still in
  // the handshake do not count) or `timeout` passes; returns whether it got
  // there. The server keeps serving meanwhile.
  bool drain(Millis timeout);
  // The same, but also gives up once no request has arrived for `quiet`: the
  // clients still connected are then idle, or stopped (a SIGSTOPped process
  // keeps its connection and asks nothing), and waiting longer only delays
  // the host's exit (Note [Lingering host]).
  bool drain(Millis timeout, Millis quiet);

 private:
  struct __attribute__((visibility("hidden"))) Impl;  // internal: not exported
  explicit TcpStoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace slurmddp

#pragma GCC visibility pop
