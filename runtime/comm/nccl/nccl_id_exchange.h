// How the ranks of an NCCL communicator find each other through the Store:
// the exchange of NCCL's unique id (as bytes) over the group's membership, and
// the description of a rendezvous that did not complete in time. Free of CUDA and
// NCCL (nccl_rendezvous.cpp adapts it to ncclUniqueId), so the unit suite
// checks it on any machine with the in-process store.
//
// Its join is a Membership (membership/membership.h): generations, join records
// and the diagnosis come from there (Note [Rendezvous generations]).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "membership/membership.h"
#include "slurmddp/nccl_communicator.h"

namespace slurmddp::comm {

class NcclIdExchange {
 public:
  using Clock = std::chrono::steady_clock;

  // `where` is the rank/host/pid text for messages; nothing blocks past `deadline`.
  NcclIdExchange(const NcclOptions& options, int device, std::string where,
                 Clock::time_point deadline);
  // Over a group that has joined already (init()): no join records of its
  // own, the world size is checked; the id lives under the group's keys.
  NcclIdExchange(const NcclOptions& options, std::shared_ptr<membership::Membership> group,
                 std::string where);

  // Takes this creation's generation and records this rank under
  // "<prefix>/<generation>/join/<rank>" (size, device, host, pid), when a
  // store is given (Membership::announce). Call once, before exchange().
  void announce();

  // Rank 0 calls `create_root_id` and publishes its result under the group's
  // key ("<prefix>/<generation>/unique_id"); the
  // others wait for it (until the deadline: TimeoutError with diagnosis()),
  // check rank 0's world size (InvalidArgument naming both) and return it.
  NcclUniqueId exchange(const std::function<NcclUniqueId()>& create_root_id);

  // Non-blocking: "3/4 ranks joined; missing: [2]" from this generation's join
  // records (plus ranks announcing another world size, and missing ranks at
  // another generation); a note instead when there is no store or it cannot
  // be read.
  std::string diagnosis();

  // This creation's generation (0 before announce() or without a store).
  int64_t generation() const { return group_->generation(); }
  // The group this rank joined (its scope holds the failure notes too).
  const std::shared_ptr<membership::Membership>& group() const { return group_; }
  // "<prefix>/<generation>/<name>" (the group's key of `name`).
  std::string key(const std::string& name) const;

 private:
  const NcclOptions options_;  // a copy: the exchange may outlive the caller's options
  const std::string where_;
  const std::string name_;  // the id's key within the group
  std::shared_ptr<membership::Membership> group_;
};

}  // namespace slurmddp::comm
