// The Gloo communicator: setup (transport, the group, the two meshes), issuing
// operations to the worker thread, the worker, and the failure diagnosis of
// Note [Failure notes]. The collectives themselves: gloo_collectives.cpp.
#include "comm/gloo/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/gloo/gloo_algorithms.h"
#include "comm/gloo/gloo_communicator_impl.h"
#include "comm/gloo/gloo_failure.h"
#include "comm/host/host_work.h"
#include "comm/host/reduce.h"
#include "comm/over_membership.h"
#include "common/log.h"
#include "common/quote.h"
#include "membership/membership.h"
#include "slurmddp/error.h"
#include "slurmddp/gloo_communicator.h"

namespace slurmddp {

namespace comm {

namespace {

Bytes text_bytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

}  // namespace

GlooCommunicator::GlooCommunicator(const GlooOptions& o,
                                   std::shared_ptr<membership::Membership> group)
    : rank_(o.rank.value_or(-1)),
      size_(o.size.value_or(0)),
      timeout_(o.timeout),
      grace_(membership::diagnosis_grace(o.timeout)),
      prefix_(o.prefix),
      small_max_(o.small_max_bytes),
      flat_mesh_max_(o.flat_mesh_max),
      store_(o.store) {
  const std::string keys =
      "rank=" + common::optional_text(o.rank) + ", size=" + common::optional_text(o.size);
  if (!o.rank || !o.size) {
    throw InvalidArgument(
        "gloo: failed to create a communicator: GlooOptions::rank and GlooOptions::size are "
        "required; " +
        keys);
  }
  if (size_ < 1) {
    throw InvalidArgument("gloo: failed to create a communicator: size must be >= 1; " + keys);
  }
  if (rank_ < 0 || rank_ >= size_) {
    throw InvalidArgument("gloo: failed to create a communicator: rank must be in [0, size); " +
                          keys);
  }
  if (o.timeout.count() <= 0) {
    throw InvalidArgument(
        "gloo: failed to create a communicator: timeout must be positive; "
        "timeout_ms=" +
        std::to_string(o.timeout.count()) + ", " + keys);
  }
  if (o.prefix.empty()) {
    throw InvalidArgument("gloo: failed to create a communicator: prefix is empty; " + keys);
  }
  ScopedSigpipeBlock no_sigpipe;  // Note [SIGPIPE]
  if (size_ > 1) {
    if (!store_) {
      throw InvalidArgument(
          "gloo: failed to create a communicator: no store for the "
          "rendezvous; " +
          keys);
    }
    bind_ = choose_bind(o);
    gloo::transport::tcp::attr attr;
    if (!bind_.ifname.empty()) {
      attr.iface = bind_.ifname;
    } else {
      attr.hostname = bind_.hostname;
    }
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw InvalidArgument(
          "gloo: failed to bind the TCP transport: " + comm::strip_gloo_location(e.what()) + "; " +
          bind_.source + ", " + keys);
    }
    // Where setup time goes, for the debug log (docs/benchmarks.md, init() at scale).
    std::string phases;
    auto phase_start = std::chrono::steady_clock::now();
    const auto phase = [&](const char* name) {
      const auto now = std::chrono::steady_clock::now();
      phases +=
          (phases.empty() ? "" : " ") + std::string(name) + "=" +
          std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(now - phase_start).count());
      phase_start = now;
    };
    join(std::move(group));
    phase("join");
    setup_shm_tier();  // Note [Shared-memory tier]
    phase("shm");
    if (!tiered_) {
      // Note [Flat mesh only when flat]: a tiered group needs none.
      sync_ctx_ = connect_mesh("sync");
      phase("mesh");
      if (small_max_ > 0) {
        try {
          comm::prime_send_buffers(sync_ctx_, small_max_);  // Note [Priming send buffers]
        } catch (const std::exception& e) {
          throw PeerError("gloo: failed to prime the sync mesh of '" + prefix_ +
                          "': " + comm::strip_gloo_location(e.what()) + "; " + keys);
        }
      }
      phase("prime");
      try {
        comm::set_sync_mode(*sync_ctx_);
      } catch (const std::exception& e) {
        throw PeerError("gloo: failed to switch the sync mesh of '" + prefix_ +
                        "' to blocking mode: " + comm::strip_gloo_location(e.what()) + "; " + keys);
      }
      phase("blocking");
    }
    publish_endpoints();
    phase("endpoints");
    // The mesh records of this rank's previous group on the prefix are spent
    // (Note [Rendezvous generations]); MeshContext writes one per mesh.
    for (const std::string name : {"sync/", "async/"}) {
      const std::string old = group_->previous_key(name + std::to_string(rank_));
      try {
        if (!old.empty()) store_->erase(old);
      } catch (const std::exception& e) {
        SLURMDDP_LOG_DEBUG(kGlooComponent, "erasing " << old << ": " << e.what());
      }
    }
    SLURMDDP_LOG_DEBUG(kGlooComponent,
                       "communicator '"
                           << prefix_ << "' ready: rank=" << rank_ << ", size=" << size_ << ", "
                           << bind_.source << ", device=" << device_->str()
                           << ", timeout_ms=" << timeout_.count() << ", setup_ms: " << phases);
  }
  if (!group_) {
    // One rank: nobody to meet, nothing in the store.
    membership::JoinOptions j;
    j.prefix = prefix_;
    group_ = membership::Membership::join(std::move(j));
  }
  // A Work::wait timeout is diagnosed like a failure seen by the worker: this
  // rank writes its note, then names the ranks without one (Note [Failure notes]).
  state_->set_timeout_diagnoser(
      [ctx = diagnosis_context()](const std::string& what, const std::exception_ptr& plain) {
        return membership::note_and_conclude(ctx, comm::Observation::Kind::kAborted, what, plain);
      });
  worker_ = std::thread([this] { worker_main(); });
}

GlooCommunicator::~GlooCommunicator() {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  cache_.clear();
}

// ---- setup -------------------------------------------------------------------

void GlooCommunicator::join(std::shared_ptr<membership::Membership> group) {
  if (group) {
    group_ = std::move(group);
  } else {
    membership::JoinOptions j;
    j.store = store_;
    j.prefix = prefix_;
    j.rank = rank_;
    j.size = size_;
    j.deadline = std::chrono::steady_clock::now() + timeout_;
    j.head = "gloo: failed to connect process group '" + prefix_ + "': ";
    j.where = "rank=" + std::to_string(rank_) + ", size=" + std::to_string(size_) +
              ", timeout_ms=" + std::to_string(timeout_.count());
    j.fields = comm::gloo_join_fields();
    group_ = membership::Membership::join(std::move(j), comm::kGlooAgreedFields);
  }
  // Every rank computes the same blocking-socket threshold from the group's
  // smallest wmem_max.
  const auto wmem = group_->agreed("wmem_max");
  small_max_ = effective_small_max(
      small_max_, size_, wmem && *wmem > 0 ? static_cast<size_t>(*wmem) : kDefaultWmemMax);
}

const std::shared_ptr<MeshContext>& GlooCommunicator::async_mesh() {
  // Note [Lazy meshes]
  //   The event-loop mesh carries only messages above the blocking threshold
  //   (the ring allreduce, large broadcasts and allgathers): a group that never
  //   sends one (small models, control traffic, the shared-memory tier's
  //   allreduce) never pays for its N - 1 connections a rank, and init() makes
  //   one mesh, as torch's Gloo group does, not two. Every rank connects it
  //   at the same operation: the first whose size, against the agreed
  //   threshold, takes the event loop, which is the same on every rank because
  //   collectives are issued in the same order with the same sizes everywhere.
  //   A blocking one-element allreduce on the connected sync mesh goes first:
  //   a peer that has gone (its connections closed) is named at once, as it
  //   would be by the operation itself, and not after the timeout of the
  //   connection's store exchange; a rank that is alive but never gets there
  //   (hung, or issuing another operation) fails the others within the
  //   timeout, diagnosed like any failure of an operation (Note [Failure
  //   notes]).
  if (!async_ctx_) {
    small_allreduce(DataType::kInt32, ReduceOp::kSum, 1)->algorithm->run();
    async_ctx_ = connect_mesh("async");
    publish_endpoints();
  }
  return async_ctx_;
}

std::shared_ptr<MeshContext> GlooCommunicator::connect_mesh(const char* name) {
  auto ctx = std::make_shared<MeshContext>(rank_, size_, timeout_);
  try {
    ctx->connect(*store_, group_->key(name) + "/", device_);  // Note [Mesh connection]
  } catch (const Error&) {
    throw;  // already in our grammar (e.g. a store timeout naming the keys)
  } catch (const std::exception& e) {
    throw PeerError(std::string("gloo: failed to connect the ") + name + " mesh of '" + prefix_ +
                    "': " + comm::strip_gloo_location(e.what()) +
                    "; rank=" + std::to_string(rank_) + ", size=" + std::to_string(size_) + ", " +
                    bind_.source);
  }
  return ctx;
}

void GlooCommunicator::publish_endpoints() {
  // Per peer, the addresses this rank listens on for it, as Gloo prints them
  // in the peer's errors, with and without a "$<sequence>" (Note [Failure
  // notes], step 1). The node leaders' ring is indexed by leader: its peers
  // are the leaders' ranks (Note [Leaders' ring]).
  std::vector<std::vector<std::string>> per_peer(static_cast<size_t>(size_));
  const auto add = [&](MeshContext& ctx, int peer_index, int peer_rank) {
    auto& list = per_peer[static_cast<size_t>(peer_rank)];
    for (const std::string& e : {ctx.getPair(peer_index)->address().str(),
                                 ctx.endpoints()[static_cast<size_t>(peer_index)].front()}) {
      if (std::find(list.begin(), list.end(), e) == list.end()) list.push_back(e);
    }
  };
  for (MeshContext* ctx : {sync_ctx_.get(), async_ctx_.get()}) {
    if (ctx == nullptr) continue;
    for (int j = 0; j < size_; ++j) {
      if (j != rank_) add(*ctx, j, j);
    }
  }
  if (leaders_ctx_) {
    for (int k : leaders_ctx_->peers()) {
      add(*leaders_ctx_, k, leader_ranks_[static_cast<size_t>(k)]);
    }
  }
  store_->set(comm::endpoints_key(group_->scope(), rank_),
              text_bytes(comm::encode_endpoints(per_peer)));
}

// ---- issuing -----------------------------------------------------------------

void GlooCommunicator::check_type(const char* verb, DataType type) const {
  if (element_size(type) == 0) {
    throw InvalidArgument(std::string("gloo: failed to ") + verb +
                          ": unknown data type; type=" + std::to_string(static_cast<int>(type)) +
                          ", rank=" + std::to_string(rank_));
  }
}

void GlooCommunicator::check_op(const char* verb, ReduceOp op) const {
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg && op != ReduceOp::kMin &&
      op != ReduceOp::kMax) {
    throw InvalidArgument(std::string("gloo: failed to ") + verb + ": unknown reduction; op=" +
                          std::to_string(static_cast<int>(op)) + ", rank=" + std::to_string(rank_));
  }
}

size_t GlooCommunicator::checked_bytes(const char* verb, size_t count, DataType type,
                                       size_t ranks) const {
  check_type(verb, type);
  const size_t es = element_size(type);
  if (count > SIZE_MAX / es / ranks) {
    throw InvalidArgument(std::string("gloo: failed to ") + verb +
                          ": buffer size overflows; count=" + std::to_string(count) +
                          ", type=" + to_string(type) + ", rank=" + std::to_string(rank_));
  }
  return count * es;
}

WorkHandle GlooCommunicator::submit(const char* op, const std::string& what,
                                    std::function<void()> run) {
  std::unique_lock<std::mutex> lock(queue_mutex_);
  const int64_t seq = static_cast<int64_t>(++issued_);
  const std::string described = what + ", op #" + std::to_string(seq);
  auto work = std::make_shared<comm::HostWork>(described, rank_, state_, timeout_);
  if (auto error = state_->error()) {
    lock.unlock();
    work->finish(error);
    return work;
  }
  queue_.push_back(Task{work, std::move(run), op, seq});
  lock.unlock();
  queue_cv_.notify_one();
  return work;
}

WorkHandle GlooCommunicator::allreduce(void* data, size_t count, DataType type, ReduceOp op) {
  checked_bytes("allreduce", count, type, 1);
  check_op("allreduce", op);
  if (count > 0 && data == nullptr) {
    throw InvalidArgument("gloo: failed to allreduce: data is null; count=" +
                          std::to_string(count) + ", rank=" + std::to_string(rank_));
  }
  std::ostringstream what;
  what << "allreduce " << count << ' ' << to_string(type) << " (" << to_string(op) << ')';
  return submit("allreduce", what.str(), [=] { do_allreduce(data, count, type, op); });
}

WorkHandle GlooCommunicator::broadcast(void* data, size_t count, DataType type, int root) {
  checked_bytes("broadcast", count, type, 1);
  if (root < 0 || root >= size_) {
    throw InvalidArgument(
        "gloo: failed to broadcast: root out of range; root=" + std::to_string(root) +
        ", size=" + std::to_string(size_) + ", rank=" + std::to_string(rank_));
  }
  if (count > 0 && data == nullptr) {
    throw InvalidArgument("gloo: failed to broadcast: data is null; count=" +
                          std::to_string(count) + ", rank=" + std::to_string(rank_));
  }
  std::ostringstream what;
  what << "broadcast " << count << ' ' << to_string(type) << " from rank " << root;
  return submit("broadcast", what.str(), [=] { do_broadcast(data, count, type, root); });
}

WorkHandle GlooCommunicator::allgather(const void* send, void* recv, size_t count, DataType type) {
  checked_bytes("allgather", count, type, static_cast<size_t>(size_));
  if (count > 0 && (send == nullptr || recv == nullptr)) {
    throw InvalidArgument("gloo: failed to allgather: null buffer; count=" + std::to_string(count) +
                          ", rank=" + std::to_string(rank_));
  }
  std::ostringstream what;
  what << "allgather " << count << ' ' << to_string(type) << " per rank";
  return submit("allgather", what.str(), [=] { do_allgather(send, recv, count, type); });
}

WorkHandle GlooCommunicator::reduce_scatter(const void* send, void* recv, size_t count,
                                            DataType type, ReduceOp op) {
  checked_bytes("reduce-scatter", count, type, static_cast<size_t>(size_));
  check_op("reduce-scatter", op);
  if (count > 0 && (send == nullptr || recv == nullptr)) {
    throw InvalidArgument("gloo: failed to reduce-scatter: null buffer; count=" +
                          std::to_string(count) + ", rank=" + std::to_string(rank_));
  }
  std::ostringstream what;
  what << "reduce-scatter " << count << ' ' << to_string(type) << " per rank (" << to_string(op)
       << ')';
  return submit("reduce_scatter", what.str(),
                [=] { do_reduce_scatter(send, recv, count, type, op); });
}

WorkHandle GlooCommunicator::barrier() {
  return submit("barrier", "complete a barrier", [this] {
    int32_t token = 1;
    do_allreduce(&token, 1, DataType::kInt32, ReduceOp::kSum);
  });
}

// ---- the worker --------------------------------------------------------------

void GlooCommunicator::worker_main() {
  sigset_t no_sigpipe;  // Note [SIGPIPE]: for the whole life of this thread
  sigemptyset(&no_sigpipe);
  sigaddset(&no_sigpipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &no_sigpipe, nullptr);
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error = state_->error();
    if (!error) {
      std::exception_ptr failure;
      if (tracker_) tracker_->enter(task.op, task.seq);
      try {
        task.run();
      } catch (...) {
        failure = std::current_exception();
      }
      if (tracker_) tracker_->leave();
      if (failure) {
        // Broken meanwhile by a Work::wait timeout: that error stands.
        error = state_->error();
        if (!error) error = diagnose_failure(task.work->what(), failure);
      }
    }
    task.work->finish(error);
    if (state_->error() && !connections_closed_) abort_on_purpose();
  }
  // Destroyed: fail what never ran.
  std::deque<Task> left;
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    left.swap(queue_);
  }
  for (auto& task : left) {
    task.work->finish(std::make_exception_ptr(
        Error("gloo: failed to " + task.work->what() +
              ": the communicator was destroyed before it ran; rank=" + std::to_string(rank_))));
  }
  if (state_->error() && !connections_closed_) abort_on_purpose();
}

comm::DiagnosisContext GlooCommunicator::diagnosis_context() const {
  return comm::DiagnosisContext{store_, group_->scope(), rank_, size_, timeout_, grace_, "gloo"};
}

std::exception_ptr GlooCommunicator::diagnose_failure(const std::string& what,
                                                      const std::exception_ptr& error) {
  const auto ctx = diagnosis_context();
  comm::Observation seen = comm::classify(error);
  comm::resolve_peer(ctx, seen);
  membership::write_note(ctx, seen, what);
  close_connections();
  auto concluded = membership::conclude(ctx, seen, what);
  auto in_force = state_->break_with(concluded);
  try {
    std::rethrow_exception(in_force);
  } catch (const std::exception& e) {
    std::string m = e.what();
    if (m.rfind("gloo: ", 0) == 0) m.erase(0, 6);
    SLURMDDP_LOG_ERROR(kGlooComponent, m);
  }
  return in_force;
}

void GlooCommunicator::abort_on_purpose() {
  comm::Observation o;
  o.kind = comm::Observation::Kind::kAborted;
  try {
    std::rethrow_exception(state_->error());
  } catch (const std::exception& e) {
    o.detail = e.what();
  }
  if (size_ > 1) membership::write_note(diagnosis_context(), o, "abort");
  close_connections();
}

void GlooCommunicator::close_connections() {
  connections_closed_ = true;
  if (shm_) {
    std::string why = "its communicator failed";
    if (const std::exception_ptr error = state_->error()) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        why = e.what();
      } catch (...) {
      }
    }
    shm_->abort("rank " + std::to_string(rank_) + ": " + why);
  }
  for (auto* ctx : {sync_ctx_.get(), async_ctx_.get(), leaders_ctx_.get()}) {
    if (ctx == nullptr) continue;
    try {
      ctx->closeConnections();
    } catch (const std::exception& e) {
      SLURMDDP_LOG_DEBUG(kGlooComponent, "closing connections: " << e.what());
    }
  }
}

}  // namespace comm

std::vector<std::pair<std::string, std::string>> comm::gloo_join_fields() {
  return {{"wmem_max", std::to_string(local_wmem_max())}};
}

std::unique_ptr<Communicator> comm::make_gloo_communicator(
    const GlooOptions& options, std::shared_ptr<membership::Membership> group,
    std::shared_ptr<progress::Tracker> tracker) {
  auto c = std::make_unique<comm::GlooCommunicator>(options, std::move(group));
  c->track(std::move(tracker));
  return c;
}

std::unique_ptr<Communicator> make_gloo_communicator(const GlooOptions& options) {
  return comm::make_gloo_communicator(options, nullptr);
}

}  // namespace slurmddp
