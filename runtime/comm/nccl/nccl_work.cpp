#include "comm/nccl/nccl_work.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <utility>

#include "comm/nccl/nccl_util.h"
#include "common/cuda_device_guard.h"
#include "common/log.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {

NcclState::NcclState(std::string where, int device) : where_(std::move(where)), device_(device) {}

std::exception_ptr NcclState::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

std::exception_ptr NcclState::error_for(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  return (error_ && seq != 0 && seq >= failed_from_) ? error_ : nullptr;
}

std::exception_ptr NcclState::observe_complete(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_ && seq != 0 && seq >= failed_from_) return error_;
  completed_through_ = std::max(completed_through_, seq);
  return nullptr;
}

std::exception_ptr NcclState::fail(std::exception_ptr error, bool nccl_locked) {
  std::exception_ptr in_force;
  std::deque<std::shared_ptr<NcclWork>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) {
      error_ = std::move(error);
      failed_from_ = completed_through_ + 1;
    }
    in_force = error_;
    dropped.swap(in_flight_);
    abort_requested_.store(true, std::memory_order_release);
  }
  if (nccl_locked) {
    abort_locked(in_force);
  } else {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    abort_locked(in_force);
  }
  return in_force;
}

void NcclState::abort_locked(const std::exception_ptr& cause) {
  if (comm_ == nullptr) return;
  std::string why = "?";
  try {
    std::rethrow_exception(cause);
  } catch (const std::exception& e) {
    why = e.what();
  } catch (...) {
  }
  SLURMDDP_LOG_ERROR(kNcclComponent,
                     "aborting the NCCL communicator (ncclCommAbort) after: " << why);
  std::unique_ptr<cuda_util::ScopedDevice> guard;
  try {
    guard = std::make_unique<cuda_util::ScopedDevice>(device_, kNcclComponent, where_);
  } catch (const std::exception& e) {  // abort anyway: NCCL selects its device itself
    SLURMDDP_LOG_WARN(kNcclComponent, "before ncclCommAbort: " << e.what());
  }
  const ncclResult_t r = ncclCommAbort(comm_);
  comm_ = nullptr;
  if (r != ncclSuccess && r != ncclInProgress) {
    SLURMDDP_LOG_WARN(kNcclComponent, "ncclCommAbort returned " << nccl_result_name(r) << " ("
                                                                << ncclGetErrorString(r) << "); "
                                                                << where_);
  }
}

std::exception_ptr NcclState::diagnose(const std::string& op, const std::exception_ptr& plain,
                                       bool lost) const {
  if (!diagnoser_ || error()) return plain;  // broken already: that error stands
  return diagnoser_(op, plain, lost);
}

void NcclState::poll_async_error(const std::string& what) {
  std::unique_lock<std::mutex> lock(nccl_mu_, std::try_to_lock);
  if (!lock.owns_lock() || comm_ == nullptr) return;
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) state = r;
  if (state == ncclSuccess || state == ncclInProgress) return;
  // A peer's failure shows as NCCL's remote or system error (a closed or
  // failing connection): Note [NCCL failure notes].
  const bool peer = state == ncclRemoteError || state == ncclSystemError;
  auto plain = nccl_failure("complete " + what + " (NCCL reported an asynchronous error)", state,
                            comm_, where_);
  fail(peer ? diagnose("complete " + what, plain, /*lost=*/true) : plain, /*nccl_locked=*/true);
}

void NcclState::push(std::shared_ptr<NcclWork> work) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_) in_flight_.push_back(std::move(work));
}

std::shared_ptr<NcclWork> NcclState::drain_completed() {
  for (;;) {
    std::shared_ptr<NcclWork> front;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (in_flight_.empty()) return nullptr;
      front = in_flight_.front();
    }
    if (front->poll() == NcclWork::Poll::kPending) return front;
    std::lock_guard<std::mutex> lock(mu_);
    if (!in_flight_.empty() && in_flight_.front() == front) in_flight_.pop_front();
  }
}

bool NcclState::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_.empty();
}

NcclWork::NcclWork(std::string what, uint64_t seq, std::shared_ptr<NcclState> state,
                   cudaEvent_t end, Clock::time_point issued,
                   std::chrono::milliseconds default_timeout)
    : Work(default_timeout),
      what_(std::move(what)),
      seq_(seq),
      state_(std::move(state)),
      end_(end),
      issued_(issued) {
  if (end_ == nullptr) done_.store(true);
}

NcclWork::~NcclWork() {
  if (end_ == nullptr) return;
  try {
    cuda_util::ScopedDevice guard(state_->device(), kNcclComponent, state_->where());
    (void)cudaEventDestroy(end_);
  } catch (const std::exception& e) {
    SLURMDDP_LOG_WARN(kNcclComponent, "while releasing a Work handle: " << e.what());
  }
}

NcclWork::Poll NcclWork::poll() {
  // Once seen complete, always complete: a later failure starts after it.
  if (done_.load(std::memory_order_acquire)) return Poll::kDone;
  if (state_->error_for(seq_)) return Poll::kFailed;
  std::unique_ptr<cuda_util::ScopedDevice> guard;
  try {
    guard = std::make_unique<cuda_util::ScopedDevice>(state_->device(), kNcclComponent,
                                                      state_->where());
  } catch (...) {
    state_->fail(std::current_exception(), /*nccl_locked=*/false);
    return Poll::kFailed;
  }
  const cudaError_t q = cudaEventQuery(end_);
  if (q == cudaErrorNotReady) return Poll::kPending;
  if (q == cudaSuccess) {
    if (state_->observe_complete(seq_)) return Poll::kFailed;
    done_.store(true, std::memory_order_release);
    return Poll::kDone;
  }
  (void)cudaGetLastError();
  state_->fail(std::make_exception_ptr(CudaError(
                   "nccl: failed to complete " + what_ + ": cudaEventQuery returned " +
                   cuda_error_text(q) + "; the communicator is aborted; " + state_->where())),
               /*nccl_locked=*/false);
  return Poll::kFailed;
}

void NcclWork::wait(std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  // Beyond a year means "forever" (and keeps start + timeout from overflowing).
  const bool forever = timeout > std::chrono::hours(24 * 365);
  const auto deadline = forever ? Clock::time_point::max() : start + timeout;
  auto last_async_poll = start;
  int spins = 0;
  auto nap = std::chrono::microseconds(10);
  for (;;) {
    const Poll p = poll();
    if (p == Poll::kDone) return;
    if (p == Poll::kFailed) {
      if (auto e = state_->error_for(seq_)) std::rethrow_exception(e);
      return;  // another thread saw it complete before the failure was recorded
    }
    const auto now = Clock::now();
    if (now - last_async_poll >= std::chrono::milliseconds(1)) {
      state_->poll_async_error(what_);
      last_async_poll = now;
      continue;
    }
    if (now >= deadline) {
      auto timed_out = std::make_exception_ptr(
          TimeoutError("nccl: failed to complete " + what_ + ": Work::wait gave up after " +
                       std::to_string(timeout.count()) +
                       " ms (a peer rank may have died, stalled or issued another collective); the "
                       "communicator is aborted; " +
                       state_->where() + ", timeout_ms=" + std::to_string(timeout.count())));
      state_->fail(state_->diagnose("complete " + what_, timed_out, /*lost=*/false),
                   /*nccl_locked=*/false);
      if (auto e = state_->error_for(seq_)) std::rethrow_exception(e);
      return;  // it completed just before the failure was recorded
    }
    // Note [Waiting without spinning]: a few yields catch short operations
    // with little latency; then sleeps grow to 1 ms, so a long wait costs the
    // CPU about a thousand wake-ups per second.
    if (spins < 64) {
      ++spins;
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::min<std::chrono::microseconds>(
          nap, std::chrono::duration_cast<std::chrono::microseconds>(deadline - now)));
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }
}

bool NcclWork::is_completed() {
  return poll() != Poll::kPending;
}

}  // namespace slurmddp::comm
