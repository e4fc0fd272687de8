// Device memory for the gpu suites and the NCCL benchmark: one owner of a
// cudaMalloc'd block whose host-to-device copies have landed when they return.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace slurmddp::support {

inline void throw_on_cuda_error(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) throw std::runtime_error(what + ": " + cudaGetErrorString(status));
}

// Note [Uploads that have landed]
// cudaMemcpy from pageable host memory to the device may return once the data
// is staged, before the DMA reached device memory (transfers up to 64 KiB),
// and its ordering on the legacy default stream does not reach non-blocking
// streams such as GradSync's communication stream or NCCL's. A buffer handed
// to a communicator or the engine right after such a copy could be read before
// the data arrived. Every host-to-device copy of the suites therefore goes
// through upload_landed(): an asynchronous copy on this thread's stream and a
// synchronization of that stream, after which the data is in device memory
// for every stream.
inline void upload_landed(void* dst, const void* host, size_t bytes) {
  if (bytes == 0) return;
  throw_on_cuda_error(
      cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread),
      "copy to the device");
  throw_on_cuda_error(cudaStreamSynchronize(cudaStreamPerThread), "wait for a copy to the device");
}

// Device to host: returns once the bytes are in host memory.
inline void download_to(void* host, const void* src, size_t bytes) {
  if (bytes == 0) return;
  throw_on_cuda_error(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost), "copy to the host");
}

// Device memory owned for one scope (on the current device). Throws
// std::runtime_error naming the size and CUDA's reason when it cannot allocate.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0)
      throw_on_cuda_error(cudaMalloc(&ptr_, bytes_),
                          "cudaMalloc(" + std::to_string(bytes_) + " bytes)");
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(ptr_); }
  size_t size() const { return bytes_; }
  // The whole buffer from / to `host` (size() bytes).
  void upload(const void* host) { upload_landed(ptr_, host, bytes_); }
  void download(void* host) const { download_to(host, ptr_, bytes_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace slurmddp::support
