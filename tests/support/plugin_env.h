// The environment the SPANK plugin gives task `rank` of a one-node step on
// loopback, for tests whose subject is what a training program sees
// (slurmddp::init(), StopSignal, the hang report): the product's own
// convention, where rank_args.h is the harness's. Variables that would make
// init() take another path (a step, a job, PMIx) are cleared; `extra` adds or
// overrides (an empty value removes).
#pragma once

#include <cstdint>
#include <string>

#include "subprocess.h"

namespace slurmddp::support {

inline Env plugin_env(int rank, int world, uint16_t master_port, const Env& extra = {}) {
  Env env{{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(master_port)},
          {"SLURMDDP_BACKEND", "gloo"},
          {"GLOO_SOCKET_IFNAME", "lo"},
          {"SLURMDDP_STEP", ""},
          {"SLURM_JOB_ID", ""},
          {"PMIX_RANK", ""}};
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

}  // namespace slurmddp::support
