// One call sets up data-parallel communication from the environment.
//
// Example, given float* buf, size_t n:
//   auto pg = slurmddp::init();            // identity, rendezvous, communicator
//   pg->comm()->allreduce(buf, n, slurmddp::DataType::kFloat32, slurmddp::ReduceOp::kAvg)
//       ->wait(pg->timeout());
//
// init() reads the identity (identity.h), then
//   - rendezvous: rank 0 hosts an authenticated TCP store on MASTER_PORT (all
//     interfaces) and every rank connects to MASTER_ADDR:MASTER_PORT with the
//     step's SLURMDDP_TOKEN; or, under srun --mpi=pmix, rank 0's store listens
//     on a port the kernel picks and PMIx tells the others where (and which
//     token): no MASTER_PORT at all (SLURMDDP_BOOTSTRAP=tcp|pmix|auto);
//   - checks that every rank agrees on WORLD_SIZE (an error names both values)
//     and waits for all ranks ("3/4 ranks joined; missing: [2]" on timeout);
//   - creates the communicator: NCCL on the task's GPU, Gloo on the CPU, or
//     MPI when asked (InitOptions::backend, else SLURMDDP_BACKEND=
//     gloo|nccl|mpi|auto; how it is chosen: docs/cpp-api.md, "How the backend
//     is chosen"). NCCL's unique id travels through the same store. With
//     SLURMDDP_BACKEND=nccl, a task that cannot use NCCL (no visible device,
//     an ordinal out of range, a build without NCCL) throws the
//     communicator's error (CudaError, InvalidArgument, Error) prefixed
//     "init: failed to create the NCCL communicator: " and followed by the
//     rank, host, SLURMDDP_BACKEND, SLURMDDP_LOCAL_DEVICE and
//     CUDA_VISIBLE_DEVICES.
// Nothing blocks longer than the timeout: SLURMDDP_TIMEOUT (e.g. "300", "30s",
// "500ms", "5m"; default 300 s) or InitOptions::timeout.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "slurmddp/communicator.h"
#include "slurmddp/identity.h"
#include "slurmddp/store.h"

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

enum class Bootstrap { kAuto, kTcp, kPmix };

struct InitOptions {
  Backend backend = Backend::kAuto;                  // kAuto: SLURMDDP_BACKEND (docs/cpp-api.md)
  Bootstrap bootstrap = Bootstrap::kAuto;            // auto: PMIx when PMIX_RANK is set, else TCP
  std::optional<std::chrono::milliseconds> timeout;  // default: SLURMDDP_TIMEOUT or kDefaultTimeout
  std::optional<ProcessIdentity> identity;           // default: identity_from_environment()
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual const ProcessIdentity& identity() const = 0;
  int rank() const { return identity().rank; }
  int size() const { return identity().world_size; }
  // The group's communicator (shared: GradSync keeps it alive).
  virtual const std::shared_ptr<Communicator>& comm() const = 0;
  // The rendezvous store (also usable by the application).
  virtual std::shared_ptr<Store> store() const = 0;
  virtual Bootstrap bootstrap() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  // Optional orderly end: a barrier so that rank 0 (which hosts the store)
  // does not leave while others still use it. The destructor does not block
  // on other ranks.
  virtual void shutdown() = 0;
  // Tells the hang report which training step this rank has completed (two
  // relaxed atomic stores: call it every step). When a collective of the
  // group waits longer than SLURMDDP_HANG_AFTER (Gloo; with NCCL and MPI: a
  // step that does not end within it; default half the timeout, at most 5
  // minutes; 0: never), or when the report signal reaches the process
  // (SLURMDDP_REPORT_SIGNAL, default SIGURG: `scancel --signal=URG <job>`),
  // one rank prints where every rank is, e.g. "hang report 1: step 1234: 7/8
  // ranks waiting in allreduce #5123; rank 5 on n2 at step 1233 for 312 s in
  // user code" (Note [Progress records]), and training goes on.
  virtual void step_done(int64_t step) { (void)step; }
};

std::unique_ptr<ProcessGroup> init(const InitOptions& options = {});

}  // namespace slurmddp

#pragma GCC visibility pop
