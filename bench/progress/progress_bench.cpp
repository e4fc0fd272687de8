// What the hang and straggler reports cost (Note [Progress records], Note
// [Hang requests], Note [Straggler windows]). Machine-readable rows on
// stdout, '#' lines are comments.
//
// Part "step": the training thread's cost, median of --reps runs of
// --calls calls each:
//   step what calls median(ns) min(ns) max(ns)
// (step_done alone; step_done with straggler windows of 100 steps; a
// collective's enter + leave as the Gloo worker marks it.)
//
// Part "store": --ranks watchdogs (threads of this process, --clients store
// connections shared among them) on one TCP store server, as rank 0's store
// sees a job of that size between reports; then one report on demand:
//   store ranks poll(ms) seconds requests req/s req/rank/s report(ms) report_requests
// report(ms): from request() at the last rank to the printed report (up to
// one poll for every rank to see it, then the answers and their reading).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "progress/watchdog.h"
#include "slurmddp/tcp_store.h"
#include "slurmddp/tcp_store_server.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using slurmddp::progress::Tracker;
using slurmddp::progress::Watchdog;
using slurmddp::progress::WatchdogOptions;

struct Options {
  std::vector<int> ranks = {1024, 4096};
  int clients = 64;
  int poll_ms = 5000;
  int seconds = 15;
  long calls = 10'000'000;
  int reps = 5;
};

std::vector<int> int_list(const char* s) {
  std::vector<int> v;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!cur.empty()) v.push_back(std::atoi(cur.c_str()));
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--ranks") {
      o.ranks = int_list(v);
    } else if (k == "--clients") {
      o.clients = std::atoi(v);
    } else if (k == "--poll-ms") {
      o.poll_ms = std::atoi(v);
    } else if (k == "--seconds") {
      o.seconds = std::atoi(v);
    } else if (k == "--calls") {
      o.calls = std::atol(v);
    } else if (k == "--reps") {
      o.reps = std::atoi(v);
    } else {
      std::fprintf(stderr,
                   "progress_bench: unknown option %s; usage: progress_bench [--ranks 1024,4096] "
                   "[--clients 64] [--poll-ms 5000] [--seconds 15] [--calls N] [--reps 5]\n",
                   k.c_str());
      std::exit(2);
    }
  }
  return o;
}

template <typename F>
void step_row(const char* what, const Options& o, F&& body) {
  std::vector<double> ns;
  for (int r = 0; r < o.reps; ++r) {
    const auto t0 = Clock::now();
    body(o.calls);
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
                 static_cast<double>(o.calls));
  }
  std::sort(ns.begin(), ns.end());
  std::printf("step %s %ld %.1f %.1f %.1f\n", what, o.calls, ns[ns.size() / 2], ns.front(),
              ns.back());
  std::fflush(stdout);
}

void part_step(const Options& o) {
  std::printf("# step what calls median(ns) min(ns) max(ns)\n");
  Tracker plain;
  step_row("step_done", o, [&](long n) {
    for (long i = 0; i < n; ++i) plain.step_done(i);
  });
  Tracker windowed;
  windowed.set_window(100, [] {});
  step_row("step_done+window100", o, [&](long n) {
    for (long i = 0; i < n; ++i) windowed.step_done(i);
    (void)windowed.take_window();
  });
  step_row("enter+leave", o, [&](long n) {
    for (long i = 0; i < n; ++i) {
      windowed.enter("allreduce", i);
      windowed.leave();
    }
  });
}

void part_store(const Options& o, int ranks) {
  slurmddp::TcpStoreServerOptions so;
  so.bind_host = "127.0.0.1";
  auto server = slurmddp::TcpStoreServer::start(so);
  std::vector<std::shared_ptr<slurmddp::Store>> clients;
  for (int c = 0; c < std::min(o.clients, ranks); ++c) {
    slurmddp::TcpStoreOptions co;
    co.host = "127.0.0.1";
    co.port = server->port();
    clients.push_back(slurmddp::make_tcp_store(co));
  }
  std::mutex mu;
  std::condition_variable cv;
  Clock::time_point printed_at{};
  std::vector<std::shared_ptr<Tracker>> trackers;
  std::vector<std::unique_ptr<Watchdog>> dogs;
  for (int r = 0; r < ranks; ++r) {
    WatchdogOptions w;
    w.store = clients[static_cast<size_t>(r) % clients.size()];
    w.scope = "bench/1";
    w.rank = r;
    w.size = ranks;
    w.node = "n" + std::to_string(r / 8 + 1);
    w.hang_after = std::chrono::hours(1);
    w.poll = std::chrono::milliseconds(o.poll_ms);
    w.gather = std::chrono::milliseconds(2 * o.poll_ms + 500);
    w.print = [&](const std::string&) {
      std::lock_guard<std::mutex> lock(mu);
      printed_at = Clock::now();
      cv.notify_all();
    };
    trackers.push_back(std::make_shared<Tracker>());
    trackers.back()->step_done(41);
    dogs.push_back(std::make_unique<Watchdog>(w, trackers.back()));
  }
  // Steady state: after the first poll (which also writes each heartbeat).
  std::this_thread::sleep_for(std::chrono::milliseconds(o.poll_ms) + 1s);  // the measured span
  const uint64_t before = server->stats().requests;
  std::this_thread::sleep_for(std::chrono::seconds(o.seconds));  // the measured span
  const uint64_t steady = server->stats().requests - before;
  const double rate = static_cast<double>(steady) / o.seconds;
  // One report on demand.
  const uint64_t before_report = server->stats().requests;
  const auto asked = Clock::now();
  dogs.back()->request();
  double report_ms = -1;
  {
    std::unique_lock<std::mutex> lock(mu);
    if (cv.wait_for(lock, std::chrono::milliseconds(4 * o.poll_ms + 10'000),
                    [&] { return printed_at != Clock::time_point{}; })) {
      report_ms = std::chrono::duration<double, std::milli>(printed_at - asked).count();
    }
  }
  const uint64_t report_requests = server->stats().requests - before_report;
  std::printf("store %d %d %d %llu %.0f %.3f %.0f %llu\n", ranks, o.poll_ms, o.seconds,
              static_cast<unsigned long long>(steady), rate, rate / ranks, report_ms,
              static_cast<unsigned long long>(report_requests));
  std::fflush(stdout);
  dogs.clear();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  part_step(o);
  std::printf(
      "# store ranks poll(ms) seconds requests req/s req/rank/s report(ms) report_requests\n");
  for (int n : o.ranks) part_store(o, n);
  return 0;
}
