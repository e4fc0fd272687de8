// store_barrier: every rank records its arrival under its own key and bumps a
// counter; the rank that brings the counter to world_size sets "done", which
// everyone waits for.
//
// On a timeout the message names the ranks that never arrived
// (Note [Probing for missing ranks]).
#include <chrono>

#include "common/quote.h"
#include "membership/ranks.h"
#include "slurmddp/error.h"
#include "slurmddp/store.h"
#include "store/barrier_join.h"

namespace slurmddp {

namespace {

using Clock = std::chrono::steady_clock;

std::string rank_key(const std::string& prefix, int rank) {
  return prefix + "rank/" + std::to_string(rank);
}

}  // namespace

void store_barrier(Store& store, const std::string& name, int rank, int world_size,
                   Millis timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw InvalidArgument("store: failed to enter barrier " + common::quote(name) +
                          ": the rank must be in [0, world_size); rank=" + std::to_string(rank) +
                          ", world_size=" + std::to_string(world_size));
  }
  const auto start = Clock::now();
  const std::string prefix = "barrier/" + name + "/";
  const std::string done = prefix + "done";
  auto check_joined = [&](int64_t joined) {
    if (joined > world_size) {
      throw InvalidArgument("store: failed to enter barrier " + common::quote(name) + ": " +
                            std::to_string(joined) +
                            " ranks joined but world_size=" + std::to_string(world_size) +
                            " (ranks disagree on the world size, or the barrier name was "
                            "reused); rank=" +
                            std::to_string(rank));
    }
  };
  // After a timeout: name the ranks that never arrived, or return when the
  // last one arrived just as we gave up.
  auto diagnose = [&] {
    const auto missing =
        membership::probe_missing(store, world_size, [&](int r) { return rank_key(prefix, r); });
    if (missing.empty()) return;
    throw TimeoutError("store barrier '" + name +
                       "': " + membership::joined_text(world_size, missing));
  };
  if (auto* join = dynamic_cast<store::BarrierJoin*>(&store)) {
    // Note [Barrier join]
    int64_t joined = 0;
    try {
      joined =
          join->barrier_join(rank_key(prefix, rank), prefix + "count", done, world_size, timeout);
    } catch (const TimeoutError&) {
      diagnose();
      return;
    }
    check_joined(joined);
    return;
  }
  store.set(rank_key(prefix, rank), Bytes{'1'});
  const int64_t joined = store.add(prefix + "count", 1);
  check_joined(joined);
  if (joined == world_size) {
    // The last to arrive: everyone is in, nothing to wait for.
    store.set(done, Bytes{'1'});
    return;
  }
  try {
    auto spent = std::chrono::duration_cast<Millis>(Clock::now() - start);
    store.wait({done}, std::max(Millis(0), timeout - spent));
  } catch (const TimeoutError&) {
    diagnose();
  }
}

}  // namespace slurmddp
