#include "stats.h"

#include <memory>

#include "slurmddp/error.h"
#include "train_config.h"

#if TRAIN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda_check.h"
#endif

namespace train {

void allreduce_sum(slurmddp::Communicator& comm, void* data, size_t count, slurmddp::DataType type,
                   std::chrono::milliseconds timeout) {
  if (comm.device() == slurmddp::DeviceKind::kHost) {
    comm.allreduce(data, count, type, slurmddp::ReduceOp::kSum)->wait(timeout);
    return;
  }
#if TRAIN_HAVE_CUDA
  CudaWhere where{-1, comm.rank()};
  check_cuda(cudaGetDevice(&where.device), "read the current CUDA device", where);
  const size_t bytes = count * slurmddp::element_size(type);
  void* raw = nullptr;
  check_cuda(cudaMalloc(&raw, bytes), "allocate a device buffer for the epoch's statistics", where);
  std::unique_ptr<void, cudaError_t (*)(void*)> device(raw, cudaFree);
  check_cuda(cudaMemcpy(device.get(), data, bytes, cudaMemcpyHostToDevice),
             "copy the epoch's statistics to the device", where);
  // A copy from pageable memory may return before it lands, and NCCL orders
  // its collective after its compute stream only, which need not be the
  // stream of that copy: wait for the device before NCCL reads the buffer.
  check_cuda(cudaDeviceSynchronize(), "wait for the statistics to reach the device", where);
  // Work::wait returns once the collective finished on the GPU.
  comm.allreduce(device.get(), count, type, slurmddp::ReduceOp::kSum)->wait(timeout);
  check_cuda(cudaMemcpy(data, device.get(), bytes, cudaMemcpyDeviceToHost),
             "copy the summed statistics to the host", where);
#else
  (void)data;
  (void)count;
  (void)type;
  (void)timeout;
  throw slurmddp::Error("train: failed to sum the epoch's statistics: the communicator (" +
                        std::string(to_string(comm.backend())) +
                        ") reduces device memory only and this build of train has no CUDA; rank=" +
                        std::to_string(comm.rank()));
#endif
}

}  // namespace train
