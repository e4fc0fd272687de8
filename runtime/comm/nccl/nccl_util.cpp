#include "comm/nccl/nccl_util.h"

#include "slurmddp/error.h"

namespace slurmddp::comm {

ncclDataType_t to_nccl(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  throw InvalidArgument("nccl: failed to map a data type: unknown DataType value " +
                        std::to_string(static_cast<int>(t)));
}

std::string nccl_version_text(int code) {
  // NCCL_VERSION(X,Y,Z) is X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before.
  int major = 0;
  int minor = 0;
  int patch = 0;
  if (code >= 10000) {
    major = code / 10000;
    minor = (code % 10000) / 100;
    patch = code % 100;
  } else {
    major = code / 1000;
    minor = (code % 1000) / 100;
    patch = code % 100;
  }
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

const char* nccl_result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult";
  }
}

std::string nccl_error_text(ncclResult_t r, ncclComm_t comm) {
  std::string s = std::string(nccl_result_name(r)) + " " + std::to_string(static_cast<int>(r)) +
                  " (" + ncclGetErrorString(r) + ")";
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += ": " + std::string(last);
  return s;
}

void throw_cuda(const std::string& action, cudaError_t e, const std::string& where) {
  throw CudaError("nccl: failed to " + action + ": " + cuda_error_text(e) + "; " + where);
}

std::exception_ptr nccl_failure(const std::string& action, ncclResult_t r, ncclComm_t comm,
                                const std::string& where) {
  const std::string message =
      "nccl: failed to " + action + ": " + nccl_error_text(r, comm) + "; " + where;
  if (r == ncclRemoteError || r == ncclSystemError) {
    return std::make_exception_ptr(PeerError(message));
  }
  return std::make_exception_ptr(NcclError(message));
}

}  // namespace slurmddp::comm
