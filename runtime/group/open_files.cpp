// Note [Open files at scale] in open_files.h.
#include "group/open_files.h"

#include <sys/resource.h>

#include <algorithm>

namespace slurmddp {

uint64_t open_files_needed(int world_size, bool hosts_store) {
  const auto n = static_cast<uint64_t>(std::max(world_size, 1));
  return (hosts_store ? n : 0) + 2 * n + 256;
}

std::string ensure_open_files(uint64_t needed, const std::string& who) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return "";
  const auto shown = [](rlim_t v) {
    return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(v);
  };
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < needed) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? needed : std::min<rlim_t>(needed, rl.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= needed) return "";
  return who + " needs about " + std::to_string(needed) +
         " open files (its connections) but may open only " + shown(rl.rlim_cur) +
         " (RLIMIT_NOFILE soft, hard " + shown(rl.rlim_max) +
         "): raise the hard limit (ulimit -Hn before sbatch/srun, or limits.conf on the nodes; "
         "slurm.conf PropagateResourceLimitsExcept=NOFILE keeps the nodes' own)";
}

}  // namespace slurmddp
