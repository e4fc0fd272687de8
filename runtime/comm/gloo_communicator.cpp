#include "comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
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

#include "comm/gloo_algorithms.h"
#include "comm/gloo_failure.h"
#include "comm/gloo_store.h"
#include "comm/gloo_work.h"
#include "comm/over_membership.h"
#include "comm/reduce.h"
#include "common/log.h"
#include "membership/membership.h"
#include "slurmddp/error.h"
#include "slurmddp/gloo_communicator.h"

namespace slurmddp {

namespace comm {

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

namespace {

constexpr const char* kComponent = "gloo";
// Staging kept by the classic-algorithm cache (their own buffers come on top).
constexpr size_t kCacheBudget = size_t{8} << 20;
// net.core.wmem_max where it cannot be read: Linux's default.
constexpr size_t kDefaultWmemMax = 212992;
// float16/bfloat16 are widened to float32 in pieces of this many elements.
constexpr size_t kUpcastChunk = size_t{4} << 20;
// Scratch buffers above this are released after each use.
constexpr size_t kKeepScratchBytes = size_t{64} << 20;

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

bool resolves(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  freeaddrinfo(res);
  return true;
}

std::string first_of_list(const char* value) {
  std::string s(value);
  const auto comma = s.find(',');
  return comma == std::string::npos ? s : s.substr(0, comma);
}

Bytes text_bytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

struct Bind {
  std::string ifname;
  std::string hostname;
  std::string source;  // where the choice came from, for messages
};

Bind choose_bind(const GlooOptions& o) {
  if (!o.ifname.empty() && !o.hostname.empty()) {
    throw InvalidArgument(
        "gloo: failed to choose the local address: set ifname or hostname, "
        "not both; ifname=" +
        o.ifname + ", hostname=" + o.hostname);
  }
  if (!o.ifname.empty()) return {o.ifname, "", "ifname=" + o.ifname};
  if (!o.hostname.empty()) return {"", o.hostname, "hostname=" + o.hostname};
  for (const char* var : {"SLURMDDP_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') {
      const std::string ifname = first_of_list(v);
      return {ifname, "", std::string(var) + "=" + v};
    }
  }
  const std::string host = host_name();
  if (!host.empty() && resolves(host)) return {"", host, "hostname=" + host + " (this host)"};
  SLURMDDP_LOG_WARN(kComponent, "this host's name '"
                                    << host
                                    << "' does not resolve; binding 127.0.0.1 (set "
                                       "SLURMDDP_IFNAME to choose an interface)");
  return {"", "127.0.0.1", "hostname=127.0.0.1 (fallback)"};
}

// Note [SIGPIPE]: Gloo writes to its sockets with plain write/writev. When a
// peer has died, that raises SIGPIPE, whose default action ends the process
// without a word (Python programs never see it: the interpreter ignores
// SIGPIPE). Every thread that can write to Gloo's sockets blocks it instead,
// so the write fails with EPIPE and becomes an error naming the peer: our
// worker thread (blocked for its lifetime), Gloo's event-loop thread (it
// inherits the mask of the thread that creates the device) and the caller's
// thread during setup (restored afterwards, with any SIGPIPE raised meanwhile
// consumed).
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~ScopedSigpipeBlock() {
    if (sigismember(&old_, SIGPIPE)) return;  // it was blocked before: leave it
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    const timespec zero{0, 0};
    siginfo_t info;
    sigset_t pending;
    while (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) &&
           sigtimedwait(&set, &info, &zero) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t old_{};
};

// The largest send buffer this host lets a socket ask for (SO_SNDBUF).
size_t local_wmem_max() {
  std::ifstream in("/proc/sys/net/core/wmem_max");
  size_t v = 0;
  if (in >> v && v > 0) return v;
  return kDefaultWmemMax;
}

// The blocking-socket threshold in force (see GlooOptions::small_max_bytes):
// Note [Priming send buffers] sends it once to each peer at setup, so large
// groups shrink it to keep that under 16 MiB; and a primed send buffer
// (twice the smaller of it and wmem_max) must hold any blocking message.
size_t effective_small_max(size_t requested, int size, size_t group_wmem_max) {
  if (size <= 1) return requested;
  const size_t per_peer = std::max<size_t>(size_t{4} << 10, (size_t{16} << 20) / (size - 1));
  return std::min({requested, per_peer, group_wmem_max});
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const GlooOptions& options, std::shared_ptr<membership::Membership> group);
  ~GlooCommunicator() override;

  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "gloo"; }
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
    std::shared_ptr<GlooWork> work;
    std::function<void()> run;
  };

  // Setup (constructor).
  void join(std::shared_ptr<membership::Membership> group);
  std::shared_ptr<gloo::rendezvous::Context> connect_mesh(const char* name);
  void publish_endpoints();

  // Issuing (caller threads).
  void check_type(const char* verb, DataType type) const;
  void check_op(const char* verb, ReduceOp op) const;
  size_t checked_bytes(const char* verb, size_t count, DataType type, size_t ranks) const;
  WorkHandle submit(const std::string& what, std::function<void()> run);

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
  void do_broadcast(void* data, size_t count, DataType type, int root);
  void do_allgather(const void* send, void* recv, size_t count, DataType type);
  void do_reduce_scatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op);
  uint8_t* scratch(std::vector<uint8_t>& buffer, size_t bytes);
  void release(std::vector<uint8_t>& buffer);

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds grace_;
  const std::string prefix_;
  size_t small_max_;  // the threshold in force, set by join()
  const std::shared_ptr<Store> store_;
  std::shared_ptr<membership::Membership> group_;  // set by join()
  Bind bind_;

  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> sync_ctx_;
  std::shared_ptr<gloo::rendezvous::Context> async_ctx_;

  // Worker-thread state.
  comm::AlgorithmCache cache_{kCacheBudget};
  std::vector<uint8_t> upcast_;          // float32 copy of a 16-bit piece (ring tier)
  std::vector<uint8_t> reduce_scatter_;  // reduce-scatter staging
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

GlooCommunicator::GlooCommunicator(const GlooOptions& o,
                                   std::shared_ptr<membership::Membership> group)
    : rank_(o.rank),
      size_(o.size),
      timeout_(o.timeout),
      grace_(std::clamp(o.timeout / 4, std::chrono::milliseconds(100),
                        std::chrono::milliseconds(2000))),
      prefix_(o.prefix),
      small_max_(o.small_max_bytes),
      store_(o.store) {
  const std::string keys = "rank=" + std::to_string(o.rank) + ", size=" + std::to_string(o.size);
  if (o.size < 1) {
    throw InvalidArgument("gloo: failed to create a communicator: size must be >= 1; " + keys);
  }
  if (o.rank < 0 || o.rank >= o.size) {
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
    join(std::move(group));
    sync_ctx_ = connect_mesh("sync");
    if (small_max_ > 0) {
      try {
        comm::prime_send_buffers(*sync_ctx_, small_max_);  // Note [Priming send buffers]
      } catch (const std::exception& e) {
        throw PeerError("gloo: failed to prime the sync mesh of '" + prefix_ +
                        "': " + comm::strip_gloo_location(e.what()) + "; " + keys);
      }
    }
    for (int j = 0; j < size_; ++j) {
      if (j != rank_) sync_ctx_->getPair(j)->setSync(true, false);
    }
    async_ctx_ = connect_mesh("async");
    publish_endpoints();
    // The mesh records of this rank's previous group on the prefix are spent
    // (Note [Rendezvous generations]).
    for (const std::string name : {"sync/", "sync/rank_", "async/", "async/rank_"}) {
      const std::string old = group_->previous_key(name + std::to_string(rank_));
      try {
        if (!old.empty()) store_->erase(old);
      } catch (const std::exception& e) {
        SLURMDDP_LOG_DEBUG(kComponent, "erasing " << old << ": " << e.what());
      }
    }
    SLURMDDP_LOG_DEBUG(kComponent, "communicator '" << prefix_ << "' ready: rank=" << rank_
                                                    << ", size=" << size_ << ", " << bind_.source
                                                    << ", device=" << device_->str()
                                                    << ", timeout_ms=" << timeout_.count());
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

std::shared_ptr<gloo::rendezvous::Context> GlooCommunicator::connect_mesh(const char* name) {
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
  ctx->setTimeout(timeout_);
  comm::GlooStoreAdapter adapter(store_, group_->key(name) + "/", timeout_);
  try {
    ctx->connectFullMesh(adapter, device_);
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
  std::vector<std::vector<std::string>> per_peer(static_cast<size_t>(size_));
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    per_peer[static_cast<size_t>(j)] = {sync_ctx_->getPair(j)->address().str(),
                                        async_ctx_->getPair(j)->address().str()};
  }
  // The listening addresses the meshes exchanged name the same connections
  // (Note [Failure notes], step 1).
  for (const char* name : {"sync", "async"}) {
    try {
      const Bytes record =
          store_->get(group_->key(std::string(name) + "/" + std::to_string(rank_)), timeout_);
      const auto exchanged =
          comm::exchanged_endpoints(std::vector<char>(record.begin(), record.end()), rank_, size_);
      for (int j = 0; j < size_; ++j) {
        for (const auto& e : exchanged[static_cast<size_t>(j)]) {
          per_peer[static_cast<size_t>(j)].push_back(e);
        }
      }
    } catch (const std::exception& e) {
      SLURMDDP_LOG_DEBUG(kComponent,
                         "reading the " << name << " mesh's address record: " << e.what());
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

WorkHandle GlooCommunicator::submit(const std::string& what, std::function<void()> run) {
  std::unique_lock<std::mutex> lock(queue_mutex_);
  const std::string described = what + ", op #" + std::to_string(++issued_);
  auto work = std::make_shared<comm::GlooWork>(described, rank_, state_, timeout_);
  if (auto error = state_->error()) {
    lock.unlock();
    work->finish(error);
    return work;
  }
  queue_.push_back(Task{work, std::move(run)});
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
  return submit(what.str(), [=] { do_allreduce(data, count, type, op); });
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
  return submit(what.str(), [=] { do_broadcast(data, count, type, root); });
}

WorkHandle GlooCommunicator::allgather(const void* send, void* recv, size_t count, DataType type) {
  checked_bytes("allgather", count, type, static_cast<size_t>(size_));
  if (count > 0 && (send == nullptr || recv == nullptr)) {
    throw InvalidArgument("gloo: failed to allgather: null buffer; count=" + std::to_string(count) +
                          ", rank=" + std::to_string(rank_));
  }
  std::ostringstream what;
  what << "allgather " << count << ' ' << to_string(type) << " per rank";
  return submit(what.str(), [=] { do_allgather(send, recv, count, type); });
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
  return submit(what.str(), [=] { do_reduce_scatter(send, recv, count, type, op); });
}

WorkHandle GlooCommunicator::barrier() {
  return submit("complete a barrier", [this] {
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
      try {
        task.run();
      } catch (...) {
        failure = std::current_exception();
      }
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
    SLURMDDP_LOG_ERROR(kComponent, m);
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
  for (auto* ctx : {sync_ctx_.get(), async_ctx_.get()}) {
    if (ctx == nullptr) continue;
    try {
      ctx->closeConnections();
    } catch (const std::exception& e) {
      SLURMDDP_LOG_DEBUG(kComponent, "closing connections: " << e.what());
    }
  }
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
    // Note [16-bit reductions] in reduce.h.
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
  if (comm::choose_allreduce_tier(bytes, small_max_) == comm::AllreduceTier::kSmallSync) {
    const std::string key = std::string("allreduce/") + to_string(type) + "/" + to_string(base) +
                            "/" + std::to_string(count);
    auto entry = cache_.get(key, [&] {
      return size_ == 2 ? comm::make_allreduce_pair_exchange(sync_ctx_, type, base, count)
                        : comm::make_allreduce_hd(sync_ctx_, type, base, count);
    });
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

void GlooCommunicator::ring_allreduce(void* data, size_t count, DataType type, ReduceOp base) {
  gloo::AllreduceOptions opts(async_ctx_);
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
  opts.setTag(tag_++);
  opts.setTimeout(timeout_);
  gloo::allreduce(opts);
}

void GlooCommunicator::do_broadcast(void* data, size_t count, DataType type, int root) {
  if (count == 0 || size_ == 1) return;
  const size_t bytes = count * element_size(type);
  if (bytes <= small_max_) {
    auto entry = cache_.get("broadcast/" + std::to_string(bytes) + "/" + std::to_string(root),
                            [&] { return comm::make_broadcast(sync_ctx_, bytes, root); });
    if (rank_ == root) std::memcpy(entry->in.data(), data, bytes);
    entry->algorithm->run();
    if (rank_ != root) std::memcpy(data, entry->in.data(), bytes);
    return;
  }
  gloo::BroadcastOptions opts(async_ctx_);
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
  if (total <= small_max_) {
    auto entry = cache_.get("allgather/" + std::to_string(bytes),
                            [&] { return comm::make_allgather(sync_ctx_, bytes); });
    std::memcpy(entry->in.data(), send, bytes);
    entry->algorithm->run();
    std::memcpy(out, entry->out.data(), total);
    return;
  }
  gloo::AllgatherOptions opts(async_ctx_);
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

}  // namespace

}  // namespace comm

std::vector<std::pair<std::string, std::string>> comm::gloo_join_fields() {
  return {{"wmem_max", std::to_string(local_wmem_max())}};
}

std::unique_ptr<Communicator> comm::make_gloo_communicator(
    const GlooOptions& options, std::shared_ptr<membership::Membership> group) {
  return std::make_unique<comm::GlooCommunicator>(options, std::move(group));
}

std::unique_ptr<Communicator> make_gloo_communicator(const GlooOptions& options) {
  return comm::make_gloo_communicator(options, nullptr);
}

}  // namespace slurmddp
