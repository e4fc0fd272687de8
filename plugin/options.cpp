#include "options.h"

#include <string>

namespace slurmddp::plugin {

const std::vector<OptionDoc>& option_table() {
  static const std::vector<OptionDoc> table = {
      {"ddp", nullptr,
       "[ddp] Export the rendezvous environment (RANK, MASTER_ADDR, ...) to every task", 0,
       kOptDdp},
      {"no-ddp", nullptr, "[ddp] Do not export the rendezvous environment", 0, kOptNoDdp},
      {"ddp-port", "N", "[ddp] Use port N for MASTER_PORT (1-65535)", 1, kOptPort},
      {"ddp-addr", "HOST", "[ddp] Use HOST (name or IP of global rank 0's node) for MASTER_ADDR", 1,
       kOptAddr},
      {"ddp-ifname", "NAME",
       "[ddp] Rendezvous and collectives over interface NAME (also NCCL/GLOO_SOCKET_IFNAME)", 1,
       kOptIfname},
      {"ddp-bind-gpu", nullptr, "[ddp] Narrow CUDA_VISIBLE_DEVICES to the task's own GPU", 0,
       kOptBindGpu},
      {"ddp-verbose", nullptr, "[ddp] Print the resolved rendezvous once per step", 0, kOptVerbose},
      {"ddp-launcher", "MODE",
       "[ddp] What each task is: direct (one rank, default), torchrun (one torchrun per node: "
       "PET_* variables), master-only (MASTER_ADDR/PORT only)",
       1, kOptLauncher},
      {"ddp-threads", "yes|no",
       "[ddp] Export OMP_NUM_THREADS and BLAS thread counts from the task's CPUs (default yes)", 1,
       kOptThreads},
  };
  return table;
}

bool record_option(launch::UserOptions& opts, int id, const char* optarg) {
  std::string arg = optarg != nullptr ? optarg : "";
  switch (id) {
    case kOptDdp:
      opts.enable = true;
      return true;
    case kOptNoDdp:
      opts.enable = false;
      return true;
    case kOptPort:
      opts.port = arg;
      return true;
    case kOptAddr:
      opts.addr = arg;
      return true;
    case kOptIfname:
      opts.ifname = arg;
      return true;
    case kOptBindGpu:
      opts.bind_gpu = true;
      return true;
    case kOptVerbose:
      opts.verbose = true;
      return true;
    case kOptLauncher:
      opts.launcher = arg;
      return true;
    case kOptThreads:
      opts.threads = arg;
      return true;
    default:
      return false;
  }
}

}  // namespace slurmddp::plugin
