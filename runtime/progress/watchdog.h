// The per-rank side of the hang report (Note [Progress records]): a tracker
// the training loop and the communicator update for free, and a watchdog
// thread that notices a collective waiting too long (or a request on demand),
// has every rank of the group answer with its record, and has the rank that
// asked print one report.
//
// Note [Hang requests]
//   Rounds 1, 2, ... under "<scope>/hang/": "current" is the number of the
//   latest round (a counter), "<round>/request" the rank that asked (set with
//   compare_set, so one rank asks per round; the winner then adds 1 to
//   "current"), "<round>/<rank>" each rank's answer. Every watchdog reads
//   "current" once every poll period (a local timer between checks: one
//   request a rank per period, 5 s by default: ~800 requests/s at rank 0 for
//   4,096 ranks, nothing per step) and answers a round newer than the last it
//   answered: the newest one, so a rank that was stopped for a while catches
//   up instead of answering rounds one by one. Answering costs three requests
//   (the answer, a count of answers, a check that the round is still open);
//   the asking rank polls the count until every rank answered or `gather`
//   passes, reads each answer once (O(N), once per report), names the ranks
//   that did not answer from their last heartbeat ("<scope>/progress/<rank>",
//   written by each watchdog at its first poll and then every heartbeat
//   period) or, with no heartbeat either, from the join (node_of), and prints
//   the report. A hang that goes on is reported again at most once per
//   hang_after.
//
//   When the round is over its keys go: the asker
//   erases the request, the count and the answers it read or did not get; a
//   rank whose answer comes after that (the request is gone) erases its answer
//   and the count again. So repeated reports leave only "current" behind.
//
//   What makes a rank ask: one of its collectives waiting longer than
//   hang_after (the C++ runtime, which marks its collectives), or, with
//   `on_stalled_step`, no step_done() for longer than hang_after, counted
//   from the watchdog's start for the first step (PyTorch, whose collectives
//   slurm-ddp does not see), or a request on demand: request(), or the report
//   signal (Note [Report signal]) reaching the process since the last poll.
//
// Note [Watchdog and store errors]
//   A store call that fails (a connection reset, a busy store host timing a
//   request out) does not end the watchdog: it logs a warning, once per
//   failing spell, and tries again at the next poll. Only a store that has
//   failed every call for longer than `store_timeout` (the group's timeout:
//   what any other request of the group would have waited) is taken as gone;
//   the watchdog then says so at warning and stops: no more hang reports for
//   this group.
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
  // No step done for longer than `t`: since the last step_done(), or, before
  // the first one, since start_clock() (a hang in the first step).
  bool step_stalled_longer_than(std::chrono::milliseconds t) const;
  // Starts the first step's clock, once (the watchdog does, at its start).
  void start_clock();

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
  // Where rank r runs, from the group's join, for a rank with neither an
  // answer nor a heartbeat; "" or throwing: unknown. May be empty.
  std::function<std::string(int rank)> node_of;
  // Note [Watchdog and store errors]: failing this long, the store is gone.
  std::chrono::milliseconds store_timeout{std::chrono::minutes(5)};
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
  // Whether it stopped for a store that is gone (Note [Watchdog and store
  // errors]), for tests.
  bool gave_up() const;

 private:
  struct Loop;
  std::shared_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace slurmddp::progress
