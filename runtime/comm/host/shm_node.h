// The ranks of one node reducing through shared memory: the tier below the
// network in the Gloo communicator's allreduce (Note [Shared-memory tier] in
// comm/gloo/gloo_communicator.h).
//
// Note [Shared-memory segment]
//   The node's lowest rank creates the segment with memfd_create: it has no
//   name in /dev/shm, so no exit path, SIGKILL included, can leave it behind;
//   the kernel frees it when the last rank that mapped it is gone. The others
//   map it through /proc/<pid>/fd/<fd> of the creator (same node, same user),
//   which closes its descriptor once all have mapped it. A rank that cannot
//   map it (another PID namespace, a locked-down /proc) makes the group go
//   without the tier, on every node alike (the decision is agreed through the
//   store).
//
// Note [Shared-memory protocol]
//   Every local rank owns one slot of slot_bytes and three 32-bit counters:
//   arrived, reduced, copied. An allreduce runs in pieces of up to slot_bytes;
//   piece s (a sequence number every local rank counts alike):
//     1. wait until every rank's `copied` reached s-1 (nobody still reads this
//        rank's slot), copy the piece into the slot except chunk k (this
//        rank's share, 1/L of the piece), arrived := s;
//     2. wait for every `arrived` = s, reduce chunk k of every other slot
//        into the user's buffer, a cache-sized block at a time, and copy each
//        reduced block into chunk k of the slot, reduced := s;
//     3. wait for every `reduced` = s, copy chunk j from slot j for every
//        other j into the user's buffer, copied := s.
//   In a reduce to the leader only the leader does step 3, and the others'
//   buffers are left partly reduced (the broadcast overwrites them).
//   Each rank moves 5 - 2/L pieces' worth of memory per piece (reads plus
//   writes), against 7 - 3/L with whole copies in and out and one pass over
//   the chunk per source. Waiting spins (up to 200 us when this rank may run
//   on at least L cores, else a few hundred pauses), then sleeps on the
//   counter with futex(2) (ranks may outnumber cores), waking when it
//   changes. A wait checks its deadline and, every kLivenessPeriod, whether the ranks it waits for
//   are alive: a dead one (gone, or a zombie) is named at once. A rank that fails marks the segment
//   aborted with its reason; every waiting rank then fails too, naming it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "slurmddp/communicator.h"
#include "slurmddp/error.h"
#include "slurmddp/store.h"

namespace slurmddp::comm {

// A node-mate seen dead while waiting for it: the failure notes' peer (Note
// [Failure notes]), as a closed connection names one.
class ShmPeerDied : public PeerError {
 public:
  ShmPeerDied(const std::string& message, int rank) : PeerError(message), rank(rank) {}
  int rank;
};

struct ShmPeer {
  int rank = 0;  // in the communicator
  int pid = 0;
};

struct ShmOptions {
  std::shared_ptr<Store> store;
  std::string key;             // store keys live under "<key>/"
  std::vector<ShmPeer> peers;  // the node's ranks, sorted by rank, this one included
  int rank = 0;                // this rank in the communicator
  std::string host;            // for messages
  // Small enough that the node's slots stay in the last-level cache (the
  // user's buffers stream through memory, the slots do not): 512 KiB was
  // 1.5-2x faster than 4 MiB at 2-64 MiB on 2 and 4 ranks.
  size_t slot_bytes = size_t{512} << 10;
  std::chrono::steady_clock::time_point deadline{};  // of the setup
};

class ShmNode {
 public:
  // Collective among opts.peers. Throws Error saying why when the segment
  // cannot be made or mapped (the caller falls back, Note
  // [Shared-memory segment]); the store's errors when a peer does not come.
  explicit ShmNode(const ShmOptions& opts);
  ~ShmNode();
  ShmNode(const ShmNode&) = delete;
  ShmNode& operator=(const ShmNode&) = delete;

  int local_rank() const { return local_; }
  int local_size() const { return static_cast<int>(peers_.size()); }
  bool leader() const { return local_ == 0; }
  size_t slot_bytes() const { return slot_bytes_; }

  using Clock = std::chrono::steady_clock;
  // In place, `type` native (float32/64, int32/64), op sum/min/max: every
  // local rank ends with the node's reduction.
  void allreduce(void* data, size_t count, DataType type, ReduceOp op, Clock::time_point deadline);
  // The leader (local rank 0) ends with the node's reduction; the others'
  // buffers are unchanged.
  void reduce_to_leader(void* data, size_t count, DataType type, ReduceOp op,
                        Clock::time_point deadline);
  // Every local rank ends with the leader's buffer.
  void broadcast_from_leader(void* data, size_t bytes, Clock::time_point deadline);
  // Marks the segment aborted (first reason wins) and wakes every waiter.
  void abort(const std::string& reason);

 private:
  struct Header;
  struct Counter;
  enum Phase { kArrived, kReduced, kCopied };

  uint8_t* slot(int local) const;
  std::atomic<uint32_t>& counter(int local, Phase phase) const;
  void publish(Phase phase, uint32_t value);
  // Waits until counter(j, phase) has reached `value` for every local j in
  // [first, last) (other than this rank).
  void wait_all(Phase phase, uint32_t value, int first, int last, Clock::time_point deadline,
                const char* what);
  void wait_one(int j, Phase phase, uint32_t value, Clock::time_point deadline, const char* what);
  [[noreturn]] void fail_aborted(const char* what);
  bool alive(int j) const;
  void pieces(void* data, size_t count, DataType type, ReduceOp op, bool everyone,
              Clock::time_point deadline);

  std::vector<ShmPeer> peers_;
  int local_ = 0;
  std::string host_;
  size_t slot_bytes_ = 0;
  size_t map_bytes_ = 0;
  uint8_t* base_ = nullptr;
  Header* header_ = nullptr;
  uint32_t seq_ = 0;  // pieces done
  std::chrono::microseconds spin_budget_{0};
};

}  // namespace slurmddp::comm
