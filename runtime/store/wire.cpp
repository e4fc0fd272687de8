#include "store/wire.h"

namespace slurmddp::store::wire {

const char* type_name(Type type) {
  switch (type) {
    case Type::kClientHello:
      return "client-hello";
    case Type::kServerHello:
      return "server-hello";
    case Type::kClientProof:
      return "client-proof";
    case Type::kAuthAbort:
      return "auth-abort";
    case Type::kAuthRefused:
      return "auth-refused";
    case Type::kSet:
      return "set";
    case Type::kGet:
      return "get";
    case Type::kAdd:
      return "add";
    case Type::kCompareSet:
      return "compare-set";
    case Type::kWait:
      return "wait";
    case Type::kCheck:
      return "check";
    case Type::kErase:
      return "erase";
    case Type::kJoin:
      return "join";
    case Type::kOk:
      return "ok";
    case Type::kValue:
      return "value";
    case Type::kInt:
      return "int";
    case Type::kBool:
      return "bool";
    case Type::kTimeout:
      return "timeout";
    case Type::kError:
      return "error";
  }
  return "unknown";
}

bool is_request(Type type) {
  auto t = static_cast<uint8_t>(type);
  return t >= static_cast<uint8_t>(Type::kSet) && t <= static_cast<uint8_t>(Type::kJoin);
}

Writer::Writer(Type type, uint32_t id) {
  buf_.reserve(64);
  buf_.resize(kLengthSize);
  u8(kVersion);
  u8(static_cast<uint8_t>(type));
  u32(id);
}

void Writer::u32(uint32_t v) {
  uint8_t b[4] = {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16),
                  static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)};
  raw(b, 4);
}

void Writer::i64(int64_t v) {
  auto u = static_cast<uint64_t>(v);
  u32(static_cast<uint32_t>(u >> 32));
  u32(static_cast<uint32_t>(u));
}

void Writer::bytes(const void* data, size_t n) {
  u32(static_cast<uint32_t>(n));
  raw(data, n);
}

void Writer::raw(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  buf_.insert(buf_.end(), p, p + n);
}

std::vector<uint8_t> Writer::finish() {
  return finish_with_tail(0);
}

std::vector<uint8_t> Writer::finish_with_tail(size_t tail) {
  auto len = static_cast<uint32_t>(buf_.size() - kLengthSize + tail);
  buf_[0] = static_cast<uint8_t>(len >> 24);
  buf_[1] = static_cast<uint8_t>(len >> 16);
  buf_[2] = static_cast<uint8_t>(len >> 8);
  buf_[3] = static_cast<uint8_t>(len);
  return std::move(buf_);
}

LengthCheck check_length(uint32_t length, size_t max_frame) {
  if (length < kHeaderSize - kLengthSize) return LengthCheck::kTooShort;
  if (size_t{length} + kLengthSize > max_frame) return LengthCheck::kTooLong;
  return LengthCheck::kOk;
}

Header decode_header(const uint8_t* p) {
  Header h;
  h.length = load_u32(p);
  h.version = p[4];
  h.type = static_cast<Type>(p[5]);
  h.id = load_u32(p + 6);
  return h;
}

FrameStatus next_frame(const uint8_t* p, size_t n, size_t max_frame, size_t* size) {
  *size = 0;
  if (n < kLengthSize) return FrameStatus::kPartial;
  if (n > kLengthSize && p[kLengthSize] != kVersion) return FrameStatus::kBadVersion;
  const uint32_t length = load_u32(p);
  switch (check_length(length, max_frame)) {
    case LengthCheck::kTooShort:
      return FrameStatus::kTooShort;
    case LengthCheck::kTooLong:
      return FrameStatus::kTooLong;
    case LengthCheck::kOk:
      break;
  }
  *size = kLengthSize + size_t{length};
  return n < *size ? FrameStatus::kPartial : FrameStatus::kComplete;
}

const uint8_t* Reader::take(size_t n) {
  if (!ok_ || n > n_) {
    ok_ = false;
    return nullptr;
  }
  const uint8_t* p = p_;
  p_ += n;
  n_ -= n;
  return p;
}

uint8_t Reader::u8() {
  const uint8_t* p = take(1);
  return p ? *p : 0;
}

uint32_t Reader::u32() {
  const uint8_t* p = take(4);
  return p ? load_u32(p) : 0;
}

int64_t Reader::i64() {
  uint64_t hi = u32();
  uint64_t lo = u32();
  return static_cast<int64_t>((hi << 32) | lo);
}

std::string Reader::str(size_t max) {
  uint32_t n = u32();
  if (n > max) ok_ = false;
  const uint8_t* p = take(n);
  return p ? std::string(reinterpret_cast<const char*>(p), n) : std::string();
}

Bytes Reader::bytes(size_t max) {
  uint32_t n = u32();
  if (n > max) ok_ = false;
  const uint8_t* p = take(n);
  return p ? Bytes(p, p + n) : Bytes();
}

void Reader::raw(void* out, size_t n) {
  const uint8_t* p = take(n);
  if (p != nullptr) {
    std::memcpy(out, p, n);
  } else {
    std::memset(out, 0, n);
  }
}

namespace {

bool read_key(Reader& r, std::string* key, std::string* why) {
  *key = r.str(kMaxKeySize);
  if (!r.ok()) {
    *why = "a key is truncated or longer than " + std::to_string(kMaxKeySize) + " bytes";
    return false;
  }
  if (key->empty()) {
    *why = "a key is empty";
    return false;
  }
  return true;
}

bool read_value(Reader& r, Bytes* value, std::string* why) {
  *value = r.bytes(kMaxValueSize);
  if (!r.ok()) {
    *why = "a value is truncated or longer than " + std::to_string(kMaxValueSize) + " bytes";
    return false;
  }
  return true;
}

bool read_timeout(Reader& r, int64_t* ms, std::string* why) {
  *ms = r.i64();
  if (!r.ok() || *ms < 0) {
    *why = "the timeout is missing or negative";
    return false;
  }
  return true;
}

bool read_key_list(Reader& r, std::vector<std::string>* keys, std::string* why) {
  uint32_t n = r.u32();
  // Each key takes at least five bytes, which bounds the count by the frame.
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    keys->emplace_back();
    if (!read_key(r, &keys->back(), why)) return false;
  }
  if (!r.ok()) {
    *why = "the key list is truncated";
    return false;
  }
  return true;
}

}  // namespace

bool decode_client_hello(const uint8_t* payload, size_t n,
                         std::array<uint8_t, kNonceSize>* client_nonce) {
  Reader r(payload, n);
  r.raw(client_nonce->data(), client_nonce->size());
  return r.done();
}

bool decode_client_proof(const uint8_t* payload, size_t n, std::array<uint8_t, kProofSize>* proof) {
  Reader r(payload, n);
  r.raw(proof->data(), proof->size());
  return r.done();
}

bool decode_auth_abort(const uint8_t* payload, size_t n, AbortReason* why) {
  Reader r(payload, n);
  *why = static_cast<AbortReason>(r.u8());
  return r.done();
}

bool decode_request(const Header& h, const uint8_t* payload, size_t n, Request* out,
                    std::string* why) {
  Reader r(payload, n);
  out->type = h.type;
  out->id = h.id;
  out->keys.clear();
  bool ok = false;
  switch (h.type) {
    case Type::kSet:
      out->keys.emplace_back();
      ok = read_key(r, &out->keys[0], why) && read_value(r, &out->value, why);
      break;
    case Type::kGet:
      out->keys.emplace_back();
      ok = read_key(r, &out->keys[0], why) && read_timeout(r, &out->number, why);
      break;
    case Type::kAdd:
      out->keys.emplace_back();
      ok = read_key(r, &out->keys[0], why);
      out->number = r.i64();
      break;
    case Type::kCompareSet:
      out->keys.emplace_back();
      ok = read_key(r, &out->keys[0], why) && read_value(r, &out->expected, why) &&
           read_value(r, &out->value, why);
      break;
    case Type::kWait:
      ok = read_key_list(r, &out->keys, why) && read_timeout(r, &out->number, why);
      break;
    case Type::kCheck:
      ok = read_key_list(r, &out->keys, why);
      break;
    case Type::kErase:
      out->keys.emplace_back();
      ok = read_key(r, &out->keys[0], why);
      break;
    case Type::kJoin:
      out->keys.resize(3);
      ok = read_key(r, &out->keys[0], why) && read_key(r, &out->keys[1], why) &&
           read_key(r, &out->keys[2], why);
      out->world = r.i64();
      if (ok && (!r.ok() || out->world < 1)) {
        *why = "the world size is missing or not positive";
        ok = false;
      }
      ok = ok && read_timeout(r, &out->number, why);
      break;
    default:
      *why = "unknown request type " + std::to_string(static_cast<unsigned>(h.type));
      return false;
  }
  if (ok && !r.done()) {
    *why = r.ok() ? "trailing bytes after the request" : "the request is truncated";
    ok = false;
  }
  return ok;
}

}  // namespace slurmddp::store::wire
