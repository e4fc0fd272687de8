// The NCCL side of the rendezvous: NcclIdExchange (pure, nccl_id_exchange.h)
// carrying an ncclUniqueId that rank 0 creates with ncclGetUniqueId.
#pragma once

#include <nccl.h>

#include <chrono>
#include <string>

#include "comm/nccl/nccl_id_exchange.h"
#include "slurmddp/nccl_communicator.h"

namespace slurmddp::comm {

class NcclRendezvous {
 public:
  using Clock = std::chrono::steady_clock;

  // `where` is the rank/host/pid text for messages; nothing blocks past `deadline`.
  NcclRendezvous(const NcclOptions& options, int device, std::string where,
                 Clock::time_point deadline);
  // Over a group that has joined already (see NcclIdExchange).
  NcclRendezvous(const NcclOptions& options, std::shared_ptr<membership::Membership> group,
                 std::string where);

  // See NcclIdExchange: this creation's generation and join record.
  void announce() { exchange_.announce(); }
  // See NcclIdExchange::exchange; rank 0 creates the id (NcclError on failure).
  ncclUniqueId exchange();
  std::string diagnosis() { return exchange_.diagnosis(); }
  const std::shared_ptr<membership::Membership>& group() const { return exchange_.group(); }

 private:
  NcclIdExchange exchange_;
  const std::string where_;
};

}  // namespace slurmddp::comm
