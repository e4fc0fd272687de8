// Note [Simulated backward] in simulated_backward.h.
#include "simulated_backward.h"

#include <sys/resource.h>

namespace slurmddp::bench {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

float g_sink = 0;

// One unit of simulated work: 4096 multiply-adds on registers.
void work_block(float* acc) {
  for (int k = 0; k < 256; ++k) {
    for (int j = 0; j < 16; ++j) acc[j] = acc[j] * 0.9999999f + 0.5f;
  }
}

void burn_work(double blocks) {
  float acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = static_cast<float>(j);
  for (double b = 0; b < blocks; b += 1) work_block(acc);
  for (int j = 0; j < 16; ++j) g_sink += acc[j];
}

double calibrate() {
  float acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = static_cast<float>(j);
  const auto start = Clock::now();
  double blocks = 0;
  while (seconds_since(start) < 0.3) {
    for (int i = 0; i < 64; ++i) work_block(acc);
    blocks += 64;
  }
  for (int j = 0; j < 16; ++j) g_sink += acc[j];
  return blocks / seconds_since(start);
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

}  // namespace slurmddp::bench
