#include "grad_sync/bucket_plan.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "slurmddp/error.h"

namespace slurmddp::grad_sync {

size_t dtype_bytes(DataType t) {
  const size_t bytes = element_size(t);
  if (bytes == 0) {
    throw InvalidArgument("grad_sync: failed to plan buckets: unknown data type; dtype=" +
                          std::to_string(static_cast<int>(t)));
  }
  return bytes;
}

size_t aligned_count(size_t count, DataType t) {
  const size_t per_align = kAlignBytes / dtype_bytes(t);
  return (count + per_align - 1) / per_align * per_align;
}

namespace {

using Key = std::tuple<int, int, int>;  // dtype, device kind, device index

struct OpenBucket {
  PlannedBucket bucket;
  size_t bytes = 0;
  size_t first_walk_position = 0;  // position of its first parameter in the walk
  bool is_first_of_key = true;     // limited by first_bucket_bytes
};

struct Closed {
  size_t first_walk_position;
  PlannedBucket bucket;
};

}  // namespace

BucketPlan plan_buckets(const std::vector<PlanParam>& params, const PlanOptions& options) {
  if (options.first_bucket_bytes == 0) {
    throw InvalidArgument(
        "grad_sync: failed to plan buckets: first_bucket_bytes must be positive; "
        "first_bucket_bytes=0");
  }
  if (options.bucket_cap_bytes == 0) {
    throw InvalidArgument(
        "grad_sync: failed to plan buckets: bucket_cap_bytes must be positive; "
        "bucket_cap_bytes=0");
  }
  std::map<Key, OpenBucket> open;
  std::vector<Closed> closed;
  auto close = [&](OpenBucket& b) {
    if (b.bucket.params.empty()) {
      return;
    }
    closed.push_back(Closed{b.first_walk_position, std::move(b.bucket)});
    const PlannedBucket& done = closed.back().bucket;
    b.bucket = PlannedBucket{};
    b.bucket.dtype = done.dtype;
    b.bucket.device = done.device;
    b.bucket.device_index = done.device_index;
    b.bytes = 0;
    b.is_first_of_key = false;
  };

  const size_t n = params.size();
  for (size_t walk = 0; walk < n; ++walk) {
    const size_t index = n - 1 - walk;  // Note [Bucket order]: last registered first
    const PlanParam& p = params[index];
    const size_t es = dtype_bytes(p.dtype);
    if (p.count > (SIZE_MAX - kAlignBytes) / es) {
      throw InvalidArgument(
          "grad_sync: failed to plan buckets: parameter size overflows; "
          "parameter=" +
          std::to_string(index) + ", count=" + std::to_string(p.count));
    }
    const size_t padded = aligned_count(p.count, p.dtype);
    const size_t bytes = padded * es;
    const int device_index = p.device == DeviceKind::kHost ? 0 : p.device_index;
    const Key key{static_cast<int>(p.dtype), static_cast<int>(p.device), device_index};
    auto it = open.find(key);
    if (it == open.end()) {
      OpenBucket fresh;
      fresh.bucket.dtype = p.dtype;
      fresh.bucket.device = p.device;
      fresh.bucket.device_index = device_index;
      it = open.emplace(key, std::move(fresh)).first;
    }
    OpenBucket& b = it->second;
    const size_t limit = b.is_first_of_key ? options.first_bucket_bytes : options.bucket_cap_bytes;
    if (!b.bucket.params.empty() && bytes > limit - std::min(limit, b.bytes)) {
      close(b);
    }
    if (b.bucket.params.empty()) {
      b.first_walk_position = walk;
    }
    b.bucket.params.push_back(index);
    b.bucket.offsets.push_back(b.bucket.count);
    b.bucket.count += padded;
    b.bytes += bytes;
    // Full (or a single parameter over the limit): close it now so that the
    // next parameter starts a new bucket.
    const size_t now_limit =
        b.is_first_of_key ? options.first_bucket_bytes : options.bucket_cap_bytes;
    if (b.bytes >= now_limit) {
      close(b);
    }
  }
  for (auto& [key, b] : open) {
    close(b);
  }

  std::sort(closed.begin(), closed.end(), [](const Closed& a, const Closed& b) {
    return a.first_walk_position < b.first_walk_position;
  });
  BucketPlan plan;
  plan.locations.resize(n);
  plan.buckets.reserve(closed.size());
  for (auto& c : closed) {
    const size_t b = plan.buckets.size();
    for (size_t slot = 0; slot < c.bucket.params.size(); ++slot) {
      plan.locations[c.bucket.params[slot]] = ParamLocation{b, slot};
    }
    plan.buckets.push_back(std::move(c.bucket));
  }
  return plan;
}

}  // namespace slurmddp::grad_sync
