#include "group/watch.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "group/duration.h"
#include "slurmddp/error.h"

namespace slurmddp {

namespace {

std::string expected_every(const char* v) {
  return std::string("SLURMDDP_STRAGGLER_EVERY=") + v +
         "; expected a number of steps (e.g. 100), or 0 for no straggler report";
}

int64_t straggler_every_from_environment() {
  const char* v = std::getenv("SLURMDDP_STRAGGLER_EVERY");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || errno != 0 || n < 0) throw InvalidArgument(expected_every(v));
  return n;
}

double straggler_ratio_from_environment() {
  const char* v = std::getenv("SLURMDDP_STRAGGLER_RATIO");
  if (v == nullptr || *v == '\0') return 1.5;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || !(x > 1.0) || x > 1000.0) {
    throw InvalidArgument(std::string("SLURMDDP_STRAGGLER_RATIO=") + v +
                          "; expected a ratio over 1 (e.g. 1.5: ranks 1.5x slower than the "
                          "median)");
  }
  return x;
}

}  // namespace

Watch make_watch(const WatchRequest& request, const std::shared_ptr<progress::Tracker>& tracker) {
  using std::chrono::milliseconds;
  milliseconds after = std::min<milliseconds>(request.timeout / 2, std::chrono::minutes(5));
  if (request.hang_after) {
    after = *request.hang_after;
  } else if (const char* v = std::getenv("SLURMDDP_HANG_AFTER"); v != nullptr && *v != '\0') {
    after = parse_duration("SLURMDDP_HANG_AFTER", v);
  }
  const std::optional<int> signal = progress::report_signal_from_environment();
  const int64_t every =
      request.straggler_every ? *request.straggler_every : straggler_every_from_environment();
  if (every < 0) throw InvalidArgument(expected_every(std::to_string(every).c_str()));
  const double ratio = straggler_ratio_from_environment();
  Watch w;
  if ((after.count() <= 0 && !signal && every == 0) || !request.store || request.size < 2) {
    return w;
  }
  // Without a threshold the polls only look for the signal's requests.
  const milliseconds period = after.count() > 0 ? after : std::chrono::minutes(5);
  progress::WatchdogOptions o;
  o.store = request.store;
  o.scope = request.scope;
  o.rank = request.rank;
  o.size = request.size;
  o.node = request.node;
  o.node_of = request.node_of;
  o.store_timeout = request.timeout;
  o.hang_after = after.count() > 0 ? after : std::chrono::hours(24 * 365 * 10);  // never
  o.on_stalled_step = !request.marks_collectives;
  o.poll = std::min(milliseconds(5000), std::max(period / 4, milliseconds(50)));
  // Every rank sees the request within one poll: the asker waits two.
  o.gather = std::min(milliseconds(5000), 2 * o.poll + milliseconds(500));
  o.straggler_every = every;
  o.straggler_ratio = ratio;
  o.describe = request.describe;
  o.stop_wait = request.stop_wait;
  if (request.print) o.print = request.print;
  if (signal) w.signal = std::make_unique<progress::ReportSignal>(*signal);
  w.watchdog = std::make_unique<progress::Watchdog>(std::move(o), tracker);
  return w;
}

}  // namespace slurmddp
