// Note [Device guard without stray contexts] in cuda_device_guard.h.
#include "common/cuda_device_guard.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "slurmddp/error.h"

namespace slurmddp::cuda_util {
namespace {

using DeviceGetFn = CUresult (*)(CUdevice*, int);
using PrimaryCtxGetStateFn = CUresult (*)(CUdevice, unsigned int*, int*);

struct Driver {
  DeviceGetFn device_get = nullptr;
  PrimaryCtxGetStateFn primary_ctx_get_state = nullptr;
};

// A driver function through cudart (no link against libcuda); null when
// unavailable. `abi`: the CUDA version whose ABI of the symbol we call (12.0,
// as PyTorch asks; both symbols have had one ABI since CUDA 7).
void* driver_function(const char* symbol, unsigned int abi) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion(symbol, &fn, abi, cudaEnableDefault, &found);
#elif CUDART_VERSION >= 12000
  (void)abi;
  const cudaError_t e = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &found);
#else
  (void)symbol;
  (void)abi;
  const cudaError_t e = cudaErrorNotSupported;
  found = cudaDriverEntryPointSuccess;
#endif
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();  // our own failed query: do not leave it pending
    return nullptr;
  }
  return fn;
}

const Driver& driver() {
  static const Driver d = [] {
    Driver x;
    x.device_get = reinterpret_cast<DeviceGetFn>(driver_function("cuDeviceGet", 12000));
    x.primary_ctx_get_state = reinterpret_cast<PrimaryCtxGetStateFn>(
        driver_function("cuDevicePrimaryCtxGetState", 12000));
    return x;
  }();
  return d;
}

}  // namespace

bool primary_context_active(int device) {
  const Driver& d = driver();
  if (d.device_get == nullptr || d.primary_ctx_get_state == nullptr) return true;
  CUdevice handle = 0;
  if (d.device_get(&handle, device) != CUDA_SUCCESS) return true;
  unsigned int flags = 0;
  int active = 0;
  if (d.primary_ctx_get_state(handle, &flags, &active) != CUDA_SUCCESS) return true;
  return active != 0;
}

ScopedDevice::ScopedDevice(int device, const char* component, const std::string& where) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    (void)cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ == device) return;
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw CudaError(std::string(component) + ": failed to make CUDA device " +
                    std::to_string(device) + " current: " + cudaGetErrorName(e) + " (" +
                    cudaGetErrorString(e) + "); " + where);
  }
  switched_ = true;
}

ScopedDevice::~ScopedDevice() {
  if (!switched_ || previous_ < 0) return;
  if (!primary_context_active(previous_)) return;  // the Note: keep `device` current
  (void)cudaSetDevice(previous_);
}

std::string device_text(int device, int rank) {
  return (rank >= 0 ? "rank=" + std::to_string(rank) + ", " : std::string()) +
         "device=" + std::to_string(device);
}

int resolve_device(int requested, int rank, const char* component) {
  auto check = [&](cudaError_t status, const char* what, int device) {
    if (status == cudaSuccess) return;
    throw CudaError(std::string(component) + ": failed to " + what + ": " +
                    cudaGetErrorString(status) + " (" + cudaGetErrorName(status) + "); " +
                    device_text(device, rank));
  };
  int count = 0;
  check(cudaGetDeviceCount(&count), "count CUDA devices", requested);
  if (count == 0) check(cudaErrorNoDevice, "find a CUDA device", requested);
  if (requested >= 0) {
    if (requested >= count) {
      throw InvalidArgument(
          std::string(component) + ": failed to use the communicator's CUDA device: device " +
          std::to_string(requested) + " is not among the " + std::to_string(count) +
          " visible devices; " + device_text(requested, rank));
    }
    return requested;
  }
  int current = 0;
  check(cudaGetDevice(&current), "read the current CUDA device", -1);
  return current;
}

}  // namespace slurmddp::cuda_util
