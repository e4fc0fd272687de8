// The key-value semantics every Store backend shares: validation of keys and
// values, counters as decimal text, compare-and-set. Not thread-safe: the
// in-process store guards it with a mutex, the TCP server owns it on its one
// event-loop thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "slurmddp/store.h"

namespace slurmddp::store {

// Timeouts are clamped to [0, kMaxWait]: negative means "check once", and a
// "forever" timeout stays far from overflowing deadline arithmetic.
inline constexpr Millis kMaxWait = std::chrono::hours(24 * 365);
inline Millis clamp_timeout(Millis t) {
  return std::clamp(t, Millis(0), kMaxWait);
}

// Values are shared, immutable buffers: a reply to a get (or many) can point at
// the stored value instead of copying it, and a later set replaces the pointer.
using Value = std::shared_ptr<const Bytes>;

// Throws InvalidArgument unless 1 <= key.size() <= kMaxKeySize. `op` names the
// Store method for the message ("set", "get", ...).
void validate_key(const char* op, const std::string& key);
// Throws InvalidArgument unless value.size() <= kMaxValueSize.
void validate_value(const char* op, const std::string& key, size_t value_size);
// validate_key for every key of a wait/check list.
void validate_keys(const char* op, const std::vector<std::string>& keys);

class KvTable {
 public:
  // Null when `key` is absent.
  Value find(const std::string& key) const;
  bool contains(const std::string& key) const { return map_.count(key) != 0; }
  void set(const std::string& key, Value value);
  // Store::add semantics; throws InvalidArgument on a non-integer value or
  // signed 64-bit overflow (the stored value is then unchanged).
  int64_t add(const std::string& key, int64_t delta);
  // Store::compare_set semantics. `*changed` says whether it stored `desired`
  // (so waiters must be woken).
  Value compare_set(const std::string& key, const Bytes& expected, Value desired, bool* changed);
  bool erase(const std::string& key) { return map_.erase(key) != 0; }
  // Indices into `keys` of the keys that are absent, in order.
  std::vector<uint32_t> missing(const std::vector<std::string>& keys) const;
  size_t size() const { return map_.size(); }
  // Sum of key and value sizes, for the server's counters.
  uint64_t payload_bytes() const { return payload_bytes_; }

 private:
  std::unordered_map<std::string, Value> map_;
  uint64_t payload_bytes_ = 0;
};

// Formats up to a few keys for an error message: ['a', 'b', ... and 7 more].
std::string format_keys(const std::vector<std::string>& keys);

// The message of every store timeout, e.g.
//   "store: failed to get key 'a': timed out after 100 ms; missing=['a']"
// `where` is appended as "; <where>" when non-empty (the TCP backend names its server).
std::string timeout_message(const char* op, const std::vector<std::string>& keys,
                            const std::vector<std::string>& missing, Millis timeout,
                            const std::string& where);

}  // namespace slurmddp::store
