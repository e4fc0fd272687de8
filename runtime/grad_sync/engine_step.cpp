// The engine's step: per-step bookkeeping of ready gradients, and two
// background threads that issue and complete the bucket collectives.
//
// Note [Engine threads]
// mark_ready() only counts: when a bucket's last gradient arrives it marks the
// bucket ready (and on CUDA enqueues the bucket's copy-in, Note [Step hooks]
// in device.h). The launcher thread walks the buckets in plan order: it waits
// until bucket k is ready, prepares it (host: copy in or compress) and issues
// its allreduce — so a bucket that fills early waits for those before it, and
// every rank issues the same collectives in the same order whatever order its
// gradients arrive in. The finisher thread walks the same order, waits for
// each allreduce and finishes the bucket (host: copy out or decompress) while
// later buckets are still communicating. wait() blocks until the finisher is
// through. The communicator runs the collectives on its own thread (Gloo) or
// stream (NCCL), so backward keeps computing meanwhile.
#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <sstream>
#include <string>

#include "grad_sync/device.h"
#include "grad_sync/engine.h"
#include "slurmddp/error.h"
#include "slurmddp/nccl_communicator.h"

namespace slurmddp {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// A collective that needs no communication (a bucket of zero-size parameters).
class DoneWork final : public Work {
 public:
  void wait(std::chrono::milliseconds) override {}
  bool is_completed() override { return true; }
};

}  // namespace

// ---- a step --------------------------------------------------------------------

void GradSync::Impl::mark_ready(size_t index) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (error_) {
    std::rethrow_exception(error_);
  }
  if (index >= params_.size()) {
    fail_locked(std::make_exception_ptr(InvalidArgument(
        "grad_sync: failed to mark a gradient ready: index out of range; index=" +
        std::to_string(index) + ", parameters=" + std::to_string(params_.size()) + where())));
  }
  if (!step_open_) {
    step_open_ = true;
    step_syncs_ = sync_enabled_.load();
    step_start_ = Clock::now();
  }
  if (marked_[index]) {
    fail_locked(std::make_exception_ptr(InvalidArgument(
        "grad_sync: failed to mark a gradient ready: parameter " + std::to_string(index) + " ('" +
        param_name(index) + "') was already marked in this step" + where())));
  }
  marked_[index] = 1;
  ++marked_count_;
  if (!step_syncs_) {
    return;
  }
  const size_t b = locations_[index].bucket;
  if (--pending_[b] > 0) {
    return;
  }
  lock.unlock();
  try {
    device_->bucket_ready(b, buckets_[b].in);
  } catch (...) {
    lock.lock();
    fail_locked(std::current_exception());
  }
  lock.lock();
  ready_[b] = 1;
  ready_at_[b] = Clock::now();
  if (b == launched_) {
    launcher_cv_.notify_one();
  }
}

void GradSync::Impl::wait() {
  const auto entered = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  if (error_) {
    std::rethrow_exception(error_);
  }
  if (marked_count_ < params_.size()) {
    std::ostringstream os;
    os << "grad_sync: failed to finish the step: " << (params_.size() - marked_count_) << " of "
       << params_.size() << " parameters were not marked ready: ";
    size_t listed = 0;
    for (size_t i = 0; i < params_.size() && listed < 8; ++i) {
      if (marked_[i]) {
        continue;
      }
      os << (listed++ ? ", " : "") << i << " ('" << param_name(i) << "')";
    }
    if (params_.size() - marked_count_ > listed) {
      os << ", ...";
    }
    os << where();
    fail_locked(std::make_exception_ptr(InvalidArgument(os.str())));
  }
  if (params_.empty() || !step_syncs_) {
    reset_step_locked();
    return;
  }
  done_cv_.wait(lock, [&] { return error_ || finished_ == buckets_.size(); });
  if (error_) {
    std::rethrow_exception(error_);
  }
  lock.unlock();
  try {
    device_->end_step();
  } catch (...) {
    record_failure(std::current_exception());
    throw;
  }
  lock.lock();
  const auto now = Clock::now();
  stats_.step_seconds = seconds(now - step_start_);
  stats_.wait_seconds = seconds(now - entered);
  stats_.bucket_seconds = bucket_seconds_;
  stats_.buckets.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    stats_.buckets[b] = GradBucketTimeline{seconds(ready_at_[b] - step_start_),
                                           seconds(issued_at_[b] - step_start_),
                                           seconds(done_at_[b] - step_start_)};
  }
  reset_step_locked();
}

void GradSync::Impl::reset_step_locked() {
  step_open_ = false;
  std::fill(marked_.begin(), marked_.end(), 0);
  marked_count_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = buckets_[b].params.size();
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(work_.begin(), work_.end(), nullptr);
  launched_ = 0;
  finished_ = 0;
  bucket_seconds_ = 0;
}

// ---- background threads (Note [Engine threads]) ---------------------------------

void GradSync::Impl::launcher_main() {
  try {
    device_->bind_thread();
  } catch (...) {
    record_failure(std::current_exception());
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    launcher_cv_.wait(lock, [&] {
      return stopping_ || error_ || (launched_ < buckets_.size() && ready_[launched_]);
    });
    if (stopping_ || error_) {
      return;
    }
    const size_t b = launched_;
    lock.unlock();
    WorkHandle work;
    std::exception_ptr failure;
    auto issued = Clock::now();
    try {
      const Bucket& bucket = buckets_[b];
      if (bucket.count == 0) {
        work = std::make_shared<DoneWork>();
      } else {
        device_->before_collective(b, bucket.in);
        issued = Clock::now();
        work = issue_allreduce(b);
      }
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (failure) {
      if (!error_) {
        error_ = failure;
      }
      finisher_cv_.notify_all();
      done_cv_.notify_all();
      return;
    }
    work_[b] = std::move(work);
    issued_at_[b] = issued;
    ++launched_;
    finisher_cv_.notify_one();
  }
}

void GradSync::Impl::finisher_main() {
  try {
    device_->bind_thread();
  } catch (...) {
    record_failure(std::current_exception());
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    finisher_cv_.wait(lock, [&] {
      return stopping_ || error_ || (finished_ < buckets_.size() && work_[finished_]);
    });
    // At destruction, collectives already issued are still waited for (in the
    // destructor), so the finisher may leave.
    if (stopping_ || error_) {
      return;
    }
    const size_t b = finished_;
    WorkHandle work = work_[b];
    lock.unlock();
    std::exception_ptr failure;
    try {
      work->wait(timeout_);
      device_->after_collective(b, buckets_[b].out);
    } catch (...) {
      failure = std::current_exception();
    }
    const auto done = Clock::now();
    lock.lock();
    if (failure) {
      if (!error_) {
        error_ = failure;
      }
      launcher_cv_.notify_all();
      done_cv_.notify_all();
      return;
    }
    bucket_seconds_ += seconds(done - issued_at_[b]);
    done_at_[b] = done;
    ++finished_;
    if (finished_ == buckets_.size()) {
      done_cv_.notify_all();
    }
  }
}

// ---- ordering a bucket's allreduce on the GPU -----------------------------------
//
// Note [NCCL compute stream]
// The NCCL communicator orders each collective after the work queued so far
// on its compute stream (NcclOptions::compute_stream). For a bucket issued
// during backward that would be all of backward the CPU has queued by then:
// the allreduce would start only near the end, hiding nothing. The engine
// used to point the communicator's compute stream at its own communication
// stream for the length of a step. That was wrong twice: bucket b then waited
// for every copy-in queued on that stream so far, later buckets' included
// (lost overlap), and the setting belongs to the communicator, so a
// collective another thread issued meanwhile (between steps of its own, or a
// metric's allreduce) was no longer ordered after the user's stream.
// Now each bucket's allreduce names exactly what it needs, for itself alone:
// the event that completes its wire data (the copy-in's event, or the
// gradient-ready event when backward writes bucket memory directly;
// Device::collective_event), passed as NcclOrder::after_event. The
// communicator's compute stream is never touched. Other CUDA communicators
// get plain allreduces: before_collective has already waited, on the host,
// for that same event (Note [Ordering with the communicator] in
// cuda_device.cpp), which the NCCL path keeps too.

WorkHandle GradSync::Impl::issue_allreduce(size_t b) {
  const Bucket& bucket = buckets_[b];
  if (nccl_ != nullptr) {
    if (void* event = device_->collective_event(b, bucket.in)) {
      return nccl_->allreduce(bucket.wire, bucket.count, bucket.wire_type, ReduceOp::kAvg,
                              NcclOrder::after_event(static_cast<CudaEvent>(event)));
    }
  }
  return comm_->allreduce(bucket.wire, bucket.count, bucket.wire_type, ReduceOp::kAvg);
}

// ---- errors --------------------------------------------------------------------

void GradSync::Impl::record_failure(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_) {
    error_ = std::move(error);
  }
  launcher_cv_.notify_all();
  finisher_cv_.notify_all();
  done_cv_.notify_all();
}

void GradSync::Impl::fail_locked(std::exception_ptr error) {
  if (!error_) {
    error_ = std::move(error);
  }
  launcher_cv_.notify_all();
  finisher_cv_.notify_all();
  done_cv_.notify_all();
  std::rethrow_exception(error_);
}

}  // namespace slurmddp
