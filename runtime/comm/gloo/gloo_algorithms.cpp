#include "comm/gloo/gloo_algorithms.h"

#include <gloo/allgather_ring.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/broadcast_one_to_all.h>

#include <algorithm>
#include <climits>
#include <exception>
#include <thread>

#include "comm/host/reduce.h"
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

void prime_send_buffers(const std::shared_ptr<gloo::Context>& context, size_t bytes) {
  const size_t floats = bytes / sizeof(float);
  if (context->size < 2 || floats == 0) return;
  const auto allreduce =
      context->size == 2
          ? make_allreduce_pair_exchange(context, DataType::kFloat32, ReduceOp::kSum, floats)
          : make_allreduce_hd(context, DataType::kFloat32, ReduceOp::kSum, floats);
  allreduce->algorithm->run();
  // The ring allgather's messages (a rank's block, at most bytes / N) go to
  // the right neighbour: one exchange around the ring sizes them, where the
  // allgather itself would take N - 1 steps.
  const int n = context->size;
  const size_t block = bytes / static_cast<size_t>(n);
  if (n < 3 || block == 0) return;  // two ranks: the pair exchange above did it
  std::vector<uint8_t> out(block), in(block);
  const int slot = context->nextSlot();
  auto recv =
      context->getPair((context->rank + n - 1) % n)->createRecvBuffer(slot, in.data(), block);
  auto send = context->getPair((context->rank + 1) % n)->createSendBuffer(slot, out.data(), block);
  send->send();
  recv->waitRecv();
  send->waitSend();
}

void set_sync_mode(gloo::Context& context, int threads) {
  std::vector<int> peers;
  for (int j = 0; j < context.size; ++j) {
    if (j != context.rank) peers.push_back(j);
  }
  const size_t n = std::min(peers.size(), static_cast<size_t>(std::max(threads, 1)));
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> workers;
  workers.reserve(n);
  for (size_t t = 0; t < n; ++t) {
    workers.emplace_back([&, t] {
      try {
        for (size_t k = t; k < peers.size(); k += n) {
          context.getPair(peers[k])->setSync(true, false);
        }
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  for (auto& w : workers) w.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
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
