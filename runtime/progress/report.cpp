#include "progress/report.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace slurmddp::progress {

namespace {

std::string seconds(int64_t ms) {
  return std::to_string(std::max<int64_t>(ms, 0) / 1000) + " s";
}

// The value seen most often (the smallest on a tie), or a default.
template <typename T>
T most_common(const std::vector<T>& values, T otherwise) {
  std::map<T, int> count;
  for (const T& v : values) ++count[v];
  T best = otherwise;
  int most = 0;
  for (const auto& [v, n] : count) {
    if (n > most) {
      best = v;
      most = n;
    }
  }
  return best;
}

std::string op_name(const Record& r) {
  return r.seq < 0 ? r.op : r.op + " #" + std::to_string(r.seq);
}

std::string describe(int rank, const std::optional<Record>& r, int64_t now_ms) {
  std::string out = "rank " + std::to_string(rank);
  if (!r) return out + ": no record (it never reported)";
  out += " on " + (r->node.empty() ? std::string("?") : r->node);
  const std::string step = " at step " + std::to_string(r->step + 1);
  const std::string in =
      r->phase == Phase::kCollective
          ? " in " + op_name(*r) + (r->where.empty() ? "" : " (" + r->where + ")")
          : (r->where.empty() ? " in user code" : " in " + r->where);
  if (!r->fresh && r->since_ms == 0) {  // known from the join only
    return out + " did not answer and wrote no heartbeat (no step seen)";
  }
  if (!r->fresh) {
    return out + " did not answer; last seen" + step + in + ", " + seconds(now_ms - r->since_ms) +
           " ago";
  }
  return out + step + " for " + seconds(now_ms - r->since_ms) + in;
}

// Where a rank is, for grouping: a collective by name and number (its
// location aside: ranks call it from different lines), user code by line.
std::tuple<int, std::string, int64_t> place(const Record& r) {
  if (r.phase == Phase::kCollective) return {0, r.op, r.seq};
  return {1, r.where, 0};
}

}  // namespace

std::string hang_report(const std::vector<std::optional<Record>>& by_rank, int64_t now_ms,
                        std::vector<int>* listed) {
  const int n = static_cast<int>(by_rank.size());
  // The largest group of answering ranks at one place (a collective first on a tie).
  std::map<std::tuple<int, std::string, int64_t>, std::vector<int>> groups;
  for (int r = 0; r < n; ++r) {
    const auto& rec = by_rank[static_cast<size_t>(r)];
    if (rec && rec->fresh) groups[place(*rec)].push_back(r);
  }
  const std::vector<int>* largest = nullptr;
  for (const auto& [k, ranks] : groups) {
    if (largest == nullptr || ranks.size() > largest->size()) largest = &ranks;
  }
  std::string out;
  std::vector<bool> summarized(static_cast<size_t>(n), false);
  if (largest != nullptr) {
    std::vector<int64_t> steps;
    std::vector<std::string> wheres;
    for (int r : *largest) {
      summarized[static_cast<size_t>(r)] = true;
      steps.push_back(by_rank[static_cast<size_t>(r)]->step + 1);
      wheres.push_back(by_rank[static_cast<size_t>(r)]->where);
    }
    const Record& first = *by_rank[static_cast<size_t>(largest->front())];
    const std::string where = most_common(wheres, std::string());
    out = "step " + std::to_string(most_common(steps, int64_t{0})) + ": " +
          std::to_string(largest->size()) + "/" + std::to_string(n) + " ranks ";
    if (first.phase == Phase::kCollective) {
      out += "waiting in " + op_name(first) + (where.empty() ? "" : " (" + where + ")");
    } else {
      out += where.empty() ? "in user code" : "at " + where;
    }
  } else {
    out = "no rank of " + std::to_string(n) + " answered";
  }
  // The others, most suspect first.
  const auto order = [&](int r) {
    const auto& rec = by_rank[static_cast<size_t>(r)];
    if (!rec || !rec->fresh) return 0;
    return rec->phase == Phase::kUser ? 1 : 2;
  };
  std::vector<int> others;
  for (int r = 0; r < n; ++r) {
    if (!summarized[static_cast<size_t>(r)]) others.push_back(r);
  }
  std::stable_sort(others.begin(), others.end(), [&](int a, int b) { return order(a) < order(b); });
  for (size_t i = 0; i < others.size() && i < kListedRanks; ++i) {
    out += "; " + describe(others[i], by_rank[static_cast<size_t>(others[i])], now_ms);
    if (listed != nullptr) listed->push_back(others[i]);
  }
  if (others.size() > kListedRanks) {
    out += "; and " + std::to_string(others.size() - kListedRanks) + " more ranks";
  }
  return out;
}

}  // namespace slurmddp::progress
