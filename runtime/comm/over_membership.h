// Communicators built over a group that has joined already (init(): its
// Membership checked the world size and carries each backend's bootstrap
// data), so that they exchange only their own data under the group's keys.
// The public make_*_communicator(options) join a Membership of their own on
// options.prefix and call these.
#pragma once

#include <memory>

#include "membership/membership.h"
#include "progress/watchdog.h"
#include "slurmddp/communicator.h"
#include "slurmddp/gloo_communicator.h"
#include "slurmddp/nccl_communicator.h"

namespace slurmddp::comm {

// `group` joined with gloo_join_fields() and kGlooAgreedFields (or null: the
// communicator joins its own on options.prefix). options.rank, size and store
// must match the group's.
// `tracker` (may be null) follows which collective the worker is in (Note
// [Progress records]).
std::unique_ptr<Communicator> make_gloo_communicator(
    const GlooOptions& options, std::shared_ptr<membership::Membership> group,
    std::shared_ptr<progress::Tracker> tracker = nullptr);

// What the Gloo communicator needs in every rank's record, and the fields whose
// group minimum it uses (Note [Priming send buffers]).
std::vector<std::pair<std::string, std::string>> gloo_join_fields();
inline const std::vector<std::string> kGlooAgreedFields = {"wmem_max"};

// `group` completed (or null: the communicator joins its own on
// options.prefix, Note [Rendezvous generations]); NCCL's unique id then lives
// under the group's key "nccl/unique_id".
std::unique_ptr<NcclCommunicator> make_nccl_communicator(
    const NcclOptions& options, std::shared_ptr<membership::Membership> group);

}  // namespace slurmddp::comm
