// CUDA and NCCL helpers of the NCCL communicator: type mapping, names, error
// text in the runtime's grammar (the device guard is common/cuda_device_guard.h).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <exception>
#include <string>

#include "slurmddp/communicator.h"

// Non-blocking communicators, ncclCommFinalize and ncclGetLastError appeared in
// NCCL 2.14; the communicator relies on all three.
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "slurm-ddp's NCCL communicator needs NCCL >= 2.14 (non-blocking communicators)"
#endif

namespace slurmddp::comm {

inline constexpr const char* kNcclComponent = "nccl";

ncclDataType_t to_nccl(DataType t);

// "2.28.9" from a version code such as 22809 (or 2903 for 2.9.3).
std::string nccl_version_text(int code);

// "cudaErrorInvalidDevice (invalid device ordinal)".
std::string cuda_error_text(cudaError_t e);
// "ncclSystemError 2 (unhandled system error): <NCCL's last error text>".
const char* nccl_result_name(ncclResult_t r);
std::string nccl_error_text(ncclResult_t r, ncclComm_t comm);

// Throws CudaError "nccl: failed to <action>: <cuda error>; <where>".
[[noreturn]] void throw_cuda(const std::string& action, cudaError_t e, const std::string& where);
// The exception for an NCCL failure: PeerError for ncclRemoteError and
// ncclSystemError (a peer or the network went away), NcclError otherwise.
std::exception_ptr nccl_failure(const std::string& action, ncclResult_t r, ncclComm_t comm,
                                const std::string& where);

}  // namespace slurmddp::comm
