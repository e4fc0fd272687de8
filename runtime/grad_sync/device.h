// Where bucket memory lives and how data moves in and out of it: host memory
// with plain copies, or CUDA memory with kernels on a communication stream.
// The engine (GradSync::Impl, engine.h) talks to this interface only.
//
// Note [Step hooks]
// One synchronized step calls, per bucket b:
//   bucket_ready(b)       in the thread whose mark_ready completed b;
//   before_collective(b)  in the launcher thread, in bucket order, right before
//                         the allreduce is issued: on return the wire buffer
//                         must hold the bucket's data;
//   after_collective(b)   in the finisher thread once the allreduce completed;
// and end_step() in the thread calling wait(), after every bucket.
// Host: the copy in runs in before_collective and the copy out in
// after_collective, both on the calling background thread, so the thread
// running backward never copies.
// CUDA: bucket_ready records an event on the compute stream, makes the
// communication stream wait for it and enqueues the copy-in kernel there;
// before_collective blocks the launcher thread until that kernel is done (see
// Note [Ordering with the communicator] in cuda_device.cpp), and an NCCL
// allreduce also waits on the GPU for collective_event(b); after_collective
// enqueues the copy-out kernel on the communication stream; end_step makes the
// compute stream wait for the communication stream.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "slurmddp/communicator.h"

namespace slurmddp::grad_sync {

// count elements from src (of the transfer's src_type) to dst (dst_type).
struct Segment {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t count = 0;
};

struct Transfer {
  DataType src_type = DataType::kFloat32;
  DataType dst_type = DataType::kFloat32;
  std::vector<Segment> segments;
};

inline constexpr size_t kNoTransfer = static_cast<size_t>(-1);

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceKind kind() const = 0;

  // Zero-filled memory that lives as long as this object (null for 0 bytes).
  virtual void* allocate(size_t bytes) = 0;
  // Frees memory from allocate() early (construction-time temporaries).
  virtual void release(void* p) = 0;
  // Blocking copies between host memory and this device's memory: on return
  // the data is in place for every stream and the host buffer is free.
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;

  // Throws InvalidArgument when `p` (count > 0 bytes) is not memory this
  // device can access as a buffer of the communicator; `what` names it.
  virtual void check_pointer(const void* p, size_t bytes, const std::string& what) = 0;

  // Registers a transfer used repeatedly; returns its id.
  virtual size_t add_transfer(Transfer t) = 0;
  // Runs a registered transfer, ordered after all work issued so far (on the
  // compute stream), and returns once it completed. Construction only.
  virtual void run_blocking(size_t transfer) = 0;

  // Note [Step hooks]. `in`/`out` are transfer ids or kNoTransfer.
  virtual void bucket_ready(size_t bucket, size_t in) = 0;
  virtual void before_collective(size_t bucket, size_t in) = 0;
  virtual void after_collective(size_t bucket, size_t out) = 0;
  virtual void end_step() = 0;

  // The event (a cudaEvent_t) whose latest record completes bucket `bucket`'s
  // wire data for this step, recorded by bucket_ready: the copy-in's event, or
  // the gradient-ready event when `in` is kNoTransfer. Null on the host. The
  // engine orders the bucket's NCCL allreduce after it (Note [NCCL compute
  // stream] in engine_step.cpp).
  virtual void* collective_event(size_t bucket, size_t in) const = 0;

  // Called once at the start of each background thread (CUDA: selects the device).
  virtual void bind_thread() = 0;

  // The communication stream (a cudaStream_t); null on the host.
  virtual void* stream() const = 0;
};

// Host memory; copies with memcpy and the casts of cast.h.
std::unique_ptr<Device> make_host_device();

// CUDA memory on `device` (the communicator's, e.g. NcclCommunicator::
// cuda_device(); -1: the calling thread's current device), a communication
// stream of its own, and `compute_stream` (a cudaStream_t of that device;
// null: the legacy default stream) as the stream gradients are produced and
// consumed on. Every CUDA object is made on `device` under a scoped device
// guard, whatever the calling thread's current device is. `num_buckets` sizes
// the per-bucket events; `rank` (the communicator's; -1: none) is named in every
// error with the device. Throws Error when built without CUDA, CudaError when
// no device is usable, InvalidArgument for a device that is not visible.
std::unique_ptr<Device> make_cuda_device(int device, size_t num_buckets, void* compute_stream,
                                         int rank = -1);

}  // namespace slurmddp::grad_sync
