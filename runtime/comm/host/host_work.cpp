#include "comm/host/host_work.h"

#include <utility>

#include "slurmddp/error.h"

namespace slurmddp::comm {

std::exception_ptr BreakState::break_with(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(m_);
  if (!error_) error_ = std::move(error);
  return error_;
}

std::exception_ptr BreakState::error() const {
  std::lock_guard<std::mutex> lock(m_);
  return error_;
}

HostWork::HostWork(std::string what, int rank, std::shared_ptr<BreakState> state,
                   std::chrono::milliseconds default_timeout, std::string backend)
    : Work(default_timeout),
      what_(std::move(what)),
      backend_(std::move(backend)),
      rank_(rank),
      state_(std::move(state)) {}

void HostWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(m_);
  if (!done_ && !error_) {
    // Beyond a year means "forever" (and keeps now() + timeout from overflowing).
    if (timeout > std::chrono::hours(24 * 365)) {
      cv_.wait(lock, [&] { return done_; });
    } else if (timeout.count() > 0) {
      cv_.wait_for(lock, timeout, [&] { return done_; });
    }
  }
  if (error_) std::rethrow_exception(error_);
  if (done_) return;
  auto timed_out = std::make_exception_ptr(
      TimeoutError(backend_ + ": failed to wait for " + what_ + ": not completed after " +
                   std::to_string(timeout.count()) + " ms; the communicator is now broken; rank=" +
                   std::to_string(rank_) + ", timeout_ms=" + std::to_string(timeout.count())));
  lock.unlock();  // the diagnosis talks to the store for up to the grace period
  std::exception_ptr reported =
      state_->error() ? state_->error() : state_->diagnose_timeout(what_, timed_out);
  reported = state_->break_with(std::move(reported));
  lock.lock();
  if (!error_) error_ = reported;
  std::rethrow_exception(error_);
}

bool HostWork::is_completed() {
  std::lock_guard<std::mutex> lock(m_);
  return done_;
}

void HostWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (!error_) error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

}  // namespace slurmddp::comm
