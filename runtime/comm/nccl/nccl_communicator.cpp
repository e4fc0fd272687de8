// The NCCL communicator (see include/slurmddp/nccl_communicator.h): creation,
// the watchdog and destruction. Issuing the collectives: nccl_collectives.cpp.
#include "slurmddp/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "comm/nccl/nccl_communicator_impl.h"
#include "comm/nccl/nccl_rendezvous.h"
#include "comm/nccl/nccl_rules.h"
#include "comm/nccl/nccl_util.h"
#include "comm/over_membership.h"
#include "common/cuda_device_guard.h"
#include "common/log.h"
#include "common/quote.h"
#include "membership/notes.h"
#include "slurmddp/error.h"

namespace slurmddp {
namespace comm {
namespace {

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

// Deadlines are computed as now + timeout in nanoseconds: longer timeouts
// (e.g. milliseconds::max() for "forever") count as ten years.
milliseconds bounded(milliseconds timeout) {
  return std::min(timeout, milliseconds(std::chrono::hours(24 * 3650)));
}

}  // namespace

NcclCommunicatorImpl::NcclCommunicatorImpl(const NcclOptions& options, int device,
                                           const std::string& device_source,
                                           std::shared_ptr<membership::Membership> group)
    : rank_(options.rank.value_or(-1)),
      size_(options.size.value_or(0)),
      device_(device),
      timeout_(bounded(options.timeout)),
      finalize_timeout_(finalize_limit(timeout_, options.finalize_timeout)),
      where_(where_text(rank_, size_, device)),
      state_(std::make_shared<NcclState>(where_, device)),
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
  ctx.grace = membership::diagnosis_grace(timeout_);
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

// Note [Finalize bound]: destruction first lets the operations in flight
// finish (bounded by the operation timeout, as each of them is), then asks NCCL
// to finalize: flush its work with the peers. A healthy group finalizes in
// milliseconds; when a peer has gone, finalize never completes, and waiting the
// whole operation timeout (5 minutes by default) would hold every surviving
// rank at exit. So finalize has its own, short limit (finalize_timeout); past
// it the communicator is aborted, which is what a dead peer calls for anyway.
NcclCommunicatorImpl::~NcclCommunicatorImpl() {
  drain_in_flight(Clock::now() + timeout_);
  stop_watchdog();
  finalize_nccl(Clock::now() + finalize_timeout_);
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
                                          << nccl_result_name(r) << " after "
                                          << ms_text(finalize_timeout_)
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

}  // namespace comm

std::unique_ptr<NcclCommunicator> make_nccl_communicator(const NcclOptions& options) {
  return comm::make_nccl_communicator(options, nullptr);
}

std::unique_ptr<NcclCommunicator> comm::make_nccl_communicator(
    const NcclOptions& options, std::shared_ptr<membership::Membership> group) {
  using comm::where_text;
  const std::string where = where_text(options.rank.value_or(-1), options.size.value_or(0), -1);
  if (!options.rank || !options.size) {
    throw InvalidArgument(
        "nccl: failed to create a communicator: NcclOptions::rank and NcclOptions::size are "
        "required; rank=" +
        common::optional_text(options.rank) + ", size=" + common::optional_text(options.size) +
        "; " + where);
  }
  if (*options.size <= 0 || *options.rank < 0 || *options.rank >= *options.size) {
    throw InvalidArgument("nccl: failed to create a communicator: rank " +
                          std::to_string(*options.rank) + " is not in [0, size) for size " +
                          std::to_string(*options.size) + "; " + where);
  }
  if (options.timeout.count() <= 0) {
    throw InvalidArgument(
        "nccl: failed to create a communicator: timeout must be positive; "
        "timeout_ms=" +
        std::to_string(options.timeout.count()) + ", " + where);
  }
  if (*options.size > 1 && !options.store) {
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
