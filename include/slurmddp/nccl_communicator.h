// The GPU communicator: collectives on CUDA device memory through NCCL (from
// the CUDA toolkit), one rank per process and GPU.
//
// Example, given int rank, int world_size, std::shared_ptr<slurmddp::Store> store,
// slurmddp::BFloat16* grads_on_gpu, size_t n:
//   slurmddp::NcclOptions o;
//   o.rank = rank; o.size = world_size; o.store = store;   // device: from the environment
//   o.timeout = std::chrono::seconds(30);
//   auto comm = slurmddp::make_nccl_communicator(o);
//   comm->allreduce(grads_on_gpu, n, slurmddp::DataType::kBFloat16, slurmddp::ReduceOp::kAvg)
//       ->wait(comm->timeout());
//
// Creation (blocking, bounded by `timeout`):
//  - Device: `device` when set, else SLURMDDP_LOCAL_DEVICE, else LOCAL_RANK
//    (then SLURM_LOCALID) modulo the number of visible devices, else 0 — the
//    rule of identity.h. The ordinal counts within CUDA_VISIBLE_DEVICES. An
//    ordinal that is not visible throws InvalidArgument naming the ordinal, its
//    source, CUDA_VISIBLE_DEVICES and SLURMDDP_LOCAL_DEVICE; no visible device
//    at all throws CudaError. The calling thread's current device is restored,
//    unless the process never used that device: re-selecting it would create
//    a CUDA context there (since CUDA 12), e.g. on GPU 0 in every rank of a
//    node; the thread then keeps this communicator's device current. Select
//    the rank's device (cudaSetDevice) before creating the communicator to
//    avoid surprises. The same holds for every operation.
//  - NCCL's unique id: rank 0 creates it and publishes it under
//    "<prefix>/<generation>/unique_id" in `store` (every rank first records
//    itself under "<prefix>/<generation>/join/<rank>"). The generation counts this rank's creations
//    on the prefix ("<prefix>/generation/<rank>", an atomic add), so a
//    communicator created again on the same store and prefix never reads the
//    previous one's id; every rank must create its communicators on a prefix
//    in the same order. A world size that differs from rank 0's throws
//    InvalidArgument naming both.
//  - NCCL is initialized non-blocking (ncclConfig_t::blocking = 0) and polled;
//    when `timeout` passes first, the half-made communicator is aborted
//    (ncclCommAbort) and TimeoutError says which rank gave up and how many
//    ranks the store saw join, e.g. "3/4 ranks joined; missing: [2]".
//    NCCL failures throw NcclError with NCCL's own last error text (PeerError
//    when NCCL blames a remote rank or the network).
//
// Operations (see communicator.h for the collective semantics):
//  - Buffers must be device (or managed) memory of this communicator's device;
//    anything else throws InvalidArgument before NCCL sees it.
//  - Every operation runs on the communicator's own stream (stream()). Unless
//    `order_after_compute_stream` is false it first waits, on the GPU, for the
//    work queued so far on the compute stream (set_compute_stream(); default:
//    the legacy default stream 0), so data produced by earlier kernels is
//    read, never stale. An operation can say instead what it waits for, for
//    itself alone (NcclOrder: a stream, an event, or nothing) through the
//    NcclCommunicator overloads; that leaves the compute stream, which every
//    thread's operations share, untouched. Calls return once NCCL has queued
//    the work (the CPU does not wait for the GPU). Buffers must stay valid and
//    untouched until the Work completed; to consume results on another stream
//    without a CPU wait, use wait_on_stream().
//  - avg: ncclAvg where the loaded NCCL has it, else a sum followed by a
//    scaling kernel (integers: sum then divide, truncating toward zero).
//    float16 and bfloat16 map to ncclFloat16 and ncclBfloat16 (reduced in
//    their own precision by NCCL). barrier() is a one-element allreduce.
//  - allgather: send and recv must not overlap, except send == recv + rank *
//    count elements (in place). reduce_scatter: recv must not overlap send,
//    except recv == send + rank * count elements.
//  - Failures: a watchdog thread checks every in-flight operation. When one
//    has not finished `timeout` after it was issued, or NCCL reports an
//    asynchronous error, the communicator is aborted (ncclCommAbort): that
//    operation and every later one throw the same error (TimeoutError naming
//    the operation, its sequence number, the rank and the timeout; PeerError
//    for a remote or network failure; NcclError otherwise). Work::wait with a
//    shorter timeout does the same when it expires. Nothing blocks longer than
//    `timeout` plus the watchdog's period (at most 100 ms) and the time
//    ncclCommAbort takes. Issuing blocks only while NCCL queues the operation
//    (on first use it may connect to peers), at most `timeout`.
//  - The destructor waits for in-flight operations (at most `timeout`), then
//    finalizes and destroys the NCCL communicator; a broken one is aborted.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "slurmddp/communicator.h"
#include "slurmddp/store.h"
#include "slurmddp/timeout.h"

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

// NCCL_UNIQUE_ID_BYTES (checked against nccl.h where the library is built).
inline constexpr size_t kNcclUniqueIdBytes = 128;
using NcclUniqueId = std::array<uint8_t, kNcclUniqueIdBytes>;

struct NcclOptions {
  // Required: this process's rank in [0, size) and the number of ranks.
  std::optional<int> rank;
  std::optional<int> size;
  // CUDA device ordinal within CUDA_VISIBLE_DEVICES; unset: from the
  // environment (see above).
  std::optional<int> device;

  // Rendezvous: the unique id travels through `store` under "<prefix>/..."
  // (under --mpi=pmix, init() finds the store through PMIx). A single rank
  // (size 1) needs none.
  // A prefix may be reused for later communicators (see above); after a
  // creation that failed on some ranks before they reached the store (e.g.
  // no usable GPU), use a new prefix.
  std::shared_ptr<Store> store;
  std::string prefix = "slurmddp/nccl";

  // Bounds creation, every operation (counted from the call that issued it)
  // and the blocking helpers. Values above ten years count as ten years.
  std::chrono::milliseconds timeout{kDefaultTimeout};

  // The stream whose queued work each operation waits for (see above);
  // nullptr: the legacy default stream. Ignored when order_after_compute_stream
  // is false (the caller then orders its work itself, e.g. with wait_on_stream
  // and events on stream()).
  CudaStream compute_stream = nullptr;
  bool order_after_compute_stream = true;

  // Create the communicator's stream with the device's highest priority, so
  // that collectives overlap compute kernels instead of queuing behind them.
  bool high_priority_stream = true;

  // Bounds ncclCommFinalize when the communicator is destroyed (NCCL flushing
  // its work with the peers; a healthy group takes milliseconds). When a peer
  // has gone it never completes: after this long (never more than `timeout`)
  // the communicator is aborted instead, so that a rank's shutdown does not
  // wait the whole operation timeout for a rank that is dead.
  std::chrono::milliseconds finalize_timeout{kDefaultFinalizeTimeout};
};

// What one operation waits for, on the GPU, before it runs on the
// communicator's stream. The default follows the communicator's compute
// stream (NcclOptions::compute_stream, set_compute_stream). Only the
// operation given this order is affected: nothing of the communicator changes.
struct NcclOrder {
  enum class Kind {
    kComputeStream,  // the compute stream (skipped when order_after_compute_stream is false)
    kStream,         // the work queued so far on `stream` (nullptr: the legacy default stream)
    kEvent,          // the completion of `event`'s latest record (cudaEventRecord before the call)
    kNothing,        // nothing: the caller orders the operation's inputs itself
  };
  Kind kind = Kind::kComputeStream;
  // kStream: a stream of this communicator's device.
  CudaStream stream = nullptr;
  // kEvent: an event of any device (a never-recorded event orders nothing).
  CudaEvent event = nullptr;

  static NcclOrder after_stream(CudaStream s) {
    NcclOrder o;
    o.kind = Kind::kStream;
    o.stream = s;
    return o;
  }
  static NcclOrder after_event(CudaEvent e) {
    NcclOrder o;
    o.kind = Kind::kEvent;
    o.event = e;
    return o;
  }
  static NcclOrder unordered() {
    NcclOrder o;
    o.kind = Kind::kNothing;
    return o;
  }
};

// The NCCL-specific surface beyond Communicator.
class NcclCommunicator : public Communicator {
 public:
  using Communicator::allgather;
  using Communicator::allreduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  using Communicator::reduce_scatter;

  // The collectives of Communicator, each waiting for what `order` names
  // instead of the compute stream (see NcclOrder). Same semantics, errors and
  // thread safety otherwise; an event order without an event throws
  // InvalidArgument.
  virtual WorkHandle allreduce(void* data, size_t count, DataType type, ReduceOp op,
                               const NcclOrder& order) = 0;
  virtual WorkHandle broadcast(void* data, size_t count, DataType type, int root,
                               const NcclOrder& order) = 0;
  virtual WorkHandle allgather(const void* send, void* recv, size_t count, DataType type,
                               const NcclOrder& order) = 0;
  virtual WorkHandle reduce_scatter(const void* send, void* recv, size_t count, DataType type,
                                    ReduceOp op, const NcclOrder& order) = 0;
  virtual WorkHandle barrier(const NcclOrder& order) = 0;

  // The CUDA device ordinal this communicator uses.
  virtual int cuda_device() const = 0;
  // The communicator's own stream, on which every operation runs.
  virtual CudaStream stream() const = 0;
  // The stream later operations wait for by default (see
  // NcclOptions::compute_stream). Thread-safe; takes effect for operations
  // issued after it returns, from every thread: it is the communicator's
  // setting, not the caller's. Code that shares the communicator with others
  // and needs another order for its own operations (GradSync, for instance)
  // passes an NcclOrder to those operations instead of swapping this.
  virtual void set_compute_stream(CudaStream stream) = 0;
  virtual CudaStream compute_stream() const = 0;
  // Makes `stream` wait, on the GPU, until `work` (from this communicator)
  // finished; returns at once. Throws InvalidArgument for a Work of another
  // communicator, and the communicator's error when it is broken.
  virtual void wait_on_stream(const WorkHandle& work, CudaStream stream) = 0;
  // The loaded NCCL library's version code (e.g. 22809 for 2.28.9).
  virtual int nccl_version() const = 0;
};

// Creates this rank's communicator (blocking until every rank joined, see
// above). Throws InvalidArgument, CudaError, NcclError, TimeoutError or
// PeerError (store lost). In a build without NCCL it throws Error saying so.
std::unique_ptr<NcclCommunicator> make_nccl_communicator(const NcclOptions& options);

// The NCCL surface of a communicator made by make_nccl_communicator; nullptr
// for any other communicator.
NcclCommunicator* as_nccl_communicator(Communicator* communicator);

}  // namespace slurmddp

#pragma GCC visibility pop
