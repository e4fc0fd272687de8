// The average for NCCL libraries without ncclAvg: a sum followed by this
// kernel on the communicator's stream (Note [Average] in nccl_communicator.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "slurmddp/communicator.h"

namespace slurmddp::comm {

// Queues data[i] = data[i] / divisor for i < count on `stream`: floating types
// divide in their own precision (float16 and bfloat16 through float32, rounded
// once); integers truncate toward zero. Returns the launch's own error; an
// error the calling thread had pending before stays pending (Note [Launch
// errors and pending errors] in common/cuda_launch.h).
cudaError_t launch_divide(void* data, size_t count, DataType type, int divisor,
                          cudaStream_t stream);

}  // namespace slurmddp::comm
