// The server's side of the handshake without sockets: client frames in, the
// server's reply and verdict out.
#include "store/server_handshake.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace slurmddp::store {
namespace {

using Step = ServerHandshake::Step;
using wire::Type;

Step feed(ServerHandshake& hs, const auth::Prover* prover, const std::vector<uint8_t>& frame) {
  const wire::Header h = wire::decode_header(frame.data());
  return hs.on_frame(prover, h, frame.data() + wire::kHeaderSize, frame.size() - wire::kHeaderSize);
}

std::vector<uint8_t> hello(const auth::Nonce& nonce, uint32_t id = 0) {
  wire::Writer w(Type::kClientHello, id);
  w.raw(nonce.data(), nonce.size());
  return w.finish();
}

std::vector<uint8_t> proof(const auth::Proof& p) {
  wire::Writer w(Type::kClientProof, 0);
  w.raw(p.data(), p.size());
  return w.finish();
}

std::vector<uint8_t> abort_frame(wire::AbortReason why) {
  wire::Writer w(Type::kAuthAbort, 0);
  w.u8(static_cast<uint8_t>(why));
  return w.finish();
}

// The server hello of a reply: whether it asks for a token, its nonce and (if
// it asks) its proof.
struct ServerHello {
  wire::Header header;
  uint8_t auth_required = 0;
  auth::Nonce nonce{};
  auth::Proof proof{};
  bool well_formed = false;
};

ServerHello parse_hello(const std::vector<uint8_t>& frame) {
  ServerHello out;
  out.header = wire::decode_header(frame.data());
  wire::Reader r(frame.data() + wire::kHeaderSize, frame.size() - wire::kHeaderSize);
  out.auth_required = r.u8();
  r.raw(out.nonce.data(), out.nonce.size());
  if (out.auth_required == 1) r.raw(out.proof.data(), out.proof.size());
  out.well_formed = r.done();
  return out;
}

const auth::Nonce kClientNonce = [] {
  auth::Nonce n{};
  for (size_t i = 0; i < n.size(); ++i) n[i] = static_cast<uint8_t>(i + 1);
  return n;
}();

TEST(ServerHandshakeTest, WithoutATokenTheHelloAloneAuthenticates) {
  ServerHandshake hs;
  Step s = feed(hs, nullptr, hello(kClientNonce, 7));
  EXPECT_EQ(s.result, Step::kAuthenticated);
  ServerHello reply = parse_hello(s.reply);
  EXPECT_EQ(reply.header.type, Type::kServerHello);
  EXPECT_EQ(reply.header.id, 7u);
  EXPECT_EQ(reply.auth_required, 0);
  EXPECT_TRUE(reply.well_formed);
}

TEST(ServerHandshakeTest, WithATokenTheServerProvesItselfThenChecksTheClient) {
  const auth::Prover prover("secret");
  ServerHandshake hs;
  Step s = feed(hs, &prover, hello(kClientNonce));
  EXPECT_EQ(s.result, Step::kContinue);
  ServerHello reply = parse_hello(s.reply);
  EXPECT_EQ(reply.header.type, Type::kServerHello);
  EXPECT_EQ(reply.auth_required, 1);
  ASSERT_TRUE(reply.well_formed);
  EXPECT_TRUE(auth::equal(reply.proof, prover.server_proof(kClientNonce, reply.nonce)));

  s = feed(hs, &prover, proof(prover.client_proof(reply.nonce, kClientNonce)));
  EXPECT_EQ(s.result, Step::kAuthenticated);
  EXPECT_TRUE(s.reply.empty());
}

TEST(ServerHandshakeTest, AWrongProofIsToldAndRefused) {
  const auth::Prover prover("secret");
  const auth::Prover other("other");
  ServerHandshake hs;
  ServerHello reply = parse_hello(feed(hs, &prover, hello(kClientNonce)).reply);
  Step s = feed(hs, &prover, proof(other.client_proof(reply.nonce, kClientNonce)));
  EXPECT_EQ(s.result, Step::kRefused);
  EXPECT_EQ(s.why, Refusal::kWrongToken);
  const std::string msg =
      "the client's proof does not match the server's token (a different SLURMDDP_TOKEN, or a "
      "replayed handshake)";
  EXPECT_EQ(s.detail, msg);
  const wire::Header h = wire::decode_header(s.reply.data());
  EXPECT_EQ(h.type, Type::kAuthRefused);
  wire::Reader r(s.reply.data() + wire::kHeaderSize, s.reply.size() - wire::kHeaderSize);
  EXPECT_EQ(r.u8(), static_cast<uint8_t>(wire::RefuseReason::kWrongProof));
  EXPECT_EQ(r.str(1024), msg);
  EXPECT_TRUE(r.done());
}

TEST(ServerHandshakeTest, AClientAbortIsRefusedForItsReason) {
  const auth::Prover prover("secret");
  struct Case {
    std::vector<uint8_t> frame;
    Refusal why;
    std::string detail;
  };
  std::vector<uint8_t> malformed = abort_frame(wire::AbortReason::kNoToken);
  malformed.push_back(0);
  malformed[3] += 1;  // the length field counts the extra byte
  const Case cases[] = {
      {abort_frame(wire::AbortReason::kNoToken), Refusal::kNoToken,
       "the server requires a token and the client has none (SLURMDDP_TOKEN unset on that "
       "rank?)"},
      {abort_frame(wire::AbortReason::kWrongProof), Refusal::kWrongToken,
       "the client found that the server's proof does not match its token (a different "
       "SLURMDDP_TOKEN)"},
      {malformed, Refusal::kMalformed, "sent a malformed auth-abort"},
  };
  for (const Case& c : cases) {
    ServerHandshake hs;
    feed(hs, &prover, hello(kClientNonce));
    Step s = feed(hs, &prover, c.frame);
    EXPECT_EQ(s.result, Step::kRefused);
    EXPECT_EQ(s.why, c.why);
    EXPECT_EQ(s.detail, c.detail);
    EXPECT_TRUE(s.reply.empty());
  }
}

TEST(ServerHandshakeTest, FramesOutOfOrderOrMalformedAreRefused) {
  const auth::Prover prover("secret");
  {
    ServerHandshake hs;  // a proof (or an abort) before the hello
    Step s = feed(hs, &prover, proof(auth::Proof{}));
    EXPECT_EQ(s.result, Step::kRefused);
    EXPECT_EQ(s.why, Refusal::kMalformed);
    EXPECT_EQ(s.detail, "sent a client-proof frame where a client-hello belongs");
    s = feed(hs, &prover, abort_frame(wire::AbortReason::kNoToken));
    EXPECT_EQ(s.detail, "sent a auth-abort frame where a client-hello belongs");
  }
  {
    ServerHandshake hs;  // a request instead of the proof
    feed(hs, &prover, hello(kClientNonce));
    wire::Writer get(Type::kGet, 1);
    Step s = feed(hs, &prover, get.finish());
    EXPECT_EQ(s.why, Refusal::kMalformed);
    EXPECT_EQ(s.detail, "sent a get frame where a client-proof belongs");
  }
  {
    ServerHandshake hs;  // a short nonce
    wire::Writer w(Type::kClientHello, 0);
    w.raw(kClientNonce.data(), kClientNonce.size() - 1);
    Step s = feed(hs, nullptr, w.finish());
    EXPECT_EQ(s.why, Refusal::kMalformed);
    EXPECT_EQ(s.detail, "sent a malformed client hello");
    EXPECT_TRUE(s.reply.empty());
  }
  {
    ServerHandshake hs;  // a short proof
    feed(hs, &prover, hello(kClientNonce));
    wire::Writer w(Type::kClientProof, 0);
    w.u8(1);
    Step s = feed(hs, &prover, w.finish());
    EXPECT_EQ(s.why, Refusal::kMalformed);
    EXPECT_EQ(s.detail, "sent a malformed client proof");
  }
}

}  // namespace
}  // namespace slurmddp::store
