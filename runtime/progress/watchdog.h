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
//   Answering costs one write; the asking rank waits up to `gather` for the
//   answers, reads them (O(N), once per report), names the ranks that did not
//   answer from their last heartbeat ("<scope>/progress/<rank>", written by
//   each watchdog at most every heartbeat period), and prints the report.
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
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "progress/record.h"
#include "slurmddp/store.h"

namespace slurmddp::progress {

// What this rank is doing, updated without locks from any thread.
class Tracker {
 public:
  void step_done(int64_t step);
  void enter(const char* op, int64_t seq);  // op: a string literal
  void leave();
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
  // Where the report goes (default: the log at warn).
  std::function<void(const std::string&)> print;
  // Adds what only the program knows to this rank's record, from the
  // watchdog's thread: `where` ("train.py:61 (next(loader))"), the phase
  // when the tracker does not know it, and with `full` (an answer, not a
  // heartbeat) `stack`, every thread's. May be empty; must not throw.
  std::function<void(Record& record, bool full)> describe;
};

class Watchdog {
 public:
  Watchdog(WatchdogOptions options, std::shared_ptr<Tracker> tracker);
  ~Watchdog();  // stops and joins the thread (at once: it sleeps on a local timer)
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Ask for a report now (e.g. from a signal's thread); taken at the next poll.
  void request() { requested_.store(true); }
  // Reports this rank printed, for tests.
  int printed() const { return printed_.load(); }

 private:
  void run();
  void answer(int64_t round);
  void report(int64_t round);
  std::string key(int64_t round, const std::string& name) const;

  WatchdogOptions o_;
  std::shared_ptr<Tracker> tracker_;
  std::atomic<bool> requested_{false};
  uint64_t signals_seen_;  // report_requests() at the last poll
  std::atomic<int> printed_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace slurmddp::progress
