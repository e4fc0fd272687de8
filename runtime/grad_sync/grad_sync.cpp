// The engine: per-step bookkeeping of ready gradients, and two background
// threads that issue and complete the bucket collectives.
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
#include "slurmddp/grad_sync.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/dtype.h"
#include "common/log.h"
#include "grad_sync/bucket_plan.h"
#include "grad_sync/device.h"
#include "grad_sync/layout.h"
#include "slurmddp/error.h"
#include "slurmddp/nccl_communicator.h"

namespace slurmddp {

const char* to_string(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kFloat16:
      return "float16";
    case Compression::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

namespace {

using grad_sync::Device;
using grad_sync::kNoTransfer;
using grad_sync::Segment;
using grad_sync::Transfer;
using Clock = std::chrono::steady_clock;

constexpr const char* kComponent = "grad_sync";

DataType wire_type_for(DataType bucket, Compression c) {
  if (bucket != DataType::kFloat32 && bucket != DataType::kFloat64) {
    return bucket;
  }
  switch (c) {
    case Compression::kNone:
      return bucket;
    case Compression::kFloat16:
      return DataType::kFloat16;
    case Compression::kBFloat16:
      return DataType::kBFloat16;
  }
  return bucket;
}

const char* kind_name(DeviceKind k) {
  return k == DeviceKind::kHost ? "host" : "cuda";
}

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

// Hidden like the rest of the internals (Note [Exported symbols]).
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
  struct Bucket {
    DataType dtype = DataType::kFloat32;
    DataType wire_type = DataType::kFloat32;
    size_t count = 0;
    void* storage = nullptr;  // bucket dtype: views, or copies without compression
    void* wire = nullptr;     // what the allreduce runs on
    size_t in = kNoTransfer;
    size_t out = kNoTransfer;
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
  std::unique_ptr<Device> device_;
  std::vector<Bucket> buckets_;
  std::vector<GradBucketInfo> infos_;
  std::vector<grad_sync::ParamLocation> locations_;

  std::atomic<bool> sync_enabled_{true};

  // Step state, guarded by mutex_ (Note [Engine threads]).
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

  // Note [NCCL compute stream]: the NCCL surface of comm_, or null.
  NcclCommunicator* nccl_ = nullptr;
};

// ---- construction --------------------------------------------------------------

GradSync::Impl::Impl(std::shared_ptr<Communicator> comm, std::vector<GradParameter> params,
                     const GradSyncOptions& options)
    : comm_(std::move(comm)),
      params_(std::move(params)),
      options_(options),
      timeout_(options.timeout.count() > 0 ? options.timeout
               : comm_                     ? comm_->timeout()
                                           : std::chrono::milliseconds(0)) {
  if (!comm_) {
    throw InvalidArgument("grad_sync: failed to create the synchronizer: no communicator");
  }
  // Local validation and planning. A failure here is not thrown at once: the
  // layout check tells the other ranks first (Note [Layout check]).
  std::string local_error = validate_locally();
  grad_sync::BucketPlan plan;
  if (local_error.empty()) {
    try {
      std::vector<grad_sync::PlanParam> shapes;
      shapes.reserve(params_.size());
      for (const auto& p : params_) {
        shapes.push_back({p.count, p.dtype, p.device, 0});
      }
      plan = grad_sync::plan_buckets(
          shapes, grad_sync::PlanOptions{options_.first_bucket_bytes, options_.bucket_cap_bytes});
    } catch (const InvalidArgument& e) {
      local_error = std::string(e.what()) + where();
    }
  }
  if (comm_->device() == DeviceKind::kCuda) {
    // The buckets, streams and events live on the communicator's device, not
    // on whatever device the constructing thread has current.
    nccl_ = as_nccl_communicator(comm_.get());
    device_ = grad_sync::make_cuda_device(nccl_ != nullptr ? nccl_->cuda_device() : -1,
                                          plan.buckets.size(), options_.cuda_stream);
  } else {
    device_ = grad_sync::make_host_device();
  }
  if (local_error.empty()) {
    try {
      for (size_t i = 0; i < params_.size(); ++i) {
        const auto& p = params_[i];
        const size_t bytes = p.count * grad_sync::dtype_bytes(p.dtype);
        const std::string what = "parameter " + std::to_string(i) + " ('" + param_name(i) + "')";
        if (p.grad != nullptr) {
          device_->check_pointer(p.grad, bytes, what + " grad");
        }
        if (p.data != nullptr && options_.broadcast_parameters) {
          device_->check_pointer(p.data, bytes, what + " data");
        }
      }
    } catch (const InvalidArgument& e) {
      local_error = std::string(e.what()) + where();
    }
  }

  grad_sync::LayoutDescription layout;
  layout.first_bucket_bytes = options_.first_bucket_bytes;
  layout.bucket_cap_bytes = options_.bucket_cap_bytes;
  layout.compression = options_.compression;
  for (const auto& p : params_) {
    layout.params.push_back({p.name, p.count, p.dtype, p.device});
  }
  grad_sync::check_layout(*comm_, *device_, layout, local_error, timeout_);

  build_buckets(plan);
  if (options_.broadcast_parameters) {
    broadcast_parameters();
  }

  const size_t nb = buckets_.size();
  marked_.assign(params_.size(), 0);
  ready_.assign(nb, 0);
  work_.assign(nb, nullptr);
  ready_at_.assign(nb, Clock::time_point{});
  issued_at_.assign(nb, Clock::time_point{});
  done_at_.assign(nb, Clock::time_point{});
  pending_.resize(nb);
  for (size_t b = 0; b < nb; ++b) {
    pending_[b] = buckets_[b].params.size();
  }
  launcher_ = std::thread([this] { launcher_main(); });
  finisher_ = std::thread([this] { finisher_main(); });
  SLURMDDP_LOG_DEBUG(kComponent,
                     "ready: parameters=" << params_.size() << ", buckets=" << nb
                                          << ", compression=" << to_string(options_.compression)
                                          << ", views=" << options_.gradient_as_bucket_view
                                          << ", device=" << kind_name(comm_->device()));
}

std::string GradSync::Impl::where() const {
  return "; rank=" + std::to_string(comm_->rank()) + ", size=" + std::to_string(comm_->size());
}

std::string GradSync::Impl::param_name(size_t i) const {
  return params_[i].name.empty() ? "#" + std::to_string(i) : params_[i].name;
}

std::string GradSync::Impl::validate_locally() {
  const std::string head = "grad_sync: failed to register parameters: ";
  for (size_t i = 0; i < params_.size(); ++i) {
    const GradParameter& p = params_[i];
    const std::string who = "parameter " + std::to_string(i) + " ('" + param_name(i) + "') ";
    if (!common::is_floating(p.dtype)) {
      return head + who +
             "has a dtype gradients cannot have (float32, float64, float16, "
             "bfloat16); dtype=" +
             std::to_string(static_cast<int>(p.dtype)) + where();
    }
    if (p.device != comm_->device()) {
      return head + who +
             "is not where the communicator's buffers live; device=" + kind_name(p.device) +
             ", communicator=" + comm_->backend() + " (" + kind_name(comm_->device()) + ")" +
             where();
    }
    if (p.count == 0) {
      continue;
    }
    if (options_.gradient_as_bucket_view && p.grad != nullptr) {
      return head + who +
             "has a grad buffer although gradients live in bucket memory "
             "(gradient_as_bucket_view): use GradSync::gradient(i); grad=set" +
             where();
    }
    if (!options_.gradient_as_bucket_view && p.grad == nullptr) {
      return head + who + "has no grad buffer; grad=null, count=" + std::to_string(p.count) +
             where();
    }
    if (options_.broadcast_parameters && p.data == nullptr) {
      return head + who +
             "has no data to broadcast from rank 0; data=null, count=" + std::to_string(p.count) +
             where();
    }
  }
  if (options_.compression != Compression::kNone && options_.compression != Compression::kFloat16 &&
      options_.compression != Compression::kBFloat16) {
    return head + "unknown compression; compression=" +
           std::to_string(static_cast<int>(options_.compression)) + where();
  }
  return "";
}

void GradSync::Impl::build_buckets(const grad_sync::BucketPlan& plan) {
  locations_ = plan.locations;
  for (const auto& pb : plan.buckets) {
    Bucket b;
    b.dtype = pb.dtype;
    b.wire_type = wire_type_for(pb.dtype, options_.compression);
    b.count = pb.count;
    b.params = pb.params;
    b.offsets = pb.offsets;
    const size_t es = grad_sync::dtype_bytes(b.dtype);
    const size_t wes = grad_sync::dtype_bytes(b.wire_type);
    const bool compressed = b.wire_type != b.dtype;
    const bool views = options_.gradient_as_bucket_view;
    if (views || !compressed) {
      b.storage = device_->allocate(b.count * es);
    }
    b.wire = compressed ? device_->allocate(b.count * wes) : b.storage;

    if (views && compressed) {
      // The whole bucket, padding included (zeros), in one segment each way.
      b.in = device_->add_transfer(Transfer{b.dtype, b.wire_type, {{b.storage, b.wire, b.count}}});
      b.out = device_->add_transfer(Transfer{b.wire_type, b.dtype, {{b.wire, b.storage, b.count}}});
    } else if (!views) {
      Transfer in{b.dtype, b.wire_type, {}};
      Transfer out{b.wire_type, b.dtype, {}};
      for (size_t s = 0; s < b.params.size(); ++s) {
        const GradParameter& p = params_[b.params[s]];
        if (p.count == 0) {
          continue;
        }
        void* slot = static_cast<uint8_t*>(b.wire) + b.offsets[s] * wes;
        in.segments.push_back(Segment{p.grad, slot, p.count});
        out.segments.push_back(Segment{slot, p.grad, p.count});
      }
      if (!in.segments.empty()) {
        b.in = device_->add_transfer(std::move(in));
        b.out = device_->add_transfer(std::move(out));
      }
    }
    GradBucketInfo info;
    info.dtype = b.dtype;
    info.device = pb.device;
    info.params = b.params;
    info.count = b.count;
    info.wire_bytes = b.count * wes;
    infos_.push_back(std::move(info));
    buckets_.push_back(std::move(b));
  }
}

// Rank 0's parameter values to every rank, one broadcast per bucket through a
// staging buffer in the bucket's dtype (so the bucket memory stays zero for
// gradient views).
void GradSync::Impl::broadcast_parameters() {
  size_t largest = 0;
  for (const auto& b : buckets_) {
    largest = std::max(largest, b.count * grad_sync::dtype_bytes(b.dtype));
  }
  if (largest == 0) {
    return;
  }
  void* staging = device_->allocate(largest);
  const bool root = comm_->rank() == 0;
  try {
    for (size_t bi = 0; bi < buckets_.size(); ++bi) {
      const Bucket& b = buckets_[bi];
      if (b.count == 0) {
        continue;
      }
      const size_t es = grad_sync::dtype_bytes(b.dtype);
      Transfer in{b.dtype, b.dtype, {}};
      Transfer out{b.dtype, b.dtype, {}};
      for (size_t s = 0; s < b.params.size(); ++s) {
        const GradParameter& p = params_[b.params[s]];
        if (p.count == 0) {
          continue;
        }
        void* slot = static_cast<uint8_t*>(staging) + b.offsets[s] * es;
        in.segments.push_back(Segment{p.data, slot, p.count});
        out.segments.push_back(Segment{slot, p.data, p.count});
      }
      if (root) {
        device_->run_blocking(device_->add_transfer(std::move(in)));
      }
      comm_->broadcast(staging, b.count, b.dtype, 0)->wait(timeout_);
      if (!root) {
        device_->run_blocking(device_->add_transfer(std::move(out)));
      }
    }
  } catch (...) {
    device_->release(staging);
    throw;
  }
  device_->release(staging);
  device_->end_step();  // CUDA: the compute stream sees the new values
}

GradSync::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  launcher_cv_.notify_all();
  finisher_cv_.notify_all();
  if (launcher_.joinable()) {
    launcher_.join();
  }
  if (finisher_.joinable()) {
    finisher_.join();
  }
  // Collectives issued but not finished still use bucket memory: let them end
  // (a broken communicator fails them at once).
  for (size_t b = finished_; b < work_.size(); ++b) {
    if (!work_[b]) {
      continue;
    }
    try {
      work_[b]->wait(timeout_);
    } catch (const std::exception& e) {
      SLURMDDP_LOG_DEBUG(kComponent, "at destruction, bucket " << b << ": " << e.what());
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

void* GradSync::Impl::gradient(size_t index) const {
  if (!options_.gradient_as_bucket_view) {
    throw InvalidArgument(
        "grad_sync: failed to give a gradient view: gradients are not bucket views "
        "(set gradient_as_bucket_view); index=" +
        std::to_string(index) + where());
  }
  if (index >= params_.size()) {
    throw InvalidArgument(
        "grad_sync: failed to give a gradient view: index out of range; "
        "index=" +
        std::to_string(index) + ", parameters=" + std::to_string(params_.size()) + where());
  }
  if (params_[index].count == 0) {
    return nullptr;
  }
  const auto& loc = locations_[index];
  const Bucket& b = buckets_[loc.bucket];
  return static_cast<uint8_t*>(b.storage) + b.offsets[loc.slot] * grad_sync::dtype_bytes(b.dtype);
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

// ---- the public face ------------------------------------------------------------

GradSync::GradSync(std::shared_ptr<Communicator> comm, std::vector<GradParameter> params,
                   const GradSyncOptions& options)
    : impl_(std::make_unique<Impl>(std::move(comm), std::move(params), options)) {}

GradSync::~GradSync() = default;

void GradSync::mark_ready(size_t index) {
  impl_->mark_ready(index);
}
void GradSync::wait() {
  impl_->wait();
}
void GradSync::set_sync_enabled(bool enabled) noexcept {
  impl_->set_sync_enabled(enabled);
}
bool GradSync::sync_enabled() const noexcept {
  return impl_->sync_enabled();
}
void* GradSync::gradient(size_t index) const {
  return impl_->gradient(index);
}
size_t GradSync::num_parameters() const {
  return impl_->num_parameters();
}
const std::vector<GradBucketInfo>& GradSync::buckets() const {
  return impl_->buckets();
}
GradSyncStepStats GradSync::last_step_stats() const {
  return impl_->last_step_stats();
}

}  // namespace slurmddp
