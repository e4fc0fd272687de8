// identity_from_environment with the network lookups of the bare-Slurm source
// (name resolution, interface table, route) injected, so that tests and fuzzers
// can run every source without touching the machine's resolver.
#pragma once

#include "launch/rendezvous.h"
#include "slurmddp/identity.h"

namespace slurmddp {

ProcessIdentity identity_from_environment(const EnvReader& env, const launch::NetworkView& net);

}  // namespace slurmddp
