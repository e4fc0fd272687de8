// The NCCL communicator's class, shared by its two source files:
// nccl_communicator.cpp (creation, the watchdog, destruction) and
// nccl_collectives.cpp (checking and issuing the collectives).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/nccl/nccl_rendezvous.h"
#include "comm/nccl/nccl_rules.h"
#include "comm/nccl/nccl_util.h"
#include "comm/nccl/nccl_work.h"
#include "common/cuda_device_guard.h"
#include "common/log.h"
#include "membership/membership.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline std::string ms_text(milliseconds m) {
  return std::to_string(m.count()) + " ms";
}

class NcclCommunicatorImpl final : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(const NcclOptions& options, int device, const std::string& device_source,
                       std::shared_ptr<membership::Membership> group);
  ~NcclCommunicatorImpl() override;
  NcclCommunicatorImpl(const NcclCommunicatorImpl&) = delete;
  NcclCommunicatorImpl& operator=(const NcclCommunicatorImpl&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::kNccl; }
  DeviceKind device() const override { return DeviceKind::kCuda; }
  milliseconds timeout() const override { return timeout_; }

  WorkHandle allreduce(void* data, size_t count, DataType type, ReduceOp op) override {
    return allreduce(data, count, type, op, NcclOrder{});
  }
  WorkHandle broadcast(void* data, size_t count, DataType type, int root) override {
    return broadcast(data, count, type, root, NcclOrder{});
  }
  WorkHandle allgather(const void* send, void* recv, size_t count, DataType type) override {
    return allgather(send, recv, count, type, NcclOrder{});
  }
  WorkHandle reduce_scatter(const void* send, void* recv, size_t count, DataType type,
                            ReduceOp op) override {
    return reduce_scatter(send, recv, count, type, op, NcclOrder{});
  }
  WorkHandle barrier() override { return barrier(NcclOrder{}); }

  WorkHandle allreduce(void* data, size_t count, DataType type, ReduceOp op,
                       const NcclOrder& order) override;
  WorkHandle broadcast(void* data, size_t count, DataType type, int root,
                       const NcclOrder& order) override;
  WorkHandle allgather(const void* send, void* recv, size_t count, DataType type,
                       const NcclOrder& order) override;
  WorkHandle reduce_scatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                            const NcclOrder& order) override;
  WorkHandle barrier(const NcclOrder& order) override;

  int cuda_device() const override { return device_; }
  CudaStream stream() const override { return stream_; }
  void set_compute_stream(CudaStream stream) override { compute_stream_.store(stream); }
  CudaStream compute_stream() const override { return compute_stream_.load(); }
  void wait_on_stream(const WorkHandle& work, CudaStream stream) override;
  int nccl_version() const override { return version_; }

 private:
  using Enqueue = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;
  // Runs after a successful enqueue, on the stream, before the Work's event.
  using After = std::function<cudaError_t(cudaStream_t)>;

  void set_up_failure_notes(const std::shared_ptr<Store>& store, const std::string& scope);
  void initialize(const NcclOptions& options, const std::string& device_source,
                  std::shared_ptr<membership::Membership> group);
  void init_nccl(const ncclUniqueId& id, NcclRendezvous& rendezvous, Clock::time_point deadline);
  void release_cuda_objects();

  void check_usable() const;
  void check_buffer(const char* verb, const char* which, const void* p, size_t count, DataType type,
                    size_t ranks) const;
  size_t checked_bytes(const char* verb, size_t count, DataType type, size_t ranks) const;
  std::string op_text(const std::string& what, uint64_t seq) const;
  ncclRedOp_t nccl_op(ReduceOp op, void* result, size_t count, DataType type, After* after) const;
  void check_order(const char* verb, const NcclOrder& order) const;
  WorkHandle issue(const std::string& what, size_t count, const NcclOrder& order,
                   const Enqueue& enqueue, const After& after = nullptr);
  void settle(ncclResult_t r, const std::string& what, Clock::time_point deadline);

  void watchdog_main();
  void stop_watchdog();
  void drain_in_flight(Clock::time_point deadline);
  void finalize_nccl(Clock::time_point deadline);

  const int rank_;
  const int size_;
  const int device_;
  const milliseconds timeout_;
  const milliseconds finalize_timeout_;  // finalize_limit(timeout, options.finalize_timeout)
  const std::string where_;
  const std::shared_ptr<NcclState> state_;
  int version_ = 0;
  bool native_avg_ = true;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t order_event_ =
      nullptr;  // recorded on the stream to follow; guarded by the NCCL mutex
  int32_t* barrier_buffer_ = nullptr;
  const bool order_after_compute_;
  std::atomic<CudaStream> compute_stream_;
  uint64_t next_seq_ = 0;  // guarded by the NCCL mutex

  std::mutex watchdog_mu_;
  std::condition_variable watchdog_cv_;
  bool watchdog_stop_ = false;
  std::thread watchdog_;
};

}  // namespace slurmddp::comm
