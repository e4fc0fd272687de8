// A child process for multi-process tests (support/subprocess.h's Child with its
// stdin and stdout on pipes and its stderr in a temporary file, or with this
// process's), and the resident set size of a process. Ranks as processes:
// rank_group.h.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "subprocess.h"

namespace slurmddp::support {

enum class Output {
  kCaptured,   // stdin and stdout on pipes, stderr in a temporary file
  kInherited,  // this process's (a GPU worker's or a benchmark rank's messages)
};

// Every wait has a deadline, and a child still running at destruction is
// SIGKILLed (by PID) and reaped.
class Process : public support::Child {
 public:
  // Runs `argv` with the current environment plus `env` (an empty value
  // removes the variable).
  Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
          Output output = Output::kCaptured)
      : Child(argv, options(env, output)) {}

  // The first stdout line that starts with `prefix`, among the lines an
  // earlier wait_line() read past and then the new ones (all kept in
  // lines()); nullopt at EOF or once `within` passed. Lines read with
  // read_line() are not kept.
  std::optional<std::string> wait_line(const std::string& prefix,
                                       std::chrono::milliseconds within) {
    size_t i = 0;
    const auto deadline = Clock::now() + within;
    for (;;) {
      for (; i < lines_.size(); ++i) {
        if (lines_[i].rfind(prefix, 0) == 0) return lines_[i];
      }
      auto line = read_line(deadline);
      if (!line) return std::nullopt;
      lines_.push_back(std::move(*line));
    }
  }

  const std::vector<std::string>& lines() const { return lines_; }

 private:
  static support::SpawnOptions options(const std::map<std::string, std::string>& env,
                                       Output output) {
    support::SpawnOptions o;
    o.env = env;
    if (output == Output::kCaptured) {
      o.in = support::Stdio::kPipe;
      o.out = support::Stdio::kPipe;
      o.err = support::Stdio::kFile;
    }
    return o;
  }

  std::vector<std::string> lines_;
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
