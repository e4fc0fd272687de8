// Note [Open files at scale] in open_files.h.
#include "group/open_files.h"

#include <sys/resource.h>

#include <algorithm>

#include "group/store_host.h"

namespace slurmddp {

uint64_t open_files_needed(int world_size, bool hosts_store) {
  const auto n = static_cast<uint64_t>(std::max(world_size, 1));
  // Note [Store host bounds]: the host's server also holds connections that
  // have not authenticated yet, and leaves the reserve (both meshes and a
  // margin) to the rest of the process.
  return (hosts_store ? n + pending_wanted(world_size) : 0) + reserve_wanted(world_size);
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
