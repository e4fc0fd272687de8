// The plugin's srun/sbatch/salloc options as data: one table with names, help
// text and ids, and one function that records a raw value. Validation happens
// later, once, in launch::resolve_settings.
#pragma once

#include <vector>

#include "launch/settings.h"

namespace slurmddp::plugin {

enum OptionId : int {
  kOptDdp = 1,
  kOptNoDdp,
  kOptPort,
  kOptAddr,
  kOptIfname,
  kOptBindGpu,
  kOptVerbose,
  kOptLauncher,
  kOptThreads,
};

struct OptionDoc {
  const char* name;     // without the leading "--"
  const char* arginfo;  // placeholder shown in --help, or nullptr for a flag
  const char* usage;    // help text, prefixed "[ddp]"
  int has_arg;          // 0 flag, 1 required argument
  OptionId id;
};

const std::vector<OptionDoc>& option_table();

// Records one option occurrence. Idempotent, because slurmstepd runs option
// callbacks twice. Returns false for an unknown id.
bool record_option(launch::UserOptions& opts, int id, const char* optarg);

}  // namespace slurmddp::plugin
