// How the ranks of an NCCL communicator find each other through the Store:
// join records, the exchange of NCCL's unique id (as bytes), and the
// description of a rendezvous that did not complete in time. Free of CUDA and
// NCCL (nccl_rendezvous.cpp adapts it to ncclUniqueId), so the unit suite
// checks it on any machine with the in-process store.
//
// Note [Rendezvous generations]
// Several communicators may be created one after another on one store with
// the same prefix (a program that rebuilds its communicator, a test that
// makes several). Keys written by an earlier creation stay in the store: with
// fixed keys a rank arriving early at the second creation would read the
// first creation's unique id (and its join records) and start NCCL with a
// stale id. So every creation works under a fresh generation: each rank takes
// its own next number with the store's atomic add on
// "<prefix>/generation/<rank>" (1 for its first creation on that prefix, 2
// for its second, ...), and all keys of that creation live under
// "<prefix>/<generation>/". Ranks meet at the same generation because every
// rank creates its communicators on a prefix in the same order (creation is
// collective). When a rank starts generation g it erases what it wrote in
// generation g-1 (its join record; rank 0 also the id): that creation is over
// on every rank (NCCL connected only after all had read the id, or it
// failed), and the store does not grow with every creation. A rank that
// failed before its rendezvous (e.g. no usable GPU) took no number, so after
// a retry it counts one behind: it then waits for an id that is gone and
// times out naming the generations (diagnosis()) instead of starting NCCL
// with a dead communicator's id; retry such a failure with a new prefix.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "slurmddp/nccl_communicator.h"

namespace slurmddp::comm {

struct JoinReport;

class NcclIdExchange {
 public:
  using Clock = std::chrono::steady_clock;

  // `where` is the rank/host/pid text for messages; nothing blocks past `deadline`.
  NcclIdExchange(const NcclOptions& options, int device, std::string where,
                 Clock::time_point deadline);

  // Takes this creation's generation and records this rank under
  // "<prefix>/<generation>/join/<rank>" (size, device, host, pid), when a
  // store is given. Call once, before exchange().
  void announce();

  // Rank 0 calls `create_root_id` and publishes its result (through the
  // bootstrap callback, or under "<prefix>/<generation>/unique_id"); the
  // others wait for it (until the deadline: TimeoutError with diagnosis()),
  // check rank 0's world size (InvalidArgument naming both) and return it.
  NcclUniqueId exchange(const std::function<NcclUniqueId()>& create_root_id);

  // Non-blocking: "3/4 ranks joined; missing: [2]" from this generation's join
  // records (plus ranks announcing another world size, and missing ranks at
  // another generation); a note instead when there is no store or it cannot
  // be read.
  std::string diagnosis();

  // This creation's generation (0 before announce() or without a store).
  int64_t generation() const { return generation_; }
  // "<prefix>/<generation>/<name>".
  std::string key(const std::string& name) const;

 private:
  std::chrono::milliseconds remaining() const;
  std::string key_at(int64_t generation, const std::string& name) const;
  std::string other_generations(const JoinReport& report);

  const NcclOptions options_;  // a copy: the exchange may outlive the caller's options
  const int device_;
  const std::string where_;
  const Clock::time_point deadline_;
  int64_t generation_ = 0;
};

}  // namespace slurmddp::comm
