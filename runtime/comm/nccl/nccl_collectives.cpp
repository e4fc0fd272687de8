// Checking and issuing the NCCL communicator's collectives (Note [Average]
// and the ordering rules of include/slurmddp/nccl_communicator.h).
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "comm/nccl/nccl_communicator_impl.h"
#include "comm/nccl/nccl_scale.h"
#include "comm/nccl/nccl_util.h"
#include "common/cuda_device_guard.h"
#include "common/log.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {

void NcclCommunicatorImpl::check_usable() const {
  if (auto e = state_->error()) std::rethrow_exception(e);
}

size_t NcclCommunicatorImpl::checked_bytes(const char* verb, size_t count, DataType type,
                                           size_t ranks) const {
  const size_t elem = slurmddp::element_size(type);
  if (elem == 0) {
    throw InvalidArgument(std::string("nccl: failed to ") + verb + ": unknown data type " +
                          std::to_string(static_cast<int>(type)) + "; " + where_);
  }
  if (count > SIZE_MAX / elem / ranks) {
    throw InvalidArgument(std::string("nccl: failed to ") + verb + ": count " +
                          std::to_string(count) + " of " + slurmddp::to_string(type) +
                          " overflows the address space; " + where_);
  }
  return count * elem * ranks;
}

void NcclCommunicatorImpl::check_buffer(const char* verb, const char* which, const void* p,
                                        size_t count, DataType type, size_t ranks) const {
  const size_t bytes = checked_bytes(verb, count, type, ranks);
  if (bytes == 0) return;
  const std::string prefix = std::string("nccl: failed to ") + verb + ": ";
  if (p == nullptr) {
    throw InvalidArgument(prefix + which + " is null for " + std::to_string(count) + " " +
                          slurmddp::to_string(type) + "; " + where_);
  }
  // Under the guard: on a thread with no current context the query would make
  // one on device 0 (Note [Device guard without stray contexts]).
  cuda_util::ScopedDevice guard(device_, kNcclComponent, where_);
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw InvalidArgument(prefix + which + " is not CUDA memory (cudaPointerGetAttributes: " +
                          cuda_error_text(e) + "); " + where_);
  }
  if (a.type == cudaMemoryTypeManaged) return;
  if (a.type != cudaMemoryTypeDevice) {
    throw InvalidArgument(prefix + which +
                          " is host memory; the NCCL communicator needs device memory of "
                          "device " +
                          std::to_string(device_) + "; " + where_);
  }
  if (a.device != device_) {
    throw InvalidArgument(prefix + which + " is memory of device " + std::to_string(a.device) +
                          ", the communicator uses device " + std::to_string(device_) + "; " +
                          where_);
  }
}

std::string NcclCommunicatorImpl::op_text(const std::string& what, uint64_t seq) const {
  return what + ", op #" + std::to_string(seq);
}

void NcclCommunicatorImpl::settle(ncclResult_t r, const std::string& what,
                                  Clock::time_point deadline) {
  // A non-blocking communicator may answer ncclInProgress while it queues the
  // operation in the background (e.g. connecting on first use); the work is on
  // the stream only once ncclCommGetAsyncError says ncclSuccess.
  ncclComm_t comm = state_->comm_locked();
  int spins = 0;
  auto nap = std::chrono::microseconds(10);
  while (r == ncclInProgress) {
    if (state_->abort_requested()) std::rethrow_exception(state_->error());
    if (Clock::now() >= deadline) {
      std::rethrow_exception(state_->fail(
          std::make_exception_ptr(TimeoutError(
              "nccl: failed to issue " + what + ": NCCL did not finish queuing it within " +
              ms_text(timeout_) + " (peers missing?); the communicator is aborted; " + where_ +
              ", timeout_ms=" + std::to_string(timeout_.count()))),
          /*nccl_locked=*/true));
    }
    if (spins < 64) {
      ++spins;
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    r = q != ncclSuccess ? q : state;
  }
  if (r != ncclSuccess) {
    std::rethrow_exception(
        state_->fail(nccl_failure("issue " + what, r, comm, where_), /*nccl_locked=*/true));
  }
}

void NcclCommunicatorImpl::check_order(const char* verb, const NcclOrder& order) const {
  switch (order.kind) {
    case NcclOrder::Kind::kComputeStream:
    case NcclOrder::Kind::kStream:
    case NcclOrder::Kind::kNothing:
      return;
    case NcclOrder::Kind::kEvent:
      if (order.event != nullptr) return;
      throw InvalidArgument(std::string("nccl: failed to ") + verb +
                            ": NcclOrder::Kind::kEvent without an event; " + where_);
  }
  throw InvalidArgument(std::string("nccl: failed to ") + verb + ": unknown NcclOrder kind " +
                        std::to_string(static_cast<int>(order.kind)) + "; " + where_);
}

WorkHandle NcclCommunicatorImpl::issue(const std::string& what, size_t count,
                                       const NcclOrder& order, const Enqueue& enqueue,
                                       const After& after) {
  check_usable();
  if (count == 0) {
    return std::make_shared<NcclWork>(what, 0, state_, nullptr, Clock::now(), timeout_);
  }
  cuda_util::ScopedDevice guard(device_, kNcclComponent, where_);
  std::lock_guard<std::mutex> lock(state_->nccl_mutex());
  check_usable();
  ncclComm_t comm = state_->comm_locked();
  if (comm == nullptr) {
    throw NcclError("nccl: failed to issue " + what + ": the communicator was destroyed; " +
                    where_);
  }
  const auto issued = Clock::now();
  const uint64_t seq = ++next_seq_;
  const std::string described = op_text(what, seq);
  auto fail_cuda = [&](const char* action, cudaError_t e) {
    (void)cudaGetLastError();
    std::rethrow_exception(state_->fail(
        std::make_exception_ptr(CudaError("nccl: failed to issue " + described + ": " + action +
                                          ": " + cuda_error_text(e) + "; " + where_)),
        /*nccl_locked=*/true));
  };

  cudaEvent_t end = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&end, cudaEventDisableTiming);
  if (e != cudaSuccess) fail_cuda("cudaEventCreateWithFlags", e);
  auto work = std::make_shared<NcclWork>(described, seq, state_, end, issued, timeout_);

  // Note [Stream order]: the collective reads what earlier kernels wrote, so
  // our stream first waits (on the GPU) for them: by default for the work
  // queued so far on the compute stream. An operation may name its own
  // predecessor instead (NcclOrder): a stream, an event, or nothing. That
  // choice is the operation's alone; the compute stream, shared by every
  // thread's operations, never changes for it (Note [NCCL compute stream] in
  // grad_sync/engine_step.cpp says why GradSync needs exactly that).
  auto follow_stream = [&](cudaStream_t s, const char* which) {
    e = cudaEventRecord(order_event_, s);
    if (e != cudaSuccess) fail_cuda((std::string("record an event on ") + which).c_str(), e);
    e = cudaStreamWaitEvent(stream_, order_event_, 0);
    if (e != cudaSuccess) {
      fail_cuda((std::string("order the communicator's stream after ") + which).c_str(), e);
    }
  };
  switch (order.kind) {
    case NcclOrder::Kind::kComputeStream:
      if (order_after_compute_) follow_stream(compute_stream_.load(), "the compute stream");
      break;
    case NcclOrder::Kind::kStream:
      follow_stream(order.stream, "the operation's stream");
      break;
    case NcclOrder::Kind::kEvent:
      e = cudaStreamWaitEvent(stream_, order.event, 0);
      if (e != cudaSuccess) fail_cuda("order the communicator's stream after the given event", e);
      break;
    case NcclOrder::Kind::kNothing:
      break;
  }
  settle(enqueue(comm, stream_), described, issued + timeout_);
  if (after) {
    e = after(stream_);
    if (e != cudaSuccess) fail_cuda("launch the averaging kernel", e);
  }
  e = cudaEventRecord(end, stream_);
  if (e != cudaSuccess) fail_cuda("record the completion event", e);
  state_->push(work);
  SLURMDDP_LOG(log::Level::kTrace, kNcclComponent, "issued " << described);
  return work;
}

// NCCL's operation for `op`. Without a native average (NCCL before 2.10)
// kAvg is a sum followed, on the stream, by dividing `result` by the size.
ncclRedOp_t NcclCommunicatorImpl::nccl_op(ReduceOp op, void* result, size_t count, DataType type,
                                          After* after) const {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      if (native_avg_) return ncclAvg;
      *after = [result, count, type, n = size_](cudaStream_t s) {
        return launch_divide(result, count, type, n, s);
      };
      return ncclSum;
  }
  return ncclSum;
}

WorkHandle NcclCommunicatorImpl::allreduce(void* data, size_t count, DataType type, ReduceOp op,
                                           const NcclOrder& order) {
  check_order("allreduce", order);
  check_buffer("allreduce", "data", data, count, type, 1);
  const std::string what = std::string("allreduce of ") + std::to_string(count) + " " +
                           slurmddp::to_string(type) + " (" + slurmddp::to_string(op) + ")";
  const ncclDataType_t t = to_nccl(type);
  After after;
  const ncclRedOp_t nop = nccl_op(op, data, count, type, &after);
  return issue(
      what, count, order,
      [=](ncclComm_t c, cudaStream_t s) { return ncclAllReduce(data, data, count, t, nop, c, s); },
      after);
}

WorkHandle NcclCommunicatorImpl::broadcast(void* data, size_t count, DataType type, int root,
                                           const NcclOrder& order) {
  check_order("broadcast", order);
  if (root < 0 || root >= size_) {
    throw InvalidArgument("nccl: failed to broadcast: root " + std::to_string(root) +
                          " is not a rank of this communicator; root=" + std::to_string(root) +
                          ", " + where_);
  }
  check_buffer("broadcast", "data", data, count, type, 1);
  const std::string what = std::string("broadcast of ") + std::to_string(count) + " " +
                           slurmddp::to_string(type) + " from rank " + std::to_string(root);
  const ncclDataType_t t = to_nccl(type);
  return issue(what, count, order, [=](ncclComm_t c, cudaStream_t s) {
    return ncclBroadcast(data, data, count, t, root, c, s);
  });
}

namespace {

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

WorkHandle NcclCommunicatorImpl::allgather(const void* send, void* recv, size_t count,
                                           DataType type, const NcclOrder& order) {
  check_order("allgather", order);
  check_buffer("allgather", "send", send, count, type, 1);
  check_buffer("allgather", "recv", recv, count, type, static_cast<size_t>(size_));
  const size_t chunk = checked_bytes("allgather", count, type, 1);
  const auto* in_place = static_cast<const uint8_t*>(recv) + chunk * static_cast<size_t>(rank_);
  if (count > 0 && send != in_place &&
      overlaps(send, chunk, recv, chunk * static_cast<size_t>(size_))) {
    throw InvalidArgument(
        "nccl: failed to allgather: send overlaps recv without being recv + "
        "rank * count (in place); " +
        where_);
  }
  const std::string what = std::string("allgather of ") + std::to_string(count) + " " +
                           slurmddp::to_string(type) + " per rank";
  const ncclDataType_t t = to_nccl(type);
  return issue(what, count, order, [=](ncclComm_t c, cudaStream_t s) {
    return ncclAllGather(send, recv, count, t, c, s);
  });
}

WorkHandle NcclCommunicatorImpl::reduce_scatter(const void* send, void* recv, size_t count,
                                                DataType type, ReduceOp op,
                                                const NcclOrder& order) {
  check_order("reduce_scatter", order);
  check_buffer("reduce_scatter", "send", send, count, type, static_cast<size_t>(size_));
  check_buffer("reduce_scatter", "recv", recv, count, type, 1);
  const size_t chunk = checked_bytes("reduce_scatter", count, type, 1);
  const auto* in_place = static_cast<const uint8_t*>(send) + chunk * static_cast<size_t>(rank_);
  if (count > 0 && recv != in_place &&
      overlaps(recv, chunk, send, chunk * static_cast<size_t>(size_))) {
    throw InvalidArgument(
        "nccl: failed to reduce_scatter: recv overlaps send without being "
        "send + rank * count (in place); " +
        where_);
  }
  const std::string what = std::string("reduce_scatter of ") + std::to_string(count) + " " +
                           slurmddp::to_string(type) + " per rank (" + slurmddp::to_string(op) +
                           ")";
  const ncclDataType_t t = to_nccl(type);
  After after;
  const ncclRedOp_t nop = nccl_op(op, recv, count, type, &after);
  return issue(
      what, count, order,
      [=](ncclComm_t c, cudaStream_t s) {
        return ncclReduceScatter(send, recv, count, t, nop, c, s);
      },
      after);
}

WorkHandle NcclCommunicatorImpl::barrier(const NcclOrder& order) {
  check_order("barrier", order);
  int32_t* buffer = barrier_buffer_;
  // A one-element max over zeros: completes on a rank only once every rank
  // has reached it, and the value never changes.
  return issue("barrier", 1, order, [buffer](ncclComm_t c, cudaStream_t s) {
    return ncclAllReduce(buffer, buffer, 1, ncclInt32, ncclMax, c, s);
  });
}

void NcclCommunicatorImpl::wait_on_stream(const WorkHandle& work, CudaStream stream) {
  const auto* w = dynamic_cast<const NcclWork*>(work.get());
  if (w == nullptr || w->state() != state_.get()) {
    throw InvalidArgument(
        "nccl: failed to make a stream wait: the Work is not from this "
        "communicator; " +
        where_);
  }
  if (auto e = state_->error_for(w->seq())) std::rethrow_exception(e);
  if (w->end_event() == nullptr) return;
  const cudaError_t e = cudaStreamWaitEvent(stream, w->end_event(), 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw_cuda("make a stream wait for " + w->what(), e, where_);
  }
}

}  // namespace slurmddp::comm
