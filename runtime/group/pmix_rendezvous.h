// The port-free bootstrap under srun --mpi=pmix (or mpirun).
//
// Note [PMIx bootstrap]
//   Rank 0 starts the rendezvous store on a port the kernel assigns (so there
//   is no MASTER_PORT to configure and nothing to collide with), and publishes
//   its endpoint — and, when the step has no SLURMDDP_TOKEN, a fresh random
//   token — through PMIx Put/Commit. One collective Fence later every rank
//   reads them with PMIx Get and connects, authenticated. Everything after
//   that (Gloo addresses, the NCCL unique id, barriers) goes through the store,
//   whose full contract (atomic add, compare-and-set, blocking waits) PMIx
//   alone does not offer.
#pragma once

#include <chrono>
#include <memory>

#include "slurmddp/identity.h"
#include "slurmddp/tcp_store.h"

namespace slurmddp {

// Throws InvalidArgument when no PMIx server answers, TimeoutError when the
// fence does not complete in `timeout` (a rank did not start), and the store's
// errors when connecting fails.
std::shared_ptr<TcpStore> pmix_rendezvous(const ProcessIdentity& id,
                                          std::chrono::milliseconds timeout);

}  // namespace slurmddp
