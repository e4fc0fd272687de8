// The collectives the Gloo communicator's worker thread runs (Note [Choosing
// Gloo's entry point] in gloo_communicator.h).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>

#include <algorithm>
#include <cstring>

#include "comm/gloo/gloo_communicator.h"
#include "comm/gloo/gloo_communicator_impl.h"
#include "comm/host/reduce.h"
#include "common/log.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {

AllreduceTier choose_allreduce_tier(size_t bytes, size_t small_max_bytes) {
  return bytes <= small_max_bytes ? AllreduceTier::kSmallSync : AllreduceTier::kLargeRing;
}

const char* to_string(AllreduceTier tier) {
  switch (tier) {
    case AllreduceTier::kSmallSync:
      return "halving-doubling/sync";
    case AllreduceTier::kLargeRing:
      return "ring";
  }
  return "?";
}

// ---- collectives (worker thread) -----------------------------------------------

uint8_t* GlooCommunicator::scratch(std::vector<uint8_t>& buffer, size_t bytes) {
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

void GlooCommunicator::release(std::vector<uint8_t>& buffer) {
  if (buffer.size() > kKeepScratchBytes) std::vector<uint8_t>().swap(buffer);
}

void GlooCommunicator::do_allreduce(void* data, size_t count, DataType type, ReduceOp op) {
  if (count == 0 || size_ == 1) return;  // one rank: sum, min, max and avg are the identity
  const ReduceOp base = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const bool avg = op == ReduceOp::kAvg;
  if (comm::is_16bit_float(type)) {
    // Note [16-bit reductions] in comm/host/reduce.h.
    auto* bytes = static_cast<uint8_t*>(data);
    for (size_t offset = 0; offset < count; offset += kUpcastChunk) {
      const size_t n = std::min(kUpcastChunk, count - offset);
      void* piece = bytes + offset * 2;
      allreduce_native(
          nullptr, n, DataType::kFloat32, base,
          [&](void* dst) { comm::widen_to_float(type, piece, static_cast<float*>(dst), n); },
          [&](void* src) {
            if (avg) comm::divide(DataType::kFloat32, src, n, size_);
            comm::narrow_from_float(type, static_cast<const float*>(src), piece, n);
          });
    }
    release(upcast_);
    return;
  }
  const size_t bytes = count * element_size(type);
  allreduce_native(
      data, count, type, base, [&](void* dst) { std::memcpy(dst, data, bytes); },
      [&](void* src) { std::memcpy(data, src, bytes); });
  if (avg) comm::divide(type, data, count, size_);
}

void GlooCommunicator::allreduce_native(void* user, size_t count, DataType type, ReduceOp base,
                                        const Stage& in, const Stage& out) {
  const size_t bytes = count * element_size(type);
  if (tiered_) {  // Note [Shared-memory tier]
    if (user != nullptr) {
      tiered_allreduce(user, count, type, base);
      return;
    }
    uint8_t* buffer = scratch(upcast_, bytes);
    in(buffer);
    tiered_allreduce(buffer, count, type, base);
    out(buffer);
    return;
  }
  if (comm::choose_allreduce_tier(bytes, small_max_) == comm::AllreduceTier::kSmallSync) {
    const auto entry = small_allreduce(type, base, count);
    in(entry->in.data());
    entry->algorithm->run();
    out(entry->in.data());
    return;
  }
  if (user != nullptr) {
    ring_allreduce(user, count, type, base);  // in place: no staging copies
    return;
  }
  uint8_t* buffer = scratch(upcast_, bytes);
  in(buffer);
  ring_allreduce(buffer, count, type, base);
  out(buffer);
}

std::shared_ptr<CachedAlgorithm> GlooCommunicator::small_allreduce(DataType type, ReduceOp base,
                                                                   size_t count) {
  const std::string key = std::string("allreduce/") + to_string(type) + "/" + to_string(base) +
                          "/" + std::to_string(count);
  return cache_.get(key, [&] {
    return size_ == 2 ? comm::make_allreduce_pair_exchange(sync_ctx_, type, base, count)
                      : comm::make_allreduce_hd(sync_ctx_, type, base, count);
  });
}

void GlooCommunicator::ring_allreduce(void* data, size_t count, DataType type, ReduceOp base) {
  gloo_allreduce(async_mesh(), tag_, data, count, type, base);
}

void GlooCommunicator::gloo_allreduce(const std::shared_ptr<gloo::Context>& ctx, uint32_t& tag,
                                      void* data, size_t count, DataType type, ReduceOp base) {
  if (ctx->size == 1) return;
  gloo::AllreduceOptions opts(ctx);
  switch (type) {
    case DataType::kFloat32:
      opts.setOutput(static_cast<float*>(data), count);
      break;
    case DataType::kFloat64:
      opts.setOutput(static_cast<double*>(data), count);
      break;
    case DataType::kInt32:
      opts.setOutput(static_cast<int32_t*>(data), count);
      break;
    case DataType::kInt64:
      opts.setOutput(static_cast<int64_t*>(data), count);
      break;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      throw Error("gloo: failed to allreduce: internal error: 16-bit type reached the ring");
  }
  opts.setReduceFunction([type, base](void* c, const void* a, const void* b, size_t n) {
    comm::reduce3(type, base, c, a, b, n);
  });
  opts.setTag(tag++);
  opts.setTimeout(timeout_);
  gloo::allreduce(opts);
}

void GlooCommunicator::tiered_placement(const void* mine, size_t mine_bytes, size_t offset,
                                        void* out, size_t total) {
  const auto* src = static_cast<const uint8_t*>(mine);
  auto* dst = static_cast<uint8_t*>(out);
  for (size_t begin = 0; begin < total; begin += kTierPiece) {
    const size_t len = std::min(kTierPiece, total - begin);
    const size_t words = (len + 3) / 4;
    uint8_t* piece = scratch(placement_, words * 4);
    std::memset(piece, 0, words * 4);
    // This rank's bytes that fall in [begin, begin + len).
    const size_t lo = std::max(begin, offset);
    const size_t hi = std::min(begin + len, offset + mine_bytes);
    if (mine_bytes > 0 && lo < hi) std::memcpy(piece + (lo - begin), src + (lo - offset), hi - lo);
    tiered_allreduce(piece, words, DataType::kInt32, ReduceOp::kSum);
    std::memcpy(dst + begin, piece, len);
  }
  release(placement_);
}

void GlooCommunicator::do_broadcast(void* data, size_t count, DataType type, int root) {
  if (count == 0 || size_ == 1) return;
  const size_t bytes = count * element_size(type);
  if (tiered_) {
    tiered_placement(data, rank_ == root ? bytes : 0, 0, data, bytes);
    return;
  }
  if (bytes <= small_max_) {
    auto entry = cache_.get("broadcast/" + std::to_string(bytes) + "/" + std::to_string(root),
                            [&] { return comm::make_broadcast(sync_ctx_, bytes, root); });
    if (rank_ == root) std::memcpy(entry->in.data(), data, bytes);
    entry->algorithm->run();
    if (rank_ != root) std::memcpy(data, entry->in.data(), bytes);
    return;
  }
  gloo::BroadcastOptions opts(async_mesh());
  opts.setOutput(static_cast<uint8_t*>(data), bytes);
  opts.setRoot(root);
  opts.setTag(tag_++);
  opts.setTimeout(timeout_);
  gloo::broadcast(opts);
}

void GlooCommunicator::do_allgather(const void* send, void* recv, size_t count, DataType type) {
  if (count == 0) return;
  const size_t bytes = count * element_size(type);
  auto* out = static_cast<uint8_t*>(recv);
  if (size_ == 1) {
    if (send != recv) std::memmove(recv, send, bytes);
    return;
  }
  const size_t total = bytes * static_cast<size_t>(size_);
  if (tiered_) {
    tiered_placement(send, bytes, bytes * static_cast<size_t>(rank_), out, total);
    return;
  }
  if (total <= small_max_) {
    auto entry = cache_.get("allgather/" + std::to_string(bytes),
                            [&] { return comm::make_allgather(sync_ctx_, bytes); });
    std::memcpy(entry->in.data(), send, bytes);
    entry->algorithm->run();
    std::memcpy(out, entry->out.data(), total);
    return;
  }
  gloo::AllgatherOptions opts(async_mesh());
  if (send != out + static_cast<size_t>(rank_) * bytes) {
    opts.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(send)), bytes);
  }
  opts.setOutput(out, total);
  opts.setTag(tag_++);
  opts.setTimeout(timeout_);
  gloo::allgather(opts);
}

void GlooCommunicator::do_reduce_scatter(const void* send, void* recv, size_t count, DataType type,
                                         ReduceOp op) {
  if (count == 0) return;
  const size_t bytes = count * element_size(type);
  if (size_ == 1) {
    if (send != recv) std::memmove(recv, send, bytes);
    return;
  }
  // An allreduce of the whole buffer, keeping our block: twice the bytes of a
  // dedicated reduce-scatter, but every tier and type of allreduce for free.
  const size_t total = bytes * static_cast<size_t>(size_);
  uint8_t* staging = scratch(reduce_scatter_, total);
  std::memcpy(staging, send, total);
  do_allreduce(staging, count * static_cast<size_t>(size_), type, op);
  std::memcpy(recv, staging + static_cast<size_t>(rank_) * bytes, bytes);
  release(reduce_scatter_);
}

}  // namespace slurmddp::comm
