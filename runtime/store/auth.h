// Challenge-response authentication of store connections (see
// Note [Store wire protocol] in wire.h). HMAC-SHA256 from OpenSSL's libcrypto.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "store/wire.h"

namespace slurmddp::store::auth {

using Nonce = std::array<uint8_t, wire::kNonceSize>;
using Proof = std::array<uint8_t, wire::kProofSize>;

// A fresh random nonce from getrandom(2). Throws Error if the kernel has none.
Nonce random_nonce();

// The client's proof: HMAC(token, "slurmddp-store/1 client" || server || client).
Proof client_proof(const std::string& token, const Nonce& server, const Nonce& client);
// The server's proof: the same with the "server" label, so that one side's
// proof can never be reflected back as the other's.
Proof server_proof(const std::string& token, const Nonce& server, const Nonce& client);

// Constant-time comparison.
bool equal(const Proof& a, const Proof& b);

}  // namespace slurmddp::store::auth
