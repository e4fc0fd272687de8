// One int64 allreduce(max) on the memory the communicator works on (host
// memory for Gloo and MPI, an 8-byte device buffer for NCCL): StopSignal's
// agreed stop check and the Checkpointer's agreement on which checkpoint to
// load (runtime/resume).
#pragma once

#include <cstdint>
#include <memory>

#include "slurmddp/communicator.h"

namespace slurmddp::comm {

class ScalarChannel {
 public:
  virtual ~ScalarChannel() = default;
  // Collective: the largest `mine` over all ranks.
  virtual int64_t max(int64_t mine) = 0;
};

// Throws Error for a CUDA communicator in a build without CUDA.
std::unique_ptr<ScalarChannel> make_scalar_channel(Communicator& comm);

}  // namespace slurmddp::comm
