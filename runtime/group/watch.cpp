#include "group/watch.h"

#include <algorithm>
#include <cstdlib>

#include "group/duration.h"

namespace slurmddp {

Watch make_watch(const WatchRequest& request, const std::shared_ptr<progress::Tracker>& tracker) {
  using std::chrono::milliseconds;
  milliseconds after = std::min<milliseconds>(request.timeout / 2, std::chrono::minutes(5));
  if (request.hang_after) {
    after = *request.hang_after;
  } else if (const char* v = std::getenv("SLURMDDP_HANG_AFTER"); v != nullptr && *v != '\0') {
    after = parse_duration("SLURMDDP_HANG_AFTER", v);
  }
  const std::optional<int> signal = progress::report_signal_from_environment();
  Watch w;
  if ((after.count() <= 0 && !signal) || !request.store || request.size < 2) return w;
  // Without a threshold the polls only look for the signal's requests.
  const milliseconds every = after.count() > 0 ? after : std::chrono::minutes(5);
  progress::WatchdogOptions o;
  o.store = request.store;
  o.scope = request.scope;
  o.rank = request.rank;
  o.size = request.size;
  o.node = request.node;
  o.hang_after = after.count() > 0 ? after : std::chrono::hours(24 * 365 * 10);  // never
  o.on_stalled_step = !request.marks_collectives;
  o.poll = std::min(milliseconds(5000), std::max(every / 4, milliseconds(50)));
  // Every rank sees the request within one poll: the asker waits two.
  o.gather = std::min(milliseconds(5000), 2 * o.poll + milliseconds(500));
  o.describe = request.describe;
  if (request.print) o.print = request.print;
  if (signal) w.signal = std::make_unique<progress::ReportSignal>(*signal);
  w.watchdog = std::make_unique<progress::Watchdog>(std::move(o), tracker);
  return w;
}

}  // namespace slurmddp
