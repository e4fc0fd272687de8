// The simulated backward of the GradSync benchmark: CPU work in units whose
// rate is measured, and the process's CPU time.
//
// Note [Simulated backward]
// Backward runs from the last parameter to the first; parameter i's gradient
// is written (count_i floats) and marked ready once its share of the
// backward, compute_seconds * count_i / total, has passed. Three modes:
//   busy  the CPU computes (C++: multiply-adds in registers; torch: small
//         matmuls) until parameter i's point in a fixed schedule measured
//         from the start of backward: backward keeps one core busy for
//         compute_seconds whatever else runs, like an accelerator backward
//         with a spinning host thread, and robust to other tenants' load.
//   work  a fixed amount of that arithmetic per parameter, calibrated to
//         compute_seconds on an idle core (the ranks average their rates):
//         a real CPU backward, which every CPU cycle communication takes
//         slows down, and every other tenant too.
//   idle  sleeps until parameter i's point in the schedule (backward on an
//         accelerator, the CPU free for communication).
// Both engines run the same schedule, so their overheads compare directly.
//
#pragma once

#include <chrono>

namespace slurmddp::bench {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t);

// Where finished work is summed, so that the compiler cannot drop it.
extern float g_sink;
// One unit of simulated work: 4096 multiply-adds on the 16 floats of `acc`.
void work_block(float* acc);
// `blocks` units of simulated work.
void burn_work(double blocks);
// Units of work per second on this core, now (measured for 0.3 s).
double calibrate();
// CPU time of this process so far (all threads, user + system), in seconds.
double cpu_seconds();

}  // namespace slurmddp::bench
