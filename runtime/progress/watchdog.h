// The per-rank side of the hang report (Note [Progress records]): a tracker
// the training loop and the communicator update for free, and a watchdog
// thread that notices a collective waiting too long (or a request on demand),
// has every rank of the group answer with its record, and has the rank that
// asked print one report.
//
// Note [Hang requests]
//   Rounds under "<scope>/hang/<round>/": "request" holds the rank that asked
//   (set with compare_set, so one rank asks per round), "<rank>" each rank's
//   answer. Every watchdog checks for the request once every poll period (a
//   local timer between checks: one request a rank per period, 5 s by
//   default: ~800 requests/s at rank 0 for 4,096 ranks, nothing per step).
//   Answering costs two requests (the answer, and a count of answers); the
//   asking rank polls the count until every rank answered or `gather`
//   passes, reads each answer once (O(N), once per report), names the ranks
//   that did not answer from their last heartbeat ("<scope>/progress/<rank>",
//   written by each watchdog at its first poll and then every heartbeat
//   period), and prints the report.
//   The next round starts after it, so a hang that goes on is reported again
//   at most once per hang_after.
//
//   What makes a rank ask: one of its collectives waiting longer than
//   hang_after (the C++ runtime, which marks its collectives), or, with
//   `on_stalled_step`, no step_done() for longer than hang_after (PyTorch,
//   whose collectives slurm-ddp does not see), or a request on demand:
//   request(), or the report signal (Note [Report signal]) reaching the
//   process since the last poll.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "progress/record.h"
#include "progress/straggler.h"
#include "slurmddp/store.h"

namespace slurmddp::progress {

// What this rank is doing, updated without locks from any thread (but the
// end of a straggler window, once every `every` steps).
class Tracker {
 public:
  void step_done(int64_t step);             // from the training thread
  void enter(const char* op, int64_t seq);  // op: a string literal
  void leave();
  // Waiting for data (Note [Straggler windows]), from the training thread.
  void data_enter();
  void data_leave();
  // Windows of `every` steps (0: none); `on_window` is called (from
  // step_done) when one ends, and take_window() then returns it, once.
  void set_window(int64_t every, std::function<void()> on_window);
  std::optional<Window> take_window();
  // For the watchdog: the phase and since when (ms since the epoch).
  Record snapshot(int rank, const std::string& node) const;
  bool in_collective_longer_than(std::chrono::milliseconds t) const;
  // A step was done, and none since for longer than `t`.
  bool step_stalled_longer_than(std::chrono::milliseconds t) const;

 private:
  std::atomic<int64_t> step_{-1};
  std::atomic<const char*> op_{nullptr};  // non-null: in a collective
  std::atomic<int64_t> seq_{-1};
  std::atomic<int64_t> since_ms_{0};
  std::atomic<int64_t> step_ms_{0};  // when step_ was set
  // Note [Straggler windows]: microseconds this window.
  std::atomic<int64_t> every_{0};
  std::atomic<int64_t> wait_us_{0};
  std::atomic<int64_t> data_us_{0};
  std::atomic<int64_t> data_since_us_{0};
  std::atomic<int64_t> collective_since_us_{0};
  std::atomic<int64_t> longest_wait_us_{0};
  std::atomic<const char*> longest_op_{nullptr};
  int64_t window_first_ = -1;  // training thread only
  int64_t window_start_us_ = 0;
  std::mutex window_mu_;
  std::optional<Window> pending_;
  std::function<void()> on_window_;
};

int64_t wall_ms();

struct WatchdogOptions {
  std::shared_ptr<Store> store;
  std::string scope;  // the group's keys: "<prefix>/<generation>"
  int rank = 0;
  int size = 1;
  std::string node;
  std::chrono::milliseconds hang_after{std::chrono::minutes(5)};
  std::chrono::milliseconds poll{std::chrono::seconds(5)};
  std::chrono::milliseconds heartbeat{std::chrono::seconds(60)};
  std::chrono::milliseconds gather{std::chrono::seconds(5)};
  // Also ask when no step was done for longer than hang_after.
  bool on_stalled_step = false;
  // Note [Straggler windows]: every this many steps (0: never), rank 0
  // names the ranks over `straggler_ratio` times the median.
  int64_t straggler_every = 0;
  double straggler_ratio = 1.5;
  // Where the report goes (default: the log at warn).
  std::function<void(const std::string&)> print;
  // Adds what only the program knows to this rank's record, from the
  // watchdog's thread: `where` ("train.py:61 (next(loader))"), the phase
  // when the tracker does not know it, and with `full` (an answer, not a
  // heartbeat) `stack`, every thread's. May be empty; must not throw.
  std::function<void(Record& record, bool full)> describe;
  // How long the destructor waits for the thread (above).
  std::chrono::milliseconds stop_wait{200};
};

class Watchdog {
 public:
  Watchdog(WatchdogOptions options, std::shared_ptr<Tracker> tracker);
  // Stops the thread and joins it; a thread still inside a store call after
  // `stop_wait` (a store host that stopped answering) is left to finish on
  // its own, so that a group's teardown never waits on a peer: it owns what
  // it uses and touches nothing of the program once stopped (describe and
  // print are never called after the destructor began).
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  static constexpr std::chrono::milliseconds kStopWait{200};  // stop_wait's default

  // Ask for a report now (e.g. from a signal's thread); taken at the next poll.
  void request();
  // Reports this rank printed, for tests.
  int printed() const;

 private:
  struct Loop;
  std::shared_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace slurmddp::progress
