// slurm-ddp for MPI programs: a Communicator over an MPI communicator, and a
// whole ProcessGroup built from one the program already has, so that an MPI
// code can use GradSync and the sampler with no second rendezvous.
//
// Example, given int argc, char** argv, std::vector<slurmddp::GradParameter> params:
//   int provided = 0;
//   MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
//   auto pg = slurmddp::init_from_mpi(MPI_COMM_WORLD);   // identity from MPI
//   slurmddp::GradSync sync(pg->comm(), params);
//
// The declarations need <mpi.h> (compile with mpicxx, or MPI's include path)
// and exist only where it is found; the library must be built against the
// same MPI (meson -Dmpi=enabled; Debian's OpenMPI).
//
// Note [MPI communicator]
//   The communicator works on its own duplicate of the given communicator
//   (MPI_Comm_dup: its traffic never matches the program's messages), with
//   MPI_ERRORS_RETURN on it, so an MPI error becomes a slurmddp::PeerError
//   carrying MPI's own message instead of aborting the job. Operations are
//   MPI's non-blocking collectives (MPI_Iallreduce, ...), polled with
//   MPI_Test until done or until the timeout: then the Work fails with a
//   TimeoutError and the communicator is broken (every later operation fails
//   with that error at once). MPI can neither say which rank is missing nor
//   cancel a collective: a process that got such an error should end (under
//   srun, Slurm then ends the step; a dead peer usually ends it first). With
//   MPI_THREAD_MULTIPLE the operations run on a worker thread, as Gloo's do
//   (overlap with computation, GradSync's buckets in flight); with a lower
//   thread level each operation completes inside the call that issues it, and
//   only one thread may issue at a time (MPI itself is not thread-safe then).
//   float16/bfloat16 are reduced in float32 (Note [16-bit reductions]); avg is
//   sum, then divide by the size.
#pragma once

#if __has_include(<mpi.h>)
#include <mpi.h>

#include <chrono>
#include <memory>

#include "slurmddp/communicator.h"
#include "slurmddp/process_group.h"
#include "slurmddp/timeout.h"

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

struct MpiOptions {
  // Bound on every operation (Work::wait() without an argument uses it too).
  std::chrono::milliseconds timeout{kDefaultTimeout};
};

// A Communicator over a duplicate of `comm` (Note [MPI communicator]). MPI
// must be initialized. Throws InvalidArgument when it is not, or when `comm`
// is MPI_COMM_NULL; PeerError when MPI refuses the duplicate.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, const MpiOptions& options = {});

// A ProcessGroup whose identity comes from `comm` (rank and size; the node's
// ranks from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)) and whose
// communicator is make_mpi_communicator(comm): no store, no port, no second
// rendezvous (store() is null). The program keeps owning MPI: the group never
// calls MPI_Finalize.
std::unique_ptr<ProcessGroup> init_from_mpi(MPI_Comm comm, const MpiOptions& options = {});

}  // namespace slurmddp

#pragma GCC visibility pop

#endif  // __has_include(<mpi.h>)
