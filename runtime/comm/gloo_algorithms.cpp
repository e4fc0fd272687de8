#include "comm/gloo_algorithms.h"

#include <gloo/allgather_ring.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/broadcast_one_to_all.h>

#include <climits>

#include "comm/reduce.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {

AlgorithmCache::~AlgorithmCache() {
  clear();
}

void AlgorithmCache::clear() {
  while (!lru_.empty()) lru_.pop_front();
  index_.clear();
  used_ = 0;
}

void AlgorithmCache::insert(const std::string& key, const std::shared_ptr<CachedAlgorithm>& entry) {
  const size_t size = entry->footprint();
  if (size > budget_) return;  // used once, freed by the caller
  while (!lru_.empty() && used_ + size > budget_) {
    used_ -= lru_.back().second->footprint();
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(key, entry);
  index_[key] = lru_.begin();
  used_ += size;
}

namespace {

template <typename T>
constexpr DataType dtype_of();
template <>
constexpr DataType dtype_of<float>() {
  return DataType::kFloat32;
}
template <>
constexpr DataType dtype_of<double>() {
  return DataType::kFloat64;
}
template <>
constexpr DataType dtype_of<int32_t>() {
  return DataType::kInt32;
}
template <>
constexpr DataType dtype_of<int64_t>() {
  return DataType::kInt64;
}

// Gloo's classic algorithms call a typed function x[i] = op(x[i], y[i]).
template <typename T, ReduceOp Op>
void typed_reduce(T* x, const T* y, size_t n) {
  static const InplaceReduceFn fn = inplace_reducer(dtype_of<T>(), Op);
  fn(x, y, n);
}

template <typename T>
const gloo::ReductionFunction<T>* reduction_for(ReduceOp op) {
  static const gloo::ReductionFunction<T> sum(gloo::SUM, &typed_reduce<T, ReduceOp::kSum>);
  static const gloo::ReductionFunction<T> min(gloo::MIN, &typed_reduce<T, ReduceOp::kMin>);
  static const gloo::ReductionFunction<T> max(gloo::MAX, &typed_reduce<T, ReduceOp::kMax>);
  switch (op) {
    case ReduceOp::kSum:
      return &sum;
    case ReduceOp::kMin:
      return &min;
    case ReduceOp::kMax:
      return &max;
    case ReduceOp::kAvg:
      break;
  }
  throw InvalidArgument("gloo: failed to select a reduction: avg runs as sum then divide; op=avg");
}

void check_int_range(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX)) {
    throw InvalidArgument(std::string("gloo: failed to build ") + what +
                          ": the classic algorithms count in int; count=" + std::to_string(n));
  }
}

template <typename T>
std::shared_ptr<CachedAlgorithm> make_hd_typed(const std::shared_ptr<gloo::Context>& context,
                                               ReduceOp op, size_t count) {
  check_int_range(count * sizeof(T), "a halving-doubling allreduce");
  auto entry = std::make_shared<CachedAlgorithm>();
  entry->in.resize(count * sizeof(T));
  std::vector<T*> ptrs{reinterpret_cast<T*>(entry->in.data())};
  entry->algorithm = std::make_unique<gloo::AllreduceHalvingDoubling<T>>(
      context, ptrs, static_cast<int>(count), reduction_for<T>(op));
  return entry;
}

template <typename T>
std::shared_ptr<CachedAlgorithm> make_ring_typed(const std::shared_ptr<gloo::Context>& context,
                                                 ReduceOp op, size_t count) {
  check_int_range(count * sizeof(T), "a ring allreduce");
  auto entry = std::make_shared<CachedAlgorithm>();
  entry->in.resize(count * sizeof(T));
  std::vector<T*> ptrs{reinterpret_cast<T*>(entry->in.data())};
  entry->algorithm = std::make_unique<gloo::AllreduceRing<T>>(
      context, ptrs, static_cast<int>(count), reduction_for<T>(op));
  return entry;
}

}  // namespace

std::shared_ptr<CachedAlgorithm> make_allreduce_pair_exchange(
    const std::shared_ptr<gloo::Context>& context, DataType type, ReduceOp op, size_t count) {
  switch (type) {
    case DataType::kFloat32:
      return make_ring_typed<float>(context, op, count);
    case DataType::kFloat64:
      return make_ring_typed<double>(context, op, count);
    case DataType::kInt32:
      return make_ring_typed<int32_t>(context, op, count);
    case DataType::kInt64:
      return make_ring_typed<int64_t>(context, op, count);
    case DataType::kFloat16:
    case DataType::kBFloat16:
      break;
  }
  throw InvalidArgument(std::string("gloo: failed to build a ring allreduce: type ") +
                        to_string(type) + " is reduced as float32; type=" + to_string(type));
}

void prime_send_buffers(gloo::Context& context, size_t bytes) {
  const int n = context.size;
  std::vector<uint8_t> out(bytes);
  std::vector<uint8_t> in(bytes * static_cast<size_t>(n - 1));
  const int slot = context.nextSlot();
  std::vector<std::unique_ptr<gloo::transport::Buffer>> sends;
  std::vector<std::unique_ptr<gloo::transport::Buffer>> recvs;
  size_t k = 0;
  for (int j = 0; j < n; ++j) {
    if (j == context.rank) continue;
    recvs.push_back(context.getPair(j)->createRecvBuffer(slot, in.data() + bytes * k++, bytes));
  }
  for (int j = 0; j < n; ++j) {
    if (j == context.rank) continue;
    sends.push_back(context.getPair(j)->createSendBuffer(slot, out.data(), bytes));
  }
  for (auto& s : sends) s->send();
  for (auto& r : recvs) r->waitRecv();
  for (auto& s : sends) s->waitSend();
}

std::shared_ptr<CachedAlgorithm> make_allreduce_hd(const std::shared_ptr<gloo::Context>& context,
                                                   DataType type, ReduceOp op, size_t count) {
  switch (type) {
    case DataType::kFloat32:
      return make_hd_typed<float>(context, op, count);
    case DataType::kFloat64:
      return make_hd_typed<double>(context, op, count);
    case DataType::kInt32:
      return make_hd_typed<int32_t>(context, op, count);
    case DataType::kInt64:
      return make_hd_typed<int64_t>(context, op, count);
    case DataType::kFloat16:
    case DataType::kBFloat16:
      break;
  }
  throw InvalidArgument(std::string("gloo: failed to build a halving-doubling allreduce: type ") +
                        to_string(type) + " is reduced as float32; type=" + to_string(type));
}

std::shared_ptr<CachedAlgorithm> make_broadcast(const std::shared_ptr<gloo::Context>& context,
                                                size_t bytes, int root) {
  auto entry = std::make_shared<CachedAlgorithm>();
  entry->in.resize(bytes);
  std::vector<uint8_t*> ptrs{entry->in.data()};
  entry->algorithm = std::make_unique<gloo::BroadcastOneToAll<uint8_t>>(context, ptrs, bytes, root);
  return entry;
}

std::shared_ptr<CachedAlgorithm> make_allgather(const std::shared_ptr<gloo::Context>& context,
                                                size_t bytes_per_rank) {
  check_int_range(bytes_per_rank * static_cast<size_t>(context->size), "a ring allgather");
  auto entry = std::make_shared<CachedAlgorithm>();
  entry->in.resize(bytes_per_rank);
  entry->out.resize(bytes_per_rank * static_cast<size_t>(context->size));
  std::vector<const uint8_t*> in{entry->in.data()};
  entry->algorithm = std::make_unique<gloo::AllgatherRing<uint8_t>>(
      context, in, entry->out.data(), static_cast<int>(bytes_per_rank));
  return entry;
}

}  // namespace slurmddp::comm
