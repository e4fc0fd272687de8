// Building the engine: local validation of the registered parameters, the
// bucket plan turned into bucket memory and transfers, the cross-rank layout
// check (Note [Layout check] in layout.h), the initial broadcast of rank 0's
// parameters, gradient views into bucket memory, and teardown.
#include <algorithm>
#include <string>

#include "common/log.h"
#include "grad_sync/arguments.h"
#include "grad_sync/bucket_plan.h"
#include "grad_sync/device.h"
#include "grad_sync/engine.h"
#include "grad_sync/layout.h"
#include "slurmddp/error.h"
#include "slurmddp/nccl_communicator.h"

namespace slurmddp {

namespace {

using grad_sync::Segment;
using grad_sync::Transfer;

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

}  // namespace

// ---- construction --------------------------------------------------------------

GradSync::Impl::Impl(std::shared_ptr<Communicator> comm, std::vector<GradParameter> params,
                     const GradSyncOptions& options)
    : comm_(std::move(comm)),
      params_(std::move(params)),
      options_(options),
      timeout_(options.timeout ? *options.timeout
               : comm_         ? comm_->timeout()
                               : std::chrono::milliseconds(0)) {
  if (!comm_) {
    throw InvalidArgument("grad_sync: failed to create the synchronizer: no communicator");
  }
  const std::string bad_timeout = grad_sync::timeout_error(
      options, "the communicator's (" + std::to_string(comm_->timeout().count()) + "ms)");
  if (!bad_timeout.empty()) throw InvalidArgument(bad_timeout);
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
                                          plan.buckets.size(), options_.cuda_stream, comm_->rank());
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
                                          << ", device=" << to_string(comm_->device()));
}

std::string GradSync::Impl::where() const {
  return "; rank=" + std::to_string(comm_->rank()) + ", size=" + std::to_string(comm_->size());
}

std::string GradSync::Impl::param_name(size_t i) const {
  return grad_sync::parameter_name(params_, i);
}

std::string GradSync::Impl::validate_locally() {
  return grad_sync::argument_error(params_, options_, comm_->backend(), comm_->device(), where());
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

// ---- teardown ------------------------------------------------------------------

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

// ---- gradient views ------------------------------------------------------------

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

}  // namespace slurmddp
