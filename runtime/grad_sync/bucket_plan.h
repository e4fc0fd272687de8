// The bucket planner: which parameters share a bucket, in which order the
// buckets are launched, and where each parameter sits inside its bucket.
// Pure: no communicator, no memory, no threads.
//
// Note [Bucket order]
// Backward produces gradients roughly in reverse registration order (the last
// layer first). The planner walks the parameters from the last registered to
// the first and fills one open bucket per (dtype, device) key; bucket 0 is the
// first to close, so it holds the last-registered parameters and is the first
// to become ready. Each key's first bucket is limited to `first_bucket_bytes`
// (1 MiB by default) so that the first allreduce starts early; later buckets
// to `bucket_cap_bytes` (25 MiB). A parameter is never split. Unlike
// PyTorch's compute_bucket_assignment_by_size, which closes a bucket once it
// reaches the limit (so the last parameter may overshoot it), a bucket here is
// closed *before* a parameter that would make it exceed the limit, so every
// bucket stays within its limit except one holding a single parameter larger
// than the limit, which always gets a bucket of its own. Buckets are ordered
// by the reverse-order position of their first parameter, which is the same
// on every rank for the same layout: that is the launch order.
#pragma once

#include <cstddef>
#include <vector>

#include "slurmddp/communicator.h"

namespace slurmddp::grad_sync {

// Each parameter's offset in its bucket is a multiple of this many bytes
// (vector loads, and views users may hand to SIMD code).
inline constexpr size_t kAlignBytes = 64;

struct PlanParam {
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  DeviceKind device = DeviceKind::kHost;
  int device_index = 0;  // CUDA ordinal; ignored for host
};

struct PlanOptions {
  size_t first_bucket_bytes = 0;
  size_t bucket_cap_bytes = 0;
};

struct PlannedBucket {
  DataType dtype = DataType::kFloat32;
  DeviceKind device = DeviceKind::kHost;
  int device_index = 0;
  std::vector<size_t> params;   // parameter indices, in walk order
  std::vector<size_t> offsets;  // element offset of each, same order
  size_t count = 0;             // elements including padding
};

struct ParamLocation {
  size_t bucket = 0;
  size_t slot = 0;  // position in PlannedBucket::params
};

struct BucketPlan {
  std::vector<PlannedBucket> buckets;    // launch order
  std::vector<ParamLocation> locations;  // indexed by parameter
};

// Byte size of one element; throws InvalidArgument for an unknown type.
size_t dtype_bytes(DataType t);

// `count` elements of `t` rounded up to kAlignBytes, in elements.
size_t aligned_count(size_t count, DataType t);

// Throws InvalidArgument (naming the option and its value) when a limit is
// zero, or when a parameter's byte size overflows.
BucketPlan plan_buckets(const std::vector<PlanParam>& params, const PlanOptions& options);

}  // namespace slurmddp::grad_sync
