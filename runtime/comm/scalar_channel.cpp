#include "comm/scalar_channel.h"

#include <string>

#include "slurmddp/error.h"
#include "slurmddp/nccl_communicator.h"
#include "slurmddp_config.h"

#if SLURMDDP_HAVE_CUDA
#include <cuda_runtime.h>

#include "common/cuda_device_guard.h"
#endif

namespace slurmddp::comm {

namespace {

class HostChannel : public ScalarChannel {
 public:
  explicit HostChannel(Communicator& comm) : comm_(comm) {}
  int64_t max(int64_t mine) override {
    int64_t v = mine;
    comm_.allreduce(&v, 1, ReduceOp::kMax)->wait();
    return v;
  }

 private:
  Communicator& comm_;
};

#if SLURMDDP_HAVE_CUDA

void check(cudaError_t status, const char* what, int device, int rank) {
  if (status == cudaSuccess) return;
  throw CudaError(std::string("comm: failed to ") + what + ": " + cudaGetErrorString(status) +
                  " (" + cudaGetErrorName(status) + "); " + cuda_util::device_text(device, rank));
}

// The value lives in 8 bytes on the communicator's GPU; the copies run on a
// stream of its own and have landed before the allreduce is issued (Note
// [Device guard without stray contexts] for the device scopes).
class DeviceChannel : public ScalarChannel {
 public:
  DeviceChannel(Communicator& comm, int device)
      : comm_(comm), rank_(comm.rank()), device_(cuda_util::resolve_device(device, rank_, "comm")) {
    cuda_util::ScopedDevice scope(device_, "comm", cuda_util::device_text(device_, rank_));
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "create a stream", device_,
          rank_);
    const cudaError_t allocated = cudaMalloc(&data_, sizeof(int64_t));
    if (allocated != cudaSuccess) {
      cudaStreamDestroy(stream_);
      check(allocated, "allocate 8 bytes of device memory", device_, rank_);
    }
  }
  ~DeviceChannel() override {
    std::unique_ptr<cuda_util::ScopedDevice> scope;
    try {
      scope = std::make_unique<cuda_util::ScopedDevice>(device_, "comm",
                                                        cuda_util::device_text(device_, rank_));
    } catch (const std::exception&) {
      // Not fatal here: the frees below work from any current device.
    }
    cudaFree(data_);
    cudaStreamDestroy(stream_);
  }
  DeviceChannel(const DeviceChannel&) = delete;
  DeviceChannel& operator=(const DeviceChannel&) = delete;

  int64_t max(int64_t mine) override {
    {
      cuda_util::ScopedDevice scope(device_, "comm", cuda_util::device_text(device_, rank_));
      check(cudaMemcpyAsync(data_, &mine, sizeof mine, cudaMemcpyHostToDevice, stream_),
            "copy to the device", device_, rank_);
      check(cudaStreamSynchronize(stream_), "copy to the device", device_, rank_);
    }
    comm_.allreduce(data_, 1, DataType::kInt64, ReduceOp::kMax)->wait();
    int64_t v = 0;
    cuda_util::ScopedDevice scope(device_, "comm", cuda_util::device_text(device_, rank_));
    check(cudaMemcpy(&v, data_, sizeof v, cudaMemcpyDeviceToHost), "copy from the device", device_,
          rank_);
    return v;
  }

 private:
  Communicator& comm_;
  int rank_;
  int device_;
  cudaStream_t stream_ = nullptr;
  void* data_ = nullptr;
};

#endif

}  // namespace

std::unique_ptr<ScalarChannel> make_scalar_channel(Communicator& comm) {
  if (comm.device() == DeviceKind::kHost) return std::make_unique<HostChannel>(comm);
#if SLURMDDP_HAVE_CUDA
  auto* nccl = dynamic_cast<NcclCommunicator*>(&comm);
  return std::make_unique<DeviceChannel>(comm, nccl != nullptr ? nccl->cuda_device() : -1);
#else
  throw Error(
      "comm: failed to use the communicator's CUDA buffers: slurm-ddp was built "
      "without CUDA");
#endif
}

}  // namespace slurmddp::comm
