// stop_rank: one rank of a training loop with slurmddp::StopSignal, for the
// multiproc stop tests. init() from the torchrun-style environment, then per
// step one allreduce (the "training") and should_stop(step). Prints
//   stopped rank=R step=S signal=SIGNAME [chained=1]
// when the ranks agree to stop, or "finished rank=R" after --steps.
//   stop_rank [--steps N] [--check-every K] [--raise SIGNAL --raise-rank R --raise-step S]
//             [--pause-rank R --pause-step S] [--kill-rank R --kill-step S] [--chain]
// --raise: rank R raises SIGNAL (a number) itself before step S's check.
// --pause: rank R prints "paused" after step S and waits for a line on stdin
// (the test delivers a signal meanwhile). --kill: rank R SIGKILLs itself at
// step S. --chain: a SIGUSR2 handler installed before StopSignal must still run.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "slurmddp/process_group.h"
#include "slurmddp/stop.h"

namespace {
std::atomic<int> g_chained{0};
void chained_handler(int) {
  g_chained.store(1);
}
}  // namespace

int main(int argc, char** argv) {
  long steps = 100, check_every = 1, raise_sig = 0, raise_rank = -1, raise_step = -1;
  long pause_rank = -1, pause_step = -1, kill_rank = -1, kill_step = -1;
  bool chain = false;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--chain") {
      chain = true;
      continue;
    }
    if (i + 1 >= argc) return 2;
    long v = std::atol(argv[++i]);
    if (k == "--steps") steps = v;
    if (k == "--check-every") check_every = v;
    if (k == "--raise") raise_sig = v;
    if (k == "--raise-rank") raise_rank = v;
    if (k == "--raise-step") raise_step = v;
    if (k == "--pause-rank") pause_rank = v;
    if (k == "--pause-step") pause_step = v;
    if (k == "--kill-rank") kill_rank = v;
    if (k == "--kill-step") kill_step = v;
  }
  try {
    if (chain) signal(SIGUSR2, chained_handler);
    auto pg = slurmddp::init();
    const int rank = pg->rank();
    slurmddp::StopOptions o;
    o.check_every = check_every;
    slurmddp::StopSignal stop(pg->comm(), o);
    for (long step = 0; step < steps; ++step) {
      if (rank == kill_rank && step == kill_step) raise(SIGKILL);
      double x = 1.0;
      pg->comm()->allreduce(&x, 1)->wait();
      if (rank == raise_rank && step == raise_step) raise(static_cast<int>(raise_sig));
      if (rank == pause_rank && step == pause_step) {
        std::printf("paused\n");
        std::fflush(stdout);
        std::string line;
        std::getline(std::cin, line);
      }
      if (stop.should_stop(step)) {
        std::printf("stopped rank=%d step=%ld signal=%s%s\n", rank, step,
                    slurmddp::signal_name(stop.agreed_signal().value_or(0)).c_str(),
                    g_chained.load() != 0 ? " chained=1" : "");
        return 0;
      }
    }
    std::printf("finished rank=%d\n", rank);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stop_rank: %s\n", e.what());
    return 1;
  }
}
