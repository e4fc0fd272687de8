// The Gloo communicator's class, shared by its two source files:
// gloo_communicator.cpp (setup, issuing, the worker thread and the failure
// diagnosis) and gloo_collectives.cpp (the collectives the worker runs, see
// Note [Choosing Gloo's entry point] in gloo_communicator.h).
#pragma once

#include <gloo/transport/device.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo/gloo_algorithms.h"
#include "comm/gloo/gloo_failure.h"
#include "comm/gloo/gloo_mesh.h"
#include "comm/gloo/gloo_setup.h"
#include "comm/host/host_work.h"
#include "comm/host/shm_node.h"
#include "membership/membership.h"
#include "progress/watchdog.h"
#include "slurmddp/communicator.h"
#include "slurmddp/gloo_communicator.h"

namespace slurmddp::comm {

inline constexpr const char* kGlooComponent = "gloo";
// Staging kept by the classic-algorithm cache (their own buffers come on top).
inline constexpr size_t kCacheBudget = size_t{8} << 20;
// float16/bfloat16 are widened to float32 in pieces of this many elements.
inline constexpr size_t kUpcastChunk = size_t{4} << 20;
// Scratch buffers above this are released after each use.
inline constexpr size_t kKeepScratchBytes = size_t{64} << 20;
// The piece of a broadcast or allgather that a tiered group sums at a time.
inline constexpr size_t kTierPiece = size_t{16} << 20;

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const GlooOptions& options, std::shared_ptr<membership::Membership> group);
  // Which collective the worker is in, for the hang report (may be null).
  void track(std::shared_ptr<progress::Tracker> tracker) { tracker_ = std::move(tracker); }
  ~GlooCommunicator() override;

  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::kGloo; }
  DeviceKind device() const override { return DeviceKind::kHost; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  WorkHandle allreduce(void* data, size_t count, DataType type, ReduceOp op) override;
  WorkHandle broadcast(void* data, size_t count, DataType type, int root) override;
  WorkHandle allgather(const void* send, void* recv, size_t count, DataType type) override;
  WorkHandle reduce_scatter(const void* send, void* recv, size_t count, DataType type,
                            ReduceOp op) override;
  WorkHandle barrier() override;

 private:
  using Stage = std::function<void(void*)>;
  struct Task {
    std::shared_ptr<HostWork> work;
    std::function<void()> run;
    const char* op = "";  // for the tracker: "allreduce", ...
    int64_t seq = 0;      // its op number
  };

  // Setup (constructor).
  void join(std::shared_ptr<membership::Membership> group);
  std::shared_ptr<MeshContext> connect_mesh(const char* name);
  // The event-loop mesh, connected by the first operation that needs it
  // (Note [Lazy meshes]); worker thread only.
  const std::shared_ptr<MeshContext>& async_mesh();
  void publish_endpoints();
  void setup_shm_tier();  // Note [Shared-memory tier]

  // Issuing (caller threads).
  void check_type(const char* verb, DataType type) const;
  void check_op(const char* verb, ReduceOp op) const;
  size_t checked_bytes(const char* verb, size_t count, DataType type, size_t ranks) const;
  WorkHandle submit(const char* op, const std::string& what, std::function<void()> run);

  // The worker thread.
  void worker_main();
  std::exception_ptr diagnose_failure(const std::string& what, const std::exception_ptr& error);
  void abort_on_purpose();
  void close_connections();
  comm::DiagnosisContext diagnosis_context() const;

  void do_allreduce(void* data, size_t count, DataType type, ReduceOp op);
  void allreduce_native(void* user, size_t count, DataType type, ReduceOp base, const Stage& in,
                        const Stage& out);
  void ring_allreduce(void* data, size_t count, DataType type, ReduceOp base);
  // `tag`: the context's own counter (every rank of the context counts alike).
  void gloo_allreduce(const std::shared_ptr<gloo::Context>& ctx, uint32_t& tag, void* data,
                      size_t count, DataType type, ReduceOp base);
  void tiered_allreduce(void* data, size_t count, DataType type, ReduceOp base);
  // The cached blocking allreduce of `count` elements on the flat sync mesh.
  std::shared_ptr<CachedAlgorithm> small_allreduce(DataType type, ReduceOp base, size_t count);
  void do_broadcast(void* data, size_t count, DataType type, int root);
  // Note [Flat mesh only when flat]: each rank's `mine` (`mine_bytes` at
  // `offset` of the `total`-byte result; none for 0) summed into `out` as
  // integers over the tiers, kTierPiece bytes at a time.
  void tiered_placement(const void* mine, size_t mine_bytes, size_t offset, void* out,
                        size_t total);
  void do_allgather(const void* send, void* recv, size_t count, DataType type);
  void do_reduce_scatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op);
  uint8_t* scratch(std::vector<uint8_t>& buffer, size_t bytes);
  void release(std::vector<uint8_t>& buffer);

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds grace_;
  const std::string prefix_;
  size_t small_max_;         // the threshold in force, set by join()
  const int flat_mesh_max_;  // Note [Flat mesh only when flat]
  const std::shared_ptr<Store> store_;
  std::shared_ptr<progress::Tracker> tracker_;     // Note [Progress records]; may be null
  std::shared_ptr<membership::Membership> group_;  // set by join()
  Bind bind_;

  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<MeshContext> sync_ctx_;
  std::shared_ptr<MeshContext> async_ctx_;  // null until async_mesh()

  // The shared-memory tier (Note [Shared-memory tier]): on when tiered_.
  bool tiered_ = false;
  int num_nodes_ = 0;
  std::unique_ptr<ShmNode> shm_;  // null on a node with one rank
  bool node_leader_ = false;
  uint32_t leaders_tag_ = 0;
  std::shared_ptr<MeshContext> leaders_ctx_;  // the node leaders' ring, when several
  std::vector<int> leader_ranks_;  // by leader index: this leader's and its ring peers' (else -1)

  // Worker-thread state.
  AlgorithmCache cache_{kCacheBudget};
  std::vector<uint8_t> upcast_;          // float32 copy of a 16-bit piece (ring tier)
  std::vector<uint8_t> reduce_scatter_;  // reduce-scatter staging
  std::vector<uint8_t> placement_;       // tiered_placement's piece
  uint32_t tag_ = 0;
  bool connections_closed_ = false;

  const std::shared_ptr<comm::BreakState> state_ = std::make_shared<comm::BreakState>();
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  uint64_t issued_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace slurmddp::comm
