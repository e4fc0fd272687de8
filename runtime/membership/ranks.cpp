#include "membership/ranks.h"

#include <algorithm>

namespace slurmddp::membership {

namespace {

void probe(Store& store, const std::function<std::string(int)>& key_of, int lo, int hi,
           std::vector<int>* missing) {
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(hi - lo));
  for (int r = lo; r < hi; ++r) keys.push_back(key_of(r));
  if (store.check(keys)) return;
  if (hi - lo == 1) {
    missing->push_back(lo);
    return;
  }
  const int mid = lo + (hi - lo) / 2;
  probe(store, key_of, lo, mid, missing);
  probe(store, key_of, mid, hi, missing);
}

}  // namespace

std::string format_ranks(std::vector<int> ranks, size_t max_items) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  size_t items = 0;
  size_t i = 0;
  for (; i < ranks.size() && items < max_items; ++items) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    if (j - i >= 2) {
      out += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
      i = j + 1;
    } else {
      out += std::to_string(ranks[i]);  // a pair is two items
      ++i;
    }
  }
  if (i < ranks.size()) out += " ... and " + std::to_string(ranks.size() - i) + " more";
  return out;
}

std::string rank_list(const std::vector<int>& ranks) {
  return "[" + format_ranks(ranks) + "]";
}

std::string joined_text(int size, const std::vector<int>& missing) {
  std::vector<int> m = missing;
  std::sort(m.begin(), m.end());
  m.erase(std::unique(m.begin(), m.end()), m.end());
  return std::to_string(size - static_cast<int>(m.size())) + "/" + std::to_string(size) +
         " ranks joined; missing: " + rank_list(m);
}

std::vector<int> probe_missing(Store& store, int size,
                               const std::function<std::string(int)>& key_of) {
  std::vector<int> missing;
  if (size > 0) probe(store, key_of, 0, size, &missing);
  return missing;
}

}  // namespace slurmddp::membership
