// The TCP backend of the Store (see store.h for the contract every method
// keeps), with an event-driven server that one rank hosts.
//
// Typical use: the rank on MASTER_ADDR passes is_server = true and hosts the
// server in a background thread of its process (bound on all interfaces at
// MASTER_PORT); every rank, that one included, gets a client:
//
// Example, given int rank, int world_size, std::string master_addr, uint16_t master_port:
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
#include "slurmddp/tcp_store_server.h"  // TcpStoreOptions::server, TcpStore::server()
#include "slurmddp/timeout.h"

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

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
  // under them. It ends as soon as they have all disconnected, or once none
  // of them has sent a request for linger_quiet (Note [Lingering host]).
  Millis linger{5000};
  Millis linger_quiet{500};
  // Limits of the hosted server (tcp_store_server.h); its port and token come
  // from the fields above.
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

#pragma GCC visibility pop
