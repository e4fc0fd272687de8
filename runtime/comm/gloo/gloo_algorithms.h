// Gloo's persistent algorithm objects (the "classic" API: AllreduceHalvingDoubling,
// BroadcastOneToAll, AllgatherRing), bound once to staging buffers and kept in
// a small cache.
//
// Note [Deterministic cache]: these objects claim transport slots from the
// context's counter when they are constructed, and a rank only matches a
// peer's message with its own object if both hold the same slot. Every rank
// therefore has to construct (and evict) the same objects in the same order.
// The cache guarantees it: keys and sizes depend only on the operation
// (collective, type, reduction, count, root), which the Communicator contract
// makes identical on all ranks, and eviction (least recently used, over a byte
// budget) depends only on that sequence. Objects are destroyed only between
// operations, and each run consumes every message its peers send it, so no
// message can arrive for an evicted slot.
#pragma once

#include <gloo/algorithm.h>
#include <gloo/context.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "slurmddp/communicator.h"

namespace slurmddp::comm {

struct CachedAlgorithm {
  std::unique_ptr<gloo::Algorithm> algorithm;
  std::vector<uint8_t> in;   // staging buffer the algorithm works on
  std::vector<uint8_t> out;  // separate output staging (allgather), else empty
  size_t footprint() const { return in.size() + out.size(); }
};

class AlgorithmCache {
 public:
  explicit AlgorithmCache(size_t budget_bytes) : budget_(budget_bytes) {}
  ~AlgorithmCache();

  // The entry for `key`, made by `make` on a miss. An entry whose footprint
  // exceeds the whole budget is handed out but not kept.
  template <typename Make>
  std::shared_ptr<CachedAlgorithm> get(const std::string& key, Make&& make) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    std::shared_ptr<CachedAlgorithm> entry = make();
    insert(key, entry);
    return entry;
  }

  size_t entries() const { return lru_.size(); }
  void clear();

 private:
  void insert(const std::string& key, const std::shared_ptr<CachedAlgorithm>& entry);

  using Entry = std::pair<std::string, std::shared_ptr<CachedAlgorithm>>;
  size_t budget_;
  size_t used_ = 0;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

// Builders, for contexts whose connections are in sync mode (blocking
// sockets: every send completes inside send(), so no message of a run is left
// queued when it returns). `type` is a native type (float32, float64, int32,
// int64) and `op` one of sum, min, max; `count` > 0 and the context size > 1.
std::shared_ptr<CachedAlgorithm> make_allreduce_hd(const std::shared_ptr<gloo::Context>& context,
                                                   DataType type, ReduceOp op, size_t count);
// Two ranks: AllreduceRing, which for two is one exchange of the whole buffer
// (fewer, larger messages than halving-doubling: faster on blocking sockets).
std::shared_ptr<CachedAlgorithm> make_allreduce_pair_exchange(
    const std::shared_ptr<gloo::Context>& context, DataType type, ReduceOp op, size_t count);
std::shared_ptr<CachedAlgorithm> make_broadcast(const std::shared_ptr<gloo::Context>& context,
                                                size_t bytes, int root);
std::shared_ptr<CachedAlgorithm> make_allgather(const std::shared_ptr<gloo::Context>& context,
                                                size_t bytes_per_rank);

// Note [Priming send buffers]: Gloo sizes a socket's send buffer (SO_SNDBUF)
// from the message being sent, and only grows it when a message exceeds the
// *doubled* value the kernel reports back. A connection first used for small
// messages therefore keeps a send buffer that a message up to twice as large
// overflows; the tail of that message then waits for the peer's ACK, and on
// loopback (MTU 64 KiB) a single full segment is ACKed only by the 40 ms
// delayed-ACK timer. With blocking sockets both ranks sit in write() meanwhile:
// 128 KiB allreduces took 45-90 ms instead of 0.4 ms. Running once, before
// the connections go to sync mode, the blocking algorithms at their largest
// size (`bytes`, the most a blocking exchange will carry) sizes every
// connection they use for the messages they will send on it (twice that,
// bounded by net.core.wmem_max, hence the threshold's bound), so every later
// blocking write completes at once, and two ranks writing to each other can
// never both block: the halving-doubling allreduce of `bytes` (its O(log N)
// partners; at two ranks the pair exchange) and one exchange around the ring
// at the ring allgather's largest block (the two neighbours). The broadcast is not primed: its root
// writes while every other rank reads, so a short send buffer costs a delayed ACK at worst, never a
// deadlock. The first version exchanged `bytes` with every peer, all to all: O(N) per rank, N x 16
// MiB through one machine's loopback, 3.5 s of a 4.6 s init at 32 ranks on 2 cores. Call on
// event-loop pairs (before setSync): it is a collective of the context's ranks.
void prime_send_buffers(const std::shared_ptr<gloo::Context>& context, size_t bytes);

// Switches every connection of `context` to Gloo's sync mode. Gloo's switch
// takes a connection off the event loop and waits for the loop's next tick
// (its epoll_wait wakes every 10 ms when idle), so one connection after the
// other costs up to 10 ms each: 0.3 s of init at 32 ranks, 10 s at 1,024.
// Connections are independent (each has its own lock), so up to `threads`
// switch at once, one tick for each batch.
void set_sync_mode(gloo::Context& context, int threads = 64);

}  // namespace slurmddp::comm
