// A child process for multi-process tests (support/subprocess.h's Child with its
// stdin and stdout on pipes and its stderr in a temporary file), and the
// resident set size of a process.
#pragma once

#include <sys/types.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "subprocess.h"

namespace slurmddp::support {

// stdin and stdout on pipes, stderr in a temporary file; every wait has a
// deadline, and a child still running at destruction is SIGKILLed (by PID).
class Process : public support::Child {
 public:
  // Runs `argv` with the current environment plus `env` (an empty value
  // removes the variable).
  Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env)
      : Child(argv, options(env)) {}

 private:
  static support::SpawnOptions options(const std::map<std::string, std::string>& env) {
    support::SpawnOptions o;
    o.env = env;
    o.in = support::Stdio::kPipe;
    o.out = support::Stdio::kPipe;
    o.err = support::Stdio::kFile;
    return o;
  }
};

// Resident set size of a process in KiB, from /proc/<pid>/status (0 if unknown).
inline long rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

}  // namespace slurmddp::support
