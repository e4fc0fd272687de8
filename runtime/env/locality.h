// Where this rank and its peers run, as far as the environment tells: the
// input of Note [Locating missing ranks] (membership/locate.cpp).
#pragma once

#include <string>
#include <vector>

#include "slurmddp/identity.h"

namespace slurmddp {

// Where ranks run, so that a rendezvous that times out can say on which hosts
// the missing ranks are (Note [Locating missing ranks]). Every part is
// optional: without it the message names ranks only.
struct Locality {
  std::string node;                // this rank's node (SLURMD_NODENAME, else the host name)
  std::vector<int> node_ranks;     // the ranks expected on this node, this one included
  std::vector<std::string> nodes;  // every node of the group
};

// node: SLURMD_NODENAME, else the host name. node_ranks: SLURM_GTIDS when it
// lists this rank and only ranks of the world (plugin and bare Slurm), else
// torchrun's block [rank - LOCAL_RANK, + LOCAL_WORLD_SIZE) (torchrun numbers
// the workers of a node consecutively); empty when neither holds. nodes:
// SLURM_STEP_NODELIST (else SLURM_NODELIST) expanded, when it names this node.
// Never throws: what cannot be read is left empty.
Locality locality_from_environment(const ProcessIdentity& id, const EnvReader& env);
Locality locality_from_environment(const ProcessIdentity& id);

}  // namespace slurmddp
