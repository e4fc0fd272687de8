// The only file that includes <slurm/spank.h>. It gathers facts from Slurm into
// plain structs, calls the pure launch rules, applies the result, and maps
// errors to slurm_error + -1. No exception crosses the C ABI.
//
// Note [Where each decision is made]
//   srun/sbatch/salloc (local, allocator): init_post_opt validates the plugstack
//     arguments and the user's options before anything is allocated, so a typo
//     fails fast with srun's own exit code. In srun it also draws the per-step
//     token: setenv() there reaches every task of the step, in every component
//     of a heterogeneous step (see export_token).
//   slurmstepd (remote): user_init plans the step once per node (MASTER_ADDR,
//     MASTER_PORT, ...). task_init applies it to each task, and is where failures
//     are reported: a failing task_init makes srun exit non-zero on every Slurm,
//     a failing user_init only from 23.11 (Note [Slurm versions]), and neither
//     drains the node.
//   slurmd and prolog/epilog contexts do nothing and never fail: an error there
//     would drain nodes.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

extern "C" {
#include <slurm/slurm.h>
#include <slurm/spank.h>
}

#include "launch/error.h"
#include "launch/parse.h"
#include "launch/rendezvous.h"
#include "launch/settings.h"
#include "launch/threads.h"
#include "options.h"
#include "slurm_compat.h"
#include "token.h"

// Built with hidden visibility; these and the slurm_spank_* hooks are the only exports
// (spank_ddp.map). Declared one by one: SPANK_PLUGIN() gives them internal linkage in C++.
#define SLURMDDP_EXPORT __attribute__((visibility("default")))
extern "C" {
SLURMDDP_EXPORT extern const char plugin_name[] = "ddp";
SLURMDDP_EXPORT extern const char plugin_type[] = "spank";
SLURMDDP_EXPORT extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
SLURMDDP_EXPORT extern const unsigned int spank_plugin_version = 1;
#if SLURMDDP_SLURM_HAS_INIT_FAILURE_MODE
// slurm_spank_init never fails; were it to, the job is at fault, not the node.
SLURMDDP_EXPORT int slurm_spank_init_failure_mode = ESPANK_JOB_FAILURE;
#endif
}

namespace launch = slurmddp::launch;
namespace plugin = slurmddp::plugin;
namespace compat = slurmddp::plugin::compat;

namespace {

// The plugin's one per-process context.
struct Context {
  launch::UserOptions opts;
  std::optional<launch::PlugstackConfig> conf;
  std::string conf_error;
  bool skip = true;  // remote: not a task step, or disabled
  std::optional<launch::StepPlan> plan;
  std::string plan_error;
  bool have_token = false;
  std::optional<launch::GpuList> node_gpus;  // the step's GPUs here, before per-task binding
  uint32_t online_cpus = 0;  // the node's, read once per node (glibc reads sysfs for it)
  // The thread variables of the user's environment, as srun passed it
  // (read in user_init, before any plugin's task_init changed it).
  std::vector<std::pair<std::string, std::string>> user_thread_vars;
  // The admin's policies for every task of a task step (launch::policy_environment).
  std::vector<launch::EnvChange> policy;
};
Context g;

void report(const char* phase, const std::string& msg) {
  slurm_error("slurm-ddp: %s: %s", phase, msg.c_str());
}

int option_cb(int val, const char* optarg, int /*remote*/) {
  return plugin::record_option(g.opts, val, optarg) ? 0 : -1;
}

std::vector<spank_option> make_spank_options() {
  std::vector<spank_option> out;
  for (const auto& o : plugin::option_table()) {
    out.push_back(spank_option{const_cast<char*>(o.name), const_cast<char*>(o.arginfo),
                               const_cast<char*>(o.usage), o.has_arg, o.id, option_cb});
  }
  return out;
}

std::optional<std::string> remote_getenv(spank_t sp, const char* name) {
  std::vector<char> buf(256);
  while (true) {
    spank_err_t rc = spank_getenv(sp, name, buf.data(), static_cast<int>(buf.size()));
    if (rc == ESPANK_SUCCESS) return std::string(buf.data());
    if (rc != ESPANK_NOSPACE || buf.size() > (1u << 20)) return std::nullopt;
    buf.resize(buf.size() * 4);
  }
}

std::optional<std::string> local_getenv(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
}

uint32_t item_u32(spank_t sp, spank_item_t item, const char* what) {
  uint32_t v = 0;
  if (spank_get_item(sp, item, &v) != ESPANK_SUCCESS) {
    throw launch::LaunchError(std::string("failed to read ") + what + " from Slurm");
  }
  return v;
}

std::string first_node_of(const std::string& nodelist) {
  compat::Hostlist hl = slurm_hostlist_create(nodelist.c_str());
  if (hl == nullptr) throw launch::LaunchError("invalid SLURM_STEP_NODELIST='" + nodelist + "'");
  char* host = slurm_hostlist_shift(hl);
  std::string out = host != nullptr ? host : "";
  free(host);
  slurm_hostlist_destroy(hl);
  if (out.empty()) throw launch::LaunchError("empty SLURM_STEP_NODELIST='" + nodelist + "'");
  return out;
}

// -m arbitrary: task i runs on line i of SLURM_HOSTFILE, read with Slurm's own
// parser (the one srun used); rank 0's node is its first host. Leaves a note
// in `f` when the file cannot be read here.
void rank0_from_hostfile(launch::StepFacts& f, const std::optional<std::string>& path) {
  if (!path || path->empty()) {
    f.rank0_note = "SLURM_HOSTFILE is not set in the step";
    return;
  }
  char* hosts = slurm_read_hostfile(path->c_str(), static_cast<int>(f.total_task_count));
  if (hosts == nullptr) {
    f.rank0_note = "SLURM_HOSTFILE='" + *path + "' cannot be read on node " + f.node_name;
    return;
  }
  std::string list = hosts;
  free(hosts);
  f.rank0_node = first_node_of(list);
  f.rank0_source = "first line of SLURM_HOSTFILE=" + *path;
}

std::string this_host() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// user_init: plan the step once per node.
void plan_remote(spank_t sp) {
  launch::StepFacts f;
  f.job_id = item_u32(sp, S_JOB_ID, "the job id");
  f.step_id = item_u32(sp, S_JOB_STEPID, "the step id");
  if (!launch::is_task_step(f.step_id)) return;  // batch, extern, interactive: skip
  g.policy = launch::policy_environment(*g.conf);
  auto env = [sp](const char* n) { return remote_getenv(sp, n); };
  launch::Settings s = launch::resolve_settings(g.opts, env, *g.conf, launch::step_name(f));
  if (!s.enabled) return;
  g.skip = false;
  f.num_nodes = item_u32(sp, S_JOB_NNODES, "the node count");
  f.node_id = item_u32(sp, S_JOB_NODEID, "the node index");
  f.local_task_count = item_u32(sp, S_JOB_LOCAL_TASK_COUNT, "the local task count");
  f.total_task_count = item_u32(sp, S_JOB_TOTAL_TASK_COUNT, "the task count");
  f.node_name = remote_getenv(sp, "SLURMD_NODENAME").value_or(this_host());
  auto nodelist = remote_getenv(sp, "SLURM_STEP_NODELIST");
  if (!nodelist) throw launch::LaunchError("SLURM_STEP_NODELIST is not set in the step");
  f.first_node = first_node_of(*nodelist);
  f.distribution = remote_getenv(sp, "SLURM_DISTRIBUTION").value_or("");
  f.resv_ports = remote_getenv(sp, "SLURM_STEP_RESV_PORTS").value_or("");
  auto token = remote_getenv(sp, plugin::kEnvToken);
  g.have_token = token && !token->empty();
  f.has_token = g.have_token;
  // Slurm 22.05 gives the count to the batch step only (0 in srun steps); the
  // steps of a requeued batch job inherit SLURM_RESTART_COUNT from its script.
  f.restart_count = item_u32(sp, S_SLURM_RESTART_COUNT, "the job's restart count");
  if (auto v = remote_getenv(sp, "SLURM_RESTART_COUNT")) {
    f.restart_count = std::max(f.restart_count, static_cast<uint32_t>(launch::parse_uint(
                                                    "SLURM_RESTART_COUNT", *v, 0, 0xffffffffu)));
  }
  launch::apply_het_step(f, env, *nodelist);  // Note [Heterogeneous steps]
  if (!s.addr && f.rank0_node.empty() && !launch::rank0_on_first_node(f.distribution)) {
    rank0_from_hostfile(f, remote_getenv(sp, "SLURM_HOSTFILE"));
  }
  g.node_gpus = launch::read_gpu_list(env);
  // Note [Thread counts in containers] (threads.h)
  for (const char* name : launch::kThreadVars) {
    if (auto v = remote_getenv(sp, name)) g.user_thread_vars.emplace_back(name, *v);
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  g.online_cpus = online > 0 ? static_cast<uint32_t>(online) : 0;
  g.plan = launch::plan_step(s, f);
}

// task_init, in the task's own process: its CPUs (Note [Thread counts]).
// Slurm reports 1 CPU per task when srun was given no --cpus-per-task; that
// is its default, not a request, so without SLURM_CPUS_PER_TASK or
// SRUN_CPUS_PER_TASK the affinity mask (or the node shared by its tasks) decides.
launch::ThreadPlan plan_task_threads(spank_t sp) {
  launch::ThreadFacts f;
  f.env_cpus_per_task = remote_getenv(sp, "SLURM_CPUS_PER_TASK");
  f.srun_cpus_per_task = remote_getenv(sp, "SRUN_CPUS_PER_TASK");
  uint32_t step_cpt = 0;
  if (spank_get_item(sp, S_STEP_CPUS_PER_TASK, &step_cpt) == ESPANK_SUCCESS &&
      (step_cpt > 1 || f.env_cpus_per_task || f.srun_cpus_per_task)) {
    f.step_cpus_per_task = step_cpt;
  }
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    f.affinity_cpus = static_cast<uint32_t>(CPU_COUNT(&mask));
  }
  f.online_cpus = g.online_cpus;
  f.local_task_count = g.plan->local_world_size;
  f.env = [](const char* n) -> std::optional<std::string> {
    for (const auto& [name, value] : g.user_thread_vars) {
      if (name == n) return value;
    }
    return std::nullopt;
  };
  return launch::plan_threads(f);
}

void apply_changes(spank_t sp, const std::vector<launch::EnvChange>& changes) {
  for (const auto& change : changes) {
    spank_err_t rc = change.value ? spank_setenv(sp, change.name.c_str(), change.value->c_str(),
                                                 change.overwrite ? 1 : 0)
                                  : spank_unsetenv(sp, change.name.c_str());
    if (rc != ESPANK_SUCCESS && rc != ESPANK_ENV_EXISTS && change.value) {
      throw launch::LaunchError("failed to set " + change.name + ": " + spank_strerror(rc));
    }
  }
}

// task_init: apply the plan to one task.
int apply_remote(spank_t sp) {
  int local_id = 0;
  uint32_t global_id = 0;
  if (spank_get_item(sp, S_TASK_ID, &local_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_TASK_GLOBAL_ID, &global_id) != ESPANK_SUCCESS) {
    throw launch::LaunchError("failed to read the task ids from Slurm");
  }
  if (!g.plan) {
    if (local_id == 0) report("rendezvous", g.plan_error);  // once per node
    return -1;
  }
  launch::TaskFacts t;
  t.local_rank = static_cast<uint32_t>(local_id);
  t.global_rank = global_id;
  auto env = [sp](const char* n) { return remote_getenv(sp, n); };
  t.gpus = launch::read_gpu_list(env);
  if (g.node_gpus && g.node_gpus->variable == t.gpus.variable) t.node_gpus = g.node_gpus;
  if (auto bind = remote_getenv(sp, "SLURMD_TRES_BIND")) t.gpu_bind = launch::parse_gpu_bind(*bind);
  if (g.plan->het_components > 0) {  // Slurm's numbers across the components
    auto number = [sp](const char* name) {
      auto v = remote_getenv(sp, name);
      if (!v) throw launch::LaunchError(std::string(name) + " is not set in the task");
      return static_cast<uint32_t>(launch::parse_uint(name, *v, 0, 0xffffffffu));
    };
    t.global_rank = number("SLURM_PROCID");
    t.node_rank = number("SLURM_NODEID");
  }
  apply_changes(sp, launch::task_environment(*g.plan, t));
  std::optional<launch::ThreadPlan> threads;
  if (g.plan->threads) threads = plan_task_threads(sp);
  if (threads) {
    const std::string count = std::to_string(threads->threads);
    // overwrite: a value set since user_init is a container's or a hook's, not
    // the user's; the user's own goes back over it (Note [Thread counts in
    // containers])
    for (const auto& name : threads->set) (void)spank_setenv(sp, name.c_str(), count.c_str(), 1);
    for (const auto& [name, value] : g.user_thread_vars) {
      (void)spank_setenv(sp, name.c_str(), value.c_str(), 1);
    }
    if (!threads->warning.empty() && t.global_rank == 0) {
      std::fprintf(stderr, "slurm-ddp: warning: %s\n", threads->warning.c_str());
    }
  }
  if (g.plan->verbose && t.global_rank == 0) {
    std::string line = launch::describe(*g.plan, g.have_token);
    launch::DeviceChoice d = launch::choose_task_device(*g.plan, t);
    if (!d.why.empty()) {
      line += "; rank 0's GPU: " + d.why +
              (d.local_device ? "" : " (SLURMDDP_LOCAL_DEVICE is not exported)");
    }
    if (threads) line += "; rank 0's " + launch::describe(*threads);
    std::fprintf(stderr, "slurm-ddp: %s\n", line.c_str());
    std::fflush(stderr);
  }
  return 0;
}

// srun (local context), right after its options: the per-step token. Drawn
// here, before srun copies its environment for each component of a
// heterogeneous step, so that every component gets the same one (a later hook,
// local_user_init, reaches only the first component).
void export_token() {
  std::string token = plugin::generate_token();
  if (setenv(plugin::kEnvToken, token.c_str(), 1) != 0) {
    throw launch::LaunchError("failed to export the step token");
  }
}

template <typename F>
int guarded(const char* phase, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    report(phase, e.what());
  } catch (...) {
    report(phase, "unknown error");
  }
  return -1;
}

}  // namespace

extern "C" {

SLURMDDP_EXPORT int slurm_spank_init(spank_t sp, int ac, char** av) {
  spank_context_t ctx = spank_context();
  if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR && ctx != S_CTX_REMOTE) return 0;
  try {
    static std::vector<spank_option> opts = make_spank_options();
    for (auto& o : opts) spank_option_register(sp, &o);
    g.conf = launch::parse_plugstack_args(std::vector<std::string>(av, av + ac));
  } catch (const std::exception& e) {
    g.conf.reset();
    g.conf_error = e.what();
  }
  return 0;  // errors are reported where they can fail a step without draining a node
}

SLURMDDP_EXPORT int slurm_spank_init_post_opt(spank_t sp, int, char**) {
  if (spank_remote(sp) || spank_context() == S_CTX_ERROR) return 0;
  spank_context_t ctx = spank_context();
  if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR) return 0;
  return guarded("options", [ctx] {
    if (!g.conf) throw launch::LaunchError(g.conf_error);
    // Validates; throws on bad input.
    launch::Settings s = launch::resolve_settings(g.opts, local_getenv, *g.conf);
    if (ctx == S_CTX_LOCAL && s.enabled) export_token();
    return 0;
  });
}

SLURMDDP_EXPORT int slurm_spank_user_init(spank_t sp, int, char**) {
  if (!spank_remote(sp)) return 0;
  try {
    if (!g.conf) throw launch::LaunchError(g.conf_error);
    plan_remote(sp);
  } catch (const std::exception& e) {
    g.skip = false;
    g.plan.reset();
    g.plan_error = e.what();
  }
  return 0;  // failures are reported by task_init, which makes srun exit non-zero
}

SLURMDDP_EXPORT int slurm_spank_task_init(spank_t sp, int, char**) {
  if (!spank_remote(sp) || (g.skip && g.policy.empty())) return 0;
  return guarded("task", [sp] {
    apply_changes(sp, g.policy);  // in disabled steps too
    return g.skip ? 0 : apply_remote(sp);
  });
}

}  // extern "C"
