// The TCP store server's options, with the bounds that keep hostile or broken
// clients from exhausting it, and its counters. Everyday use needs only
// tcp_store.h (which includes this for TcpStoreOptions::server, whose defaults
// suit any job); this is for tuning a server's limits and for monitoring one
// through TcpStoreServer::stats().
#pragma once

#include <cstddef>
#include <cstdint>
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

}  // namespace slurmddp

#pragma GCC visibility pop
