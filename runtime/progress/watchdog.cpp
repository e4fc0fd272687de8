// Note [Hang requests] in watchdog.h.
#include "progress/watchdog.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "common/log.h"
#include "progress/report.h"
#include "progress/report_signal.h"
#include "slurmddp/error.h"

namespace slurmddp::progress {

namespace {

const char* const kComponent = "progress";

std::string text(const Bytes& b) {
  return std::string(b.begin(), b.end());
}
Bytes bytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

}  // namespace

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t steady_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Tracker::step_done(int64_t step) {
  const int64_t now = wall_ms();
  step_ms_.store(now, std::memory_order_relaxed);
  step_.store(step, std::memory_order_relaxed);
  if (op_.load(std::memory_order_relaxed) == nullptr) {
    since_ms_.store(now, std::memory_order_relaxed);
  }
  const int64_t every = every_.load(std::memory_order_relaxed);
  if (every <= 0) return;
  const int64_t now_us = steady_us();
  if (window_first_ < 0) {  // the first window starts after the first step done
    window_first_ = step + 1;
    window_start_us_ = now_us;
    wait_us_.store(0, std::memory_order_relaxed);
    data_us_.store(0, std::memory_order_relaxed);
    longest_wait_us_.store(0, std::memory_order_relaxed);
    return;
  }
  if (step + 1 - window_first_ < every) return;
  Window w;
  w.first_step = window_first_;
  w.steps = step + 1 - window_first_;
  w.step_us = now_us - window_start_us_;
  w.wait_us = wait_us_.exchange(0, std::memory_order_relaxed);
  w.data_us = data_us_.exchange(0, std::memory_order_relaxed);
  longest_wait_us_.store(0, std::memory_order_relaxed);
  const char* op = longest_op_.exchange(nullptr, std::memory_order_relaxed);
  if (op != nullptr) w.op = op;
  window_first_ = step + 1;
  window_start_us_ = now_us;
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(window_mu_);
    pending_ = std::move(w);
    notify = on_window_;
  }
  if (notify) notify();
}

void Tracker::enter(const char* op, int64_t seq) {
  seq_.store(seq, std::memory_order_relaxed);
  since_ms_.store(wall_ms(), std::memory_order_relaxed);
  if (every_.load(std::memory_order_relaxed) > 0) {
    collective_since_us_.store(steady_us(), std::memory_order_relaxed);
  }
  op_.store(op, std::memory_order_release);
}

void Tracker::leave() {
  const char* op = op_.exchange(nullptr, std::memory_order_acq_rel);
  since_ms_.store(wall_ms(), std::memory_order_relaxed);
  if (every_.load(std::memory_order_relaxed) > 0 && op != nullptr) {
    const int64_t took = steady_us() - collective_since_us_.load(std::memory_order_relaxed);
    wait_us_.fetch_add(took, std::memory_order_relaxed);
    if (took > longest_wait_us_.load(std::memory_order_relaxed)) {
      longest_wait_us_.store(took, std::memory_order_relaxed);
      longest_op_.store(op, std::memory_order_relaxed);
    }
  }
}

void Tracker::data_enter() {
  if (every_.load(std::memory_order_relaxed) > 0) {
    data_since_us_.store(steady_us(), std::memory_order_relaxed);
  }
}

void Tracker::data_leave() {
  const int64_t since = data_since_us_.exchange(0, std::memory_order_relaxed);
  if (since > 0) data_us_.fetch_add(steady_us() - since, std::memory_order_relaxed);
}

void Tracker::set_window(int64_t every, std::function<void()> on_window) {
  {
    std::lock_guard<std::mutex> lock(window_mu_);
    on_window_ = std::move(on_window);
  }
  every_.store(every, std::memory_order_relaxed);
}

std::optional<Window> Tracker::take_window() {
  std::lock_guard<std::mutex> lock(window_mu_);
  std::optional<Window> w = std::move(pending_);
  pending_.reset();
  return w;
}

Record Tracker::snapshot(int rank, const std::string& node) const {
  Record r;
  r.rank = rank;
  r.node = node;
  r.step = step_.load(std::memory_order_relaxed);
  const char* op = op_.load(std::memory_order_acquire);
  if (op != nullptr) {
    r.phase = Phase::kCollective;
    r.op = op;
    r.seq = seq_.load(std::memory_order_relaxed);
  }
  r.since_ms = since_ms_.load(std::memory_order_relaxed);
  return r;
}

bool Tracker::in_collective_longer_than(std::chrono::milliseconds t) const {
  return op_.load(std::memory_order_acquire) != nullptr &&
         wall_ms() - since_ms_.load(std::memory_order_relaxed) > t.count();
}

bool Tracker::step_stalled_longer_than(std::chrono::milliseconds t) const {
  const int64_t since = step_ms_.load(std::memory_order_relaxed);  // 0: no clock yet
  return since > 0 && wall_ms() - since > t.count();
}

void Tracker::start_clock() {
  const int64_t now = wall_ms();
  int64_t unset = 0;
  step_ms_.compare_exchange_strong(unset, now, std::memory_order_relaxed);
  unset = 0;
  since_ms_.compare_exchange_strong(unset, now, std::memory_order_relaxed);
}

struct Watchdog::Loop {
  Loop(WatchdogOptions options, std::shared_ptr<Tracker> tracker)
      : o_(std::move(options)), tracker_(std::move(tracker)), signals_seen_(report_requests()) {}
  void run();
  // One poll's store work; throws what the store throws.
  void poll_once(std::chrono::steady_clock::time_point now);
  void answer(int64_t round, bool asker);
  void report(int64_t round);
  // Note [Watchdog and store errors]: false when the store is taken as gone.
  bool survive(const std::exception& e);
  void publish_window();
  // Polls counter `counter` until it reaches `want` or `until`; false when
  // the watchdog is stopping.
  bool wait_count(const std::string& counter, int64_t want,
                  std::chrono::steady_clock::time_point until);
  std::string key(int64_t round, const std::string& name) const;
  bool stopping() {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  }
  // describe/print, unless stopping: the destructor sets stop_ under
  // call_mu_ too, so once it did, neither is running nor will start.
  template <typename F>
  void call_program(F&& f) {
    std::lock_guard<std::mutex> lock(call_mu_);
    if (!stopping()) f();
  }

  WatchdogOptions o_;
  std::shared_ptr<Tracker> tracker_;
  std::atomic<bool> requested_{false};
  uint64_t signals_seen_;  // report_requests() at the last poll
  std::atomic<int> printed_{0};
  std::atomic<bool> gave_up_{false};
  // run()'s thread only:
  int64_t answered_ = 0;  // the last round this rank answered
  std::optional<std::chrono::steady_clock::time_point> failing_since_;
  std::chrono::steady_clock::time_point last_beat_{};
  int64_t beat_step_ = -2, beat_seq_ = -2;  // where the last beat was; -2: no beat yet
  bool beat_in_collective_ = false;
  std::chrono::steady_clock::time_point next_auto_{};
  std::mutex mu_;
  std::mutex call_mu_;  // held while the program's describe or print runs
  std::condition_variable cv_;
  bool stop_ = false;
  bool done_ = false;          // run() returned
  bool window_ready_ = false;  // the tracker ended a straggler window
  bool first_beat_ = false;    // the first heartbeat is in the store
};

Watchdog::Watchdog(WatchdogOptions options, std::shared_ptr<Tracker> tracker) {
  if (!options.print) {
    options.print = [](const std::string& report) { SLURMDDP_LOG_WARN(kComponent, report); };
  }
  tracker->start_clock();  // a hang in the first step is one too
  loop_ = std::make_shared<Loop>(std::move(options), std::move(tracker));
  if (loop_->o_.straggler_every > 0) {
    std::weak_ptr<Loop> weak = loop_;
    loop_->tracker_->set_window(loop_->o_.straggler_every, [weak] {
      if (auto loop = weak.lock()) {
        std::lock_guard<std::mutex> lock(loop->mu_);
        loop->window_ready_ = true;
        loop->cv_.notify_all();
      }
    });
  }
  thread_ = std::thread([loop = loop_] {
    loop->run();
    std::lock_guard<std::mutex> lock(loop->mu_);
    loop->done_ = true;
    loop->cv_.notify_all();
  });
  // The thread's first beat comes at once; the program goes on when it is in
  // the store (or after stop_wait, for a store that does not answer): a rank
  // stopped (or stuck in a read) in its first steps is still named with its
  // node and step, not as a rank that never reported.
  std::unique_lock<std::mutex> lock(loop_->mu_);
  loop_->cv_.wait_for(lock, loop_->o_.stop_wait,
                      [this] { return loop_->first_beat_ || loop_->done_; });
}

Watchdog::~Watchdog() {
  if (loop_->o_.straggler_every > 0) loop_->tracker_->set_window(0, nullptr);
  std::unique_lock<std::mutex> call(loop_->call_mu_);  // after a describe or print running now
  std::unique_lock<std::mutex> lock(loop_->mu_);
  loop_->stop_ = true;
  call.unlock();
  loop_->cv_.notify_all();
  if (loop_->cv_.wait_for(lock, loop_->o_.stop_wait, [this] { return loop_->done_; })) {
    lock.unlock();
    thread_.join();
  } else {
    lock.unlock();
    SLURMDDP_LOG_DEBUG(kComponent, "the watchdog is inside a store call; it ends on its own");
    thread_.detach();
  }
}

void Watchdog::request() {
  loop_->requested_.store(true);
}

int Watchdog::printed() const {
  return loop_->printed_.load();
}

bool Watchdog::gave_up() const {
  return loop_->gave_up_.load();
}

std::string Watchdog::Loop::key(int64_t round, const std::string& name) const {
  return o_.scope + "/hang/" + std::to_string(round) + "/" + name;
}

void Watchdog::Loop::answer(int64_t round, bool asker) {
  Record r = tracker_->snapshot(o_.rank, o_.node);
  if (o_.describe) call_program([&] { o_.describe(r, true); });
  const std::string mine = key(round, std::to_string(o_.rank));
  answered_ = round;
  o_.store->set(mine, bytes(encode(r)));
  o_.store->add(key(round, "answers"), 1);
  // Note [Hang requests]: the asker erases the request when the round is
  // over; an answer after that is nobody's to read.
  if (!asker && !o_.store->check({key(round, "request")})) {
    o_.store->erase(mine);
    o_.store->erase(key(round, "answers"));
  }
}

bool Watchdog::Loop::wait_count(const std::string& counter, int64_t want,
                                std::chrono::steady_clock::time_point until) {
  while (o_.store->add(counter, 0) < want && std::chrono::steady_clock::now() < until) {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stop_; })) return false;
  }
  return true;
}

void Watchdog::Loop::report(int64_t round) {
  const auto until = std::chrono::steady_clock::now() + o_.gather;
  std::vector<std::optional<Record>> records(static_cast<size_t>(o_.size));
  std::vector<bool> answered(static_cast<size_t>(o_.size), false);
  // Wait on the answers' counter (one request a poll), then read each
  // answer once: O(N) requests a report.
  if (!wait_count(key(round, "answers"), o_.size, until)) return;
  for (int r = 0; r < o_.size; ++r) {
    const std::string k = key(round, std::to_string(r));
    if (!o_.store->check({k})) continue;
    answered[static_cast<size_t>(r)] = true;
    records[static_cast<size_t>(r)] = decode(text(o_.store->get(k, std::chrono::milliseconds(0))));
    o_.store->erase(k);  // answers carry stacks (kilobytes a rank in Python): read once, they go
  }
  for (int r = 0; r < o_.size; ++r) {
    if (answered[static_cast<size_t>(r)]) continue;
    const std::string k = o_.scope + "/progress/" + std::to_string(r);
    if (o_.store->check({k})) {
      auto last = decode(text(o_.store->get(k, std::chrono::milliseconds(0))));
      if (last) last->fresh = false;
      records[static_cast<size_t>(r)] = last;
    }
    if (!records[static_cast<size_t>(r)] && o_.node_of) {
      // No heartbeat either: where it runs, from the join (since_ms 0: never seen).
      Record joined;
      joined.rank = r;
      joined.fresh = false;
      joined.since_ms = 0;
      try {
        joined.node = o_.node_of(r);
      } catch (const std::exception&) {
        joined.node.clear();
      }
      if (!joined.node.empty()) records[static_cast<size_t>(r)] = joined;
    }
  }
  // One line, then the stacks of the ranks it names one by one.
  std::vector<int> listed;
  const std::string name = "hang report " + std::to_string(round);
  std::string out = name + ": " + hang_report(records, wall_ms(), &listed);
  for (int r : listed) {
    const auto& rec = records[static_cast<size_t>(r)];
    if (!rec || rec->stack.empty()) continue;
    out += "\n" + name + ": rank " + std::to_string(r) + " on " + rec->node + ":\n" + rec->stack;
    if (out.back() == '\n') out.pop_back();
  }
  call_program([&] {
    printed_.fetch_add(1);  // before: a reader of the print may ask
    o_.print(out);
  });
  // Note [Hang requests]: the round is over. The request first: an answer
  // written after this sees it gone and erases itself and the count.
  o_.store->erase(key(round, "request"));
  o_.store->erase(key(round, "answers"));
  for (int r = 0; r < o_.size; ++r) {
    if (!answered[static_cast<size_t>(r)]) o_.store->erase(key(round, std::to_string(r)));
  }
}

// Note [Straggler windows]: this rank's line, and at rank 0 the report.
void Watchdog::Loop::publish_window() {
  std::optional<Window> mine = tracker_->take_window();
  if (!mine) return;
  mine->rank = o_.rank;
  mine->node = o_.node;
  const auto key_of = [this](int r) { return o_.scope + "/straggler/" + std::to_string(r); };
  const std::string counter = o_.scope + "/straggler/count/" + std::to_string(mine->first_step);
  o_.store->set(key_of(o_.rank), bytes(encode(*mine)));
  o_.store->add(counter, 1);
  if (o_.rank != 0) return;
  // The others end the same window within about a step: wait on the
  // window's counter up to `gather`, then read each line once.
  const auto until = std::chrono::steady_clock::now() + o_.gather;
  if (!wait_count(counter, o_.size, until)) return;
  o_.store->erase(counter);
  std::vector<std::optional<Window>> windows(static_cast<size_t>(o_.size));
  windows[0] = mine;
  for (int r = 1; r < o_.size; ++r) {
    if (!o_.store->check({key_of(r)})) continue;
    auto got = decode_window(text(o_.store->get(key_of(r), std::chrono::milliseconds(0))));
    if (got && got->first_step == mine->first_step) windows[static_cast<size_t>(r)] = got;
  }
  const std::string report = straggler_report(windows, o_.straggler_ratio);
  if (!report.empty()) call_program([&] { o_.print(report); });
}

bool Watchdog::Loop::survive(const std::exception& e) {
  const auto now = std::chrono::steady_clock::now();
  if (!failing_since_) {
    failing_since_ = now;
    SLURMDDP_LOG_WARN(kComponent, "hang report watchdog: a store call failed: "
                                      << e.what() << "; trying again every " << o_.poll.count()
                                      << " ms for up to " << o_.store_timeout.count()
                                      << " ms; rank=" << o_.rank << ", node=" << o_.node);
    return true;
  }
  if (now - *failing_since_ < o_.store_timeout) return true;
  SLURMDDP_LOG_WARN(
      kComponent,
      "hang report watchdog: failed to reach the store for "
          << std::chrono::duration_cast<std::chrono::milliseconds>(now - *failing_since_).count()
          << " ms (store_timeout=" << o_.store_timeout.count()
          << " ms): the store is gone, no more hang reports for this group; "
          << "last error: " << e.what() << "; rank=" << o_.rank << ", node=" << o_.node);
  gave_up_.store(true);
  return false;
}

void Watchdog::Loop::poll_once(std::chrono::steady_clock::time_point now) {
  // A beat every heartbeat period, and one more when this rank has
  // been in the same collective or step for half the threshold since
  // its last beat (at most one a wait, and only in waits that long): a
  // rank that then stops answering is named where it stopped, not where
  // it was a minute ago.
  const Record now_at = tracker_->snapshot(o_.rank, o_.node);
  const bool waiting = wall_ms() - now_at.since_ms >= std::max(o_.poll, o_.hang_after / 2).count();
  const bool moved = now_at.step != beat_step_ || now_at.seq != beat_seq_ ||
                     (now_at.phase == Phase::kCollective) != beat_in_collective_;
  if (now - last_beat_ >= o_.heartbeat || (waiting && moved)) {
    Record r = now_at;
    const bool first = beat_step_ == -2;
    if (o_.describe && !first) call_program([&] { o_.describe(r, false); });
    o_.store->set(o_.scope + "/progress/" + std::to_string(o_.rank), bytes(encode(r)));
    if (first) {  // and the next poll beats again, with the description
      std::lock_guard<std::mutex> lock(mu_);
      first_beat_ = true;
      cv_.notify_all();
    } else {
      last_beat_ = now;
    }
    beat_step_ = now_at.step;
    beat_seq_ = now_at.seq;
    beat_in_collective_ = now_at.phase == Phase::kCollective;
  }
  const std::string current_key = o_.scope + "/hang/current";
  int64_t current = o_.store->add(current_key, 0);
  const uint64_t signals = report_requests();
  const bool signalled = signals != signals_seen_;
  signals_seen_ = signals;
  const bool stalled = tracker_->in_collective_longer_than(o_.hang_after) ||
                       (o_.on_stalled_step && tracker_->step_stalled_longer_than(o_.hang_after));
  bool asker = false;
  if (current <= answered_ &&
      (requested_.exchange(false) || signalled || (now >= next_auto_ && stalled))) {
    // Note [Hang requests]: open round current + 1, unless another rank just did.
    const int64_t next = current + 1;
    const Bytes me = bytes(std::to_string(o_.rank));
    asker = o_.store->compare_set(key(next, "request"), {}, me) == me;
    if (asker) o_.store->add(current_key, 1);
    current = next;
  }
  if (current <= answered_) return;
  answer(current, asker);
  if (asker) report(current);
  next_auto_ = std::chrono::steady_clock::now() + o_.hang_after;
}

void Watchdog::Loop::run() {
  // The first beat at once (the constructor waits for it), without the
  // program's description (it has not started); the next at the next poll,
  // with it; then one every heartbeat period.
  last_beat_ = std::chrono::steady_clock::now() - o_.heartbeat;
  // A hang that goes on is reported again at most once per hang_after.
  next_auto_ = std::chrono::steady_clock::now();
  auto next_poll = std::chrono::steady_clock::now();
  for (;;) {
    bool window = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, next_poll, [this] { return stop_ || window_ready_; });
      if (stop_) return;
      window = window_ready_;
      window_ready_ = false;
    }
    try {
      if (window) publish_window();
      const auto now = std::chrono::steady_clock::now();
      if (now < next_poll) continue;
      next_poll = now + o_.poll;
      poll_once(now);
      if (failing_since_) {
        SLURMDDP_LOG_WARN(kComponent, "hang report watchdog: the store answers again; rank="
                                          << o_.rank << ", node=" << o_.node);
        failing_since_.reset();
      }
    } catch (const std::exception& e) {
      if (!survive(e)) return;
    }
  }
}

}  // namespace slurmddp::progress
