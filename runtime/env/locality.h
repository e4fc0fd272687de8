// Where this rank and its peers run, as far as the environment tells: the
// input of Note [Locating missing ranks] (membership/locate.cpp).
#pragma once

#include "membership/membership.h"
#include "slurmddp/identity.h"

namespace slurmddp {

// node: SLURMD_NODENAME, else the host name. node_ranks: SLURM_GTIDS when it
// lists this rank and only ranks of the world (plugin and bare Slurm), else
// torchrun's block [rank - LOCAL_RANK, + LOCAL_WORLD_SIZE) (torchrun numbers
// the workers of a node consecutively); empty when neither holds. nodes:
// SLURM_STEP_NODELIST (else SLURM_NODELIST) expanded, when it names this node.
// Never throws: what cannot be read is left empty.
membership::Locality locality_from_environment(const ProcessIdentity& id, const EnvReader& env);
membership::Locality locality_from_environment(const ProcessIdentity& id);

}  // namespace slurmddp
