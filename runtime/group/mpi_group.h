// init()'s SLURMDDP_BACKEND=mpi: MPI initialized here when the program did
// not (and finalized when the group ends), then init_from_mpi(MPI_COMM_WORLD)
// (slurmddp/mpi_communicator.h). The identity is MPI's: the environment is not
// read (PMIx, which MPI itself starts, must not be started twice).
#pragma once

#include <chrono>
#include <memory>

#include "slurmddp/identity.h"
#include "slurmddp/process_group.h"

namespace slurmddp {

// Throws InvalidArgument when MPI cannot start.
std::unique_ptr<ProcessGroup> init_mpi_backend(std::chrono::milliseconds timeout);

}  // namespace slurmddp
