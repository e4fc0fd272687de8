// store_barrier: every rank records its arrival under its own key and bumps a
// counter; the rank that brings the counter to world_size sets "done", which
// everyone waits for.
//
// Note [Barrier missing ranks]
// On a timeout the message names the ranks that never arrived. Asking for each
// rank key separately costs world_size round trips on a TCP store, so the ranks
// are probed in halves with check(): a group whose keys all exist is done in
// one call, and only groups holding a missing rank are split further, which
// costs O(missing * log(world_size)) calls.
#include <chrono>

#include "parse.h"
#include "slurmddp/error.h"
#include "slurmddp/store.h"
#include "store/barrier_join.h"

namespace slurmddp {

namespace {

using Clock = std::chrono::steady_clock;

std::string rank_key(const std::string& prefix, int rank) {
  return prefix + "rank/" + std::to_string(rank);
}

void find_missing(Store& store, const std::string& prefix, int lo, int hi,
                  std::vector<int>* missing) {
  std::vector<std::string> keys;
  for (int r = lo; r < hi; ++r) keys.push_back(rank_key(prefix, r));
  if (store.check(keys)) return;
  if (hi - lo == 1) {
    missing->push_back(lo);
    return;
  }
  int mid = lo + (hi - lo) / 2;
  find_missing(store, prefix, lo, mid, missing);
  find_missing(store, prefix, mid, hi, missing);
}

// "2, 4-9, 12": runs of three or more consecutive ranks as ranges.
std::string format_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    if (j - i >= 2) {
      out += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
    } else {
      out += std::to_string(ranks[i]);
      if (j > i) out += ", " + std::to_string(ranks[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace

void store_barrier(Store& store, const std::string& name, int rank, int world_size,
                   Millis timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw InvalidArgument("store: failed to enter barrier " + launch::quote(name) +
                          ": the rank must be in [0, world_size); rank=" + std::to_string(rank) +
                          ", world_size=" + std::to_string(world_size));
  }
  const auto start = Clock::now();
  const std::string prefix = "barrier/" + name + "/";
  const std::string done = prefix + "done";
  auto check_joined = [&](int64_t joined) {
    if (joined > world_size) {
      throw InvalidArgument("store: failed to enter barrier " + launch::quote(name) + ": " +
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
    std::vector<int> missing;
    find_missing(store, prefix, 0, world_size, &missing);
    if (missing.empty()) return;
    throw TimeoutError("store barrier '" + name +
                       "': " + std::to_string(world_size - static_cast<int>(missing.size())) + "/" +
                       std::to_string(world_size) + " ranks joined; missing: [" +
                       format_ranks(missing) + "]");
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
