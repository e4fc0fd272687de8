// The watchdog (Note [Hang requests]): ranks as threads on the in-process
// store; a collective waiting too long, or a request on demand, makes one
// rank print one report naming where every rank is.
#include "progress/watchdog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "progress/report_signal.h"
#include "slurmddp/error.h"
#include "time_scale.h"

namespace slurmddp::progress {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// Reports printed by any rank, in order.
class Printed {
 public:
  void add(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.push_back(s);
    cv_.notify_all();
  }
  // Waits (up to `within`) until `n` reports were printed; returns them.
  std::vector<std::string> wait_for(size_t n, std::chrono::milliseconds within = 20s) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, within, [&] { return lines_.size() >= n; });
    return lines_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

struct Rank {
  std::shared_ptr<Tracker> tracker = std::make_shared<Tracker>();
  std::unique_ptr<Watchdog> watchdog;
};

WatchdogOptions options(const std::shared_ptr<Store>& store, int rank, int size, Printed& out) {
  WatchdogOptions o;
  o.store = store;
  o.scope = "g/1";
  o.rank = rank;
  o.size = size;
  o.node = rank < 2 ? "n1" : "n2";
  o.hang_after = 300ms;
  o.poll = 50ms;
  o.heartbeat = 100ms;
  o.gather = 5s;
  o.print = [&out](const std::string& s) { out.add(s); };
  return o;
}

TEST(Watchdog, ACollectiveWaitingTooLongGetsOneReportNamingTheRankInUserCode) {
  auto store = make_in_process_store();
  Printed out;
  std::vector<Rank> ranks(4);
  for (int r = 0; r < 4; ++r) {
    auto& k = ranks[static_cast<size_t>(r)];
    WatchdogOptions o = options(store, r, 4, out);
    if (r == 3) {
      k.tracker->step_done(10);  // still loading step 11's batch
      o.describe = [](Record& rec, bool full) {
        rec.where = "train.py:61 (next(loader))";
        if (full) rec.stack = "  File \"train.py\", line 61 in main\n";
      };
    } else {
      k.tracker->step_done(11);
      k.tracker->enter("all_reduce", 7);
    }
    k.watchdog = std::make_unique<Watchdog>(o, k.tracker);
  }
  const auto printed = out.wait_for(1);
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_THAT(printed[0], HasSubstr("hang report 1: step 12: 3/4 ranks waiting in all_reduce #7; "
                                    "rank 3 on n2 at step 11 for "));
  EXPECT_THAT(printed[0], HasSubstr(" in train.py:61 (next(loader))\n"
                                    "hang report 1: rank 3 on n2:\n"
                                    "  File \"train.py\", line 61 in main"));
  // Once stopped: the answers were read once and erased (Python's carry
  // stacks), and the round's request and count with them once it was
  // printed (Note [Hang requests]).
  for (auto& k : ranks) k.watchdog.reset();
  for (int r = 0; r < 4; ++r) EXPECT_FALSE(store->check({"g/1/hang/1/" + std::to_string(r)}));
  EXPECT_FALSE(store->check({"g/1/hang/1/request"}));
  EXPECT_FALSE(store->check({"g/1/hang/1/answers"}));
  // Each round's report was printed once, by one rank.
  std::set<std::string> rounds;
  for (const auto& line : out.wait_for(0, 0ms)) {
    EXPECT_TRUE(rounds.insert(line.substr(0, line.find(':'))).second) << line;
  }
}

TEST(Watchdog, ARankThatDoesNotAnswerIsNamedFromItsLastHeartbeat) {
  auto store = make_in_process_store();
  Printed out;
  std::vector<Rank> ranks(3);
  // Rank 2 beat once (in user code, step 4 done) and then stopped answering.
  {
    Record last;
    last.rank = 2;
    last.node = "n2";
    last.step = 4;
    last.since_ms = wall_ms() - 60'000;
    last.where = "train.py:70";
    store->set("g/1/progress/2", encode(last));
  }
  for (int r = 0; r < 2; ++r) {
    auto& k = ranks[static_cast<size_t>(r)];
    k.tracker->step_done(5);
    k.tracker->enter("all_reduce", 40);
    WatchdogOptions o = options(store, r, 3, out);
    o.gather = 500ms;  // rank 2 never answers
    k.watchdog = std::make_unique<Watchdog>(o, k.tracker);
  }
  const auto printed = out.wait_for(1);
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_THAT(printed[0], HasSubstr("step 6: 2/3 ranks waiting in all_reduce #40; rank 2 on n2 "
                                    "did not answer; last seen at step 5 in train.py:70, 6"));
}

TEST(Watchdog, OnDemandEveryRankIsListedAndNothingIsReportedUnasked) {
  auto store = make_in_process_store();
  Printed out;
  std::vector<Rank> ranks(2);
  for (int r = 0; r < 2; ++r) {
    auto& k = ranks[static_cast<size_t>(r)];
    k.tracker->step_done(2);
    k.watchdog = std::make_unique<Watchdog>(options(store, r, 2, out), k.tracker);
  }
  ranks[1].watchdog->request();
  const auto printed = out.wait_for(1);
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_THAT(printed[0], HasSubstr("hang report 1: step 3: 2/2 ranks in user code"));
  EXPECT_EQ(ranks[1].watchdog->printed(), 1);
  EXPECT_EQ(ranks[0].watchdog->printed(), 0);
}

// PyTorch's ranks: no collectives marked, a step that does not end is the hang.
TEST(Watchdog, WithStalledStepsAStepThatDoesNotEndGetsAReport) {
  auto store = make_in_process_store();
  Printed out;
  std::vector<Rank> ranks(2);
  for (int r = 0; r < 2; ++r) {
    auto& k = ranks[static_cast<size_t>(r)];
    k.tracker->step_done(r == 0 ? 8 : 7);
    WatchdogOptions o = options(store, r, 2, out);
    o.on_stalled_step = true;
    o.describe = [r](Record& rec, bool) {
      rec.where = r == 0 ? "train.py:88 (loss.backward())" : "train.py:61 (next(loader))";
    };
    k.watchdog = std::make_unique<Watchdog>(o, k.tracker);
  }
  const auto printed = out.wait_for(1);
  ASSERT_EQ(printed.size(), 1u);
  // One rank at each line: the tie goes to the first line in order.
  EXPECT_THAT(printed[0], HasSubstr("hang report 1: step 8: 1/2 ranks at train.py:61 "
                                    "(next(loader)); rank 0 on n1 at step 9 for "));
  EXPECT_THAT(printed[0], HasSubstr(" in train.py:88 (loss.backward())"));
}

TEST(Watchdog, TheReportSignalAsksForAReportAndTheProgramGoesOn) {
  auto store = make_in_process_store();
  Printed out;
  ReportSignal handler(SIGURG);
  std::vector<Rank> ranks(2);
  for (int r = 0; r < 2; ++r) {
    auto& k = ranks[static_cast<size_t>(r)];
    k.tracker->step_done(3);
    WatchdogOptions o = options(store, r, 2, out);
    o.hang_after = std::chrono::hours(1);
    k.watchdog = std::make_unique<Watchdog>(o, k.tracker);
  }
  ASSERT_EQ(raise(SIGURG), 0);
  const auto printed = out.wait_for(1);
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_THAT(printed[0], HasSubstr("hang report 1: step 4: 2/2 ranks in user code"));
}

// Note [Hang requests]: report after report (the report signal, again and
// again) leaves no round's keys behind, a late answer included: rank 1
// answers after the asker stopped gathering, and erases its answer itself.
TEST(Watchdog, EveryRoundsKeysGoWhenItIsOverLateAnswersToo) {
  auto store = make_in_process_store();
  Printed out;
  std::vector<Rank> ranks(2);
  for (int r = 0; r < 2; ++r) {
    auto& k = ranks[static_cast<size_t>(r)];
    k.tracker->step_done(2);
    WatchdogOptions o = options(store, r, 2, out);
    o.hang_after = std::chrono::hours(1);
    o.gather = 100ms;
    if (r == 1) {
      o.describe = [](Record&, bool full) {
        if (full) std::this_thread::sleep_for(300ms);  // a slow stack dump
      };
    }
    k.watchdog = std::make_unique<Watchdog>(o, k.tracker);
  }
  for (size_t n = 1; n <= 3; ++n) {
    ranks[0].watchdog->request();
    ASSERT_EQ(out.wait_for(n).size(), n);
    // Rank 1's late answer comes after the report: wait for it to go.
    const std::string late = "g/1/hang/" + std::to_string(n) + "/1";
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(400ms);  // rank 1's answer is written and erased
      if (!store->check({late})) break;
    }
  }
  for (auto& k : ranks) k.watchdog.reset();
  EXPECT_THAT(out.wait_for(3)[0], HasSubstr("rank 1 on n1 did not answer; last seen at step 3"));
  for (int round = 1; round <= 3; ++round) {
    for (const char* name : {"request", "answers", "0", "1"}) {
      const std::string k = "g/1/hang/" + std::to_string(round) + "/" + name;
      EXPECT_FALSE(store->check({k})) << k;
    }
  }
  EXPECT_EQ(store->add("g/1/hang/current", 0), 3);
}

// A rank with neither an answer nor a heartbeat (its watchdog never ran: a
// rank stopped before it started) is named with its node from the join.
TEST(Watchdog, ARankThatNeverReportedIsNamedWithItsNodeFromTheJoin) {
  auto store = make_in_process_store();
  Printed out;
  std::vector<Rank> ranks(2);  // of 3: rank 2 is silent
  for (int r = 0; r < 2; ++r) {
    auto& k = ranks[static_cast<size_t>(r)];
    k.tracker->step_done(5);
    k.tracker->enter("all_reduce", 40);
    WatchdogOptions o = options(store, r, 3, out);
    o.gather = 300ms;
    o.node_of = [](int rank) { return rank == 2 ? std::string("n7") : std::string("n1"); };
    k.watchdog = std::make_unique<Watchdog>(o, k.tracker);
  }
  const auto printed = out.wait_for(1);
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_THAT(printed[0], HasSubstr("step 6: 2/3 ranks waiting in all_reduce #40; rank 2 on n7 did "
                                    "not answer and wrote no heartbeat (no step seen)"));
}

// on_stalled_step (PyTorch): a first step that does not end is a hang too;
// its clock starts with the watchdog.
TEST(Watchdog, AHangInTheFirstStepIsReported) {
  auto store = make_in_process_store();
  Printed out;
  std::vector<Rank> ranks(2);
  for (int r = 0; r < 2; ++r) {
    auto& k = ranks[static_cast<size_t>(r)];
    WatchdogOptions o = options(store, r, 2, out);
    o.on_stalled_step = true;
    k.watchdog = std::make_unique<Watchdog>(o, k.tracker);
  }
  const auto printed = out.wait_for(1);
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_THAT(printed[0], HasSubstr("hang report 1: step 0: 2/2 ranks in user code"));
}

// Note [Watchdog and store errors]: the in-process store, but every call
// throws while `failing` is set.
class FlakyStore : public Store {
 public:
  std::atomic<bool> failing{false};
  std::atomic<int> failed{0};
  void set(const std::string& k, const Bytes& v) override { check_up(), inner_->set(k, v); }
  Bytes get(const std::string& k, Millis t) override { return check_up(), inner_->get(k, t); }
  int64_t add(const std::string& k, int64_t d) override { return check_up(), inner_->add(k, d); }
  Bytes compare_set(const std::string& k, const Bytes& e, const Bytes& d) override {
    return check_up(), inner_->compare_set(k, e, d);
  }
  void wait(const std::vector<std::string>& k, Millis t) override {
    check_up(), inner_->wait(k, t);
  }
  bool check(const std::vector<std::string>& k) override { return check_up(), inner_->check(k); }
  bool erase(const std::string& k) override { return check_up(), inner_->erase(k); }

 private:
  void check_up() {
    if (failing.load()) {
      ++failed;
      throw Error("tcp store: connection reset by peer");
    }
  }
  std::shared_ptr<Store> inner_ = make_in_process_store();
};

TEST(Watchdog, ATransientStoreErrorIsSurvivedAndAStoreThatStaysGoneEndsIt) {
  auto store = std::make_shared<FlakyStore>();
  Printed out;
  std::vector<Rank> ranks(2);
  for (int r = 0; r < 2; ++r) {
    auto& k = ranks[static_cast<size_t>(r)];
    k.tracker->step_done(1);
    WatchdogOptions o = options(store, r, 2, out);
    o.hang_after = std::chrono::hours(1);
    o.store_timeout = 2s;
    k.watchdog = std::make_unique<Watchdog>(o, k.tracker);
  }
  store->failing = true;  // a few polls of 50 ms fail, well inside store_timeout
  const auto spell = std::chrono::steady_clock::now() + 1s;
  while (store->failed.load() < 6 && std::chrono::steady_clock::now() < spell) {
    std::this_thread::sleep_for(10ms);
  }
  store->failing = false;
  ranks[1].watchdog->request();
  const auto printed = out.wait_for(1);
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_THAT(printed[0], HasSubstr("hang report 1: step 2: 2/2 ranks in user code"));
  EXPECT_FALSE(ranks[0].watchdog->gave_up());

  store->failing = true;  // for good
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!(ranks[0].watchdog->gave_up() && ranks[1].watchdog->gave_up()) &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(ranks[0].watchdog->gave_up());
  EXPECT_TRUE(ranks[1].watchdog->gave_up());
}

// A store whose host stopped answering: every call blocks until released.
class FrozenStore : public Store {
 public:
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  void set(const std::string&, const Bytes&) override { block(); }
  Bytes get(const std::string&, Millis) override { return block(), Bytes{}; }
  int64_t add(const std::string&, int64_t) override { return block(), 0; }
  Bytes compare_set(const std::string&, const Bytes&, const Bytes&) override {
    return block(), Bytes{};
  }
  void wait(const std::vector<std::string>&, Millis) override { block(); }
  bool check(const std::vector<std::string>&) override { return block(), false; }
  bool erase(const std::string&) override { return block(), false; }
  std::atomic<int> calls{0};

 private:
  void block() {
    ++calls;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return released_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
};

// issue: the teardown never waits on a peer that no longer answers.
TEST(Watchdog, ATeardownDoesNotWaitForAStoreThatStoppedAnswering) {
  auto store = std::make_shared<FrozenStore>();
  Printed out;
  auto tracker = std::make_shared<Tracker>();
  auto watchdog = std::make_unique<Watchdog>(options(store, 1, 2, out), tracker);
  // The first poll's heartbeat is inside the frozen store.
  while (store->calls.load() == 0) std::this_thread::yield();
  const auto started = std::chrono::steady_clock::now();
  watchdog.reset();
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_LT(took, support::scaled(Watchdog::kStopWait + 300ms));
  EXPECT_GE(took, Watchdog::kStopWait);
  store->release();  // the thread, left alone, ends on its own
  EXPECT_TRUE(out.wait_for(0, 0ms).empty());
}

// Note [Straggler windows]: trackers driven by hand, rank 2 the straggler.
TEST(Watchdog, EveryWindowRankZeroNamesTheStraggler) {
  auto store = make_in_process_store();
  Printed out;
  std::vector<Rank> ranks(3);
  for (int r = 0; r < 3; ++r) {
    auto& k = ranks[static_cast<size_t>(r)];
    WatchdogOptions o = options(store, r, 3, out);
    o.hang_after = std::chrono::hours(1);
    o.straggler_every = 10;
    k.watchdog = std::make_unique<Watchdog>(o, k.tracker);
  }
  const auto spin = [](std::chrono::microseconds d) {  // busy: a step's compute
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  // One thread plays all three ranks of a synchronous step: 2 ms of compute
  // everywhere, then 3 ms more on rank 2 while ranks 0 and 1 wait in the
  // allreduce for it.
  for (int step = 0; step <= 10; ++step) {
    spin(2ms);
    ranks[0].tracker->enter("allreduce", step);
    ranks[1].tracker->enter("allreduce", step);
    spin(3ms);
    ranks[0].tracker->leave();
    ranks[1].tracker->leave();
    for (auto& k : ranks) k.tracker->step_done(step);
  }
  const auto printed = out.wait_for(1);
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_THAT(printed[0], ::testing::MatchesRegex(
                              "straggler report, steps 1-10: rank 2 on n2: [0-9.]+x the median "
                              "\\(compute [0-9.]+ vs [0-9.]+ ms a step\\) for 10 steps; the "
                              "others wait for it in allreduce \\(median [0-9.]+ ms a step\\)"));
}

}  // namespace
}  // namespace slurmddp::progress
