// The cross-rank layout check run when a GradSync is constructed.
//
// Note [Layout check]
// Every rank must register the same parameters (count, dtype, device kind,
// position by position) and the same options that shape the collectives
// (bucket limits, compression): otherwise the ranks would issue allreduces of
// different sizes, which hangs or silently mixes unrelated gradients.
// The check never hangs and tells every rank the same story:
//  1. allgather a fixed-size summary from each rank: whether its parameters
//     passed local validation, a 64-bit digest of its encoded layout, its
//     parameter count and the size of its full description;
//  2. all equal and valid: done (one small collective in the common case);
//  3. a rank refused its own parameters: every rank throws, naming it;
//  4. digests differ: rank 0 broadcasts its full description (every rank knows
//     its size from step 1), each rank finds its first difference from it, and
//     a fixed-size difference record is allgathered, so that every rank can
//     throw the same message naming the lowest differing rank, the first
//     differing parameter (index and names) and both values.
// Names are not part of the digest (they may legitimately differ) but are
// carried for the message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "slurmddp/communicator.h"
#include "slurmddp/grad_sync.h"

namespace slurmddp::grad_sync {

class Device;

struct ParamDescription {
  std::string name;
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  DeviceKind device = DeviceKind::kHost;
};

struct LayoutDescription {
  uint64_t first_bucket_bytes = 0;
  uint64_t bucket_cap_bytes = 0;
  Compression compression = Compression::kNone;
  std::vector<ParamDescription> params;
};

// What differs first between rank 0's layout and another's.
enum class LayoutField : int64_t {
  kNone = 0,
  kFirstBucketBytes,
  kBucketCapBytes,
  kCompression,
  kNumParameters,
  kCount,
  kDtype,
  kDevice,
};

struct LayoutDifference {
  LayoutField field = LayoutField::kNone;
  int64_t param = -1;  // the parameter (kCount, kDtype, kDevice), else -1
  int64_t value0 = 0;  // rank 0's value
  int64_t value = 0;   // the other rank's value
};

// Integers that describe the layout without names (what the digest covers).
std::vector<int64_t> encode_shape(const LayoutDescription& layout);
uint64_t layout_digest(const LayoutDescription& layout);

// Serialization of the whole description, names included, as int64 words.
std::vector<int64_t> serialize_layout(const LayoutDescription& layout);
// Throws ProtocolError when `words` is not a serialized layout.
LayoutDescription deserialize_layout(const std::vector<int64_t>& words);

LayoutDifference first_difference(const LayoutDescription& rank0, const LayoutDescription& mine);

// "field=value" as printed in messages, e.g. "dtype=float16", "count=12".
std::string field_text(LayoutField field, int64_t value);

// The message every rank throws for a difference found on rank `other`:
//   "... rank 2 registered a different layout than rank 0: parameter 3
//    ('fc.bias' on rank 0, 'fc.b' on rank 2): count=10 on rank 0, count=12 on
//    rank 2; ranks that differ from rank 0: [2, 3]"
std::string describe_difference(int other, const LayoutDifference& d, const std::string& name0,
                                const std::string& name_other,
                                const std::vector<int>& differing_ranks);

// Note [Layout check], steps 1-4, over `comm` (buffers staged through
// `device`). `local_error` is non-empty when this rank refused its own
// parameters: the check then throws InvalidArgument with it on this rank (and
// an Error naming this rank on the others). Throws InvalidArgument on every
// rank when layouts differ.
void check_layout(Communicator& comm, Device& device, const LayoutDescription& layout,
                  const std::string& local_error, std::chrono::milliseconds timeout);

}  // namespace slurmddp::grad_sync
