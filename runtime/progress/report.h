// The hang report: one line that says where every rank of a group is, from
// their progress records (Note [Progress records]), e.g.
//   step 1234: 7/8 ranks waiting in all_reduce #5123 (train.py:88); rank 5 on
//   n2 at step 1233 for 312 s in train.py:61 (next(loader))
// Pure: the caller gathers the records.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "progress/record.h"

namespace slurmddp::progress {

// Ranks named one by one after the summary; the rest are counted.
inline constexpr size_t kListedRanks = 8;

// `by_rank[r]`: rank r's record (stale when it did not answer), or nothing
// when it never wrote one. `now_ms`: wall clock, as Record::since_ms.
//
// The largest set of answering ranks at the same place (the same collective,
// name and sequence number; else the same location in user code) is the
// summary, with the step they are in; on a tie a collective wins. Every
// other rank is named with its node, its step, how long it has been where it
// is and where: first those that did not answer (stopped, or stuck outside
// reach), then those in user code, then those in another collective. "Step"
// is the step a rank is in: its last completed step + 1. A sequence number
// below 0 is unknown (PyTorch's collectives) and not printed. A stale record
// with since_ms 0 says only where the rank runs (from the join): it never
// wrote a heartbeat. `listed`, when
// given, receives the ranks named one by one.
std::string hang_report(const std::vector<std::optional<Record>>& by_rank, int64_t now_ms,
                        std::vector<int>* listed = nullptr);

}  // namespace slurmddp::progress
