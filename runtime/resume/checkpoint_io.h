// The file side of Note [Checkpoint layout], shared by the C++ Checkpointer and
// the Python package's: atomic writes, step directory names, pruning.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace slurmddp::resume {

// Writes `bytes` to <dir>/<name>: a temporary name in `dir`, fsync, rename,
// fsync of the directory. Throws Error naming the path and the errno text.
void write_atomic(const std::string& dir, const std::string& name, const std::string& bytes);

// The whole file, or nullopt when it cannot be opened (errno says why).
std::optional<std::string> read_file(const std::string& path);

// "step-<N>", and back (-1 for a name that is not one).
std::string step_dir_name(int64_t step);
int64_t step_of(const std::string& name);

// Keeps the `keep` newest complete steps (those with a COMPLETE marker) up to
// `current`; removes older ones and incomplete ones below `current`.
void prune(const std::string& dir, int64_t current, int keep);

}  // namespace slurmddp::resume
