// The server's side of a connection's handshake (Note [Store wire protocol] in
// wire.h), without sockets: it reads the client's handshake frames and says
// what to answer and whether the connection is now authenticated or must be
// refused. The event loop (tcp_server.h) keeps one per connection until the
// handshake completes, sends the replies and applies the outcome.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "store/auth.h"
#include "store/refusal.h"
#include "store/wire.h"

namespace slurmddp::store {

class ServerHandshake {
 public:
  // What one handshake frame leads to.
  struct Step {
    enum Result { kContinue, kAuthenticated, kRefused };
    Result result = kContinue;
    // A frame to send first; empty: none. With kRefused the connection is
    // closed once it is written.
    std::vector<uint8_t> reply;
    // kRefused: the reason and what to log.
    Refusal why{};
    std::string detail;
  };

  // Handles one complete handshake frame (header `h`, payload[0, n)). `prover`
  // holds the server's token; null: the server has none, and the client's
  // hello alone authenticates it.
  Step on_frame(const auth::Prover* prover, const wire::Header& h, const uint8_t* payload,
                size_t n);

 private:
  bool awaiting_proof_ = false;  // sent the server hello, waiting for the client's proof
  auth::Nonce client_nonce_{};
  auth::Nonce server_nonce_{};
};

}  // namespace slurmddp::store
