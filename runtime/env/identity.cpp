#include "slurmddp/identity.h"

#include <cstdlib>

#include "common/log.h"
#include "env/identity.h"
#include "env/pmix_identity.h"
#include "launch/error.h"
#include "launch/hostlist.h"
#include "launch/parse.h"
#include "launch/rendezvous.h"
#include "launch/settings.h"
#include "slurmddp/error.h"

namespace slurmddp {

namespace {

constexpr uint64_t kMaxRanks = 1u << 24;

const char* const kComponent = "identity";

// Wraps the launch rules' errors into the runtime's hierarchy, with context.
template <typename F>
auto checked(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const launch::LaunchError& e) {
    throw InvalidArgument(std::string("identity: failed to read the environment: ") + e.what());
  }
}

int int_var(const EnvReader& env, const char* name, uint64_t lo, uint64_t hi) {
  auto v = env(name);
  if (!v) {
    throw InvalidArgument(std::string("identity: failed to read the environment: ") + name +
                          " is not set; expected an integer in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
  }
  return checked([&] { return static_cast<int>(launch::parse_uint(name, *v, lo, hi)); });
}

std::optional<int> opt_int_var(const EnvReader& env, const char* name, uint64_t lo, uint64_t hi) {
  if (!env(name)) return std::nullopt;
  return int_var(env, name, lo, hi);
}

void check_less(const char* a_name, int a, const char* b_name, int b) {
  if (a >= b) {
    throw InvalidArgument(std::string("identity: contradictory environment: ") + a_name + "=" +
                          std::to_string(a) + " >= " + b_name + "=" + std::to_string(b) +
                          "; expected " + a_name + " < " + b_name);
  }
}

// The task's GPUs and, when the plugin did not say, the index the plugin's
// rules give (Note [Device choice]).
void read_device(const EnvReader& env, ProcessIdentity& id) {
  launch::GpuList list = launch::read_gpu_list(env);
  id.gpus = list.ids;
  id.gpu_variable = list.variable;
  if (auto d = env("SLURMDDP_LOCAL_DEVICE")) {
    id.local_device = checked([&] {
      return static_cast<int>(launch::parse_uint("SLURMDDP_LOCAL_DEVICE", *d, 0, 1u << 16));
    });
    id.device_why = "SLURMDDP_LOCAL_DEVICE=" + *d;
    return;
  }
  launch::DeviceFacts f;
  f.local_rank = static_cast<uint32_t>(id.local_rank);
  f.local_task_count = static_cast<uint32_t>(id.local_world_size);
  f.task = list;
  if (auto bind = env("SLURMD_TRES_BIND")) f.bind = launch::parse_gpu_bind(*bind);
  launch::DeviceChoice choice = launch::choose_device(f, false);
  id.device_why = choice.why;
  if (choice.local_device) id.local_device = static_cast<int>(*choice.local_device);
}

std::string ifname_of(const EnvReader& env) {
  if (auto v = env("SLURMDDP_IFNAME")) return *v;
  if (auto v = env("GLOO_SOCKET_IFNAME")) return launch::split(*v, ',').front();
  return {};
}

// Note [Announced token]
//   The plugin sets SLURMDDP_AUTH=hmac in every task whose step got a token. A
//   process that sees the announcement but no SLURMDDP_TOKEN lost the token on
//   the way (a container runtime or a wrapper that filters the environment).
//   Falling back to an open rendezvous would quietly drop the authentication
//   every other rank relies on, so that is refused unless the user says so
//   with SLURMDDP_ALLOW_OPEN=1.
std::string token_of(const EnvReader& env) {
  auto token = env("SLURMDDP_TOKEN");
  if (token && !token->empty()) return *token;
  auto auth = env(launch::kEnvAuth);
  if (!auth || auth->empty()) return "";
  auto allow = env("SLURMDDP_ALLOW_OPEN");
  if (allow && checked([&] { return launch::parse_bool("SLURMDDP_ALLOW_OPEN", *allow); })) {
    SLURMDDP_LOG_WARN(kComponent,
                      "SLURMDDP_TOKEN is not set although the plugin announced "
                      "one (SLURMDDP_AUTH="
                          << *auth
                          << "); running with an open rendezvous because "
                             "SLURMDDP_ALLOW_OPEN="
                          << *allow);
    return "";
  }
  throw InvalidArgument(
      "identity: SLURMDDP_TOKEN is not set, but slurm-ddp's plugin announced an authenticated "
      "rendezvous for step " +
      env(launch::kEnvStep).value_or("?") + " (SLURMDDP_AUTH=" + *auth +
      "): the token was lost between srun and this process, e.g. by a container or a wrapper "
      "that filters the environment; pass SLURMDDP_TOKEN through to the program, or set "
      "SLURMDDP_ALLOW_OPEN=1 to accept a rendezvous that anyone who reaches it can join");
}

// Note [A master changed after the plugin]
//   The plugin exports MASTER_ADDR:MASTER_PORT twice: as torch reads them, and
//   as SLURMDDP_MASTER. When they differ in a task, something set them after
//   the plugin ran: a container image's preset, or pyxis loaded after the
//   plugin copying enroot's PyTorch hook's values (MASTER_ADDR = the first
//   host name, MASTER_PORT = job id % 4536 + 61000: the same for every step of
//   a job, so two steps at once collide on it). The runtime then warns, on
//   every node's local rank 0, naming both values and the fix, and uses the
//   plugin's: they are derived from the step by the same rules on every node,
//   reserved for this step alone and checked to be rank 0's address, where a
//   preset is only as good as its own rule. A user who sets MASTER_ADDR or
//   MASTER_PORT on purpose after srun unsets SLURMDDP_MASTER (--ddp-addr and
//   --ddp-port are the plugin's way).
void prefer_plugins_master(const EnvReader& env, ProcessIdentity& id) {
  auto exported = env(launch::kEnvMaster);
  if (!exported) return;
  const std::string now = id.master_addr + ":" + std::to_string(id.master_port);
  if (*exported == now) return;
  const auto colon = exported->rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw InvalidArgument("identity: " + std::string(launch::kEnvMaster) + "=" + *exported +
                          " is not ADDR:PORT; it is slurm-ddp's plugin's export: unset it, or "
                          "leave it as the plugin set it");
  }
  const std::string addr = exported->substr(0, colon);
  checked([&] { launch::check_host_syntax(launch::kEnvMaster, addr); });
  const uint16_t port =
      checked([&] { return launch::parse_port(launch::kEnvMaster, exported->substr(colon + 1)); });
  if (id.local_rank == 0) {
    SLURMDDP_LOG_WARN(kComponent, "MASTER_ADDR:MASTER_PORT="
                                      << now << " differs from " << *exported
                                      << ", which slurm-ddp's plugin exported for step " << id.step
                                      << ": set after the plugin ran (a container "
                                         "image's preset, or pyxis with enroot's "
                                         "PyTorch hook loaded after the plugin); using "
                                      << *exported
                                      << ". Fix: load slurm-ddp's plugstack line after "
                                         "pyxis's (docs/admin-guide.md, \"Containers\"), "
                                         "or srun --container-env=MASTER_ADDR,"
                                         "MASTER_PORT; to use "
                                      << now << " instead, unset " << launch::kEnvMaster);
  }
  id.master_addr = addr;
  id.master_port = port;
}

std::optional<std::string> slurm_step(const EnvReader& env) {
  auto job = env("SLURM_JOB_ID");
  auto step = env("SLURM_STEP_ID");
  if (!step) step = env("SLURM_STEPID");
  if (!job || !step) return std::nullopt;
  return *job + "." + *step;
}

// Sources 1 and 2: the torchrun contract (the plugin exports it too).
ProcessIdentity from_torchrun(const EnvReader& env, IdentitySource source) {
  ProcessIdentity id;
  id.source = source;
  id.world_size = int_var(env, "WORLD_SIZE", 1, kMaxRanks);
  id.rank = int_var(env, "RANK", 0, kMaxRanks);
  check_less("RANK", id.rank, "WORLD_SIZE", id.world_size);
  id.local_world_size = opt_int_var(env, "LOCAL_WORLD_SIZE", 1, kMaxRanks).value_or(id.world_size);
  id.local_rank = opt_int_var(env, "LOCAL_RANK", 0, kMaxRanks).value_or(id.rank);
  check_less("LOCAL_RANK", id.local_rank, "LOCAL_WORLD_SIZE", id.local_world_size);
  if (id.local_world_size > id.world_size) {
    throw InvalidArgument("identity: contradictory environment: LOCAL_WORLD_SIZE=" +
                          std::to_string(id.local_world_size) +
                          " > WORLD_SIZE=" + std::to_string(id.world_size));
  }
  auto node = opt_int_var(env, "NODE_RANK", 0, kMaxRanks);
  if (!node) node = opt_int_var(env, "GROUP_RANK", 0, kMaxRanks);
  id.node_rank = node.value_or(0);
  id.num_nodes = opt_int_var(env, "SLURMDDP_NUM_NODES", 1, kMaxRanks)
                     .value_or((id.world_size + id.local_world_size - 1) / id.local_world_size);
  check_less("NODE_RANK", id.node_rank, "the node count", id.num_nodes);
  auto addr = env("MASTER_ADDR");
  if (!addr || addr->empty()) {
    throw InvalidArgument(
        "identity: failed to read the environment: MASTER_ADDR is not set; expected the host name "
        "or IP address of rank 0's node");
  }
  checked([&] { launch::check_host_syntax("MASTER_ADDR", *addr); });
  id.master_addr = *addr;
  auto port = env("MASTER_PORT");
  if (!port) {
    throw InvalidArgument(
        "identity: failed to read the environment: MASTER_PORT is not set; expected a TCP port "
        "number in [1, 65535]");
  }
  id.master_port = checked([&] { return launch::parse_port("MASTER_PORT", *port); });
  // torchrun's static rendezvous (what --ddp-launcher=torchrun asks for) hands
  // its workers its own TCPStore on MASTER_PORT: a different protocol, and the
  // port is taken, so rank 0 could not host the rendezvous there.
  if (auto agent = env("TORCHELASTIC_USE_AGENT_STORE"); agent && *agent == "True") {
    throw InvalidArgument(
        "identity: this process was started by torchrun with its static rendezvous "
        "(TORCHELASTIC_USE_AGENT_STORE=True): MASTER_ADDR:MASTER_PORT=" +
        id.master_addr + ":" + std::to_string(id.master_port) +
        " is torchrun's own store, which slurm-ddp's runtime cannot join; start the program "
        "with srun, one task per rank (--ddp-launcher=direct), or use torchrun's c10d "
        "rendezvous (--rdzv_backend=c10d)");
  }
  id.token = token_of(env);
  read_device(env, id);
  id.ifname = ifname_of(env);
  id.step = env("SLURMDDP_STEP").value_or(slurm_step(env).value_or(""));
  if (source == IdentitySource::kPlugin) prefer_plugins_master(env, id);
  return id;
}

// Source 3: bare Slurm variables, through the plugin's own rules.
ProcessIdentity from_slurm(const EnvReader& env, const launch::NetworkView& net) {
  return checked([&] {
    auto req = [&](const char* name) {
      auto v = env(name);
      if (!v) throw launch::LaunchError(std::string(name) + " is not set");
      return *v;
    };
    auto num = [&](const char* name) {
      return static_cast<uint32_t>(launch::parse_uint(name, req(name), 0, 0xffffffffu));
    };
    launch::StepFacts f;
    f.job_id = num("SLURM_JOB_ID");
    f.step_id = env("SLURM_STEP_ID") ? num("SLURM_STEP_ID") : num("SLURM_STEPID");
    if (!launch::is_task_step(f.step_id)) {
      throw launch::LaunchError(
          "this is not a task step (SLURM_STEP_ID=" + std::to_string(f.step_id) +
          ", the batch or an interactive step); launch the program with srun");
    }
    f.node_id = num("SLURM_NODEID");
    std::string tpn_name =
        env("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    auto tpn = launch::parse_tasks_per_node(tpn_name, req(tpn_name.c_str()));
    f.num_nodes = static_cast<uint32_t>(tpn.size());
    if (f.node_id >= f.num_nodes) {
      throw launch::LaunchError("SLURM_NODEID=" + std::to_string(f.node_id) + " but " + tpn_name +
                                " lists " + std::to_string(f.num_nodes) + " nodes");
    }
    f.local_task_count = tpn[f.node_id];
    // Summed in 64 bits: up to 2^24 nodes of up to 2^24 tasks each would wrap a
    // 32-bit sum into a plausible but wrong world size.
    uint64_t total = 0;
    for (uint32_t c : tpn) total += c;
    if (total > kMaxRanks) {
      throw launch::LaunchError(tpn_name + " adds up to " + std::to_string(total) +
                                " tasks; expected at most " + std::to_string(kMaxRanks));
    }
    f.total_task_count = env("SLURM_STEP_NUM_TASKS") ? num("SLURM_STEP_NUM_TASKS")
                         : env("SLURM_NTASKS")       ? num("SLURM_NTASKS")
                                                     : static_cast<uint32_t>(total);
    if (f.total_task_count != total) {
      throw launch::LaunchError("the task count " + std::to_string(f.total_task_count) +
                                " differs from the sum of " + tpn_name + " (" +
                                std::to_string(total) + ")");
    }
    std::string nodelist_name =
        env("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_NODELIST";
    f.first_node = launch::first_host(nodelist_name, req(nodelist_name.c_str()));
    f.node_name = env("SLURMD_NODENAME").value_or("?");
    f.distribution = env("SLURM_DISTRIBUTION").value_or("");
    f.resv_ports = env("SLURM_STEP_RESV_PORTS").value_or("");
    auto lookup = [&](const char* n) { return env(n); };
    // Note [Heterogeneous steps]: the node list is sorted but node ids follow
    // the components, so rank 0's node and this node's task count come from
    // the het groups and SLURM_GTIDS.
    if (auto het = launch::het_rank0_node(lookup, req(nodelist_name.c_str()))) {
      f.rank0_node = het->node;
      f.rank0_source = het->source;
      if (auto gtids = env("SLURM_GTIDS")) {
        f.local_task_count = static_cast<uint32_t>(launch::split(*gtids, ',').size());
      }
      f.resv_ports.clear();  // per component
    }

    launch::Settings s =
        launch::resolve_settings({}, lookup, launch::PlugstackConfig{}, launch::step_name(f));
    launch::StepPlan plan = launch::plan_step(s, f, net);

    ProcessIdentity id;
    id.source = IdentitySource::kSlurm;
    id.rank = static_cast<int>(num("SLURM_PROCID"));
    id.local_rank = static_cast<int>(num("SLURM_LOCALID"));
    id.world_size = static_cast<int>(plan.world_size);
    id.local_world_size = static_cast<int>(plan.local_world_size);
    id.node_rank = static_cast<int>(plan.node_rank);
    id.num_nodes = static_cast<int>(plan.num_nodes);
    if (id.rank >= id.world_size || id.local_rank >= id.local_world_size) {
      throw launch::LaunchError("SLURM_PROCID=" + std::to_string(id.rank) +
                                " SLURM_LOCALID=" + std::to_string(id.local_rank) + " do not fit " +
                                std::to_string(id.world_size) + " tasks, " +
                                std::to_string(id.local_world_size) + " on this node");
    }
    id.master_addr = plan.master_addr;
    id.master_port = plan.port.port;
    id.token = token_of(env);
    read_device(env, id);
    id.ifname = ifname_of(env);
    if (id.ifname.empty()) id.ifname = plan.route_ifname;
    id.step = plan.step;
    return id;
  });
}

bool has_any(const EnvReader& env, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (env(n)) return true;
  }
  return false;
}

}  // namespace

const char* to_string(IdentitySource s) {
  switch (s) {
    case IdentitySource::kPlugin:
      return "plugin";
    case IdentitySource::kTorchrun:
      return "torchrun";
    case IdentitySource::kSlurm:
      return "slurm";
    case IdentitySource::kPmix:
      return "pmix";
    case IdentitySource::kMpi:
      return "mpi";
  }
  return "?";
}

std::string ProcessIdentity::describe() const {
  std::string s = "rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " (local " +
                  std::to_string(local_rank) + "/" + std::to_string(local_world_size) + ", node " +
                  std::to_string(node_rank) + "/" + std::to_string(num_nodes) + ")";
  if (!master_addr.empty()) s += " master " + master_addr + ":" + std::to_string(master_port);
  s += std::string(" source ") + to_string(source);
  if (!step.empty()) s += " step " + step;
  if (local_device) s += " device " + std::to_string(*local_device);
  s += token.empty() ? " open" : " authenticated";
  return s;
}

ProcessIdentity identity_from_environment(const EnvReader& env) {
  return identity_from_environment(env, launch::NetworkView{});
}

ProcessIdentity identity_from_environment(const EnvReader& env, const launch::NetworkView& net) {
  bool plugin_vars = env(launch::kEnvStep).has_value();
  if (plugin_vars) {
    auto current = slurm_step(env);
    if (current && *current != *env(launch::kEnvStep)) {
      SLURMDDP_LOG_WARN(kComponent, "ignoring RANK, MASTER_ADDR, ... exported for step "
                                        << *env(launch::kEnvStep) << ": this is step " << *current
                                        << " (inherited from an outer step)");
      return from_slurm(env, net);
    }
    return from_torchrun(env, IdentitySource::kPlugin);
  }
  if (has_any(env, {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})) {
    return from_torchrun(env, IdentitySource::kTorchrun);
  }
  if (env("SLURM_PROCID") && env("SLURM_JOB_ID")) return from_slurm(env, net);
  throw InvalidArgument(
      "identity: failed to find this process's rank: none of SLURMDDP_STEP (slurm-ddp's plugin), "
      "RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun), SLURM_PROCID (srun) or PMIX_RANK "
      "(PMIx) is set; launch the program with srun, torchrun or mpirun");
}

ProcessIdentity identity_from_environment() {
  EnvReader env = [](const char* n) -> std::optional<std::string> {
    const char* v = std::getenv(n);
    return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
  };
  bool others = env(launch::kEnvStep) || env("RANK") || env("WORLD_SIZE") || env("MASTER_ADDR") ||
                env("MASTER_PORT") || (env("SLURM_PROCID") && env("SLURM_JOB_ID"));
  if (!others && env("PMIX_RANK")) {
    ProcessIdentity id = pmix_identity();
    read_device(env, id);
    return id;
  }
  return identity_from_environment(env);
}

}  // namespace slurmddp
