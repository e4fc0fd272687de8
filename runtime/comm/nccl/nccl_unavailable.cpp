// make_nccl_communicator in a build without NCCL: says so.
#include "comm/over_membership.h"
#include "common/quote.h"
#include "slurmddp/error.h"
#include "slurmddp/nccl_communicator.h"

namespace slurmddp {

std::unique_ptr<NcclCommunicator> make_nccl_communicator(const NcclOptions& options) {
  return comm::make_nccl_communicator(options, nullptr);
}

std::unique_ptr<NcclCommunicator> comm::make_nccl_communicator(
    const NcclOptions& options, std::shared_ptr<membership::Membership> /*group*/) {
  throw Error(
      "nccl: failed to create a communicator: slurm-ddp was built without NCCL "
      "(configure with -Dcuda=enabled -Dnccl=enabled where CUDA and NCCL are "
      "installed); rank=" +
      common::optional_text(options.rank));
}

NcclCommunicator* as_nccl_communicator(Communicator* /*communicator*/) {
  return nullptr;
}

}  // namespace slurmddp
