#include "slurmddp/process_group.h"

#include <unistd.h>

#include <cstdlib>

#include "comm/over_membership.h"
#include "common/log.h"
#include "env/locality.h"
#include "group/duration.h"
#include "group/node_gpus.h"
#include "group/open_files.h"
#include "group/open_store.h"
#include "group/rendezvous_store.h"
#include "group/store_host.h"
#include "group/watch.h"
#include "launch/address.h"
#include "launch/error.h"
#include "launch/gpu_binding.h"
#include "membership/membership.h"
#include "slurmddp/error.h"
#include "slurmddp/tcp_store.h"
#include "slurmddp_config.h"

#if SLURMDDP_HAVE_GLOO
#include "slurmddp/gloo_communicator.h"
#endif
#include "slurmddp/nccl_communicator.h"
#if SLURMDDP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if SLURMDDP_HAVE_PMIX
#include "group/pmix_rendezvous.h"
#endif
#if SLURMDDP_HAVE_MPI
#include "group/mpi_group.h"
#endif

namespace slurmddp {

namespace {

const char* const kComponent = "init";

std::optional<std::string> getenv_opt(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
}

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

class Group : public ProcessGroup {
 public:
  Group(ProcessIdentity id, std::shared_ptr<Store> store, std::shared_ptr<Communicator> comm,
        std::chrono::milliseconds timeout, Bootstrap bootstrap,
        std::shared_ptr<progress::Tracker> tracker, std::unique_ptr<progress::Watchdog> watchdog,
        std::unique_ptr<progress::ReportSignal> report_signal)
      : id_(std::move(id)),
        store_(std::move(store)),
        comm_(std::move(comm)),
        timeout_(timeout),
        bootstrap_(bootstrap),
        tracker_(std::move(tracker)),
        watchdog_(std::move(watchdog)),
        report_signal_(std::move(report_signal)) {}
  ~Group() override {
    watchdog_.reset();  // first: it reads the tracker and uses the store
    comm_.reset();      // before the store (unless shared elsewhere): it may still use the store
  }
  void step_done(int64_t step) override {
    if (tracker_) tracker_->step_done(step);
  }
  const ProcessIdentity& identity() const override { return id_; }
  const std::shared_ptr<Communicator>& comm() const override { return comm_; }
  std::shared_ptr<Store> store() const override { return store_; }
  Bootstrap bootstrap() const override { return bootstrap_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  void shutdown() override {
    if (shut_down_) return;
    shut_down_ = true;
    comm_->barrier()->wait(timeout_);
  }

 private:
  ProcessIdentity id_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Communicator> comm_;
  std::chrono::milliseconds timeout_;
  Bootstrap bootstrap_;
  std::shared_ptr<progress::Tracker> tracker_;
  std::unique_ptr<progress::Watchdog> watchdog_;
  std::unique_ptr<progress::ReportSignal> report_signal_;
  bool shut_down_ = false;
};

// Note [One join]
//   init() joins the group once (membership/membership.h): every rank records
//   itself under "slurmddp/init", the world size is checked once, and the
//   record carries what the chosen backend needs every rank to know (Gloo's
//   socket buffer limit, NCCL's device). The communicator is then built over
//   that group and exchanges only its own data under the group's keys (Gloo's
//   mesh addresses, NCCL's unique id): no second join, no second size check.
// The backend a rank chose and why ("SLURMDDP_BACKEND=gloo", "auto: ...").
struct BackendChoice {
  Backend backend = Backend::kGloo;
  std::string why;
};

// The task's GPUs as PCI bus ids when the CUDA runtime sees as many as the GPU
// variable lists (Note [Node GPUs]), else the variable's entries.
std::vector<std::string> physical_gpus(const ProcessIdentity& id) {
#if SLURMDDP_HAVE_NCCL
  int n = 0;
  if (!id.gpus.empty() && id.gpu_variable == "CUDA_VISIBLE_DEVICES" &&
      cudaGetDeviceCount(&n) == cudaSuccess && static_cast<size_t>(n) == id.gpus.size()) {
    std::vector<std::string> ids;
    for (int d = 0; d < n; ++d) {
      char bus[64] = {};
      if (cudaDeviceGetPCIBusId(bus, sizeof bus, d) != cudaSuccess) return id.gpus;
      ids.emplace_back(bus);
    }
    return ids;
  }
#endif
  return id.gpus;
}

// Note [One backend]: each rank chooses its backend on its own (auto picks
// NCCL where the rank has a usable GPU), so a node with a broken driver, or a
// mix of GPU and CPU nodes, would split the group: NCCL ranks waiting for a
// unique id that Gloo ranks never send, until the full timeout, with a
// diagnosis about missing ranks. The backend is therefore a field of the join
// that every rank must give the same value: a rank that differs fails the
// join at once on every rank, naming both choices and why each was made.
std::shared_ptr<membership::Membership> join_group(const ProcessIdentity& id,
                                                   const BackendChoice& choice,
                                                   const std::vector<std::string>& physical,
                                                   const std::shared_ptr<Store>& store,
                                                   std::chrono::milliseconds timeout) {
  const Backend backend = choice.backend;
  membership::JoinOptions j =
      join_options(id, store, "slurmddp/init", "init: failed to join the process group: ", timeout);
  std::vector<std::string> agree;
  const auto gpu_fields =
      node_gpu_fields(id, physical, gpu_sharing_from_environment());  // Note [Node GPUs]
#if SLURMDDP_HAVE_GLOO
  if (backend == Backend::kGloo) {
    j.fields = comm::gloo_join_fields();
    agree = comm::kGlooAgreedFields;
  }
#endif
  if (backend == Backend::kNccl) {
    j.fields = {{"device", std::to_string(id.local_device.value_or(-1))}};
  }
  j.fields.insert(j.fields.end(), gpu_fields.begin(), gpu_fields.end());
  j.fields.emplace_back("backend", to_string(backend));
  j.fields.emplace_back("backend_why", choice.why);
  j.agree_equal = {"backend"};
  try {
    return membership::Membership::join(std::move(j), agree);
  } catch (const membership::SizeMismatch& e) {
    throw InvalidArgument(
        "init: failed to join the process group: WORLD_SIZE differs between ranks; rank " +
        std::to_string(e.rank) + " on " + host_name() +
        " has WORLD_SIZE=" + std::to_string(e.size) + ", another rank registered WORLD_SIZE=" +
        std::to_string(e.other_size) + " (rank " + std::to_string(e.other_rank) + ")");
  }
}

// Rank 0's server: its bounds from the world size and the limit of open files
// (Note [Store host bounds]), and where it listens (Note [Store listen address]).
void host_options(const ProcessIdentity& id, TcpStoreServerOptions& server) {
  // init() raised the limit already and said so when it could not; the other
  // front ends of the rendezvous (rendezvous_store.h) did not.
  (void)ensure_open_files(open_files_needed(id.world_size, true), "");
  const uint64_t nofile = soft_nofile();
  const TcpStoreServerOptions bounds = store_bounds(id.world_size, nofile);
  server.max_unauthenticated = bounds.max_unauthenticated;
  server.reserve_fds = bounds.reserve_fds;
  std::vector<launch::IpAddress> resolved;
  try {
    resolved = launch::resolve_host(id.master_addr);
  } catch (const launch::LaunchError&) {
    // Listening on every interface, which store_listen_address says.
  }
  const ListenChoice where =
      store_listen_address(id.master_addr, resolved, launch::local_interface_addresses());
  server.bind_host = where.host;
  SLURMDDP_LOG_INFO(
      kComponent, "rendezvous store: "
                      << where.why << "; at most " << server.max_unauthenticated
                      << " connections authenticating at once, " << server.reserve_fds
                      << " file descriptors left to the rest of "
                         "the process (limit "
                      << (nofile == 0 ? std::string("unlimited") : std::to_string(nofile)) << ")");
}

std::shared_ptr<Store> tcp_rendezvous(const ProcessIdentity& id, std::chrono::milliseconds timeout,
                                      const std::string& head) {
  TcpStoreOptions o;
  o.host = id.master_addr;
  o.port = id.master_port;
  o.is_server = id.rank == 0;
  o.token = id.token;
  o.timeout = timeout;
  // Note [Open store]
  const std::string open = check_open_store(id, getenv_opt(kEnvRequireToken), host_name(), head);
  if (!open.empty()) SLURMDDP_LOG_WARN(kComponent, open);
  if (o.is_server) host_options(id, o.server);
  try {
    return make_tcp_store(o);
  } catch (const TimeoutError& e) {
    if (o.is_server) throw;
    // Nobody answered on MASTER_ADDR:MASTER_PORT: rank 0 is the one missing.
    throw TimeoutError(head + "rank 0 is missing: it hosts the rendezvous store at " +
                       id.master_addr + ":" + std::to_string(id.master_port) +
                       " (MASTER_ADDR:MASTER_PORT) and did not come up: " + e.what() +
                       "; rank=" + std::to_string(id.rank) +
                       ", size=" + std::to_string(id.world_size) + ", host=" + host_name());
  }
}

// Whether this process can use a GPU at all: built with NCCL, and the CUDA
// runtime sees a device (CUDA_VISIBLE_DEVICES alone proves nothing).
bool gpu_usable() {
#if SLURMDDP_HAVE_NCCL
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

std::string env_shown(const char* name) {
  auto v = getenv_opt(name);
  return std::string(name) + "=" + (v ? "'" + *v + "'" : "<unset>");
}

// What init() adds to a failure of the NCCL communicator: how the backend was
// chosen, the device variables, who, and the way out.
std::string nccl_context(const ProcessIdentity& id) {
  return "; rank=" + std::to_string(id.rank) + ", host=" + host_name() + ", " +
         env_shown("SLURMDDP_BACKEND") + ", " + env_shown("SLURMDDP_LOCAL_DEVICE") + ", " +
         env_shown("CUDA_VISIBLE_DEVICES") +
         (id.device_why.empty() ? "" : ", device: " + id.device_why) +
         " (use SLURMDDP_BACKEND=gloo or auto to train on the CPU)";
}

// A failure of the NCCL communicator again, as its own type, with init()'s
// prefix and context.
template <typename E>
[[noreturn]] void rethrow_with_context(const E& e, const ProcessIdentity& id) {
  throw E("init: failed to create the NCCL communicator: " + std::string(e.what()) +
          nccl_context(id));
}

BackendChoice choose_backend(const InitOptions& options, const ProcessIdentity& id) {
  BackendChoice c{options.backend,
                  std::string("InitOptions::backend=") + to_string(options.backend)};
  if (c.backend == Backend::kAuto) {
    if (auto v = getenv_opt("SLURMDDP_BACKEND")) {
      c.why = "SLURMDDP_BACKEND=" + *v;
      if (*v == "gloo") {
        c.backend = Backend::kGloo;
      } else if (*v == "nccl") {
        c.backend = Backend::kNccl;
      } else if (*v == "mpi") {
        c.backend = Backend::kMpi;
      } else if (*v != "auto" && !v->empty()) {
        throw InvalidArgument("init: invalid SLURMDDP_BACKEND='" + *v +
                              "': expected gloo, nccl, mpi or auto");
      }
    }
  }
  if (c.backend == Backend::kAuto) {
    const std::string gpu = id.local_device
                                ? "GPU " + std::to_string(*id.local_device)
                                : "GPUs " + launch::GpuList{id.gpu_variable, id.gpus}.text();
    if (!id.local_device && id.gpus.empty()) {
      c.backend = Backend::kGloo;
      c.why = "auto: no GPU for this task";
    } else if (!gpu_usable()) {
      c.backend = Backend::kGloo;
      c.why = "auto: " + gpu + " of this task, but no usable CUDA device";
    } else {
      c.backend = Backend::kNccl;
      c.why = "auto: " + gpu + " usable";
    }
  }
  return c;
}

std::unique_ptr<Communicator> make_communicator(
    Backend backend, const ProcessIdentity& id, const std::shared_ptr<Store>& store,
    const std::shared_ptr<membership::Membership>& group, std::chrono::milliseconds timeout,
    [[maybe_unused]] const std::shared_ptr<progress::Tracker>& tracker) {  // unused without Gloo
  if (backend == Backend::kNccl) {
    // Note [init and NCCL]
    //   The communicator is built over the group that init() already joined
    //   (Note [One join]) on its rendezvous store (TCP, or the PMIx-announced
    //   one under --mpi=pmix): rank 0 puts NCCL's unique id under the group's
    //   keys and the others read it, so the GPU path needs no second
    //   bootstrap. The device is the task's SLURMDDP_LOCAL_DEVICE (the
    //   identity's rule). A task that cannot use NCCL (no device visible, a
    //   bad ordinal, a build without NCCL) fails here, after the rendezvous,
    //   with the communicator's own reason and init()'s context: the whole
    //   path up to the first CUDA call runs on any machine, so its wiring is
    //   tested without a GPU. Ranks that did get a device then fail within the
    //   timeout in NCCL's rendezvous, naming the ranks that did not join.
    NcclOptions o;
    o.rank = id.rank;
    o.size = id.world_size;
    o.device = id.local_device;
    o.store = store;
    o.prefix = group->prefix();
    o.timeout = timeout;
    try {
      return comm::make_nccl_communicator(o, group);
    } catch (const CudaError& e) {
      rethrow_with_context(e, id);
    } catch (const InvalidArgument& e) {
      rethrow_with_context(e, id);
    } catch (const TimeoutError& e) {
      rethrow_with_context(e, id);
    } catch (const PeerError& e) {
      rethrow_with_context(e, id);
    } catch (const NcclError& e) {
      rethrow_with_context(e, id);
    } catch (const Error& e) {
      rethrow_with_context(e, id);
    }
  }
#if SLURMDDP_HAVE_GLOO
  GlooOptions o;
  o.rank = id.rank;
  o.size = id.world_size;
  o.store = store;
  o.ifname = id.ifname;
  o.timeout = timeout;
  o.prefix = group->prefix();
  return comm::make_gloo_communicator(o, group, tracker);
#else
  (void)id;
  (void)store;
  (void)group;
  (void)timeout;
  throw InvalidArgument(
      "init: no communicator available: built without Gloo (meson -Dgloo=enabled)");
#endif
}

// Note [Node GPUs]: this rank's device among the node's ranks, or the
// failure when NCCL would get two ranks on one GPU that did not ask to share it.
void settle_device(ProcessIdentity& id, const BackendChoice& choice,
                   const std::vector<std::string>& physical, const membership::Membership& group) {
  if (id.gpus.empty()) return;
  const Locality where = locality_from_environment(id);
  const NodeGpuOutcome o =
      settle_node_gpus(id, group, where.node_ranks, where.node, getenv_opt("SLURMD_TRES_BIND"));
  id.local_device = o.device;
  id.device_why = o.why;
  if (!o.shared.empty()) SLURMDDP_LOG_INFO(kComponent, o.shared);
  if (o.conflict.empty()) return;
  if (choice.backend == Backend::kNccl) {
    throw InvalidArgument("init: " + o.conflict + "; rank=" + std::to_string(id.rank) +
                          ", host=" + host_name() + ", backend nccl (" + choice.why + ")");
  }
  if (physical != id.gpus) SLURMDDP_LOG_WARN(kComponent, o.conflict);
}

}  // namespace

membership::JoinOptions join_options(const ProcessIdentity& id, std::shared_ptr<Store> store,
                                     const std::string& prefix, const std::string& head,
                                     std::chrono::milliseconds timeout) {
  membership::JoinOptions j;
  j.store = std::move(store);
  j.prefix = prefix;
  j.rank = id.rank;
  j.size = id.world_size;
  j.deadline = std::chrono::steady_clock::now() + timeout;
  j.head = head;
  j.where = "rank=" + std::to_string(id.rank) + ", size=" + std::to_string(id.world_size) +
            ", host=" + host_name() + ", timeout_ms=" + std::to_string(timeout.count());
  j.locality = locality_from_environment(id);
  return j;
}

std::chrono::milliseconds timeout_from_environment(
    const std::optional<std::chrono::milliseconds>& requested) {
  if (requested) return *requested;
  if (auto v = getenv_opt("SLURMDDP_TIMEOUT")) return parse_duration("SLURMDDP_TIMEOUT", *v);
  return kDefaultTimeout;
}

Bootstrap bootstrap_from_environment(Bootstrap requested) {
  if (requested != Bootstrap::kAuto) return requested;
  auto v = getenv_opt("SLURMDDP_BOOTSTRAP").value_or("auto");
  if (v == "tcp") return Bootstrap::kTcp;
  if (v == "pmix") return Bootstrap::kPmix;
  if (v == "auto" || v.empty()) {
    return (SLURMDDP_HAVE_PMIX && getenv_opt("PMIX_RANK")) ? Bootstrap::kPmix : Bootstrap::kTcp;
  }
  throw InvalidArgument("init: invalid SLURMDDP_BOOTSTRAP='" + v + "': expected tcp, pmix or auto");
}

std::shared_ptr<Store> rendezvous_store(const ProcessIdentity& id, Bootstrap bootstrap,
                                        std::chrono::milliseconds timeout,
                                        const std::string& head) {
  if (bootstrap == Bootstrap::kTcp) {
    if (id.master_addr.empty()) {
      throw InvalidArgument(head + "failed to rendezvous: no MASTER_ADDR (identity source " +
                            std::string(to_string(id.source)) + "); use the PMIx bootstrap");
    }
    return tcp_rendezvous(id, timeout, head);
  }
#if SLURMDDP_HAVE_PMIX
  return pmix_rendezvous(id, timeout);  // Note [PMIx bootstrap]
#else
  throw InvalidArgument(head +
                        "SLURMDDP_BOOTSTRAP=pmix, but this build has no PMIx (built without "
                        "PMIx's headers: install libpmix-dev or pmix-devel and rebuild or "
                        "reinstall); unset it, or set SLURMDDP_BOOTSTRAP=tcp, to rendezvous at "
                        "MASTER_ADDR:MASTER_PORT");
#endif
}

std::unique_ptr<ProcessGroup> init(const InitOptions& options) {
  const auto requested = getenv_opt("SLURMDDP_BACKEND");
  if (options.backend == Backend::kMpi ||
      (options.backend == Backend::kAuto && requested && *requested == "mpi")) {
    // Note [MPI communicator]: MPI's own launch is the rendezvous, and its
    // world the identity.
#if SLURMDDP_HAVE_MPI
    return init_mpi_backend(timeout_from_environment(options.timeout));
#else
    throw InvalidArgument(
        "init: SLURMDDP_BACKEND=mpi, but this build has no MPI (meson -Dmpi=enabled)");
#endif
  }
  ProcessIdentity id = options.identity ? *options.identity : identity_from_environment();
  log::set_rank(id.rank);
  const std::chrono::milliseconds timeout = timeout_from_environment(options.timeout);
  const Bootstrap bootstrap = bootstrap_from_environment(options.bootstrap);
  const BackendChoice choice = choose_backend(options, id);
  SLURMDDP_LOG_INFO(kComponent, id.describe() << " backend " << to_string(choice.backend) << " ("
                                              << choice.why << ") bootstrap "
                                              << (bootstrap == Bootstrap::kPmix ? "pmix" : "tcp"));

  // Note [Open files at scale]: before the store's server takes connections.
  const std::string fds = ensure_open_files(
      open_files_needed(id.world_size, id.rank == 0 && bootstrap == Bootstrap::kTcp),
      "rank " + std::to_string(id.rank) + " of " + std::to_string(id.world_size) + " on " +
          host_name());
  if (!fds.empty()) SLURMDDP_LOG_WARN(kComponent, fds);
  const auto started = std::chrono::steady_clock::now();
  const auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 t)
        .count();
  };
  std::shared_ptr<Store> store = rendezvous_store(id, bootstrap, timeout, "init: ");
  const auto store_ms = ms_since(started);
  // Note [Node GPUs]: asked of the CUDA runtime once, for the join and the settling.
  const std::vector<std::string> physical = physical_gpus(id);
  auto group = join_group(id, choice, physical, store, timeout);
  const auto join_ms = ms_since(started) - store_ms;
  settle_device(id, choice, physical, *group);
  auto tracker = std::make_shared<progress::Tracker>();
  auto comm = make_communicator(choice.backend, id, store, group, timeout, tracker);
  // Note [Progress records]: Gloo marks its collectives in the tracker.
  WatchRequest watch_request;
  watch_request.store = store;
  watch_request.scope = group->scope();
  watch_request.rank = id.rank;
  watch_request.size = id.world_size;
  watch_request.node = locality_from_environment(id).node;
  // Every record is in the store once the join completed: one read, for a
  // rank the hang report cannot otherwise place.
  watch_request.node_of = [group](int r) { return group->record(r).host; };
  watch_request.timeout = timeout;
  watch_request.marks_collectives = choice.backend == Backend::kGloo;
  Watch watch = make_watch(watch_request, tracker);
  SLURMDDP_LOG_DEBUG(kComponent, "ready in " << ms_since(started) << " ms: store " << store_ms
                                             << " ms, join " << join_ms << " ms, communicator "
                                             << ms_since(started) - store_ms - join_ms << " ms");
  return std::make_unique<Group>(std::move(id), std::move(store), std::move(comm), timeout,
                                 bootstrap, std::move(tracker), std::move(watch.watchdog),
                                 std::move(watch.signal));
}

}  // namespace slurmddp
