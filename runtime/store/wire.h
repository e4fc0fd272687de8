// The TCP store's wire protocol (version 1). Pure encoding and decoding, no I/O,
// so the parser can be unit-tested and fuzzed on its own.
//
// Note [Store wire protocol]
// Every message is one frame:
//   u32 length   bytes that follow this field (big-endian, like all integers)
//   u8  version  kVersion; anything else is refused
//   u8  type     a Type below
//   u32 id       request id chosen by the client, echoed in the reply
//                (replies may come out of order: blocked get/wait are parked)
//   ...          the payload of that type
// Byte strings are u32 length + bytes; i64 are two's complement.
//
// Handshake, before anything else on a connection (one round trip for the
// client, which then sends requests without waiting for a verdict):
//   client -> kClientHello  32-byte client nonce Nc
//   server -> kServerHello  u8 auth_required, 32-byte server nonce Ns,
//                           [server proof = HMAC-SHA256(token, "slurmddp-store/1 server" || Nc ||
//                           Ns)]
//   then, only when auth_required:
//   client -> kClientProof  client proof = HMAC-SHA256(token, "slurmddp-store/1 client" || Ns ||
//   Nc)
//          or kAuthAbort    u8 AbortReason, when the client has no token or the
//                           server's proof does not match its token: it never
//                           proves itself to a server that has not proved itself
//   server -> kAuthRefused  u8 RefuseReason, string message, when the client's
//                           proof does not match; then it closes. Success is silent.
// Without a token the server is open (auth_required = 0) and the client, if it
// holds a token, refuses it. Ns is fresh per connection, so a recorded proof is
// useless on another connection; each proof covers both nonces under its own
// label, so neither side's proof can be reflected as the other's. The token
// itself never crosses the wire.
//
// Requests and their replies after the handshake:
//   kSet      key, value                    -> kOk
//   kGet      key, i64 timeout_ms           -> kValue value | kTimeout
//   kAdd      key, i64 delta                -> kInt value
//   kCompareSet key, expected, desired      -> kValue value
//   kWait     u32 n, n keys, i64 timeout_ms -> kOk | kTimeout
//   kCheck    u32 n, n keys                 -> kBool
//   kErase    key                           -> kBool
//   kJoin     rank key, count key, done key, i64 world, i64 timeout_ms
//             -> kInt joined | kTimeout   (Note [Barrier join])
//   kTimeout  u32 n, n u32 indices of the keys still missing
//   kError    u8 ErrorCode, string message  (any request)
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "slurmddp/store.h"

namespace slurmddp::store::wire {

inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kProofSize = 32;
// length field + version + type + id
inline constexpr size_t kLengthSize = 4;
inline constexpr size_t kHeaderSize = kLengthSize + 1 + 1 + 4;
// Frames before authentication are tiny; anything longer is refused unread.
inline constexpr size_t kMaxHandshakeFrame = 128;
// The largest legitimate frame: compare_set with a maximal key and two maximal values.
inline constexpr size_t kMaxFrame = 2 * (4 + kMaxValueSize) + 4 + kMaxKeySize + 64;

enum class Type : uint8_t {
  kClientHello = 1,
  kServerHello = 2,
  kClientProof = 3,
  kAuthAbort = 4,
  kAuthRefused = 5,
  kSet = 16,
  kGet = 17,
  kAdd = 18,
  kCompareSet = 19,
  kWait = 20,
  kCheck = 21,
  kErase = 22,
  kJoin = 23,
  kOk = 64,
  kValue = 65,
  kInt = 66,
  kBool = 67,
  kTimeout = 68,
  kError = 69,
};

const char* type_name(Type type);
bool is_request(Type type);

enum class ErrorCode : uint8_t {
  kInvalidArgument = 1,  // bad key/value/counter: the client throws InvalidArgument
  kProtocol = 2,         // malformed request: the server closes the connection
  kBusy = 3,             // too many blocked requests on one connection
};

// Why the server refused a connection's proof (kAuthRefused).
enum class RefuseReason : uint8_t {
  kWrongProof = 1,  // the proof does not match (wrong token, or a replayed handshake)
};

// Why a client gave up on the handshake (kAuthAbort).
enum class AbortReason : uint8_t {
  kNoToken = 1,     // the server needs a token; the client has none
  kWrongProof = 2,  // the server's proof does not match the client's token
};

// Appends big-endian integers and length-prefixed strings to a buffer.
class Writer {
 public:
  explicit Writer(Type type, uint32_t id);
  void u8(uint8_t v) { buf_.push_back(v); }
  void u32(uint32_t v);
  void i64(int64_t v);
  void bytes(const void* data, size_t n);
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  void raw(const void* data, size_t n);
  // Fills in the length field and returns the frame.
  std::vector<uint8_t> finish();
  // For a frame whose last field is a length-prefixed blob sent separately
  // (zero copy): the length field counts `tail` more bytes than are buffered.
  std::vector<uint8_t> finish_with_tail(size_t tail);

 private:
  std::vector<uint8_t> buf_;
};

// A parsed frame header. `length` counts the bytes after the length field.
struct Header {
  uint32_t length = 0;
  uint8_t version = 0;
  Type type{};
  uint32_t id = 0;
};

inline uint32_t load_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Validation of a frame's length field against a limit; how many bytes the
// whole frame occupies including the length field.
enum class LengthCheck { kOk, kTooShort, kTooLong };
LengthCheck check_length(uint32_t length, size_t max_frame);

// Decodes the header of a complete frame `p` (at least kHeaderSize bytes).
Header decode_header(const uint8_t* p);

// How a connection's buffered input p[0, n) begins, by the server's framing
// rules (Note [Store server bounds] in tcp_server.h): a complete frame of *size
// bytes (length field included), too few bytes yet, or a violation that closes
// the connection. The version byte is checked as soon as it has arrived, before
// the length field is trusted.
enum class FrameStatus { kComplete, kPartial, kBadVersion, kTooShort, kTooLong };
FrameStatus next_frame(const uint8_t* p, size_t n, size_t max_frame, size_t* size);

// Reads the payload of one frame. Every getter fails softly: after the first
// short read, ok() is false and the getters return zeros.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  // A length-prefixed string of at most `max` bytes.
  std::string str(size_t max);
  Bytes bytes(size_t max);
  void raw(void* out, size_t n);
  bool ok() const { return ok_; }
  // True iff everything was read without error and nothing is left over.
  bool done() const { return ok_ && n_ == 0; }

 private:
  const uint8_t* take(size_t n);
  const uint8_t* p_;
  size_t n_;
  bool ok_ = true;
};

// A decoded request (server side). Keys hold one key for single-key requests.
struct Request {
  Type type{};
  uint32_t id = 0;
  std::vector<std::string> keys;
  Bytes value;         // kSet value, kCompareSet desired
  Bytes expected;      // kCompareSet
  int64_t number = 0;  // kGet/kWait/kJoin timeout in ms, kAdd delta
  int64_t world = 0;   // kJoin
};

// The payloads of the handshake frames a server receives; each returns false
// unless the payload is exactly that.
bool decode_client_hello(const uint8_t* payload, size_t n,
                         std::array<uint8_t, kNonceSize>* client_nonce);
bool decode_client_proof(const uint8_t* payload, size_t n, std::array<uint8_t, kProofSize>* proof);
bool decode_auth_abort(const uint8_t* payload, size_t n, AbortReason* why);

// Decodes the payload of a request frame; returns false on any violation
// (unknown type, short or trailing bytes, a key or value over the limits, an
// empty key, a negative timeout) and says why in `*why`.
bool decode_request(const Header& h, const uint8_t* payload, size_t n, Request* out,
                    std::string* why);

}  // namespace slurmddp::store::wire
