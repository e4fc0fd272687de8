// The first half of init(), for other front ends of the same rendezvous (the
// Python package's torch init method): the settings read from the
// environment and the store every rank connects to.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "membership/membership.h"
#include "slurmddp/identity.h"
#include "slurmddp/process_group.h"
#include "slurmddp/store.h"

namespace slurmddp {

// `requested`, else SLURMDDP_TIMEOUT ("300", "30s", "5m", ...), else
// kDefaultTimeout. Throws InvalidArgument naming SLURMDDP_TIMEOUT and its value.
std::chrono::milliseconds timeout_from_environment(
    const std::optional<std::chrono::milliseconds>& requested);

// `requested` unless kAuto; else SLURMDDP_BOOTSTRAP=tcp|pmix|auto (auto: PMIx
// under srun --mpi=pmix in a build with PMIx, else TCP).
Bootstrap bootstrap_from_environment(Bootstrap requested);

// TCP: rank 0 hosts the authenticated store on MASTER_PORT, every rank
// connects to MASTER_ADDR:MASTER_PORT with the identity's token. PMIx: Note
// [PMIx bootstrap]. Throws what connecting throws, naming host:port; when
// nobody answers on MASTER_ADDR:MASTER_PORT, a TimeoutError that starts with
// `head` and says that rank 0 is missing.
std::shared_ptr<Store> rendezvous_store(const ProcessIdentity& id, Bootstrap bootstrap,
                                        std::chrono::milliseconds timeout, const std::string& head);

// The join that init() makes, without a backend's fields: this rank's record
// under "<prefix>/", the world size checked once, a deadline `timeout` from
// now, and messages that start with `head` and end with "rank=R, size=N,
// host=H, timeout_ms=T" (missing ranks located from the environment).
membership::JoinOptions join_options(const ProcessIdentity& id, std::shared_ptr<Store> store,
                                     const std::string& prefix, const std::string& head,
                                     std::chrono::milliseconds timeout);

}  // namespace slurmddp
