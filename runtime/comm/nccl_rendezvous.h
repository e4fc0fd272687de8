// How the ranks of an NCCL communicator find each other: join records and the
// exchange of NCCL's unique id through the Store (or a bootstrap callback),
// and the description of a rendezvous that did not complete in time.
#pragma once

#include <nccl.h>

#include <chrono>
#include <string>

#include "slurmddp/nccl_communicator.h"

namespace slurmddp::comm {

class NcclRendezvous {
 public:
  using Clock = std::chrono::steady_clock;

  // `where` is the rank/host/pid text for messages; nothing blocks past `deadline`.
  NcclRendezvous(const NcclOptions& options, int device, std::string where,
                 Clock::time_point deadline);

  // Records this rank under "<prefix>/join/<rank>" (size, device, host, pid),
  // when a store is given.
  void announce();

  // Rank 0 creates the id and publishes it; the others wait for it (until the
  // deadline: TimeoutError with diagnosis()) and check rank 0's world size
  // (InvalidArgument naming both).
  ncclUniqueId exchange();

  // Non-blocking: "3/4 ranks joined; missing: [2]" from the store's join
  // records (plus ranks announcing another world size); a note instead when
  // there is no store or it cannot be read.
  std::string diagnosis();

 private:
  std::string key(const std::string& name) const;
  std::chrono::milliseconds remaining() const;

  const NcclOptions& options_;
  const int device_;
  const std::string where_;
  const Clock::time_point deadline_;
};

}  // namespace slurmddp::comm
