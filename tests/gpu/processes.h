// Rank processes for the gpu suite: a test program starts itself again with
// other arguments and environment, and waits for the copies with a limit.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace slurmddp::gpu_testing {

// This program's path (/proc/self/exe).
std::string self_path();

// Starts this program with `args` and the current environment plus (or
// overridden by) `env`; -1 when it could not start.
pid_t spawn_self(const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env = {});

// The exit code of `pid`, 128 + signal when killed, or nullopt (after
// SIGKILL) when it did not end before `deadline`.
std::optional<int> wait_for(pid_t pid, std::chrono::steady_clock::time_point deadline);

}  // namespace slurmddp::gpu_testing
