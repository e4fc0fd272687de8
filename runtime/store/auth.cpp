#include "store/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "slurmddp/error.h"

namespace slurmddp::store::auth {

namespace {

Proof mac(const std::string& token, const char* label, const Nonce& server, const Nonce& client) {
  // label || server nonce || client nonce, each of fixed length, so the
  // concatenation is unambiguous.
  uint8_t msg[64 + 2 * wire::kNonceSize];
  size_t label_len = std::strlen(label);
  std::memcpy(msg, label, label_len);
  std::memcpy(msg + label_len, server.data(), server.size());
  std::memcpy(msg + label_len + server.size(), client.data(), client.size());
  Proof out{};
  unsigned int out_len = 0;
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), msg,
           label_len + server.size() + client.size(), out.data(), &out_len) == nullptr ||
      out_len != out.size()) {
    throw Error("store: failed to compute the authentication proof: HMAC-SHA256 failed");
  }
  return out;
}

}  // namespace

Nonce random_nonce() {
  Nonce n{};
  size_t got = 0;
  while (got < n.size()) {
    ssize_t r = getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(std::string("store: failed to draw a nonce: getrandom: ") +
                  std::strerror(errno));
    }
    got += static_cast<size_t>(r);
  }
  return n;
}

Proof client_proof(const std::string& token, const Nonce& server, const Nonce& client) {
  return mac(token, "slurmddp-store/1 client", server, client);
}

Proof server_proof(const std::string& token, const Nonce& server, const Nonce& client) {
  return mac(token, "slurmddp-store/1 server", server, client);
}

bool equal(const Proof& a, const Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace slurmddp::store::auth
