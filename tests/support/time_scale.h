// Note [Time scale]
//   A test that asserts a wall-clock bound ("fails within its 1 s timeout, so
//   before 1.6 s") is written for a machine running the code at full speed.
//   Under the sanitizers the same code runs several times slower (TSan most),
//   so every such bound goes through scaled(): the bound times
//   SLURMDDP_TEST_TIME_SCALE (1 when unset; scripts/run-sanitizers sets it for
//   each kind). The timeouts handed to the code under test are not scaled: what
//   is asserted stays the same, only the allowance for slow execution grows.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace slurmddp::support {

inline double time_scale() {
  static const double scale = [] {
    const char* v = std::getenv("SLURMDDP_TEST_TIME_SCALE");
    if (v == nullptr || *v == '\0') return 1.0;
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(s >= 1.0 && s <= 100.0)) {
      std::fprintf(stderr, "SLURMDDP_TEST_TIME_SCALE=%s: expected a number from 1 to 100\n", v);
      std::exit(2);
    }
    return s;
  }();
  return scale;
}

// A bound on elapsed time, stretched by the time scale.
template <typename Rep, typename Period>
std::chrono::milliseconds scaled(std::chrono::duration<Rep, Period> bound) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double, Period>(bound) * time_scale());
}
// A bound in seconds or milliseconds as a plain number.
inline double scaled(double bound) {
  return bound * time_scale();
}

}  // namespace slurmddp::support
