#include "launch/settings.h"

#include "common/quote.h"
#include "launch/error.h"

namespace slurmddp::launch {

using common::quote;

const std::vector<KeyDoc>& plugstack_keys() {
  static const std::vector<KeyDoc> keys = {
      {"default", "on|off", "on",
       "whether steps get the rendezvous environment without --ddp (--no-ddp turns it off)"},
      {"port_range", "LO-HI", "61000-65535",
       "ports for MASTER_PORT when the step has no reserved ports; above the ephemeral range"},
      {"network", "CIDR[,CIDR]", "(any)",
       "pick MASTER_ADDR among the addresses of the master host inside these networks"},
      {"hostname_suffix", "SUFFIX", "(none)",
       "resolve <first node><SUFFIX> for MASTER_ADDR, e.g. -ib for n1-ib"},
      {"ifname", "NAME", "(none)",
       "network interface for rendezvous and collectives: MASTER_ADDR must lie in its network; "
       "also exports NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME"},
      {"bind_gpu", "yes|no", "no",
       "narrow CUDA_VISIBLE_DEVICES to the task's own GPU by default (--ddp-bind-gpu)"},
      {"threads", "yes|no", "yes",
       "export OMP_NUM_THREADS and the BLAS libraries' thread variables from each task's CPUs, "
       "unless the user set them"},
      {"nccl_ifname", "yes|no", "yes",
       "export NCCL_SOCKET_IFNAME = each node's interface toward MASTER_ADDR, unless the user or "
       "the container image set it (no: leave NCCL's own choice)"},
      {"verbose", "yes|no", "no", "print the resolved rendezvous once per step by default"},
      {"require_token", "yes|no", "no",
       "export SLURMDDP_REQUIRE_TOKEN=1 into every task of every task step, so that the runtime "
       "refuses to run a rendezvous store without the step's token (where srun did not load the "
       "plugin, or --no-ddp) instead of running it open"},
      {"launcher", "direct|torchrun|master-only", "direct",
       "what each task is by default (--ddp-launcher): one rank (direct), one torchrun agent per "
       "node (torchrun: PET_* variables), or a framework that maps SLURM_* itself (master-only: "
       "MASTER_ADDR/MASTER_PORT only)"},
  };
  return keys;
}

const char* to_string(Launcher l) {
  switch (l) {
    case Launcher::kDirect:
      return "direct";
    case Launcher::kTorchrun:
      return "torchrun";
    case Launcher::kMasterOnly:
      return "master-only";
  }
  return "?";
}

Launcher parse_launcher(const std::string& what, const std::string& value) {
  for (Launcher l : {Launcher::kDirect, Launcher::kTorchrun, Launcher::kMasterOnly}) {
    if (value == to_string(l)) return l;
  }
  throw LaunchError("invalid " + what + "=" + quote(value) +
                    ": expected one of direct, torchrun, master-only");
}

namespace {

std::string accepted_keys() {
  std::string s;
  for (const auto& k : plugstack_keys()) s += (s.empty() ? "" : ", ") + std::string(k.key);
  return s;
}

bool parse_on_off(const std::string& key, const std::string& value) {
  return parse_bool("plugstack argument " + key, value);
}

// The value of a yes|no option such as --ddp-threads=yes. parse_bool's other
// spellings (on/off, true/false, 1/0) are accepted too, as in the variables
// that mirror the options.
bool parse_yes_no_option(const std::string& option, const std::string& value) {
  try {
    return parse_bool(option, value);
  } catch (const LaunchError&) {
    throw LaunchError("invalid " + option + "=" + quote(value) +
                      ": expected yes or no (or on/off, true/false, 1/0)");
  }
}

}  // namespace

PlugstackConfig parse_plugstack_args(const std::vector<std::string>& args) {
  PlugstackConfig c;
  for (const auto& arg : args) {
    auto eq = arg.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw LaunchError("invalid plugstack argument " + quote(arg) +
                        ": expected key=value with key one of: " + accepted_keys());
    }
    std::string key = arg.substr(0, eq);
    std::string value = arg.substr(eq + 1);
    std::string what = "plugstack argument " + key;
    if (key == "default") {
      c.enabled_by_default = parse_on_off(key, value);
    } else if (key == "port_range") {
      c.port_range = parse_port_range(what, value);
    } else if (key == "network") {
      c.networks = parse_cidr_list(what, value);
    } else if (key == "hostname_suffix") {
      if (!value.empty()) check_host_syntax(what, "x" + value);
      c.hostname_suffix = value;
    } else if (key == "ifname") {
      check_ifname_syntax(what, value);
      c.ifname = value;
    } else if (key == "bind_gpu") {
      c.bind_gpu = parse_on_off(key, value);
    } else if (key == "threads") {
      c.threads = parse_on_off(key, value);
    } else if (key == "nccl_ifname") {
      c.nccl_ifname = parse_on_off(key, value);
    } else if (key == "verbose") {
      c.verbose = parse_on_off(key, value);
    } else if (key == "launcher") {
      c.launcher = parse_launcher(what, value);
    } else if (key == "require_token") {
      c.require_token = parse_on_off(key, value);
    } else {
      throw LaunchError("unknown plugstack argument " + quote(key) + " in " + quote(arg) +
                        "; accepted keys: " + accepted_keys());
    }
  }
  return c;
}

Settings resolve_settings(const UserOptions& opts, const EnvLookup& env,
                          const PlugstackConfig& conf, std::string_view current_step) {
  Settings s;
  s.networks = conf.networks;
  s.hostname_suffix = conf.hostname_suffix;
  s.port_range = conf.port_range;

  // enable
  s.enabled = conf.enabled_by_default;
  if (auto v = env(kEnvEnable)) s.enabled = parse_bool(kEnvEnable, *v);
  if (opts.enable) s.enabled = *opts.enable;

  // port: --ddp-port > SLURMDDP_PORT > MASTER_PORT set by the user
  if (opts.port) {
    s.port = Sourced<uint16_t>{parse_port("--ddp-port", *opts.port), "--ddp-port"};
  } else if (auto v = env(kEnvPort)) {
    s.port = Sourced<uint16_t>{parse_port(kEnvPort, *v), kEnvPort};
  } else if (auto mp = env("MASTER_PORT")) {
    auto marker = env(kEnvStep);
    bool inherited = marker && (current_step.empty() || *marker != current_step);
    if (!inherited) s.port = Sourced<uint16_t>{parse_port("MASTER_PORT", *mp), "MASTER_PORT"};
  }

  // addr
  if (opts.addr) {
    check_host_syntax("--ddp-addr", *opts.addr);
    s.addr = Sourced<std::string>{*opts.addr, "--ddp-addr"};
  } else if (auto v = env(kEnvAddr)) {
    check_host_syntax(kEnvAddr, *v);
    s.addr = Sourced<std::string>{*v, kEnvAddr};
  }

  // ifname
  s.ifname = conf.ifname;
  if (auto v = env(kEnvIfname)) {
    check_ifname_syntax(kEnvIfname, *v);
    s.ifname = *v;
  }
  if (opts.ifname) {
    check_ifname_syntax("--ddp-ifname", *opts.ifname);
    s.ifname = *opts.ifname;
  }

  s.bind_gpu = conf.bind_gpu;
  if (auto v = env(kEnvBindGpu)) s.bind_gpu = parse_bool(kEnvBindGpu, *v);
  if (opts.bind_gpu) s.bind_gpu = *opts.bind_gpu;

  s.threads = conf.threads;
  if (auto v = env(kEnvThreads)) s.threads = parse_bool(kEnvThreads, *v);
  if (opts.threads) s.threads = parse_yes_no_option("--ddp-threads", *opts.threads);

  s.nccl_ifname = conf.nccl_ifname;

  s.verbose = conf.verbose;
  if (auto v = env(kEnvVerbose)) s.verbose = parse_bool(kEnvVerbose, *v);
  if (opts.verbose) s.verbose = *opts.verbose;

  s.launcher = conf.launcher;
  if (auto v = env(kEnvLauncher)) s.launcher = parse_launcher(kEnvLauncher, *v);
  if (opts.launcher) s.launcher = parse_launcher("--ddp-launcher", *opts.launcher);
  return s;
}

}  // namespace slurmddp::launch
