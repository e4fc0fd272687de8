// Checks for the GPU path's CUDA runtime calls. Failures throw
// slurmddp::CudaError in the project's grammar, e.g.
//   "train: failed to allocate the model's memory: out of memory
//    (cudaErrorMemoryAllocation); device=0, rank=3"
// Included by C++ (g++) and CUDA (nvcc) sources alike.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "slurmddp/error.h"

namespace train {

// Who failed where, for messages: several ranks share a node and its GPUs.
struct CudaWhere {
  int device = -1;
  int rank = -1;
};

inline std::string where_suffix(const CudaWhere& w) {
  return "; device=" + std::to_string(w.device) + ", rank=" + std::to_string(w.rank);
}

inline void check_cuda(cudaError_t status, const char* what, const CudaWhere& w) {
  if (status == cudaSuccess) return;
  throw slurmddp::CudaError(std::string("train: failed to ") + what + ": " +
                            cudaGetErrorString(status) + " (" + cudaGetErrorName(status) + ")" +
                            where_suffix(w));
}

}  // namespace train
