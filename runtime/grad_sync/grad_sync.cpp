// The public GradSync (include/slurmddp/grad_sync.h): a thin face that
// forwards to the engine, GradSync::Impl (engine.h). NoSyncScope is inline in
// the public header, on top of set_sync_enabled.
#include "slurmddp/grad_sync.h"

#include <memory>
#include <utility>

#include "grad_sync/arguments.h"
#include "grad_sync/bucket_plan.h"
#include "grad_sync/engine.h"
#include "slurmddp/error.h"

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

// ---- the public face ------------------------------------------------------------

GradSync::GradSync(std::shared_ptr<Communicator> comm, std::vector<GradParameter> params,
                   const GradSyncOptions& options)
    : impl_(std::make_unique<Impl>(std::move(comm), std::move(params), options)) {}

GradSync::~GradSync() = default;

void GradSync::check_arguments(const std::vector<GradParameter>& params,
                               const GradSyncOptions& options, Backend backend, DeviceKind device) {
  const std::string bad_timeout = grad_sync::timeout_error(options, "the communicator's");
  if (!bad_timeout.empty()) throw InvalidArgument(bad_timeout);
  const std::string error = grad_sync::argument_error(params, options, backend, device, "");
  if (!error.empty()) throw InvalidArgument(error);
  std::vector<grad_sync::PlanParam> shapes;
  shapes.reserve(params.size());
  for (const auto& p : params) shapes.push_back({p.count, p.dtype, p.device, 0});
  grad_sync::plan_buckets(
      shapes, grad_sync::PlanOptions{options.first_bucket_bytes, options.bucket_cap_bytes});
}

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
