// The NCCL communicator (see include/slurmddp/nccl_communicator.h).
#include "slurmddp/nccl_communicator.h"

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

#include "comm/nccl_rendezvous.h"
#include "comm/nccl_rules.h"
#include "comm/nccl_scale.h"
#include "comm/nccl_util.h"
#include "comm/nccl_work.h"
#include "comm/over_membership.h"
#include "common/cuda_device_guard.h"
#include "common/log.h"
#include "membership/notes.h"
#include "slurmddp/error.h"

namespace slurmddp {
namespace comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Note [Average]: ncclAvg (NCCL >= 2.10) divides inside NCCL (floating types
// pre-multiply by 1/n, integers divide the sum). Without it, or with
// SLURMDDP_NCCL_AVG=sum-divide (used by the gpu suite to test this path), the
// communicator sums and then runs launch_divide() on its stream, before the
// Work's event: the Work completes only once the average is in place.
bool native_average(int version) {
  const char* v = std::getenv("SLURMDDP_NCCL_AVG");
  if (v != nullptr && std::strcmp(v, "sum-divide") == 0) return false;
  return version >= NCCL_VERSION(2, 10, 0);
}

std::optional<std::string> getenv_reader(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

// The watchdog's period: fine enough for short test timeouts, coarse enough
// to cost nothing in training.
milliseconds watchdog_period(milliseconds timeout) {
  return std::clamp(timeout / 20, milliseconds(5), milliseconds(100));
}

std::string ms_text(milliseconds m) {
  return std::to_string(m.count()) + " ms";
}

// Deadlines are computed as now + timeout in nanoseconds: longer timeouts
// (e.g. milliseconds::max() for "forever") count as ten years.
milliseconds bounded(milliseconds timeout) {
  return std::min(timeout, milliseconds(std::chrono::hours(24 * 3650)));
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
  const char* backend() const override { return "nccl"; }
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

NcclCommunicatorImpl::NcclCommunicatorImpl(const NcclOptions& options, int device,
                                           const std::string& device_source,
                                           std::shared_ptr<membership::Membership> group)
    : rank_(options.rank),
      size_(options.size),
      device_(device),
      timeout_(bounded(options.timeout)),
      where_(where_text(options.rank, options.size, device)),
      state_(std::make_shared<NcclState>(where_)),
      order_after_compute_(options.order_after_compute_stream),
      compute_stream_(options.compute_stream) {
  try {
    initialize(options, device_source, std::move(group));
  } catch (...) {
    // Half-made: nothing in flight, no watchdog; abort NCCL if it exists.
    {
      std::lock_guard<std::mutex> lock(state_->nccl_mutex());
      if (ncclComm_t c = state_->comm_locked()) {
        (void)ncclCommAbort(c);
        state_->set_comm_locked(nullptr);
      }
    }
    release_cuda_objects();
    throw;
  }
}

void NcclCommunicatorImpl::initialize(const NcclOptions& options, const std::string& device_source,
                                      std::shared_ptr<membership::Membership> group) {
  const auto start = Clock::now();
  const auto deadline = start + timeout_;
  if (ncclGetVersion(&version_) != ncclSuccess) version_ = 0;
  if (version_ < NCCL_VERSION(2, 14, 0)) {
    throw NcclError("nccl: failed to create a communicator: the loaded NCCL library is " +
                    nccl_version_text(version_) +
                    " but slurm-ddp needs >= 2.14 (non-blocking "
                    "communicators; built against " +
                    nccl_version_text(NCCL_VERSION_CODE) + "); " + where_);
  }
  native_avg_ = native_average(version_);

  cuda_util::ScopedDevice guard(device_, kNcclComponent, where_);
  int least = 0;
  int greatest = 0;
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (e != cudaSuccess) throw_cuda("query the stream priorities", e, where_);
  e = cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking,
                                   options.high_priority_stream ? greatest : least);
  if (e != cudaSuccess) throw_cuda("create the communicator's stream", e, where_);
  e = cudaEventCreateWithFlags(&order_event_, cudaEventDisableTiming);
  if (e != cudaSuccess) throw_cuda("create an event", e, where_);
  e = cudaMalloc(reinterpret_cast<void**>(&barrier_buffer_), sizeof(int32_t));
  if (e != cudaSuccess) throw_cuda("allocate the barrier's buffer", e, where_);
  e = cudaMemsetAsync(barrier_buffer_, 0, sizeof(int32_t), stream_);  // ordered before any barrier
  if (e != cudaSuccess) throw_cuda("clear the barrier's buffer", e, where_);

  NcclRendezvous rendezvous = group ? NcclRendezvous(options, std::move(group), where_)
                                    : NcclRendezvous(options, device_, where_, deadline);
  rendezvous.announce();
  const ncclUniqueId id = rendezvous.exchange();
  init_nccl(id, rendezvous, deadline);
  if (options.store && size_ > 1) set_up_failure_notes(options.store, rendezvous.group()->scope());

  watchdog_ = std::thread([this] { watchdog_main(); });
  SLURMDDP_LOG_INFO(kNcclComponent,
                    "communicator ready in "
                        << std::chrono::duration_cast<milliseconds>(Clock::now() - start).count()
                        << " ms: NCCL " << nccl_version_text(version_) << ", device " << device_
                        << " (" << device_source << "), average "
                        << (native_avg_ ? "ncclAvg" : "sum-divide") << "; " << where_);
}

// Note [NCCL failure notes] (nccl_work.h).
void NcclCommunicatorImpl::set_up_failure_notes(const std::shared_ptr<Store>& store,
                                                const std::string& scope) {
  membership::DiagnosisContext ctx;
  ctx.store = store;
  ctx.prefix = scope;
  ctx.rank = rank_;
  ctx.size = size_;
  ctx.timeout = timeout_;
  ctx.grace = std::clamp(timeout_ / 4, milliseconds(100), milliseconds(2000));
  ctx.component = "nccl";
  state_->set_diagnoser([ctx](const std::string& op, const std::exception_ptr& plain, bool lost) {
    return membership::note_and_conclude(
        ctx, lost ? membership::Observation::Kind::kPeer : membership::Observation::Kind::kTimeout,
        op, plain);
  });
}

void NcclCommunicatorImpl::init_nccl(const ncclUniqueId& id, NcclRendezvous& rendezvous,
                                     Clock::time_point deadline) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Note [Non-blocking init]
  std::unique_lock<std::mutex> lock(state_->nccl_mutex());
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size_, id, rank_, &config);
  state_->set_comm_locked(comm);
  // Note [Non-blocking init]: NCCL connects to its peers in the background
  // and reports ncclInProgress until it is done; polling lets a rank that
  // never arrives end in a TimeoutError (after ncclCommAbort) instead of a
  // hang. The sleep grows from 100 us to 10 ms: init takes 100s of ms anyway.
  auto nap = std::chrono::microseconds(100);
  while (r == ncclInProgress || (r == ncclSuccess && comm != nullptr)) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    r = q != ncclSuccess ? q : state;
    if (r != ncclInProgress) break;
    if (Clock::now() >= deadline) {
      // Ask the store before aborting: the diagnosis is what the user needs.
      const std::string seen = rendezvous.diagnosis();
      (void)ncclCommAbort(comm);
      state_->set_comm_locked(nullptr);
      throw TimeoutError(
          "nccl: failed to initialize the communicator: NCCL did not connect "
          "all ranks within " +
          ms_text(timeout_) + "; " + seen + "; the half-made communicator was aborted; " + where_ +
          ", timeout_ms=" + std::to_string(timeout_.count()));
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(10000));
  }
  if (r != ncclSuccess) {
    const std::exception_ptr failure = nccl_failure(
        "initialize the communicator (" + rendezvous.diagnosis() + ")", r, comm, where_);
    if (comm != nullptr) (void)ncclCommAbort(comm);
    state_->set_comm_locked(nullptr);
    std::rethrow_exception(failure);
  }
}

NcclCommunicatorImpl::~NcclCommunicatorImpl() {
  const auto deadline = Clock::now() + timeout_;
  drain_in_flight(deadline);
  stop_watchdog();
  finalize_nccl(deadline);
  release_cuda_objects();
}

void NcclCommunicatorImpl::drain_in_flight(Clock::time_point deadline) {
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    const std::shared_ptr<NcclWork> pending = state_->drain_completed();
    if (!pending || state_->error()) return;
    if (Clock::now() >= deadline) {
      state_->fail(std::make_exception_ptr(
                       TimeoutError("nccl: failed to destroy the communicator: " + pending->what() +
                                    " still in flight after " + ms_text(timeout_) +
                                    "; the communicator is aborted; " + where_)),
                   /*nccl_locked=*/false);
      return;
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(2000));
  }
}

void NcclCommunicatorImpl::stop_watchdog() {
  {
    std::lock_guard<std::mutex> lock(watchdog_mu_);
    watchdog_stop_ = true;
  }
  watchdog_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void NcclCommunicatorImpl::finalize_nccl(Clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(state_->nccl_mutex());
  ncclComm_t comm = state_->comm_locked();
  if (comm == nullptr) return;  // aborted after a failure
  state_->set_comm_locked(nullptr);
  try {
    cuda_util::ScopedDevice guard(device_, kNcclComponent, where_);
    ncclResult_t r = ncclCommFinalize(comm);
    auto nap = std::chrono::microseconds(100);
    while (r == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(10000));
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
      r = q != ncclSuccess ? q : state;
    }
    if (r == ncclSuccess) {
      r = ncclCommDestroy(comm);
      if (r == ncclSuccess || r == ncclInProgress) return;
      SLURMDDP_LOG_WARN(kNcclComponent,
                        "ncclCommDestroy returned " << nccl_result_name(r) << "; " << where_);
      return;
    }
    SLURMDDP_LOG_WARN(kNcclComponent, "ncclCommFinalize did not complete ("
                                          << nccl_result_name(r) << " after " << ms_text(timeout_)
                                          << "); aborting the communicator instead; " << where_);
  } catch (const std::exception& e) {
    SLURMDDP_LOG_WARN(kNcclComponent, "while destroying the communicator: " << e.what());
  }
  (void)ncclCommAbort(comm);
}

void NcclCommunicatorImpl::release_cuda_objects() {
  if (stream_ == nullptr && order_event_ == nullptr && barrier_buffer_ == nullptr) return;
  std::unique_ptr<cuda_util::ScopedDevice> guard;
  try {
    guard = std::make_unique<cuda_util::ScopedDevice>(device_, kNcclComponent, where_);
  } catch (const std::exception& e) {
    SLURMDDP_LOG_WARN(kNcclComponent, "while releasing CUDA objects: " << e.what());
  }
  // cudaFree waits for the device; after a drain or an abort nothing of ours runs.
  bool failed = false;
  if (barrier_buffer_ != nullptr) failed |= cudaFree(barrier_buffer_) != cudaSuccess;
  if (order_event_ != nullptr) failed |= cudaEventDestroy(order_event_) != cudaSuccess;
  if (stream_ != nullptr) failed |= cudaStreamDestroy(stream_) != cudaSuccess;
  if (failed) (void)cudaGetLastError();  // our own errors: not left pending for the caller
  barrier_buffer_ = nullptr;
  order_event_ = nullptr;
  stream_ = nullptr;
}

void NcclCommunicatorImpl::watchdog_main() {
  (void)cudaSetDevice(device_);
  const milliseconds period = watchdog_period(timeout_);
  std::unique_lock<std::mutex> lock(watchdog_mu_);
  while (!watchdog_stop_) {
    watchdog_cv_.wait_for(lock, period, [this] { return watchdog_stop_; });
    if (watchdog_stop_) break;
    lock.unlock();
    if (!state_->error()) {
      const std::shared_ptr<NcclWork> pending = state_->drain_completed();
      if (pending && Clock::now() - pending->issued() > timeout_) {
        auto plain = std::make_exception_ptr(TimeoutError(
            "nccl: failed to complete " + pending->what() + ": not finished " + ms_text(timeout_) +
            " after it was issued (a peer rank may have died, stalled or issued another "
            "collective); the watchdog aborted the communicator; " +
            where_ + ", timeout_ms=" + std::to_string(timeout_.count())));
        state_->fail(state_->diagnose("complete " + pending->what(), plain, /*lost=*/false),
                     /*nccl_locked=*/false);
      } else {
        state_->poll_async_error(pending ? pending->what() : std::string("no operation (idle)"));
      }
    }
    lock.lock();
  }
}

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

WorkHandle NcclCommunicatorImpl::allreduce(void* data, size_t count, DataType type, ReduceOp op,
                                           const NcclOrder& order) {
  check_order("allreduce", order);
  check_buffer("allreduce", "data", data, count, type, 1);
  const std::string what = std::string("allreduce of ") + std::to_string(count) + " " +
                           slurmddp::to_string(type) + " (" + slurmddp::to_string(op) + ")";
  const ncclDataType_t t = to_nccl(type);
  ncclRedOp_t nop = ncclSum;
  After after;
  switch (op) {
    case ReduceOp::kSum:
      nop = ncclSum;
      break;
    case ReduceOp::kMin:
      nop = ncclMin;
      break;
    case ReduceOp::kMax:
      nop = ncclMax;
      break;
    case ReduceOp::kAvg:
      if (native_avg_) {
        nop = ncclAvg;
      } else {
        nop = ncclSum;
        const int n = size_;
        after = [data, count, type, n](cudaStream_t s) {
          return launch_divide(data, count, type, n, s);
        };
      }
      break;
  }
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
  ncclRedOp_t nop = ncclSum;
  After after;
  switch (op) {
    case ReduceOp::kSum:
      nop = ncclSum;
      break;
    case ReduceOp::kMin:
      nop = ncclMin;
      break;
    case ReduceOp::kMax:
      nop = ncclMax;
      break;
    case ReduceOp::kAvg:
      if (native_avg_) {
        nop = ncclAvg;
      } else {
        nop = ncclSum;
        const int n = size_;
        after = [recv, count, type, n](cudaStream_t s) {
          return launch_divide(recv, count, type, n, s);
        };
      }
      break;
  }
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

}  // namespace
}  // namespace comm

std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions& options) {
  return comm::make_nccl_communicator(options, nullptr);
}

std::unique_ptr<Communicator> comm::make_nccl_communicator(
    const NcclOptions& options, std::shared_ptr<membership::Membership> group) {
  using comm::where_text;
  const std::string where = where_text(options.rank, options.size, -1);
  if (options.size <= 0 || options.rank < 0 || options.rank >= options.size) {
    throw InvalidArgument("nccl: failed to create a communicator: rank " +
                          std::to_string(options.rank) + " is not in [0, size) for size " +
                          std::to_string(options.size) + "; " + where);
  }
  if (options.timeout.count() <= 0) {
    throw InvalidArgument(
        "nccl: failed to create a communicator: timeout must be positive; "
        "timeout_ms=" +
        std::to_string(options.timeout.count()) + ", " + where);
  }
  if (options.size > 1 && !options.store) {
    throw InvalidArgument(
        "nccl: failed to create a communicator: NcclOptions needs a store to "
        "share NCCL's unique id; " +
        where);
  }
  if (options.store && options.prefix.empty()) {
    throw InvalidArgument("nccl: failed to create a communicator: empty prefix; " + where);
  }
  int visible = 0;
  const cudaError_t e = cudaGetDeviceCount(&visible);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    const EnvReader env = comm::getenv_reader;
    throw CudaError("nccl: failed to count the CUDA devices: " + comm::cuda_error_text(e) + "; " +
                    comm::env_assignment(env, "CUDA_VISIBLE_DEVICES") + ", " + where);
  }
  const comm::DeviceChoice device =
      comm::choose_device(options.device, visible, comm::getenv_reader, where);
  return std::make_unique<comm::NcclCommunicatorImpl>(options, device.ordinal, device.source,
                                                      std::move(group));
}

NcclCommunicator* as_nccl_communicator(Communicator* communicator) {
  return dynamic_cast<NcclCommunicator*>(communicator);
}

}  // namespace slurmddp
