// The launch rules: from the facts of a Slurm step and the resolved settings to
// the rendezvous environment of each task. One implementation, used by the SPANK
// plugin (facts from spank items) and by the runtime when the plugin is not
// installed (facts from SLURM_* variables).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launch/address.h"
#include "launch/gpu_binding.h"
#include "launch/settings.h"

namespace slurmddp::launch {

// Slurm's special step ids (batch script, extern, interactive, pending) are
// all >= this value; such steps are not task steps and get nothing.
inline constexpr uint32_t kFirstSpecialStepId = 0xfffffff0u;
inline bool is_task_step(uint32_t step_id) {
  return step_id < kFirstSpecialStepId;
}

// What the step looks like from one node.
struct StepFacts {
  uint32_t job_id = 0;
  uint32_t step_id = 0;
  uint32_t num_nodes = 0;         // nodes in the step
  uint32_t node_id = 0;           // this node's index in the step, 0-based
  uint32_t local_task_count = 0;  // tasks of the step on this node
  uint32_t total_task_count = 0;  // tasks in the step
  std::string first_node;         // first host of SLURM_STEP_NODELIST
  std::string node_name;          // this node, for messages
  std::string distribution;       // SLURM_DISTRIBUTION; empty when not set
  std::string resv_ports;         // SLURM_STEP_RESV_PORTS; empty when none
  // The node that runs global rank 0 when the layout says so but it need not be
  // the first node of the list (-m arbitrary: the first line of SLURM_HOSTFILE;
  // a heterogeneous step: the first node of its first component), with where it
  // came from; empty otherwise. `rank0_note` says why it could not be known.
  std::string rank0_node;
  std::string rank0_source;
  std::string rank0_note;
  // A heterogeneous step (srun ... : ...): one world across its components.
  // job_id is then the step's leading job id, shared by every component, and the
  // counts are the whole step's (Note [Heterogeneous steps]).
  uint32_t het_components = 0;  // 0: an ordinary step
  bool has_token = false;       // SLURMDDP_TOKEN reached the step (srun loaded the plugin)
  uint32_t restart_count = 0;   // times Slurm requeued the job (S_SLURM_RESTART_COUNT)
};

// Note [Heterogeneous steps]
//   Each component of `srun -n 2 : -n 2` is a step of its own job (ids J and
//   J+1) on its own nodes. Slurm numbers the tasks and nodes across the
//   components, in component order (SLURM_PROCID, SLURM_NODEID of each task),
//   and gives every component the combined counts (SLURM_STEP_NUM_TASKS,
//   SLURM_STEP_NUM_NODES), the combined node list -- sorted, so its first node
//   need not be rank 0's -- and the het job's id (SLURM_JOB_ID). So:
//   - the step is named after SLURM_JOB_ID.<step id> in every component, and the
//     port is hashed from it (reserved ports are per component and differ);
//   - rank 0's node is the first node, among the step's, of the lowest het
//     group (SLURM_JOB_NODELIST_HET_GROUP_<k>) that has nodes in the step;
//   - each task's RANK and NODE_RANK are Slurm's global numbers; LOCAL_RANK and
//     LOCAL_WORLD_SIZE count the task's component on its node (components
//     sharing a node are not merged).
//   A step of one component of a het job is an ordinary step, named the same way.
using StepEnv = std::function<std::optional<std::string>(const char* name)>;

// Rank 0's node of a step of a heterogeneous job (see the Note) and where it
// came from; nullopt when SLURM_HET_SIZE is not set. `step_nodes` is the step's
// node list (SLURM_STEP_NODELIST).
struct Rank0Node {
  std::string node;
  std::string source;
};
std::optional<Rank0Node> het_rank0_node(const StepEnv& env, const std::string& step_nodes);

// Reads the heterogeneous-job variables (SLURM_HET_SIZE, ...) of a step whose
// own component has `f.total_task_count` tasks on nodes `step_nodes`, and
// turns `f` into the facts of the whole step. Throws LaunchError naming the
// variable when the environment contradicts itself.
void apply_het_step(StepFacts& f, const StepEnv& env, const std::string& step_nodes);

// Checks the facts are self-consistent (counts non-zero, node_id < num_nodes, ...).
void check_step_facts(const StepFacts& f);

// "<jobid>.<stepid>"
std::string step_name(const StepFacts& f);

struct PortChoice {
  uint16_t port = 0;
  std::string source;  // for --ddp-verbose and errors
};
// MASTER_PORT: explicit setting > first port of SLURM_STEP_RESV_PORTS > a hash
// of the job id into the port range, offset by the step id, so that steps of
// one job never share a port (while fewer steps than ports in the range).
PortChoice choose_port(const Settings& s, const StepFacts& f);

// Whether the step's distribution puts global rank 0 on the first node of the
// step's node list: true for block, cyclic and plane (and when Slurm did not set
// one: its default is block), false for arbitrary and anything unknown.
bool rank0_on_first_node(const std::string& distribution);

// The I/O the plan needs, injectable for tests.
struct NetworkView {
  std::function<std::vector<IpAddress>(const std::string& host)> resolve = resolve_host;
  std::function<std::vector<InterfaceAddress>()> interfaces = local_interface_addresses;
  std::function<std::optional<IpAddress>(const IpAddress&)> route_source = route_source_address;
};

// Node-level decisions, identical on every node of the step.
struct StepPlan {
  std::string step;  // "<jobid>.<stepid>"
  uint32_t world_size = 0;
  uint32_t num_nodes = 0;
  uint32_t node_rank = 0;
  uint32_t local_world_size = 0;
  std::string master_host;  // the name (or literal) resolved for MASTER_ADDR
  std::string master_addr;
  std::string addr_source;  // e.g. "first node of the step" or "--ddp-addr"
  bool master_on_first_node = true;
  PortChoice port;
  std::string ifname;        // explicit interface (ifname=, --ddp-ifname)
  std::string route_ifname;  // this node's interface toward MASTER_ADDR; empty if unknown
  bool bind_gpu = false;
  bool threads = true;      // export thread counts (Note [Thread counts])
  bool nccl_ifname = true;  // NCCL_SOCKET_IFNAME toward MASTER_ADDR (Note [Socket interfaces])
  bool verbose = false;
  Launcher launcher = Launcher::kDirect;
  uint32_t het_components = 0;
  bool has_token = false;
  uint32_t restart_count = 0;
};

// Decides MASTER_ADDR/MASTER_PORT and the node-level values. Throws LaunchError
// when a value is invalid or MASTER_ADDR cannot be established with certainty.
StepPlan plan_step(const Settings& s, const StepFacts& f, const NetworkView& net = {});

// Set in every task: "hmac" when the step's token reached it. A process that
// finds this but no SLURMDDP_TOKEN lost the token on the way (a container or a
// wrapper filtering the environment) and must not fall back to an open
// rendezvous (Note [Announced token]).
inline constexpr const char* kEnvAuth = "SLURMDDP_AUTH";
// Set in every task: "<MASTER_ADDR>:<MASTER_PORT>" as the plugin exported them,
// so the runtime can tell when something changed them later (an image's preset
// MASTER_PORT, enroot's PyTorch hook, a wrapper script).
inline constexpr const char* kEnvMaster = "SLURMDDP_MASTER";

// What one task sees.
struct TaskFacts {
  uint32_t local_rank = 0;
  uint32_t global_rank = 0;
  GpuList gpus;  // the task's GPUs (CUDA_VISIBLE_DEVICES, ...), after Slurm's per-task binding
  // The step's GPUs on this node before Slurm's per-task binding (what
  // slurmstepd sees at user_init).
  std::optional<GpuList> node_gpus;
  std::optional<GpuBind> gpu_bind;  // SLURMD_TRES_BIND's GPU part
  // A heterogeneous step's node index across components (SLURM_NODEID of the
  // task); the plan's node index otherwise.
  std::optional<uint32_t> node_rank;
};

// Note [Device choice] (gpu_binding.h): SLURMDDP_LOCAL_DEVICE when the choice
// is certain; with `bind` (--ddp-bind-gpu) the task's GPU variable is narrowed
// to that one GPU.
DeviceChoice choose_task_device(const StepPlan& plan, const TaskFacts& t);

struct EnvChange {
  std::string name;
  std::optional<std::string> value;  // nullopt: unset
  bool overwrite = true;             // false: keep a value the user already set
};

// The variables to set (and unset) in one task, after checking the task against
// the plan (ranks in range; rank 0 on the first node when the plan assumes it;
// on rank 0's node, MASTER_ADDR is one of its addresses).
//
// Note [Socket interfaces]
//   PyTorch's Gloo binds to whatever the node's hostname resolves to unless
//   GLOO_SOCKET_IFNAME is set; on Debian-style hosts that is 127.0.1.1 and the
//   other ranks' connections are refused. NCCL's bootstrap and socket
//   transport take the first interface by its own preference (ib*, then any
//   but lo and docker*), which on multi-NIC nodes is often one the other
//   nodes cannot reach (NVIDIA/nccl#913): a hang or "connection refused" at
//   the first collective. So each node exports the interface its route to
//   MASTER_ADDR leaves through, which the rendezvous just proved reachable,
//   as both, unless the user or the container image set one already
//   (overwrite=false). NCCL_SOCKET_IFNAME governs only NCCL's sockets, not its
//   InfiniBand transport (NCCL_IB_HCA). The plugstack key nccl_ifname=no
//   leaves NCCL's own choice. An explicit ifname sets all of them.
std::vector<EnvChange> task_environment(const StepPlan& plan, const TaskFacts& t,
                                        const NetworkView& net = {});

// The admin's policies that every task of a task step gets, whether or not
// the step uses the plugin's rendezvous (--no-ddp, default=off): under
// require_token=yes, SLURMDDP_REQUIRE_TOKEN=1 (overwriting the user's value).
std::vector<EnvChange> policy_environment(const PlugstackConfig& conf);

// One line for --ddp-verbose. Never contains the token.
std::string describe(const StepPlan& plan, bool have_token);

}  // namespace slurmddp::launch
