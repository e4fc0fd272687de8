// The TCP backend of the Store (see store.h for the contract every method
// keeps), with an event-driven server that one rank hosts.
//
// Typical use: the rank on MASTER_ADDR passes is_server = true and hosts the
// server in a background thread of its process (bound on all interfaces at
// MASTER_PORT); every rank, that one included, gets a client:
//
//   slurmddp::TcpStoreOptions o;
//   o.host = master_addr; o.port = master_port; o.is_server = (rank == 0);
//   o.token = getenv("SLURMDDP_TOKEN") ? getenv("SLURMDDP_TOKEN") : "";
//   auto store = slurmddp::make_tcp_store(o);
//   slurmddp::store_barrier(*store, "init", rank, world_size, std::chrono::seconds(60));
//
// Authentication: with a token, both ends of every connection prove knowledge
// of it by challenge-response (HMAC-SHA256 over fresh nonces from both sides;
// the token never crosses the wire), the server first, so a client never
// proves itself to a server that has not. A client without the right token is
// refused (ProtocolError saying why, logged by the server), and a client
// holding a token refuses a server that does not ask for one. Without a token
// the store is open to anyone who can reach the port, as torch's TCPStore is.
// Authentication does not encrypt: someone who can read or alter the traffic
// on the path can still read or alter it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "slurmddp/store.h"
#include "slurmddp/timeout.h"

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
  // A connection must complete the handshake within this, or it is closed.
  Millis handshake_timeout{10000};
  // After the handshake, a frame that has begun must keep arriving: a
  // connection whose partial frame makes no progress for this long is closed.
  Millis stall_timeout{30000};
  // At most this many connections may be in the handshake at once; each new
  // one beyond it closes the one that has waited longest.
  size_t max_unauthenticated = 4096;
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
  uint64_t refused_over_capacity = 0;      // evicted by max_unauthenticated, or no fds left
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
  TcpStoreServerStats stats() const;

  // Blocks until no authenticated client is connected (connections still in
  // the handshake do not count) or `timeout` passes; returns whether it got
  // there. The server keeps serving meanwhile.
  bool drain(Millis timeout);

 private:
  struct Impl;
  explicit TcpStoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreOptions {
  // The server's host name or address (MASTER_ADDR).
  std::string host = "127.0.0.1";
  // The server's port (MASTER_PORT); with is_server, 0 picks a free one.
  uint16_t port = 0;
  // Host the server in a background thread of this process, bound on all
  // interfaces (or server.bind_host) at `port`; the client then talks to it
  // over loopback. The server lives as long as the returned store.
  bool is_server = false;
  // The shared secret (SLURMDDP_TOKEN); empty: open. Also the server's token.
  std::string token;
  // How long to keep trying to connect (retrying with exponential backoff),
  // and the deadline of every non-blocking request (set, add, ...).
  Millis timeout{kDefaultTimeout};
  // With is_server: how long destroying the store keeps serving the other
  // ranks still connected, so that they can finish their last requests (the
  // last barrier's reply, a timeout diagnosis) instead of losing the server
  // under them. It ends as soon as they have all disconnected.
  Millis linger{5000};
  // Limits of the hosted server; its port and token come from the fields above.
  TcpStoreServerOptions server;
};

// A Store client connected to one server. Any number of threads may share it:
// their requests are multiplexed over one connection and a blocked get/wait in
// one thread does not delay the others. Errors name the server as host:port:
// PeerError when the connection is lost, TimeoutError when connecting or a
// request runs out of time, ProtocolError when authentication is refused or
// the server breaks the protocol.
class TcpStore : public Store {
 public:
  // "host:port" of the server.
  virtual std::string endpoint() const = 0;
  // The server's port (useful with is_server and port 0).
  virtual uint16_t port() const = 0;
  // The hosted server when is_server, else null.
  virtual TcpStoreServer* server() const = 0;
};

// Connects (and with is_server first starts the server). Blocks until the
// handshake succeeds or options.timeout passes: TimeoutError naming host:port,
// how long it tried and the last cause; ProtocolError when authentication is
// refused (never retried).
std::shared_ptr<TcpStore> make_tcp_store(const TcpStoreOptions& options);

}  // namespace slurmddp
