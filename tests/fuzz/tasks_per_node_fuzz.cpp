// Fuzz target: Slurm's tasks-per-node lists (SLURM_STEP_TASKS_PER_NODE,
// SLURM_TASKS_PER_NODE), e.g. "4(x2),3", through launch::parse_tasks_per_node.
//
// Invariants of an accepted list: at least one node, at most 2^24 nodes, every
// count in [1, 2^24]; printed back in Slurm's compressed form (runs of equal
// counts as "C(xN)") it parses to the same list.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "launch/error.h"
#include "launch/parse.h"

namespace {

std::string compress(const std::vector<uint32_t>& counts) {
  std::string out;
  for (size_t i = 0; i < counts.size();) {
    size_t j = i;
    while (j < counts.size() && counts[j] == counts[i]) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(counts[i]);
    if (j - i > 1) out += "(x" + std::to_string(j - i) + ")";
    i = j;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view value = slurmddp::fuzz::text(data, size);
  std::vector<uint32_t> counts;
  try {
    counts = slurmddp::launch::parse_tasks_per_node("SLURM_STEP_TASKS_PER_NODE", value);
  } catch (const slurmddp::launch::LaunchError&) {
    return 0;
  }
  FUZZ_CHECK(!counts.empty(), std::string(value));
  FUZZ_CHECK(counts.size() <= (size_t{1} << 24), std::to_string(counts.size()));
  for (uint32_t c : counts) {
    FUZZ_CHECK(c >= 1 && c <= (uint32_t{1} << 24), std::to_string(c));
  }
  const std::string printed = compress(counts);
  FUZZ_CHECK(slurmddp::launch::parse_tasks_per_node("SLURM_STEP_TASKS_PER_NODE", printed) == counts,
             printed);
  return 0;
}
