// The one way the runtime names a set of ranks, and the one "who is missing"
// sentence every rendezvous prints.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "slurmddp/store.h"

namespace slurmddp::membership {

// "2, 4-9, 12": sorted and deduplicated; runs of three or more consecutive
// ranks as ranges; after `max_items` items, "... and N more" (N counts ranks).
std::string format_ranks(std::vector<int> ranks, size_t max_items = 32);

// "[2, 4-9]": format_ranks in brackets, as the "missing=[..]" key of messages.
std::string rank_list(const std::vector<int>& ranks);

// "3/4 ranks joined; missing: [2]". `missing` are ranks in [0, size).
std::string joined_text(int size, const std::vector<int>& missing);

// Note [Probing for missing ranks]
// Which of ranks [0, size) have no key `key_of(rank)` in the store. Asking for
// each key separately costs `size` round trips on a TCP store, so the ranks
// are probed in halves with check(): a group whose keys all exist is done in
// one call, and only groups holding a missing rank are split further, which
// costs O(missing * log(size)) calls. Throws what the store throws.
std::vector<int> probe_missing(Store& store, int size,
                               const std::function<std::string(int)>& key_of);

}  // namespace slurmddp::membership
