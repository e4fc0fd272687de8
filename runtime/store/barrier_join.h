// An optional capability of a Store backend: joining a store_barrier in one
// request.
//
// Note [Barrier join]
// store_barrier's algorithm (set the rank key, add to the counter, the last
// rank sets "done", everyone waits for "done") costs a TCP client two or three
// round trips and as many wake-ups. A backend with this capability runs the
// very same steps on its side in one request, which is answered when "done"
// exists, so joining costs one round trip. The keys it leaves behind are the
// same, so the timeout diagnosis (which ranks are missing) works unchanged.
#pragma once

#include <cstdint>
#include <string>

#include "slurmddp/store.h"

namespace slurmddp::store {

class BarrierJoin {
 public:
  virtual ~BarrierJoin() = default;
  // Exactly, and atomically up to the wait:
  //   set(rank_key, "1"); n = add(count_key, 1);
  //   if (n == world) set(done_key, "1");
  //   if (n < world) wait({done_key}, timeout);
  // Returns n. Throws what those calls throw (TimeoutError naming done_key).
  virtual int64_t barrier_join(const std::string& rank_key, const std::string& count_key,
                               const std::string& done_key, int64_t world, Millis timeout) = 0;
};

}  // namespace slurmddp::store
