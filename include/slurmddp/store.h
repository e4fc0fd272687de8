// The rendezvous key-value store: how ranks find each other and exchange
// bootstrap data (Gloo addresses, the NCCL unique id).
//
// The contract below holds for every backend (TCP, in-process); one
// parameterized test suite checks it against each.
//
//  - Keys are non-empty byte strings of at most kMaxKeySize bytes; values are
//    byte strings of at most kMaxValueSize bytes. Violations throw InvalidArgument.
//  - Every method is thread-safe: any number of threads may call any methods of
//    one Store object concurrently.
//  - Blocking methods take a timeout; on expiry they throw TimeoutError naming
//    the keys still missing. A timeout of zero means "check once".
//  - A backend that loses its server or peer throws PeerError naming host:port.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "slurmddp/timeout.h"

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

using Bytes = std::vector<uint8_t>;
using Millis = std::chrono::milliseconds;

inline constexpr size_t kMaxKeySize = 4096;
inline constexpr size_t kMaxValueSize = size_t{64} << 20;

class Store {
 public:
  virtual ~Store() = default;

  // Stores `value` under `key`, replacing any previous value, and wakes every
  // get/wait blocked on `key`. Returns once the store has applied it.
  virtual void set(const std::string& key, const Bytes& value) = 0;

  // Returns the value of `key`, blocking until it exists or `timeout` passes
  // (TimeoutError naming the key).
  virtual Bytes get(const std::string& key, Millis timeout) = 0;

  // Atomically adds `delta` to the signed 64-bit counter under `key` (a missing
  // key counts as 0) and returns the new value. Counters are stored as their
  // decimal text, so get() on a counter returns e.g. "3". Adding to a key whose
  // value is not a decimal integer throws InvalidArgument. Never blocks on keys.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // Atomically: if the current value of `key` equals `expected` (a missing key
  // matches an empty `expected`), sets it to `desired`. Returns the value after
  // the operation (so the caller won iff the result equals `desired` and it was
  // not already that value). Wakes waiters when it sets. Never blocks on keys.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;

  // Blocks until every key in `keys` exists or `timeout` passes (TimeoutError
  // listing the keys still missing).
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;

  // Non-blocking: true iff every key in `keys` exists.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Deletes `key`; returns whether it existed. Blocked get/wait calls on it keep
  // waiting for a later set.
  virtual bool erase(const std::string& key) = 0;

  // Text forms of set and get (the bytes of the string, no terminator).
  void set(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  void set(const std::string& key, const char* value) { set(key, std::string(value)); }
  std::string get_string(const std::string& key, Millis timeout) {
    const Bytes b = get(key, timeout);
    return std::string(b.begin(), b.end());
  }
  // get() and wait() with kDefaultTimeout.
  Bytes get(const std::string& key) { return get(key, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys) { wait(keys, kDefaultTimeout); }
};

// Blocks until all `world_size` ranks have entered the barrier `name` (use a
// fresh name per barrier), or throws TimeoutError of the form
//   "store barrier 'init': 3/4 ranks joined; missing: [2]" after `timeout`.
void store_barrier(Store& store, const std::string& name, int rank, int world_size, Millis timeout);

// A store living inside this process, for tests and single-process runs.
std::shared_ptr<Store> make_in_process_store();

}  // namespace slurmddp

#pragma GCC visibility pop
