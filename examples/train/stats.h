// Sums a few host values (the epoch's loss and accuracy counts) over the
// ranks, on whichever communicator the process group has.
#pragma once

#include <chrono>
#include <cstddef>

#include "slurmddp/communicator.h"

namespace train {

// In place: every rank ends with the sum over ranks of `data` (count values
// of `type`, host memory). A host communicator (Gloo) reduces the buffer
// itself; a CUDA one (NCCL) reads device memory only, so the values travel
// through a device buffer on the current CUDA device. Blocks until done (at
// most `timeout` for the collective). Throws the communicator's errors, and
// CudaError naming the step, device and rank for CUDA failures.
void allreduce_sum(slurmddp::Communicator& comm, void* data, size_t count, slurmddp::DataType type,
                   std::chrono::milliseconds timeout);
// The same for an array of T (double, int64_t, ...): the type follows from it.
template <typename T>
void allreduce_sum(slurmddp::Communicator& comm, T* data, size_t count,
                   std::chrono::milliseconds timeout) {
  allreduce_sum(comm, data, count, slurmddp::data_type_of<T>, timeout);
}

}  // namespace train
