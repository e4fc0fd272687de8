// Note [Open files at scale]
//   Every rank's connections are file descriptors: rank 0's store holds one
//   per rank, and a flat Gloo mesh one per peer (two meshes once the
//   event-loop one is connected, Note [Lazy meshes]). srun gives tasks the
//   submitting shell's soft limit (PropagateResourceLimits), commonly 1,024,
//   so a job of 1,000 ranks would fail at rank 0 with "Too many open files"
//   that names nothing. init() raises the soft limit (RLIMIT_NOFILE) to what
//   the group needs, up to the hard limit, and says so in one warning naming
//   both numbers and the way out when even the hard limit is short.
#pragma once

#include <cstdint>
#include <string>

namespace slurmddp {

// The descriptors a rank of `world_size` needs: the store's connections (on
// rank 0, `hosts_store`: one per rank and those still authenticating, Note
// [Store host bounds]), both flat meshes, and a margin for the program's own.
uint64_t open_files_needed(int world_size, bool hosts_store);

// Raises this process's soft RLIMIT_NOFILE to `needed` (never above the hard
// limit, never lowers it). Returns "" when the limit holds `needed`, else the
// warning: the limits, what is needed, and how to raise the hard limit.
std::string ensure_open_files(uint64_t needed, const std::string& who);

}  // namespace slurmddp
