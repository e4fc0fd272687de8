#include "store/server_handshake.h"

#include <utility>

namespace slurmddp::store {

namespace {

ServerHandshake::Step refused(Refusal why, std::string detail) {
  ServerHandshake::Step s;
  s.result = ServerHandshake::Step::kRefused;
  s.why = why;
  s.detail = std::move(detail);
  return s;
}

}  // namespace

ServerHandshake::Step ServerHandshake::on_frame(const auth::Prover* prover, const wire::Header& h,
                                                const uint8_t* payload, size_t n) {
  using wire::Type;
  const Type expected = awaiting_proof_ ? Type::kClientProof : Type::kClientHello;
  if (awaiting_proof_ && h.type == Type::kAuthAbort) {
    wire::AbortReason why{};
    if (!wire::decode_auth_abort(payload, n, &why)) {
      return refused(Refusal::kMalformed, "sent a malformed auth-abort");
    }
    if (why == wire::AbortReason::kNoToken) {
      return refused(Refusal::kNoToken,
                     "the server requires a token and the client has none (SLURMDDP_TOKEN unset "
                     "on that rank?)");
    }
    return refused(Refusal::kWrongToken,
                   "the client found that the server's proof does not match its token (a "
                   "different SLURMDDP_TOKEN)");
  }
  if (h.type != expected) {
    return refused(Refusal::kMalformed, std::string("sent a ") + wire::type_name(h.type) +
                                            " frame where a " + wire::type_name(expected) +
                                            " belongs");
  }
  if (!awaiting_proof_) {
    if (!wire::decode_client_hello(payload, n, &client_nonce_)) {
      return refused(Refusal::kMalformed, "sent a malformed client hello");
    }
    server_nonce_ = auth::random_nonce();
    wire::Writer w(Type::kServerHello, h.id);
    w.u8(prover == nullptr ? 0 : 1);
    w.raw(server_nonce_.data(), server_nonce_.size());
    if (prover != nullptr) {
      auth::Proof mine = prover->server_proof(client_nonce_, server_nonce_);
      w.raw(mine.data(), mine.size());
    }
    Step s;
    s.reply = w.finish();
    if (prover == nullptr) {
      s.result = Step::kAuthenticated;
    } else {
      awaiting_proof_ = true;
    }
    return s;
  }
  auth::Proof proof{};
  if (!wire::decode_client_proof(payload, n, &proof)) {
    return refused(Refusal::kMalformed, "sent a malformed client proof");
  }
  if (!auth::equal(proof, prover->client_proof(server_nonce_, client_nonce_))) {
    const std::string msg =
        "the client's proof does not match the server's token (a different SLURMDDP_TOKEN, or "
        "a replayed handshake)";
    wire::Writer w(Type::kAuthRefused, h.id);
    w.u8(static_cast<uint8_t>(wire::RefuseReason::kWrongProof));
    w.str(msg);
    Step s = refused(Refusal::kWrongToken, msg);
    s.reply = w.finish();
    return s;
  }
  awaiting_proof_ = false;
  Step s;
  s.result = Step::kAuthenticated;
  return s;
}

}  // namespace slurmddp::store
