// The straggler report: which rank holds every step of the others, and in
// which phase (issue: "one rank with a slow disk, a throttled GPU or a busy
// node holds every step of every other rank, and nothing says which").
//
// Note [Straggler windows]
//   In synchronous data-parallel training every rank's step takes the same
//   wall time: the fast ranks wait in the collective for the slow one. What
//   differs is where the time goes. Each rank adds up, over a window of
//   `every` steps, its step time, its time inside collectives (the runtime
//   marks them; PyTorch code can with Progress.waiting) and its time waiting
//   for data (Progress.loader). Its own time is the step time less the
//   waiting in collectives (or, where no rank marks collectives, its data
//   time). At the end of each window every rank writes one line to the
//   store ("<scope>/straggler/<rank>", overwritten: N keys in all), off the
//   training thread; rank 0 reads the N lines (O(N) once per window) and
//   names the ranks whose own time is over `ratio` times the median, and by
//   at least a millisecond a step: "straggler report, steps 100-199: rank 5
//   on n2: 1.8x the median (compute 180 vs 100 ms a step) for 100 steps; the
//   others wait for it in allreduce (median 78 ms a step)". Nothing is
//   printed for a window without a straggler.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace slurmddp::progress {

// One rank's window of steps, in microseconds.
struct Window {
  int rank = -1;
  std::string node;
  int64_t first_step = 0;  // the window's first step
  int64_t steps = 0;
  int64_t step_us = 0;  // wall time of the window's steps
  int64_t wait_us = 0;  // inside collectives
  int64_t data_us = 0;  // waiting for data
  std::string op;       // the collective it spent the most time in ("" if none)
};

std::string encode(const Window& w);
std::optional<Window> decode_window(const std::string& text);

// The report for one window (every entry's first_step the same), or "" when
// no rank is a straggler. Ranks without an entry are left out.
std::string straggler_report(const std::vector<std::optional<Window>>& by_rank, double ratio);

}  // namespace slurmddp::progress
