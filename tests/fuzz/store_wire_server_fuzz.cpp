// Fuzz target: what a store server does with the bytes a client sends
// (Note [Store wire protocol]), through the server's own pure pieces: framing
// and bounds (wire::next_frame), the handshake payloads
// (wire::decode_client_hello/decode_client_proof/decode_auth_abort), request
// decoding (wire::decode_request) and the table every request acts on
// (store::KvTable). The connection's state machine is the server's: one
// handshake frame of at most kMaxHandshakeFrame bytes first, then requests of
// at most kMaxFrame bytes; the first violation closes the connection.
//
// Input: one byte of setup (bit 0: the server holds a token; bit 1: the
// connection is already authenticated), then the client's byte stream.
//
// Invariants: a complete frame lies inside the input and its header agrees with
// the framing; a decoded request is within the store's limits and re-encodes to
// exactly the bytes it came from; the table does what the Store contract says
// (a set value reads back, add returns what it stores, compare_set answers the
// value it leaves, missing lists ascending indices).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "slurmddp/error.h"
#include "slurmddp/store.h"
#include "store/auth.h"
#include "store/kv_table.h"
#include "store/wire.h"

namespace {

namespace wire = slurmddp::store::wire;
using slurmddp::Bytes;
using slurmddp::store::KvTable;
using wire::Type;

std::vector<uint8_t> encode(const wire::Request& r) {
  wire::Writer w(r.type, r.id);
  auto key_list = [&] {
    w.u32(static_cast<uint32_t>(r.keys.size()));
    for (const auto& k : r.keys) w.str(k);
  };
  switch (r.type) {
    case Type::kSet:
      w.str(r.keys[0]);
      w.bytes(r.value.data(), r.value.size());
      break;
    case Type::kGet:
    case Type::kAdd:
      w.str(r.keys[0]);
      w.i64(r.number);
      break;
    case Type::kCompareSet:
      w.str(r.keys[0]);
      w.bytes(r.expected.data(), r.expected.size());
      w.bytes(r.value.data(), r.value.size());
      break;
    case Type::kWait:
      key_list();
      w.i64(r.number);
      break;
    case Type::kCheck:
      key_list();
      break;
    case Type::kErase:
      w.str(r.keys[0]);
      break;
    case Type::kJoin:
      for (const auto& k : r.keys) w.str(k);
      w.i64(r.world);
      w.i64(r.number);
      break;
    default:
      FUZZ_CHECK(false, "decode_request accepted a non-request type");
  }
  return w.finish();
}

std::string text(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

void check_missing(const KvTable& table, const std::vector<std::string>& keys) {
  std::vector<uint32_t> missing = table.missing(keys);
  for (size_t i = 0; i < missing.size(); ++i) {
    FUZZ_CHECK(missing[i] < keys.size() && (i == 0 || missing[i - 1] < missing[i]),
               std::to_string(missing[i]));
    FUZZ_CHECK(!table.contains(keys[missing[i]]), keys[missing[i]]);
  }
}

void add(KvTable& table, const std::string& key, int64_t delta) {
  try {
    int64_t v = table.add(key, delta);
    FUZZ_CHECK(text(*table.find(key)) == std::to_string(v), key);
  } catch (const slurmddp::InvalidArgument&) {
    // not a counter, or it would overflow: the store answers kError
  }
}

// The server's on_request, reduced to its effect on the table.
void apply(KvTable& table, wire::Request& r) {
  const std::string& key = r.keys.empty() ? std::string() : r.keys[0];
  switch (r.type) {
    case Type::kSet: {
      table.set(key, std::make_shared<const Bytes>(r.value));
      FUZZ_CHECK(*table.find(key) == r.value, key);
      break;
    }
    case Type::kGet:
      (void)table.find(key);
      break;
    case Type::kAdd:
      add(table, key, r.number);
      break;
    case Type::kCompareSet: {
      slurmddp::store::Value before = table.find(key);
      bool changed = false;
      slurmddp::store::Value after =
          table.compare_set(key, r.expected, std::make_shared<const Bytes>(r.value), &changed);
      const bool matched = before ? *before == r.expected : r.expected.empty();
      FUZZ_CHECK(changed == matched, key);
      FUZZ_CHECK(after && *after == (matched ? r.value : before ? *before : Bytes{}), key);
      break;
    }
    case Type::kWait:
    case Type::kCheck:
      check_missing(table, r.keys);
      break;
    case Type::kErase:
      table.erase(key);
      FUZZ_CHECK(!table.contains(key), key);
      break;
    case Type::kJoin:
      table.set(key, std::make_shared<const Bytes>(Bytes{'1'}));
      add(table, r.keys[1], 1);
      break;
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t flags = size > 0 ? data[0] : 0;
  const bool with_token = (flags & 1) != 0;
  bool authenticated = (flags & 2) != 0;
  const uint8_t* p = data + (size > 0 ? 1 : 0);
  const size_t n = size > 0 ? size - 1 : 0;

  static const slurmddp::store::auth::Prover prover("fuzz-token");
  slurmddp::store::auth::Nonce client_nonce{};
  const slurmddp::store::auth::Nonce server_nonce{};  // fixed: the input cannot know it anyway
  bool awaiting_proof = false;
  KvTable table;

  size_t pos = 0;
  while (n - pos >= wire::kLengthSize) {
    const size_t limit = authenticated ? wire::kMaxFrame : wire::kMaxHandshakeFrame;
    size_t total = 0;
    const wire::FrameStatus status = wire::next_frame(p + pos, n - pos, limit, &total);
    if (status != wire::FrameStatus::kComplete) break;  // a partial frame, or the connection closes
    FUZZ_CHECK(total >= wire::kHeaderSize && total <= limit && total <= n - pos,
               std::to_string(total));
    const uint8_t* frame = p + pos;
    const wire::Header h = wire::decode_header(frame);
    FUZZ_CHECK(h.version == wire::kVersion && size_t{h.length} + wire::kLengthSize == total,
               std::to_string(h.length));
    const uint8_t* payload = frame + wire::kHeaderSize;
    const size_t m = total - wire::kHeaderSize;

    if (!authenticated) {
      if (awaiting_proof && h.type == Type::kAuthAbort) {
        wire::AbortReason why{};
        FUZZ_CHECK(wire::decode_auth_abort(payload, m, &why) == (m == 1), std::to_string(m));
        break;  // refused either way
      }
      if (h.type != (awaiting_proof ? Type::kClientProof : Type::kClientHello)) break;
      if (!awaiting_proof) {
        const bool ok = wire::decode_client_hello(payload, m, &client_nonce);
        FUZZ_CHECK(ok == (m == wire::kNonceSize), std::to_string(m));
        if (!ok) break;
        if (with_token) {
          awaiting_proof = true;
        } else {
          authenticated = true;
        }
      } else {
        slurmddp::store::auth::Proof proof{};
        const bool ok = wire::decode_client_proof(payload, m, &proof);
        FUZZ_CHECK(ok == (m == wire::kProofSize), std::to_string(m));
        if (!ok) break;
        // Without the token no input can prove itself (short of breaking HMAC).
        if (!slurmddp::store::auth::equal(proof, prover.client_proof(server_nonce, client_nonce))) {
          break;
        }
        authenticated = true;
      }
      pos += total;
      continue;
    }

    wire::Request req;
    std::string why;
    if (!wire::is_request(h.type) || !wire::decode_request(h, payload, m, &req, &why)) {
      FUZZ_CHECK(!wire::is_request(h.type) || !why.empty(), "a refusal without a reason");
      break;  // the server answers kError and closes
    }
    FUZZ_CHECK(req.type == h.type && req.id == h.id, wire::type_name(req.type));
    for (const auto& k : req.keys) {
      FUZZ_CHECK(!k.empty() && k.size() <= slurmddp::kMaxKeySize, std::to_string(k.size()));
    }
    FUZZ_CHECK(req.value.size() <= slurmddp::kMaxValueSize &&
                   req.expected.size() <= slurmddp::kMaxValueSize,
               std::to_string(req.value.size()));
    const std::vector<uint8_t> again = encode(req);
    FUZZ_CHECK(again.size() == total && std::equal(again.begin(), again.end(), frame),
               std::string("re-encoding a decoded ") + wire::type_name(req.type) +
                   " request gives other bytes");
    apply(table, req);
    pos += total;
  }
  return 0;
}
