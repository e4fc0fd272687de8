// The unique id over a Membership (membership/membership.h).
#include "comm/nccl/nccl_id_exchange.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "slurmddp/error.h"

namespace slurmddp::comm {

namespace {

membership::JoinOptions join_options(const NcclOptions& o, int device, const std::string& where,
                                     NcclIdExchange::Clock::time_point deadline) {
  membership::JoinOptions j;
  j.store = o.store;
  j.prefix = o.prefix;
  j.rank = o.rank.value_or(-1);
  j.size = o.size.value_or(0);
  j.deadline = deadline;
  j.head = "nccl: failed to join the communicator: ";
  j.where = where;
  j.fields = {{"device", std::to_string(device)}};
  return j;
}

}  // namespace

NcclIdExchange::NcclIdExchange(const NcclOptions& options, int device, std::string where,
                               Clock::time_point deadline)
    : options_(options),
      where_(std::move(where)),
      name_("unique_id"),
      group_(std::make_shared<membership::Membership>(
          join_options(options, device, where_, deadline))) {}

NcclIdExchange::NcclIdExchange(const NcclOptions& options,
                               std::shared_ptr<membership::Membership> group, std::string where)
    : options_(options),
      where_(std::move(where)),
      name_("nccl/unique_id"),
      group_(std::move(group)) {}

std::string NcclIdExchange::key(const std::string& name) const {
  return group_->key(name);
}

void NcclIdExchange::announce() {
  if (!options_.store || group_->generation() != 0) return;
  group_->announce();
  // The previous creation's id is over too (Note [Rendezvous generations]).
  if (options_.rank == 0 && group_->generation() > 1) {
    options_.store->erase(group_->previous_key(name_));
  }
}

NcclUniqueId NcclIdExchange::exchange(const std::function<NcclUniqueId()>& create_root_id) {
  const bool root = options_.rank == 0;
  const NcclUniqueId id = root ? create_root_id() : NcclUniqueId{};
  if (!options_.store) {
    if (options_.size == 1) return id;
    throw InvalidArgument("nccl: failed to exchange NCCL's unique id: NcclOptions has no store; " +
                          where_);
  }
  announce();  // no-op when done already: the id must live under this generation
  const std::string id_key = key(name_);
  if (root) {
    options_.store->set(id_key, Bytes(id.begin(), id.end()));
    return id;
  }
  Bytes value;
  const auto budget = group_->remaining();
  try {
    value = options_.store->get(id_key, budget);
  } catch (const TimeoutError& e) {
    throw TimeoutError("nccl: failed to get NCCL's unique id from rank 0 within " +
                       std::to_string(budget.count()) + " ms: " + diagnosis() + "; " + where_ +
                       ", key=" + id_key + " (" + e.what() + ")");
  }
  if (value.size() != kNcclUniqueIdBytes) {
    throw ProtocolError("nccl: failed to read NCCL's unique id: the store holds " +
                        std::to_string(value.size()) + " bytes, expected " +
                        std::to_string(kNcclUniqueIdBytes) + " (another program's key?); " +
                        where_ + ", key=" + id_key);
  }
  if (!group_->completed()) {
    // Rank 0 recorded itself (in this generation) before publishing the id.
    const auto root_record =
        membership::parse_record(options_.store->get(key("join/0"), group_->remaining()));
    if (root_record.size != options_.size) {
      throw InvalidArgument(
          "nccl: failed to join the communicator: the world size differs "
          "between ranks; size=" +
          std::to_string(options_.size.value_or(0)) + " (rank " +
          std::to_string(options_.rank.value_or(-1)) +
          "), size=" + std::to_string(root_record.size) + " (rank 0); " + where_);
    }
  }
  NcclUniqueId got{};
  std::copy(value.begin(), value.end(), got.begin());
  return got;
}

std::string NcclIdExchange::diagnosis() {
  return group_->diagnosis();
}

}  // namespace slurmddp::comm
