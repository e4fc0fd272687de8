// Ranks as processes: the one launcher of the multi-process suites, the GPU
// workers and the benchmarks. A RankGroup starts one program per rank, each
// with its own command line and environment (plugin_env.h's variables, or
// rank_args.h's command line around a store hosted here: rank_launcher.h),
// as Processes (process.h: stdout read line by line, stderr kept in a file,
// or this process's streams); it waits only with deadlines, and SIGKILLs (by
// PID) and reaps every rank still running when it is destroyed. Ranks as
// threads: rank_threads.h.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "process.h"
#include "subprocess.h"

namespace slurmddp::support {

// What one rank runs: argv (argv[0] a path) and the variables added to this
// process's environment (an empty value removes one).
struct RankLaunch {
  std::vector<std::string> argv;
  Env env;
};

// Rank r of a group of `world`.
using LaunchOf = std::function<RankLaunch(int rank, int world)>;

class RankGroup {
 public:
  // Starts ranks `which` (every rank 0 .. world-1 when not given) of a group
  // of `world`, in that order. Throws std::runtime_error naming the rank when
  // one cannot be started; the ranks started before it are SIGKILLed.
  RankGroup(int world, const LaunchOf& launch_of, Output output = Output::kCaptured,
            const std::optional<std::vector<int>>& which = std::nullopt)
      : ranks_(static_cast<size_t>(world)) {
    std::vector<int> ranks;
    if (which) {
      ranks = *which;
    } else {
      for (int r = 0; r < world; ++r) ranks.push_back(r);
    }
    for (int r : ranks) {
      RankLaunch l = launch_of(r, world);
      try {
        ranks_.at(static_cast<size_t>(r)) = std::make_unique<Process>(l.argv, l.env, output);
      } catch (const std::exception& e) {
        throw std::runtime_error("rank " + std::to_string(r) + " of " + std::to_string(world) +
                                 ": " + e.what());
      }
    }
  }

  int size() const { return static_cast<int>(ranks_.size()); }
  bool started(int r) const { return ranks_.at(static_cast<size_t>(r)) != nullptr; }
  // Rank r, which must have been started.
  Process& rank(int r) {
    if (!started(r)) throw std::logic_error("rank " + std::to_string(r) + " was not started");
    return *ranks_[static_cast<size_t>(r)];
  }
  // Each rank's PID (-1 for a rank not started).
  std::vector<pid_t> pids() const {
    std::vector<pid_t> out;
    for (const auto& p : ranks_) out.push_back(p ? p->pid() : -1);
    return out;
  }

  // Each rank's exit code (see exit_code; -1 for a rank not started), or
  // nullopt for a rank still running at `deadline`, which is then SIGKILLed
  // and reaped. With `stop_on_failure`, once a rank ends with a non-zero code
  // the others are SIGKILLed at once instead of being left to their timeouts.
  std::vector<std::optional<int>> wait_all(Clock::time_point deadline,
                                           bool stop_on_failure = false) {
    std::vector<std::optional<int>> codes(ranks_.size());
    for (;;) {
      bool running = false, failed = false;
      for (size_t r = 0; r < ranks_.size(); ++r) {
        codes[r] = ranks_[r] ? ranks_[r]->try_wait() : std::optional<int>(-1);
        if (!codes[r]) running = true;
        if (ranks_[r] && codes[r] && *codes[r] != 0) failed = true;
      }
      if (!running) return codes;
      if (failed && stop_on_failure) {
        for (auto& p : ranks_) {
          if (p) p->kill_now();
        }
        continue;  // every rank is reaped now: collect the codes
      }
      if (Clock::now() >= deadline) {
        for (size_t r = 0; r < ranks_.size(); ++r) {
          if (!codes[r]) ranks_[r]->kill_now();  // the code stays nullopt
        }
        return codes;
      }
      pollfd none{-1, 0, 0};
      poll(&none, 0, 10);  // a pause between checks of the exit statuses
    }
  }
  std::vector<std::optional<int>> wait_all(std::chrono::milliseconds within,
                                           bool stop_on_failure = false) {
    return wait_all(Clock::now() + within, stop_on_failure);
  }

  // "rank 0: exit 0; rank 1: killed at the deadline" for wait_all()'s codes.
  static std::string describe(const std::vector<std::optional<int>>& codes) {
    std::string s;
    for (size_t r = 0; r < codes.size(); ++r) {
      if (!s.empty()) s += "; ";
      s += "rank " + std::to_string(r) + ": " +
           (codes[r] ? "exit " + std::to_string(*codes[r]) : std::string("killed at the deadline"));
    }
    return s;
  }

 private:
  std::vector<std::unique_ptr<Process>> ranks_;  // null: not started
};

}  // namespace slurmddp::support
