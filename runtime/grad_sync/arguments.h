// The checks of GradSync's parameters and options that need neither the
// communicator nor a device: the constructor's first step, and
// GradSync::check_arguments for programs that want the verdict before any
// device call (Note [Checks before the device]).
//
// Note [Checks before the device]
//   A program that registers its parameters wrongly (a CUDA communicator with
//   parameters left at the default DeviceKind::kHost, a grad buffer beside
//   gradient_as_bucket_view) hears it from the constructor, after the
//   communicator, the device and the ranks exist. On a machine without a GPU
//   that is never: the program cannot get that far. The same checks, as a
//   pure function of the parameters, the options and the communicator's kind,
//   let it ask first: gpu_grad_sync_bench --dry-run runs them on a CPU machine
//   (scripts/gpu-check --dry-run), so that a wrong registration fails there
//   and not on the first device run.
#pragma once

#include <string>
#include <vector>

#include "slurmddp/communicator.h"
#include "slurmddp/grad_sync.h"

namespace slurmddp::grad_sync {

// "#<index>" for a parameter without a name.
std::string parameter_name(const std::vector<GradParameter>& params, size_t i);

// The constructor's complaint about GradSyncOptions::timeout, or "" when it
// is unset or positive; `fallback` names the timeout used when it is unset.
std::string timeout_error(const GradSyncOptions& options, const std::string& fallback);

// The first reason `params` and `options` cannot be registered with a
// communicator of `backend` whose buffers live on `device`, with `where`
// appended ("; rank=..., size=..."), or "" when there is none. Reads no memory
// the parameters point to.
std::string argument_error(const std::vector<GradParameter>& params, const GradSyncOptions& options,
                           Backend backend, DeviceKind device, const std::string& where);

}  // namespace slurmddp::grad_sync
