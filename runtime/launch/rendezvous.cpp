#include "launch/rendezvous.h"

#include <algorithm>
#include <set>

#include "common/quote.h"
#include "launch/error.h"
#include "launch/hostlist.h"
#include "launch/parse.h"

namespace slurmddp::launch {

using common::quote;

namespace {

// Note [Stop signals through torchrun]
//   torchrun starts its workers in sessions of their own and handles SIGTERM,
//   SIGINT, SIGHUP and SIGQUIT itself: it sends the signal it got on to its
//   workers and kills them 30 s later. SIGUSR1 and SIGUSR2, which Slurm sends
//   before the time limit (--signal=USR1@120) and scancel --signal sends, end
//   torchrun by their default action where Slurm signals only the step's tasks
//   (proctrack/pgid), and never reach the workers. A newer torchrun (2.15, not
//   2.6) takes the signals it handles as --signals-to-handle, read from
//   PET_SIGNALS_TO_HANDLE like its other options (it then sets
//   TORCHELASTIC_SIGNALS_TO_HANDLE itself, from that option); the plugin adds
//   SIGUSR1 and SIGUSR2 there for a torchrun step (a value of the user's own,
//   and the flag on torchrun's command line, win), so the workers get every
//   stop signal and slurmddp.StopSignal agrees as under srun. An older torchrun
//   ignores the variable (docs/python.md, "Under torchrun").
const char* const kTorchrunSignals = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2";

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string first_token(const std::string& dist) {
  auto end = dist.find_first_of(":,=");
  std::string t = dist.substr(0, end);
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t;
}

}  // namespace

std::string step_name(const StepFacts& f) {
  return std::to_string(f.job_id) + "." + std::to_string(f.step_id);
}

void check_step_facts(const StepFacts& f) {
  auto bad = [&](const std::string& what) {
    throw LaunchError("inconsistent step " + step_name(f) + ": " + what);
  };
  if (f.num_nodes == 0) bad("0 nodes");
  if (f.total_task_count == 0) bad("0 tasks");
  if (f.local_task_count == 0) bad("0 tasks on node " + f.node_name);
  if (f.node_id >= f.num_nodes) {
    bad("node index " + std::to_string(f.node_id) + " >= node count " +
        std::to_string(f.num_nodes));
  }
  if (f.local_task_count > f.total_task_count) {
    bad("local task count " + std::to_string(f.local_task_count) + " > total task count " +
        std::to_string(f.total_task_count));
  }
  if (f.num_nodes > f.total_task_count) {
    bad("node count " + std::to_string(f.num_nodes) + " > task count " +
        std::to_string(f.total_task_count));
  }
  if (f.first_node.empty()) bad("empty step node list");
}

std::optional<Rank0Node> het_rank0_node(const StepEnv& env, const std::string& step_nodes) {
  auto size_text = env("SLURM_HET_SIZE");
  if (!size_text) return std::nullopt;
  auto groups = static_cast<uint32_t>(parse_uint("SLURM_HET_SIZE", *size_text, 1, 1u << 16));
  // One budget for the step's list and every group's (Note [Bounded parsing]):
  // the groups are walked host by host until one is in the step.
  HostBudget budget;
  std::set<std::string> in_step;
  for_each_host("SLURM_STEP_NODELIST", step_nodes, budget, [&in_step](const std::string& host) {
    in_step.insert(host);
    return true;
  });
  for (uint32_t k = 0; k < groups; ++k) {
    std::string name = "SLURM_JOB_NODELIST_HET_GROUP_" + std::to_string(k);
    auto list = env(name.c_str());
    if (!list) continue;
    std::string found;
    for_each_host(name, *list, budget, [&](const std::string& host) {
      if (in_step.count(host) != 0) found = host;
      return found.empty();
    });
    if (!found.empty()) {
      return Rank0Node{
          found, "first node of het group " + std::to_string(k) + " in the step (" + name + ")"};
    }
  }
  throw LaunchError("step of a heterogeneous job (SLURM_HET_SIZE=" + *size_text +
                    "): none of SLURM_JOB_NODELIST_HET_GROUP_0.." + std::to_string(groups - 1) +
                    " has a node of SLURM_STEP_NODELIST=" + quote(step_nodes) +
                    "; expected the step's nodes in its groups' node lists");
}

void apply_het_step(StepFacts& f, const StepEnv& env, const std::string& step_nodes) {
  auto size_text = env("SLURM_HET_SIZE");
  if (!size_text) return;
  auto number = [&](const char* name) -> uint32_t {
    auto v = env(name);
    if (!v) {
      throw LaunchError("step " + step_name(f) + " of a heterogeneous job: " + name +
                        " is not set; expected it in every component's environment");
    }
    return static_cast<uint32_t>(parse_uint(name, *v, 0, 0xffffffffu));
  };
  // Every component names the step after the het job (SLURM_JOB_ID), as its
  // tasks see it.
  f.job_id = number("SLURM_JOB_ID");
  uint32_t tasks = number("SLURM_STEP_NUM_TASKS");
  if (tasks == f.total_task_count) return;  // one component: an ordinary step
  if (tasks < f.total_task_count) {
    throw LaunchError("step " + step_name(f) + " of a heterogeneous job: SLURM_STEP_NUM_TASKS=" +
                      std::to_string(tasks) + " is less than this component's " +
                      std::to_string(f.total_task_count) + " tasks");
  }
  uint32_t nodes = number("SLURM_STEP_NUM_NODES");
  auto rank0 = het_rank0_node(env, step_nodes);
  f.rank0_node = rank0->node;
  f.rank0_source = rank0->source;
  f.total_task_count = tasks;
  f.num_nodes = nodes;
  f.het_components = static_cast<uint32_t>(parse_uint("SLURM_HET_SIZE", *size_text, 1, 1u << 16));
  f.resv_ports.clear();  // reserved per component: they differ between components
}

PortChoice choose_port(const Settings& s, const StepFacts& f) {
  if (s.port) return PortChoice{s.port->value, s.port->source};
  if (!f.resv_ports.empty()) {
    // Only the first port is used: the list stays ranges (Note [Bounded parsing]).
    auto ranges = parse_port_list("SLURM_STEP_RESV_PORTS", f.resv_ports);
    // Digits, commas and dashes once parsed; a long list is shortened.
    const std::string shown = f.resv_ports.size() <= 80 ? f.resv_ports : quote(f.resv_ports);
    return PortChoice{ranges.front().lo, "SLURM_STEP_RESV_PORTS=" + shown};
  }
  const PortRange& r = s.port_range;
  uint64_t base = splitmix64(f.job_id) % r.size();
  auto port = static_cast<uint16_t>(r.lo + (base + f.step_id) % r.size());
  return PortChoice{port, "hash of job " + std::to_string(f.job_id) + " step " +
                              std::to_string(f.step_id) + " into port_range " +
                              std::to_string(r.lo) + "-" + std::to_string(r.hi)};
}

bool rank0_on_first_node(const std::string& distribution) {
  std::string t = first_token(distribution);
  return t.empty() || t == "block" || t == "cyclic" || t == "plane" || t == "fcyclic";
}

StepPlan plan_step(const Settings& s, const StepFacts& f, const NetworkView& net) {
  check_step_facts(f);
  StepPlan p;
  p.step = step_name(f);
  p.world_size = f.total_task_count;
  p.num_nodes = f.num_nodes;
  p.node_rank = f.node_id;
  p.local_world_size = f.local_task_count;
  p.ifname = s.ifname;
  p.bind_gpu = s.bind_gpu;
  p.threads = s.threads;
  p.nccl_ifname = s.nccl_ifname;
  p.verbose = s.verbose;
  p.launcher = s.launcher;
  p.het_components = f.het_components;
  p.has_token = f.has_token;
  p.restart_count = f.restart_count;
  p.port = choose_port(s, f);

  AddressPolicy policy;
  policy.networks = s.networks;
  policy.allow_loopback = f.num_nodes == 1;
  if (!s.ifname.empty() && policy.networks.empty()) {
    try {
      policy.networks = interface_networks(s.ifname, net.interfaces());
    } catch (const LaunchError& e) {
      throw LaunchError(std::string("failed to use ifname on node ") + f.node_name + ": " +
                        e.what());
    }
  }

  if (s.addr) {
    p.master_host = s.addr->value;
    p.addr_source = s.addr->source;
    p.master_on_first_node = false;
  } else if (!f.rank0_node.empty()) {
    p.master_host = f.rank0_node + s.hostname_suffix;
    p.addr_source = f.rank0_source;
    p.master_on_first_node = false;  // rank 0's node checks that the address is its own
  } else {
    if (!rank0_on_first_node(f.distribution)) {
      throw LaunchError(
          "failed to establish MASTER_ADDR for step " + p.step +
          ": with task distribution SLURM_DISTRIBUTION=" + quote(f.distribution) +
          " global rank 0 need not run on the first node (" + f.first_node + ")" +
          (f.rank0_note.empty() ? "" : " and " + f.rank0_note) +
          "; name rank 0's host with --ddp-addr=HOST, or use block or cyclic distribution");
    }
    p.master_host = f.first_node + s.hostname_suffix;
    p.addr_source = "first node of the step";
    p.master_on_first_node = true;
  }
  std::vector<IpAddress> candidates;
  try {
    candidates = net.resolve(p.master_host);
  } catch (const LaunchError& e) {
    throw LaunchError(std::string("failed to establish MASTER_ADDR on node ") + f.node_name +
                      " (host from " + p.addr_source + "): " + e.what());
  }
  IpAddress master = select_address(p.master_host, candidates, policy);
  p.master_addr = master.str();
  if (!s.ifname.empty()) {
    p.route_ifname = s.ifname;
  } else if (auto src = net.route_source(master)) {
    p.route_ifname = interface_of(*src, net.interfaces());
  }
  return p;
}

DeviceChoice choose_task_device(const StepPlan& plan, const TaskFacts& t) {
  DeviceFacts f;
  f.local_rank = t.local_rank;
  f.local_task_count = plan.local_world_size;
  f.task = t.gpus;
  f.node = t.node_gpus;
  f.bind = t.gpu_bind;
  return choose_device(f, plan.bind_gpu);
}

std::vector<EnvChange> task_environment(const StepPlan& plan, const TaskFacts& t,
                                        const NetworkView& net) {
  auto fail = [&](const std::string& why) {
    throw LaunchError("task rank " + std::to_string(t.global_rank) + " of step " + plan.step +
                      ": " + why);
  };
  const uint32_t node_rank = t.node_rank.value_or(plan.node_rank);
  if (t.global_rank >= plan.world_size) {
    fail("RANK " + std::to_string(t.global_rank) + " >= WORLD_SIZE " +
         std::to_string(plan.world_size));
  }
  if (t.local_rank >= plan.local_world_size) {
    fail("LOCAL_RANK " + std::to_string(t.local_rank) + " >= LOCAL_WORLD_SIZE " +
         std::to_string(plan.local_world_size));
  }
  if (node_rank >= plan.num_nodes) {
    fail("NODE_RANK " + std::to_string(node_rank) + " >= the node count " +
         std::to_string(plan.num_nodes));
  }
  if (plan.launcher == Launcher::kTorchrun && plan.local_world_size != 1) {
    fail("--ddp-launcher=torchrun runs one torchrun per node, but this node runs " +
         std::to_string(plan.local_world_size) +
         " tasks of the step; launch with --ntasks-per-node=1 (torchrun starts the ranks)");
  }
  if (t.global_rank == 0) {
    if (plan.master_on_first_node && node_rank != 0) {
      fail("global rank 0 runs on node index " + std::to_string(node_rank) +
           ", not on the first node of the step, so MASTER_ADDR=" + plan.master_addr +
           " would be wrong; name rank 0's host with --ddp-addr=HOST");
    }
    auto master = IpAddress::parse(plan.master_addr);
    bool local = false;
    for (const auto& ia : net.interfaces()) local = local || (master && ia.addr == *master);
    if (!local) {
      fail("MASTER_ADDR=" + plan.master_addr + " (resolved from '" + plan.master_host + "', " +
           plan.addr_source + ") is not an address of the node running rank 0; other ranks " +
           "could not reach the rendezvous. Fix name resolution, hostname_suffix=/network=, or " +
           "--ddp-addr");
    }
  }

  std::vector<EnvChange> env;
  auto set = [&](const char* k, const std::string& v) { env.push_back({k, v}); };
  auto unset = [&](const char* k) { env.push_back({k, std::nullopt}); };
  const std::string port = std::to_string(plan.port.port);
  const bool direct = plan.launcher == Launcher::kDirect;
  // Note [Launchers]: the per-rank contract only where each task is one rank.
  if (!direct) {
    for (const char* k :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK"}) {
      unset(k);
    }
  } else {
    set("RANK", std::to_string(t.global_rank));
    set("LOCAL_RANK", std::to_string(t.local_rank));
    set("WORLD_SIZE", std::to_string(plan.world_size));
    set("LOCAL_WORLD_SIZE", std::to_string(plan.local_world_size));
    set("NODE_RANK", std::to_string(node_rank));
    set("GROUP_RANK", std::to_string(node_rank));
  }
  set("MASTER_ADDR", plan.master_addr);
  set("MASTER_PORT", port);
  if (plan.launcher == Launcher::kTorchrun) {
    // torchrun reads its options from PET_<OPTION>; a flag on its command line
    // still wins. The static rendezvous makes node rank 0 the master's node.
    set("PET_NNODES", std::to_string(plan.num_nodes));
    set("PET_NODE_RANK", std::to_string(node_rank));
    set("PET_MASTER_ADDR", plan.master_addr);
    set("PET_MASTER_PORT", port);
    set("PET_RDZV_BACKEND", "static");
    set("PET_RDZV_ENDPOINT", plan.master_addr + ":" + port);
    set("PET_RDZV_ID", plan.step);
    // Note [Stop signals through torchrun]
    env.push_back({"PET_SIGNALS_TO_HANDLE", kTorchrunSignals, /*overwrite=*/false});
  }
  set(kEnvStep, plan.step);
  set(kEnvMaster, plan.master_addr + ":" + port);
  if (plan.has_token) {
    set(kEnvAuth, "hmac");
  } else {
    unset(kEnvAuth);
  }
  set("SLURMDDP_NUM_NODES", std::to_string(plan.num_nodes));
  // A fresh start (0) or the n-th run after Slurm requeued the job; torchrun's
  // name too, for PyTorch code that already reads it.
  set("SLURMDDP_RESTART_COUNT", std::to_string(plan.restart_count));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(plan.restart_count));
  DeviceChoice d = choose_task_device(plan, t);
  if (plan.launcher == Launcher::kTorchrun) {
    // One agent per node starts one rank per GPU it sees; without GPUs,
    // torchrun's own default (1) or its --nproc-per-node flag decides.
    const size_t gpus = t.gpus.ids.size();
    if (gpus > 0) {
      set("PET_NPROC_PER_NODE", std::to_string(gpus));
    } else {
      unset("PET_NPROC_PER_NODE");
    }
    unset("SLURMDDP_LOCAL_DEVICE");  // each worker picks LOCAL_RANK's GPU
  } else if (d.local_device) {
    set("SLURMDDP_LOCAL_DEVICE", std::to_string(*d.local_device));
  } else {
    unset("SLURMDDP_LOCAL_DEVICE");
  }
  if (d.visible_devices && plan.launcher != Launcher::kTorchrun) {
    set(t.gpus.variable.c_str(), *d.visible_devices);
  }
  if (!plan.ifname.empty()) {
    set("NCCL_SOCKET_IFNAME", plan.ifname);
    set("GLOO_SOCKET_IFNAME", plan.ifname);
    set("SLURMDDP_IFNAME", plan.ifname);
  } else if (!plan.route_ifname.empty()) {  // Note [Socket interfaces]
    env.push_back({"GLOO_SOCKET_IFNAME", plan.route_ifname, /*overwrite=*/false});
    if (plan.nccl_ifname) {
      env.push_back({"NCCL_SOCKET_IFNAME", plan.route_ifname, /*overwrite=*/false});
    }
  }
  if (plan.verbose) set(kEnvVerbose, "1");
  return env;
}

std::string describe(const StepPlan& p, bool have_token) {
  std::string tasks = p.launcher == Launcher::kTorchrun ? " torchrun agents=" : " WORLD_SIZE=";
  std::string s = "step " + p.step + ":" + tasks + std::to_string(p.world_size) +
                  " nodes=" + std::to_string(p.num_nodes) + " MASTER_ADDR=" + p.master_addr + " (" +
                  p.master_host + ", " + p.addr_source +
                  ") MASTER_PORT=" + std::to_string(p.port.port) + " (" + p.port.source + ")";
  if (!p.ifname.empty()) s += " ifname=" + p.ifname;
  if (p.ifname.empty() && !p.route_ifname.empty()) s += " route_ifname=" + p.route_ifname;
  if (p.bind_gpu) s += " bind_gpu=yes";
  if (p.launcher != Launcher::kDirect) s += std::string(" launcher=") + to_string(p.launcher);
  if (p.het_components > 0) s += " het_components=" + std::to_string(p.het_components);
  s += have_token ? " token=set" : " token=none (srun did not load the plugin; rendezvous is open)";
  return s;
}

std::vector<EnvChange> policy_environment(const PlugstackConfig& conf) {
  std::vector<EnvChange> out;
  if (conf.require_token) out.push_back({kEnvRequireToken, std::string("1"), true});
  return out;
}

}  // namespace slurmddp::launch
