// Gradient synchronization for data-parallel training: after each backward
// pass every rank holds the average of all ranks' gradients, and the
// communication runs while the backward pass is still computing.
//
// Example, given std::shared_ptr<slurmddp::Communicator> comm,
// std::vector<slurmddp::GradParameter> params, int64_t steps,
// std::function<void(size_t)> compute_gradient, std::function<void()> optimizer_step:
//   slurmddp::GradSync sync(comm, params);  // params in registration order; checks layouts,
//                                           // broadcasts rank 0's values
//   for (int64_t step = 0; step < steps; ++step) {
//     for (size_t i = params.size(); i-- > 0;) {  // the order backward usually finishes them
//       compute_gradient(i);
//       sync.mark_ready(i);                 // may start an allreduce
//     }
//     sync.wait();                          // averaged gradients in place
//     optimizer_step();
//   }
//
// How it works (details in runtime/grad_sync/):
//  - Parameters are grouped into buckets in reverse registration order (the
//    order backward usually produces gradients): the first bucket holds at most
//    `first_bucket_bytes` so that communication starts early, the others at
//    most `bucket_cap_bytes`. A bucket never mixes data types or devices; a
//    parameter larger than the cap gets a bucket of its own.
//  - When every gradient of a bucket is marked ready, its allreduce (average)
//    is started in the background. Buckets are always launched in bucket
//    order, identical on every rank: a bucket that fills early waits for the
//    buckets before it, whatever order gradients become ready in on each rank.
//  - Buffers live where the communicator wants them (`Communicator::device()`):
//    host memory for Gloo, CUDA memory for NCCL. On CUDA, bucket copies and
//    compression casts run as kernels on a communication stream of the engine,
//    ordered after the compute stream by events. Bucket memory, streams and
//    events are made on the NCCL communicator's GPU (cuda_device()) whatever
//    device the calling thread has current. The thread's current device is
//    restored afterwards, unless the process never used it (re-selecting it
//    would create a CUDA context there: Note [Device guard without stray
//    contexts] in runtime/common/cuda_device_guard.h).
//  - The communicator is shared, not owned exclusively: between steps the
//    caller may use it for its own collectives, but not while a step is in
//    progress from another thread (the ranks could then issue collectives in
//    different orders). With NCCL, each bucket's allreduce waits on the GPU
//    for that bucket's own ready event (NcclOrder::after_event), not for all
//    of backward queued so far on the compute stream; the engine never changes
//    the communicator's settings (its compute stream stays the caller's, for
//    every collective other code issues).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "slurmddp/communicator.h"

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

// Default size limit of the first bucket (the one launched first): small, so
// that communication starts soon after backward begins.
inline constexpr size_t kFirstBucketBytes = size_t{1} << 20;
// Default size limit of every other bucket.
inline constexpr size_t kBucketCapBytes = size_t{25} << 20;

// The data type gradients travel in. Applies to float32 and float64 buckets;
// float16 and bfloat16 buckets always travel as they are.
enum class Compression {
  kNone,
  // IEEE binary16: about 3 significant decimal digits; gradients whose
  // magnitude exceeds 65504 become infinite (as with PyTorch's fp16 hook).
  kFloat16,
  // bfloat16: the float32 range with about 2 significant decimal digits.
  kBFloat16,
};
const char* to_string(Compression c);

// One parameter, as registered by the model. All ranks must register the same
// list: same length and, position by position, the same count, dtype and
// device kind (checked at construction).
struct GradParameter {
  // For error messages only (may differ between ranks); empty: "#<index>".
  std::string name;
  // The parameter's values: overwritten with rank 0's at construction when
  // GradSyncOptions::broadcast_parameters. May be null when count is 0 or the
  // broadcast is off.
  void* data = nullptr;
  // The gradient buffer (count elements of dtype, on the same device): read
  // when the parameter is marked ready and overwritten with the average.
  // Must be null with GradSyncOptions::gradient_as_bucket_view (the gradient
  // then lives in bucket memory: see GradSync::gradient()).
  void* grad = nullptr;
  size_t count = 0;
  // float32, float64, float16 or bfloat16.
  DataType dtype = DataType::kFloat32;
  // Must equal the communicator's device(); for CUDA, all parameters must be
  // on the communicator's GPU (NcclCommunicator::cuda_device(); for another
  // CUDA communicator, the device current when the GradSync is constructed).
  DeviceKind device = DeviceKind::kHost;
};

struct GradSyncOptions {
  // Bucket size limits in bytes (both > 0). All ranks must use the same values.
  size_t first_bucket_bytes = kFirstBucketBytes;
  size_t bucket_cap_bytes = kBucketCapBytes;
  // Wire data type; all ranks must use the same value. Averages are computed
  // by the communicator's ReduceOp::kAvg on the compressed values (Gloo sums
  // 16-bit values in float32 and rounds once; NCCL's ncclAvg scales before
  // summing), so compression cannot overflow a sum that the average fits in.
  Compression compression = Compression::kNone;
  // Keep gradients in bucket memory: GradSync::gradient(i) is where backward
  // must write gradient i, and where the average appears. Saves the copies
  // into and out of the buckets (PyTorch's gradient_as_bucket_view).
  bool gradient_as_bucket_view = false;
  // Overwrite every rank's parameter values with rank 0's at construction.
  bool broadcast_parameters = true;
  // Bound on every wait for a collective (> 0); unset: the communicator's
  // timeout().
  std::optional<std::chrono::milliseconds> timeout;
  // CUDA only: the stream (of the communicator's GPU) on which backward
  // produces the gradients and later kernels consume them. Null: the legacy
  // default stream.
  CudaStream cuda_stream = nullptr;
};

// One bucket of the plan, for inspection.
struct GradBucketInfo {
  DataType dtype = DataType::kFloat32;
  DeviceKind device = DeviceKind::kHost;
  // Parameter indices, in the order they sit in the bucket.
  std::vector<size_t> params;
  // Elements in the bucket's buffer (parameters plus alignment padding).
  size_t count = 0;
  // Bytes each allreduce of this bucket moves (after compression).
  size_t wire_bytes = 0;
};

// When one bucket got through a step, in seconds since its first mark_ready.
struct GradBucketTimeline {
  double ready = 0;   // its last gradient was marked ready
  double issued = 0;  // its allreduce was issued (after the buckets before it)
  double done = 0;    // its allreduce completed and the results are in place
};

// Timings of the last synchronized step (steady clock, seconds).
struct GradSyncStepStats {
  // First mark_ready to the end of wait().
  double step_seconds = 0;
  // Time wait() spent blocked for communication to finish: the communication
  // that backward did not hide.
  double wait_seconds = 0;
  // Sum over buckets of issue-to-completion times (buckets overlap, so this
  // can exceed step_seconds).
  double bucket_seconds = 0;
  // Per bucket, in bucket order.
  std::vector<GradBucketTimeline> buckets;
};

// The synchronizer. Thread safety: mark_ready() may be called concurrently
// from several threads; every other method must not run concurrently with
// any method (including mark_ready) of the same object. Internally two
// background threads issue and complete the bucket collectives.
//
// Errors: a failed collective (a lost peer, a timeout) breaks the object: the
// error is rethrown by the next mark_ready() or wait(), and by every later
// call. Misuse (an index out of range, a parameter marked twice in one step,
// a step finished with parameters not marked) throws InvalidArgument naming
// the parameter and also breaks it, because the ranks can no longer agree on
// the sequence of collectives.
class GradSync {
 public:
  // Plans the buckets, allocates their memory, checks that every rank
  // registered the same layout and options, then (with broadcast_parameters)
  // overwrites every parameter with rank 0's values. Collective: every rank
  // must construct its GradSync at the same point of its sequence of
  // collectives on `comm`. Blocks until done.
  // Throws InvalidArgument for bad options or parameters (naming the
  // parameter, the field and its value) and, on every rank, when the ranks'
  // layouts differ: the message names the first differing parameter and both
  // values, e.g. "... parameter 3 ('fc.bias'): count=10 on rank 0, count=12
  // on rank 2 ...". Errors of the communicator propagate (TimeoutError,
  // PeerError); CudaError for CUDA failures.
  GradSync(std::shared_ptr<Communicator> comm, std::vector<GradParameter> params,
           const GradSyncOptions& options = {});
  // The constructor's checks of `params` and `options` that need neither the
  // communicator nor a device, for a communicator of `backend` whose buffers
  // live on `device` (the NCCL communicator: Backend::kNccl, DeviceKind::kCuda):
  // dtypes, devices, grad and data buffers, compression and the bucket limits.
  // Local and cheap: no collective, no device call, and no memory the
  // parameters point to is read. Throws InvalidArgument with the message the
  // constructor would throw (without rank and size). A program can ask before
  // any device call, e.g. on a machine without a GPU.
  static void check_arguments(const std::vector<GradParameter>& params,
                              const GradSyncOptions& options, Backend backend, DeviceKind device);
  // Waits (at most the timeout per collective) for collectives still in
  // flight, because they use the buckets' memory. Never throws.
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Declares the gradient of parameter `index` final for this step. When it
  // completes a bucket, that bucket's allreduce starts in the background as
  // soon as the buckets before it have started. Non-blocking (on CUDA: records
  // an event on the compute stream and may enqueue a copy kernel). The first
  // call after wait() begins a new step. Throws InvalidArgument for an index
  // out of range or already marked in this step; rethrows a background error.
  void mark_ready(size_t index);

  // Finishes the step: blocks until every bucket's allreduce completed and the
  // averaged gradients are in place (in the `grad` buffers, or in bucket memory
  // with gradient_as_bucket_view). On CUDA it returns once the copies back are
  // enqueued, with the compute stream ordered after them. While sync is
  // disabled it returns at once and communicates nothing. Throws
  // InvalidArgument naming the parameters never marked in this step (when some
  // were), or the error of a failed collective.
  void wait();

  // Gradient accumulation (PyTorch's no_sync): while disabled, steps
  // (mark_ready ... wait) communicate nothing and leave gradients untouched,
  // so the caller can accumulate into them; the first step after re-enabling
  // averages the accumulated sums. Takes effect at the next step (a step in
  // progress keeps the setting it began with). Never throws. All ranks must
  // agree on which steps sync.
  void set_sync_enabled(bool enabled) noexcept;
  bool sync_enabled() const noexcept;

  // With gradient_as_bucket_view: where gradient `index` lives (count
  // elements of its dtype, on its device; null when count is 0). Stable for
  // the object's lifetime. Throws InvalidArgument without that option.
  void* gradient(size_t index) const;

  size_t num_parameters() const;
  const std::vector<GradBucketInfo>& buckets() const;
  GradSyncStepStats last_step_stats() const;

 private:
  class __attribute__((visibility("hidden"))) Impl;  // internal: not exported
  std::unique_ptr<Impl> impl_;
};

// Disables sync for its lifetime (restoring the previous setting), like
// `with ddp.no_sync():`.
class NoSyncScope {
 public:
  explicit NoSyncScope(GradSync& sync) : sync_(sync), previous_(sync.sync_enabled()) {
    sync_.set_sync_enabled(false);
  }
  ~NoSyncScope() { sync_.set_sync_enabled(previous_); }
  NoSyncScope(const NoSyncScope&) = delete;
  NoSyncScope& operator=(const NoSyncScope&) = delete;

 private:
  GradSync& sync_;
  bool previous_;
};

}  // namespace slurmddp

#pragma GCC visibility pop
