// The knobs of the launch rules and where each value comes from.
//
// Precedence, written once: command-line option > environment of the step
// (what srun/sbatch was started with) > plugstack.conf argument > built-in default.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/address.h"
#include "launch/parse.h"

namespace slurmddp::launch {

// The default port range for hashed ports: above Linux's ephemeral range
// (32768-60999), so an automatically chosen port never races a client socket.
inline constexpr PortRange kDefaultPortRange{61000, 65535};

// What the tasks of a step are, and so which contract the plugin exports.
//
// Note [Launchers]
//   direct      every task is one rank: the torchrun contract (RANK, LOCAL_RANK,
//               WORLD_SIZE, ..., MASTER_ADDR/PORT), what torch's env:// reads.
//   torchrun    every task is one torchrun agent, one per node, which starts the
//               ranks itself: torchrun's own PET_* variables (PET_NNODES,
//               PET_NODE_RANK, PET_NPROC_PER_NODE, static rendezvous at
//               MASTER_ADDR:MASTER_PORT), so `srun --ntasks-per-node=1 torchrun
//               train.py` needs no flags and node rank 0 is the master's node.
//               RANK and friends are not exported: they would describe agents,
//               and torchrun sets the workers' own.
//   master-only for frameworks that map SLURM_PROCID/SLURM_LOCALID themselves
//               and refuse a preset RANK under Slurm (ignite): only MASTER_ADDR,
//               MASTER_PORT and the plugin's own SLURMDDP_* variables.
enum class Launcher { kDirect, kTorchrun, kMasterOnly };
const char* to_string(Launcher l);
// "direct" | "torchrun" | "master-only"; throws LaunchError naming `what`.
Launcher parse_launcher(const std::string& what, const std::string& value);

// Admin configuration: the arguments of the plugstack.conf line.
struct PlugstackConfig {
  bool enabled_by_default = true;            // default=on|off
  PortRange port_range = kDefaultPortRange;  // port_range=LO-HI
  std::vector<Cidr> networks;                // network=CIDR[,CIDR]
  std::string hostname_suffix;               // hostname_suffix=-ib
  std::string ifname;                        // ifname=ib0
  bool bind_gpu = false;                     // bind_gpu=yes|no
  bool threads = true;                       // threads=yes|no
  bool nccl_ifname = true;                   // nccl_ifname=yes|no
  bool verbose = false;                      // verbose=yes|no
  Launcher launcher = Launcher::kDirect;     // launcher=direct|torchrun|master-only
  bool require_token = false;                // require_token=yes|no (Note [Open store])
};

// Parses plugstack arguments ("key=value" each). Unknown keys and bad values
// throw LaunchError naming the key, the value and the accepted form.
PlugstackConfig parse_plugstack_args(const std::vector<std::string>& args);

// The accepted plugstack keys with their help text, for docs and errors.
struct KeyDoc {
  const char* key;
  const char* form;
  const char* default_value;
  const char* help;
};
const std::vector<KeyDoc>& plugstack_keys();

// Raw values of the user's srun/sbatch/salloc options (unset: not given).
struct UserOptions {
  std::optional<bool> enable;           // --ddp / --no-ddp
  std::optional<std::string> port;      // --ddp-port
  std::optional<std::string> addr;      // --ddp-addr
  std::optional<std::string> ifname;    // --ddp-ifname
  std::optional<bool> bind_gpu;         // --ddp-bind-gpu
  std::optional<std::string> threads;   // --ddp-threads=yes|no (validated in resolve_settings)
  std::optional<bool> verbose;          // --ddp-verbose
  std::optional<std::string> launcher;  // --ddp-launcher
};

// Reads one variable of the step's environment; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// An explicit value and the name of the option or variable it came from.
template <typename T>
struct Sourced {
  T value{};
  std::string source;
};

// Everything resolved, validated and ready for the decisions.
struct Settings {
  bool enabled = true;
  std::optional<Sourced<uint16_t>> port;     // explicit port, if any
  std::optional<Sourced<std::string>> addr;  // explicit master host/IP, if any
  std::string ifname;
  std::vector<Cidr> networks;
  std::string hostname_suffix;
  PortRange port_range = kDefaultPortRange;
  bool bind_gpu = false;
  bool threads = true;      // export thread counts (Note [Thread counts], threads.h)
  bool nccl_ifname = true;  // NCCL_SOCKET_IFNAME toward MASTER_ADDR (Note [Socket interfaces])
  bool verbose = false;
  Launcher launcher = Launcher::kDirect;
};

// Environment variables that mirror the options.
inline constexpr const char* kEnvEnable = "SLURMDDP_ENABLE";
inline constexpr const char* kEnvPort = "SLURMDDP_PORT";
inline constexpr const char* kEnvAddr = "SLURMDDP_ADDR";
inline constexpr const char* kEnvIfname = "SLURMDDP_IFNAME";
inline constexpr const char* kEnvBindGpu = "SLURMDDP_BIND_GPU";
inline constexpr const char* kEnvThreads = "SLURMDDP_THREADS";
inline constexpr const char* kEnvVerbose = "SLURMDDP_VERBOSE";
inline constexpr const char* kEnvLauncher = "SLURMDDP_LAUNCHER";
// Set by the plugin to 1 in every task of a task step under require_token=yes:
// the runtime then refuses to run a TCP rendezvous without SLURMDDP_TOKEN
// (Note [Open store], runtime/group/open_store.h).
inline constexpr const char* kEnvRequireToken = "SLURMDDP_REQUIRE_TOKEN";
// Set by the plugin in every task: "<jobid>.<stepid>". When a later srun
// inherits it, MASTER_PORT in that environment is the plugin's own export of an
// earlier step, not a user's choice, and is ignored.
inline constexpr const char* kEnvStep = "SLURMDDP_STEP";

// Applies the precedence and validates every value. `current_step` is
// "<jobid>.<stepid>" of the step being launched, or empty where unknown (srun
// before launch), in which case any inherited SLURMDDP_STEP marks MASTER_PORT
// as inherited.
Settings resolve_settings(const UserOptions& opts, const EnvLookup& env,
                          const PlugstackConfig& conf, std::string_view current_step = {});

}  // namespace slurmddp::launch
