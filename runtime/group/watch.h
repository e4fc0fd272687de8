// The hang report's watchdog for one group (Note [Progress records]), from
// the environment: init() makes one for its group, and slurmddp.torch one for
// torch's group over the slurmddp:// rendezvous.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "progress/report_signal.h"
#include "progress/watchdog.h"
#include "slurmddp/store.h"

namespace slurmddp {

struct WatchRequest {
  std::shared_ptr<Store> store;
  std::string scope;  // the group's keys
  int rank = 0;
  int size = 1;
  std::string node;
  // Where rank r runs, from the group's join (WatchdogOptions::node_of).
  std::function<std::string(int rank)> node_of;
  // The group's timeout: the default threshold is half of it, at most 5 min;
  // a store failing for that long is gone (Note [Watchdog and store errors]).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // The communicator marks its collectives in the tracker (Gloo); otherwise
  // a step that does not end is the hang (step_done).
  bool marks_collectives = false;
  // When set, the threshold (0: never) instead of SLURMDDP_HANG_AFTER's.
  std::optional<std::chrono::milliseconds> hang_after;
  // When set, instead of SLURMDDP_STRAGGLER_EVERY (steps; 0: no report).
  std::optional<int64_t> straggler_every;
  std::function<void(progress::Record&, bool)> describe;
  std::function<void(const std::string&)> print;  // default: the log at warn
  // How long the group's teardown waits for the watchdog's thread inside a
  // store call (Watchdog::~Watchdog).
  std::chrono::milliseconds stop_wait = progress::Watchdog::kStopWait;
};

// A watchdog and the report signal's handler; both empty when the group has
// one rank, or SLURMDDP_HANG_AFTER=0 and SLURMDDP_REPORT_SIGNAL=none.
struct Watch {
  std::unique_ptr<progress::ReportSignal> signal;
  std::unique_ptr<progress::Watchdog> watchdog;
};

// It asks on its own after SLURMDDP_HANG_AFTER (default: half the timeout,
// at most 5 minutes; "0": never), and on the report signal (Note [Report
// signal]); every SLURMDDP_STRAGGLER_EVERY steps (default 0: never) rank 0
// names the ranks over SLURMDDP_STRAGGLER_RATIO (default 1.5) times the
// median (Note [Straggler windows]). Throws InvalidArgument naming the
// variable for a bad value.
Watch make_watch(const WatchRequest& request, const std::shared_ptr<progress::Tracker>& tracker);

}  // namespace slurmddp
