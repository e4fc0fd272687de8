#include "comm/nccl/nccl_rendezvous.h"

#include <cstring>

#include "comm/nccl/nccl_util.h"

namespace slurmddp::comm {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes,
              "kNcclUniqueIdBytes must match NCCL_UNIQUE_ID_BYTES");

NcclRendezvous::NcclRendezvous(const NcclOptions& options, int device, std::string where,
                               Clock::time_point deadline)
    : exchange_(options, device, where, deadline), where_(std::move(where)) {}

NcclRendezvous::NcclRendezvous(const NcclOptions& options,
                               std::shared_ptr<membership::Membership> group, std::string where)
    : exchange_(options, std::move(group), where), where_(std::move(where)) {}

ncclUniqueId NcclRendezvous::exchange() {
  const NcclUniqueId bytes = exchange_.exchange([this] {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      std::rethrow_exception(nccl_failure("create NCCL's unique id", r, nullptr, where_));
    }
    NcclUniqueId b{};
    std::memcpy(b.data(), &id, b.size());
    return b;
  });
  ncclUniqueId id;
  std::memcpy(&id, bytes.data(), sizeof id);
  return id;
}

}  // namespace slurmddp::comm
