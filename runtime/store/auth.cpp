#include "store/auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "slurmddp/error.h"

namespace slurmddp::store::auth {

namespace {

[[noreturn]] void hmac_failed(const char* step) {
  throw Error(std::string("store: failed to compute the authentication proof: HMAC-SHA256 ") +
              step + " failed");
}

// Fetched once: fetching the algorithm is the costly part of each HMAC() call.
EVP_MAC* hmac_algorithm() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (mac == nullptr) hmac_failed("fetch");
  return mac;
}

}  // namespace

Nonce random_nonce() {
  Nonce n{};
  size_t got = 0;
  while (got < n.size()) {
    ssize_t r = getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(std::string("store: failed to draw a nonce: getrandom: ") + std::strerror(errno));
    }
    got += static_cast<size_t>(r);
  }
  return n;
}

Prover::Prover(const std::string& token) {
  keyed_ = EVP_MAC_CTX_new(hmac_algorithm());
  if (keyed_ == nullptr) hmac_failed("context");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (EVP_MAC_init(keyed_, reinterpret_cast<const unsigned char*>(token.data()), token.size(),
                   params) != 1) {
    EVP_MAC_CTX_free(keyed_);
    hmac_failed("key setup");
  }
}

Prover::~Prover() {
  EVP_MAC_CTX_free(keyed_);
}

Proof Prover::mac(const char* label, const Nonce& first, const Nonce& second) const {
  // label || first nonce || second nonce, each of fixed length, so the
  // concatenation is unambiguous.
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_dup(keyed_);
  if (ctx == nullptr) hmac_failed("copy");
  Proof out{};
  size_t out_len = 0;
  bool ok =
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(label), std::strlen(label)) == 1 &&
      EVP_MAC_update(ctx, first.data(), first.size()) == 1 &&
      EVP_MAC_update(ctx, second.data(), second.size()) == 1 &&
      EVP_MAC_final(ctx, out.data(), &out_len, out.size()) == 1 && out_len == out.size();
  EVP_MAC_CTX_free(ctx);
  if (!ok) hmac_failed("update");
  return out;
}

Proof Prover::server_proof(const Nonce& client, const Nonce& server) const {
  return mac("slurmddp-store/1 server", client, server);
}

Proof Prover::client_proof(const Nonce& server, const Nonce& client) const {
  return mac("slurmddp-store/1 client", server, client);
}

bool equal(const Proof& a, const Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace slurmddp::store::auth
