// Challenge-response authentication of store connections (see
// Note [Store wire protocol] in wire.h). HMAC-SHA256 from OpenSSL's libcrypto.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "store/wire.h"

typedef struct evp_mac_ctx_st EVP_MAC_CTX;

namespace slurmddp::store::auth {

using Nonce = std::array<uint8_t, wire::kNonceSize>;
using Proof = std::array<uint8_t, wire::kProofSize>;

// A fresh random nonce from getrandom(2). Throws Error if the kernel has none.
Nonce random_nonce();

// HMAC-SHA256 keyed once with a token; each proof copies the keyed state, so
// the server pays for the key schedule once, not per connection.
class Prover {
 public:
  explicit Prover(const std::string& token);
  ~Prover();
  Prover(const Prover&) = delete;
  Prover& operator=(const Prover&) = delete;

  // The server's proof: HMAC(token, "slurmddp-store/1 server" || client || server).
  Proof server_proof(const Nonce& client, const Nonce& server) const;
  // The client's proof: HMAC(token, "slurmddp-store/1 client" || server || client).
  // Labels and nonce order differ, so one side's proof is never the other's.
  Proof client_proof(const Nonce& server, const Nonce& client) const;

 private:
  Proof mac(const char* label, const Nonce& first, const Nonce& second) const;
  EVP_MAC_CTX* keyed_ = nullptr;
};

// Constant-time comparison.
bool equal(const Proof& a, const Proof& b);

}  // namespace slurmddp::store::auth
