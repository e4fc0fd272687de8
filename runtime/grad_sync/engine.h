// GradSync::Impl, the engine behind the public GradSync, declared for the
// files that implement it:
//   engine_setup.cpp  construction: local validation, bucket building, the
//                     cross-rank layout check (layout.h), the initial
//                     broadcast, gradient views, and teardown;
//   engine_step.cpp   a step: mark_ready, the launcher and finisher threads
//                     (Note [Engine threads]), wait, and failure handling;
//   grad_sync.cpp     the public GradSync, forwarding to the engine.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "grad_sync/bucket_plan.h"
#include "grad_sync/device.h"
#include "slurmddp/grad_sync.h"
#include "slurmddp/nccl_communicator.h"

namespace slurmddp {

// Hidden like the rest of the internals (Note [Exported symbols] in
// runtime/meson.build).
class __attribute__((visibility("hidden"))) GradSync::Impl {
 public:
  Impl(std::shared_ptr<Communicator> comm, std::vector<GradParameter> params,
       const GradSyncOptions& options);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  void mark_ready(size_t index);
  void wait();
  void set_sync_enabled(bool enabled) { sync_enabled_.store(enabled); }
  bool sync_enabled() const { return sync_enabled_.load(); }
  void* gradient(size_t index) const;
  size_t num_parameters() const { return params_.size(); }
  const std::vector<GradBucketInfo>& buckets() const { return infos_; }
  GradSyncStepStats last_step_stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  using Clock = std::chrono::steady_clock;

  struct Bucket {
    DataType dtype = DataType::kFloat32;
    DataType wire_type = DataType::kFloat32;
    size_t count = 0;
    void* storage = nullptr;  // bucket dtype: views, or copies without compression
    void* wire = nullptr;     // what the allreduce runs on
    size_t in = grad_sync::kNoTransfer;
    size_t out = grad_sync::kNoTransfer;
    std::vector<size_t> params;
    std::vector<size_t> offsets;
  };

  std::string where() const;
  std::string param_name(size_t i) const;
  std::string validate_locally();
  void build_buckets(const grad_sync::BucketPlan& plan);
  void broadcast_parameters();
  [[noreturn]] void fail_locked(std::exception_ptr error);
  void record_failure(std::exception_ptr error);
  void reset_step_locked();
  void launcher_main();
  void finisher_main();
  WorkHandle issue_allreduce(size_t b);

  const std::shared_ptr<Communicator> comm_;
  const std::vector<GradParameter> params_;
  const GradSyncOptions options_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<grad_sync::Device> device_;
  std::vector<Bucket> buckets_;
  std::vector<GradBucketInfo> infos_;
  std::vector<grad_sync::ParamLocation> locations_;

  std::atomic<bool> sync_enabled_{true};

  // Step state, guarded by mutex_ (Note [Engine threads] in engine_step.cpp).
  mutable std::mutex mutex_;
  std::condition_variable launcher_cv_;
  std::condition_variable finisher_cv_;
  std::condition_variable done_cv_;
  bool step_open_ = false;
  bool step_syncs_ = true;
  Clock::time_point step_start_;
  std::vector<char> marked_;
  size_t marked_count_ = 0;
  std::vector<size_t> pending_;   // per bucket: parameters not yet marked
  std::vector<char> ready_;       // per bucket: all marked (and bucket_ready done)
  std::vector<WorkHandle> work_;  // per bucket: issued collective
  std::vector<Clock::time_point> ready_at_;
  std::vector<Clock::time_point> issued_at_;
  std::vector<Clock::time_point> done_at_;
  size_t launched_ = 0;  // buckets issued in this step (launcher)
  size_t finished_ = 0;  // buckets finished in this step (finisher)
  double bucket_seconds_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
  GradSyncStepStats stats_;

  std::thread launcher_;
  std::thread finisher_;

  // Note [NCCL compute stream] (engine_step.cpp): the NCCL surface of comm_,
  // or null.
  NcclCommunicator* nccl_ = nullptr;
};

}  // namespace slurmddp
