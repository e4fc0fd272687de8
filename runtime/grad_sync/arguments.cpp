// GradSync's checks before the communicator and the device (arguments.h).
#include "grad_sync/arguments.h"

#include "common/dtype.h"

namespace slurmddp::grad_sync {

std::string parameter_name(const std::vector<GradParameter>& params, size_t i) {
  return params[i].name.empty() ? "#" + std::to_string(i) : params[i].name;
}

std::string timeout_error(const GradSyncOptions& options, const std::string& fallback) {
  if (!options.timeout || options.timeout->count() > 0) return "";
  return "grad_sync: failed to create the synchronizer: GradSyncOptions::timeout=" +
         std::to_string(options.timeout->count()) +
         "ms; expected a positive duration, or unset for " + fallback;
}

namespace {

// What is wrong with parameter i alone, or "".
std::string parameter_error(const std::vector<GradParameter>& params, size_t i,
                            const GradSyncOptions& options, Backend backend, DeviceKind device) {
  const GradParameter& p = params[i];
  const std::string who =
      "parameter " + std::to_string(i) + " ('" + parameter_name(params, i) + "') ";
  if (!common::is_floating(p.dtype)) {
    return who + "has a dtype gradients cannot have (float32, float64, float16, bfloat16); dtype=" +
           std::to_string(static_cast<int>(p.dtype));
  }
  if (p.device != device) {
    return who + "is not where the communicator's buffers live; device=" + to_string(p.device) +
           ", communicator=" + to_string(backend) + " (" + to_string(device) + ")";
  }
  if (p.count == 0) return "";
  if (options.gradient_as_bucket_view && p.grad != nullptr) {
    return who +
           "has a grad buffer although gradients live in bucket memory "
           "(gradient_as_bucket_view): use GradSync::gradient(i); grad=set";
  }
  if (!options.gradient_as_bucket_view && p.grad == nullptr) {
    return who + "has no grad buffer; grad=null, count=" + std::to_string(p.count);
  }
  if (options.broadcast_parameters && p.data == nullptr) {
    return who +
           "has no data to broadcast from rank 0; data=null, count=" + std::to_string(p.count);
  }
  return "";
}

}  // namespace

std::string argument_error(const std::vector<GradParameter>& params, const GradSyncOptions& options,
                           Backend backend, DeviceKind device, const std::string& where) {
  std::string head = "grad_sync: failed to register parameters: ";
  for (size_t i = 0; i < params.size(); ++i) {
    std::string error = parameter_error(params, i, options, backend, device);
    if (!error.empty()) return head.append(error).append(where);
  }
  if (options.compression != Compression::kNone && options.compression != Compression::kFloat16 &&
      options.compression != Compression::kBFloat16) {
    return head + "unknown compression; compression=" +
           std::to_string(static_cast<int>(options.compression)) + where;
  }
  return "";
}

}  // namespace slurmddp::grad_sync
