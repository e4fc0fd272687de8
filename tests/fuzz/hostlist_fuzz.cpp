// Fuzz target: Slurm hostlist expressions (SLURM_STEP_NODELIST,
// SLURM_NODELIST), e.g. "node[001-004,010],gpu-[1-2]", through
// launch::expand_hostlist and launch::first_host.
//
// Invariants of an accepted expression: at most max_hosts hosts and at least
// as many as the ranges of any one bracket, every name non-empty and free of the list's own syntax
// (brackets, commas, blanks); first_host agrees with the first expanded name; the expanded names,
// listed plainly, expand to themselves.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "launch/error.h"
#include "launch/hostlist.h"

namespace {

namespace launch = slurmddp::launch;

// Small enough that a long host name times the count stays far from the
// fuzzer's memory limit.
constexpr size_t kMaxHosts = 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view expr = slurmddp::fuzz::text(data, size);
  std::vector<std::string> hosts;
  try {
    hosts = launch::expand_hostlist("SLURM_STEP_NODELIST", expr, kMaxHosts);
  } catch (const launch::LaunchError&) {
    // first_host parses the same expression: it may still succeed (it does not
    // count hosts), but must fail cleanly otherwise.
    try {
      FUZZ_CHECK(!launch::first_host("SLURM_STEP_NODELIST", expr).empty(), std::string(expr));
    } catch (const launch::LaunchError&) {
    }
    return 0;
  }
  FUZZ_CHECK(!hosts.empty() && hosts.size() <= kMaxHosts, std::to_string(hosts.size()));
  // Every range of a bracket contributes at least one host.
  for (size_t open = expr.find('['); open != std::string_view::npos;
       open = expr.find('[', open + 1)) {
    const std::string_view inside = expr.substr(open, expr.find(']', open) - open);
    const size_t ranges = 1 + static_cast<size_t>(std::count(inside.begin(), inside.end(), ','));
    FUZZ_CHECK(hosts.size() >= ranges, std::to_string(hosts.size()) + " hosts from " +
                                           std::to_string(ranges) + " ranges in one bracket");
  }
  std::string plain;
  for (const auto& h : hosts) {
    FUZZ_CHECK(!h.empty(), std::string(expr));
    FUZZ_CHECK(h.find_first_of("[], \t\n") == std::string::npos, h);
    plain += (plain.empty() ? "" : ",") + h;
  }
  FUZZ_CHECK(launch::first_host("SLURM_STEP_NODELIST", expr) == hosts.front(), hosts.front());
  // The plain listing of a short expression can be longer than any value may
  // be (kMaxHostlistBytes): that one is refused, as it must be.
  if (plain.size() > launch::kMaxHostlistBytes) {
    try {
      launch::expand_hostlist("SLURM_STEP_NODELIST", plain, kMaxHosts);
      FUZZ_CHECK(false, "a listing of " + std::to_string(plain.size()) + " bytes was accepted");
    } catch (const launch::LaunchError&) {
    }
    return 0;
  }
  FUZZ_CHECK(launch::expand_hostlist("SLURM_STEP_NODELIST", plain, kMaxHosts) == hosts, plain);
  return 0;
}
