// The TCP store client's operations: each Store call encoded as one request,
// and its reply decoded (or turned into the error the server reported).
#include "common/quote.h"
#include "slurmddp/error.h"
#include "store/kv_table.h"
#include "store/tcp_client.h"

namespace slurmddp::store {

using common::quote;

void TcpClient::set(const std::string& key, const Bytes& value) {
  validate_key("set", key);
  validate_value("set", key, value.size());
  wire::Writer w(wire::Type::kSet, 0);
  w.str(key);
  w.bytes(value.data(), value.size());
  expect(call(w, io_deadline(), "set key " + quote(key)), wire::Type::kOk);
}

Bytes TcpClient::get(const std::string& key, Millis timeout) {
  validate_key("get", key);
  timeout = clamp_timeout(timeout);
  wire::Writer w(wire::Type::kGet, 0);
  w.str(key);
  w.i64(timeout.count());
  const std::string what = "get key " + quote(key);
  Reply r = call(w, wait_deadline(timeout), what);
  if (r.type == wire::Type::kTimeout) throw_timeout("get", {key}, r, timeout);
  expect(r, wire::Type::kValue);
  return read_value(r, what);
}

int64_t TcpClient::add(const std::string& key, int64_t delta) {
  validate_key("add", key);
  wire::Writer w(wire::Type::kAdd, 0);
  w.str(key);
  w.i64(delta);
  const std::string what = "add to key " + quote(key);
  return read_int(call(w, io_deadline(), what), what);
}

int64_t TcpClient::barrier_join(const std::string& rank_key, const std::string& count_key,
                                const std::string& done_key, int64_t world, Millis timeout) {
  for (const std::string* k : {&rank_key, &count_key, &done_key}) validate_key("join", *k);
  timeout = clamp_timeout(timeout);
  wire::Writer w(wire::Type::kJoin, 0);
  w.str(rank_key);
  w.str(count_key);
  w.str(done_key);
  w.i64(world);
  w.i64(timeout.count());
  const std::string what = "join the barrier of key " + quote(done_key);
  Reply r = call(w, wait_deadline(timeout), what);
  if (r.type == wire::Type::kTimeout) throw_timeout("wait for", {done_key}, r, timeout);
  return read_int(r, what);
}

Bytes TcpClient::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  validate_key("compare_set", key);
  validate_value("compare_set", key, expected.size());
  validate_value("compare_set", key, desired.size());
  wire::Writer w(wire::Type::kCompareSet, 0);
  w.str(key);
  w.bytes(expected.data(), expected.size());
  w.bytes(desired.data(), desired.size());
  const std::string what = "compare_set key " + quote(key);
  Reply r = call(w, io_deadline(), what);
  expect(r, wire::Type::kValue);
  return read_value(r, what);
}

void TcpClient::wait(const std::vector<std::string>& keys, Millis timeout) {
  validate_keys("wait for", keys);
  timeout = clamp_timeout(timeout);
  wire::Writer w(wire::Type::kWait, 0);
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.i64(timeout.count());
  Reply r = call(w, wait_deadline(timeout), "wait for " + format_keys(keys));
  if (r.type == wire::Type::kTimeout) throw_timeout("wait for", keys, r, timeout);
  expect(r, wire::Type::kOk);
}

bool TcpClient::check(const std::vector<std::string>& keys) {
  validate_keys("check", keys);
  wire::Writer w(wire::Type::kCheck, 0);
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  return read_bool(call(w, io_deadline(), "check " + format_keys(keys)));
}

bool TcpClient::erase(const std::string& key) {
  validate_key("erase", key);
  wire::Writer w(wire::Type::kErase, 0);
  w.str(key);
  return read_bool(call(w, io_deadline(), "erase key " + quote(key)));
}

void TcpClient::expect(const Reply& r, wire::Type type) {
  if (r.type == type) return;
  if (r.type == wire::Type::kError) {
    wire::Reader rd(r.payload.data(), r.payload.size());
    auto code = static_cast<wire::ErrorCode>(rd.u8());
    std::string msg = rd.str(size_t{64} * 1024);
    if (code == wire::ErrorCode::kInvalidArgument) throw InvalidArgument(msg);
    if (code == wire::ErrorCode::kBusy) throw Error(msg + "; server=" + endpoint_);
    throw ProtocolError(msg + "; server=" + endpoint_);
  }
  protocol_violation(std::string("read a reply"), std::string("expected a ") +
                                                      wire::type_name(type) + " reply, got " +
                                                      wire::type_name(r.type));
}

void TcpClient::protocol_violation(const std::string& what, const std::string& why) {
  mark_dead(true, why);
  throw ProtocolError("store: failed to " + what + ": server " + endpoint_ + " sent " + why);
}

void TcpClient::throw_timeout(const char* op, const std::vector<std::string>& keys, const Reply& r,
                              Millis timeout) {
  wire::Reader rd(r.payload.data(), r.payload.size());
  uint32_t n = rd.u32();
  std::vector<std::string> missing;
  for (uint32_t i = 0; i < n && rd.ok(); ++i) {
    uint32_t k = rd.u32();
    if (k < keys.size()) missing.push_back(keys[k]);
  }
  throw TimeoutError(timeout_message(op, keys, missing, timeout, "server=" + endpoint_));
}

Bytes TcpClient::read_value(const Reply& r, const std::string& what) {
  wire::Reader rd(r.payload.data(), r.payload.size());
  Bytes v = rd.bytes(kMaxValueSize);
  if (!rd.done()) protocol_violation(what, "a malformed value reply");
  return v;
}

int64_t TcpClient::read_int(const Reply& r, const std::string& what) {
  expect(r, wire::Type::kInt);
  wire::Reader rd(r.payload.data(), r.payload.size());
  int64_t v = rd.i64();
  if (!rd.done()) protocol_violation(what, "a malformed reply");
  return v;
}

bool TcpClient::read_bool(const Reply& r) {
  expect(r, wire::Type::kBool);
  return !r.payload.empty() && r.payload[0] != 0;
}

}  // namespace slurmddp::store
