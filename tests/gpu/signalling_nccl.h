// An NcclCommunicator that forwards every call to a real one and lets a test
// wait for the moment an operation was issued, instead of sleeping and hoping
// that a background thread (GradSync's launcher, say) got there by then.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

#include "slurmddp/nccl_communicator.h"

namespace slurmddp::support {

class SignallingNccl : public NcclCommunicator {
 public:
  explicit SignallingNccl(std::unique_ptr<NcclCommunicator> inner)
      : owner_(std::move(inner)), inner_(owner_.get()) {}

  NcclCommunicator* inner() const { return inner_; }

  // Blocks until `n` allreduces have been issued through this communicator
  // (any overload); false after `limit`.
  bool await_allreduces(size_t n, std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return allreduces_ >= n; });
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Backend backend() const override { return inner_->backend(); }
  DeviceKind device() const override { return inner_->device(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }

  WorkHandle allreduce(void* data, size_t count, DataType type, ReduceOp op) override {
    return issued(inner_->allreduce(data, count, type, op));
  }
  WorkHandle allreduce(void* data, size_t count, DataType type, ReduceOp op,
                       const NcclOrder& order) override {
    return issued(inner_->allreduce(data, count, type, op, order));
  }
  WorkHandle broadcast(void* data, size_t count, DataType type, int root) override {
    return inner_->broadcast(data, count, type, root);
  }
  WorkHandle broadcast(void* data, size_t count, DataType type, int root,
                       const NcclOrder& order) override {
    return inner_->broadcast(data, count, type, root, order);
  }
  WorkHandle allgather(const void* send, void* recv, size_t count, DataType type) override {
    return inner_->allgather(send, recv, count, type);
  }
  WorkHandle allgather(const void* send, void* recv, size_t count, DataType type,
                       const NcclOrder& order) override {
    return inner_->allgather(send, recv, count, type, order);
  }
  WorkHandle reduce_scatter(const void* send, void* recv, size_t count, DataType type,
                            ReduceOp op) override {
    return inner_->reduce_scatter(send, recv, count, type, op);
  }
  WorkHandle reduce_scatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                            const NcclOrder& order) override {
    return inner_->reduce_scatter(send, recv, count, type, op, order);
  }
  WorkHandle barrier() override { return inner_->barrier(); }
  WorkHandle barrier(const NcclOrder& order) override { return inner_->barrier(order); }

  int cuda_device() const override { return inner_->cuda_device(); }
  CudaStream stream() const override { return inner_->stream(); }
  void set_compute_stream(CudaStream stream) override { inner_->set_compute_stream(stream); }
  CudaStream compute_stream() const override { return inner_->compute_stream(); }
  void wait_on_stream(const WorkHandle& work, CudaStream stream) override {
    inner_->wait_on_stream(work, stream);
  }
  int nccl_version() const override { return inner_->nccl_version(); }

 private:
  WorkHandle issued(WorkHandle work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++allreduces_;
    }
    cv_.notify_all();
    return work;
  }

  std::unique_ptr<NcclCommunicator> owner_;
  NcclCommunicator* inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t allreduces_ = 0;
};

}  // namespace slurmddp::support
