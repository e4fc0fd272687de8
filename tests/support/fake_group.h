// A group of in-process host communicators for engine tests (ranks as
// threads): collectives match by sequence number, the last rank to arrive
// computes the result into every rank's buffer, and every call is recorded.
// Mismatched collectives (different kind, count or dtype at the same sequence
// number) fail on every rank with ProtocolError instead of hanging.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "grad_sync/bucket_plan.h"
#include "slurmddp/communicator.h"
#include "slurmddp/error.h"

namespace slurmddp::support {

struct Call {
  std::string kind;  // "allreduce", "broadcast", "allgather", "barrier"
  const void* data = nullptr;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
};

class FakeGroup : public std::enable_shared_from_this<FakeGroup> {
 public:
  explicit FakeGroup(int size) : size_(size), records_(static_cast<size_t>(size)) {}

  std::shared_ptr<Communicator> communicator(int rank);

  // Calls issued so far by `rank`, in order.
  std::vector<Call> calls(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    return records_[static_cast<size_t>(rank)];
  }
  // Blocks until `rank` issued at least `n` calls or `within` passed.
  bool wait_for_calls(int rank, size_t n, std::chrono::milliseconds within) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, within,
                        [&] { return records_[static_cast<size_t>(rank)].size() >= n; });
  }
  // From the n-th collective on (0-based, per rank), every Work fails with PeerError.
  void fail_from(size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_from_ = n;
  }
  // Collectives complete only when released (per rank sequence number < limit).
  void hold_from(size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    hold_from_ = n;
  }
  void release_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    hold_from_ = SIZE_MAX;
    cv_.notify_all();
  }

 private:
  friend class FakeCommunicator;
  friend class FakeWork;

  struct Slot {
    Call call;
    std::vector<void*> buffers;  // per rank (allgather: recv)
    std::vector<const void*> sends;
    int root = 0;
    int arrived = 0;
    bool done = false;
    std::string error;
  };

  size_t issue(int rank, const Call& call, void* buffer, const void* send, int root);
  void complete(Slot& slot);

  const int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::vector<Call>> records_;
  std::map<size_t, Slot> slots_;
  size_t fail_from_ = SIZE_MAX;
  size_t hold_from_ = SIZE_MAX;
};

class FakeWork final : public Work {
 public:
  FakeWork(std::shared_ptr<FakeGroup> group, size_t seq, int rank)
      : group_(std::move(group)), seq_(seq), rank_(rank) {}
  void wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(group_->mutex_);
    if (seq_ >= group_->fail_from_) {
      throw PeerError("fake: failed to run collective #" + std::to_string(seq_) +
                      ": injected peer loss; rank=" + std::to_string(rank_));
    }
    auto& slot = group_->slots_[seq_];
    const bool ok = group_->cv_.wait_for(lock, timeout, [&] {
      return (slot.done && seq_ < group_->hold_from_) || !slot.error.empty();
    });
    if (!slot.error.empty()) throw ProtocolError(slot.error);
    if (!ok) {
      throw TimeoutError("fake: failed to run collective #" + std::to_string(seq_) +
                         ": timed out; rank=" + std::to_string(rank_));
    }
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(group_->mutex_);
    return group_->slots_[seq_].done;
  }

 private:
  std::shared_ptr<FakeGroup> group_;
  size_t seq_;
  int rank_;
};

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size_; }
  Backend backend() const override { return Backend::kGloo; }  // a host one
  DeviceKind device() const override { return DeviceKind::kHost; }
  std::chrono::milliseconds timeout() const override { return std::chrono::seconds(20); }

  WorkHandle allreduce(void* data, size_t count, DataType type, ReduceOp op) override {
    return submit(Call{"allreduce", data, count, type, op}, data, nullptr, 0);
  }
  WorkHandle broadcast(void* data, size_t count, DataType type, int root) override {
    return submit(Call{"broadcast", data, count, type, ReduceOp::kSum}, data, nullptr, root);
  }
  WorkHandle allgather(const void* send, void* recv, size_t count, DataType type) override {
    return submit(Call{"allgather", send, count, type, ReduceOp::kSum}, recv, send, 0);
  }
  WorkHandle reduce_scatter(const void*, void*, size_t, DataType, ReduceOp) override {
    throw Error("fake: reduce_scatter is not implemented");
  }
  WorkHandle barrier() override {
    return submit(Call{"barrier", nullptr, 0, DataType::kInt32, ReduceOp::kSum}, nullptr, nullptr,
                  0);
  }

 private:
  WorkHandle submit(const Call& call, void* buffer, const void* send, int root) {
    const size_t seq = group_->issue(rank_, call, buffer, send, root);
    return std::make_shared<FakeWork>(group_, seq, rank_);
  }
  std::shared_ptr<FakeGroup> group_;
  int rank_;
  friend class FakeGroup;
};

inline std::shared_ptr<Communicator> FakeGroup::communicator(int rank) {
  return std::make_shared<FakeCommunicator>(shared_from_this(), rank);
}

inline size_t FakeGroup::issue(int rank, const Call& call, void* buffer, const void* send,
                               int root) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& record = records_[static_cast<size_t>(rank)];
  const size_t seq = record.size();
  record.push_back(call);
  Slot& slot = slots_[seq];
  if (slot.arrived == 0) {
    slot.call = call;
    slot.buffers.assign(static_cast<size_t>(size_), nullptr);
    slot.sends.assign(static_cast<size_t>(size_), nullptr);
    slot.root = root;
  } else if (slot.call.kind != call.kind || slot.call.count != call.count ||
             slot.call.type != call.type || slot.root != root) {
    slot.error = "fake: collective #" + std::to_string(seq) + " mismatched: " + slot.call.kind +
                 " of " + std::to_string(slot.call.count) + " vs " + call.kind + " of " +
                 std::to_string(call.count) + " on rank " + std::to_string(rank);
  }
  slot.buffers[static_cast<size_t>(rank)] = buffer;
  slot.sends[static_cast<size_t>(rank)] = send;
  if (++slot.arrived == size_ && slot.error.empty()) complete(slot);
  cv_.notify_all();
  return seq;
}

// Note: reductions widen to double and round once, like Gloo's float32 path
// for 16-bit types (exact for the integer-valued test data).
inline void FakeGroup::complete(Slot& slot) {
  const Call& c = slot.call;
  const size_t n = c.count;
  const size_t ranks = static_cast<size_t>(size_);
  auto get = [&](const void* p, size_t i) { return common::load_as_double(c.type, p, i); };
  auto put = [&](void* p, size_t i, double v) { common::store_from_double(c.type, p, i, v); };
  const size_t es = grad_sync::dtype_bytes(c.type);
  if (c.kind == "allreduce") {
    std::vector<double> acc(n, 0.0);
    for (size_t r = 0; r < ranks; ++r) {
      for (size_t i = 0; i < n; ++i) acc[i] += get(slot.buffers[r], i);
    }
    for (size_t i = 0; i < n; ++i) {
      double v = acc[i];
      if (c.op == ReduceOp::kAvg) {
        // Sum then divide in the reduction type, as Gloo does (float32 for
        // 16-bit and float32 data).
        v = c.type == DataType::kFloat64
                ? v / static_cast<double>(size_)
                : static_cast<double>(static_cast<float>(v) / static_cast<float>(size_));
      }
      for (size_t r = 0; r < ranks; ++r) put(slot.buffers[r], i, v);
    }
  } else if (c.kind == "broadcast") {
    for (size_t r = 0; r < ranks; ++r) {
      if (static_cast<int>(r) != slot.root && n > 0) {
        std::memcpy(slot.buffers[r], slot.buffers[static_cast<size_t>(slot.root)], n * es);
      }
    }
  } else if (c.kind == "allgather") {
    for (size_t r = 0; r < ranks; ++r) {
      for (size_t q = 0; q < ranks; ++q) {
        if (n > 0)
          std::memcpy(static_cast<uint8_t*>(slot.buffers[r]) + q * n * es, slot.sends[q], n * es);
      }
    }
  }
  slot.done = true;
}

}  // namespace slurmddp::support
