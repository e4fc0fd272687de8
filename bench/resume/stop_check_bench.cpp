// The per-step cost of StopSignal::should_stop: the agreed stop check is one
// allreduce(max) of a single int64 every check_every steps. Ranks are
// processes on loopback (Gloo), started by this program itself. Rank 0 prints
// one row per setting, the median over repetitions of the time per training
// step spent in should_stop (min and max beside it):
//   stop_check ranks=4 check_every=1 steps=2000 us_per_step=41.2 min=39.8 max=45.0
//
//   stop_check_bench [--ranks N] [--steps S] [--reps R]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "loopback_port.h"
#include "plugin_env.h"
#include "slurmddp/process_group.h"
#include "slurmddp/stop.h"
#include "stats.h"
#include "subprocess.h"

namespace {

int run_rank(long steps, long reps) {
  auto pg = slurmddp::init();
  for (long every : {1L, 10L, 100L}) {
    slurmddp::StopOptions o;
    o.check_every = every;
    slurmddp::StopSignal stop(pg->comm(), o);
    std::vector<double> per_step_us;
    for (long rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
      pg->comm()->barrier()->wait();
      auto t0 = std::chrono::steady_clock::now();
      for (long step = 0; step < steps; ++step) {
        if (stop.should_stop(step)) return 3;  // nobody signals: never
      }
      double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (rep > 0) per_step_us.push_back(us / static_cast<double>(steps));
    }
    if (pg->rank() == 0) {
      auto s = slurmddp::bench::spread_of(per_step_us);
      std::printf(
          "stop_check ranks=%d check_every=%ld steps=%ld us_per_step=%.3f min=%.3f max=%.3f\n",
          pg->size(), every, steps, s.median, s.min, s.max);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 4;
  long steps = 2000, reps = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--ranks") ranks = std::atoi(argv[i + 1]);
    if (k == "--steps") steps = std::atol(argv[i + 1]);
    if (k == "--reps") reps = std::atol(argv[i + 1]);
  }
  try {
    if (std::getenv("STOP_BENCH_RANK") != nullptr) return run_rank(steps, reps);
    const uint16_t port = slurmddp::support::free_loopback_port();
    std::vector<std::unique_ptr<slurmddp::support::Child>> children;
    for (int r = 0; r < ranks; ++r) {
      slurmddp::support::SpawnOptions o;
      o.env = slurmddp::support::plugin_env(r, ranks, port, {{"STOP_BENCH_RANK", "1"}});
      children.push_back(std::make_unique<slurmddp::support::Child>(
          std::vector<std::string>{"/proc/self/exe", "--steps", std::to_string(steps), "--reps",
                                   std::to_string(reps)},
          o));
    }
    int worst = 0;
    for (auto& c : children) {
      auto code = c->wait(std::chrono::minutes(10));
      int rc = code.value_or(124);
      if (rc != 0) worst = rc;
    }
    return worst;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stop_check_bench: %s\n", e.what());
    return 1;
  }
}
