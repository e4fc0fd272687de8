// The identity from a PMIx server (srun --mpi=pmix, mpirun): rank, sizes and
// node placement, without any rendezvous address (bootstrap goes through PMIx).
#pragma once

#include "slurmddp/identity.h"

namespace slurmddp {

// Throws InvalidArgument when PMIx support is not built in or no PMIx server
// answers, Error naming the PMIx key when a value is missing.
ProcessIdentity pmix_identity();

}  // namespace slurmddp
