// Note [Straggler windows] in straggler.h.
#include "progress/straggler.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace slurmddp::progress {

namespace {

int64_t median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string ms(int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, us >= 10'000 ? "%.0f" : "%.1f", static_cast<double>(us) / 1000.0);
  return buf;
}

std::string times(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fx", x);
  return buf;
}

}  // namespace

std::string encode(const Window& w) {
  std::ostringstream os;
  os << "rank=" << w.rank << " first_step=" << w.first_step << " steps=" << w.steps
     << " step_us=" << w.step_us << " wait_us=" << w.wait_us << " data_us=" << w.data_us
     << " op=" << (w.op.empty() ? "-" : w.op) << " node=" << w.node;
  return os.str();
}

std::optional<Window> decode_window(const std::string& text) {
  Window w;
  std::istringstream is(text);
  std::string field;
  int seen = 0;
  while (is >> field) {
    const auto eq = field.find('=');
    if (eq == std::string::npos) return std::nullopt;
    const std::string k = field.substr(0, eq), v = field.substr(eq + 1);
    try {
      if (k == "node") {
        w.node = v;
      } else if (k == "op") {
        w.op = v == "-" ? "" : v;
      } else if (k == "rank") {
        w.rank = std::stoi(v);
      } else if (k == "first_step") {
        w.first_step = std::stoll(v);
      } else if (k == "steps") {
        w.steps = std::stoll(v);
      } else if (k == "step_us") {
        w.step_us = std::stoll(v);
      } else if (k == "wait_us") {
        w.wait_us = std::stoll(v);
      } else if (k == "data_us") {
        w.data_us = std::stoll(v);
      } else {
        continue;
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
    ++seen;
  }
  if (seen < 8 || w.rank < 0 || w.steps <= 0) return std::nullopt;
  return w;
}

std::string straggler_report(const std::vector<std::optional<Window>>& by_rank, double ratio) {
  std::vector<const Window*> ws;
  bool marks_collectives = false;
  for (const auto& w : by_rank) {
    if (!w) continue;
    ws.push_back(&*w);
    marks_collectives = marks_collectives || w->wait_us > 0;
  }
  if (ws.size() < 2) return "";
  // A rank's own time a step: what it spends outside the collectives (or,
  // where none are marked, waiting for data).
  const auto own = [&](const Window& w) {
    const int64_t t = marks_collectives ? w.step_us - w.wait_us : w.data_us;
    return std::max<int64_t>(t, 0) / w.steps;
  };
  std::vector<int64_t> owns, waits, datas, computes;
  for (const Window* w : ws) {
    owns.push_back(own(*w));
    waits.push_back(w->wait_us / w->steps);
    datas.push_back(w->data_us / w->steps);
    computes.push_back(std::max<int64_t>(w->step_us - w->wait_us - w->data_us, 0) / w->steps);
  }
  const int64_t m = median(owns), m_data = median(datas), m_compute = median(computes);
  std::vector<const Window*> slow;
  for (const Window* w : ws) {
    const int64_t o = own(*w);
    if (static_cast<double>(o) > ratio * static_cast<double>(m) && o - m >= 1000) {
      slow.push_back(w);
    }
  }
  if (slow.empty()) return "";
  std::sort(slow.begin(), slow.end(), [&](const Window* a, const Window* b) {
    return own(*a) != own(*b) ? own(*a) > own(*b) : a->rank < b->rank;
  });
  const Window& first = *ws.front();
  std::string out = "straggler report, steps " + std::to_string(first.first_step) + "-" +
                    std::to_string(first.first_step + first.steps - 1) + ":";
  std::map<std::string, int> ops;  // where the others wait
  std::vector<int64_t> other_waits;
  for (const Window* w : ws) {
    if (std::find(slow.begin(), slow.end(), w) != slow.end()) continue;
    if (!w->op.empty()) ++ops[w->op];
    other_waits.push_back(w->wait_us / w->steps);
  }
  size_t listed = 0;
  for (const Window* w : slow) {
    if (listed++ == 8) {
      out += " and " + std::to_string(slow.size() - 8) + " more ranks;";
      break;
    }
    const int64_t per_step_data = w->data_us / w->steps;
    const int64_t per_step_compute =
        std::max<int64_t>(w->step_us - w->wait_us - w->data_us, 0) / w->steps;
    // The phase that holds the others: the one furthest over its median.
    const bool data = per_step_data - m_data > per_step_compute - m_compute;
    const int64_t mine = data ? per_step_data : per_step_compute;
    const int64_t theirs = data ? m_data : m_compute;
    out += " rank " + std::to_string(w->rank) + " on " + (w->node.empty() ? "?" : w->node) + ": " +
           times(m > 0 ? static_cast<double>(own(*w)) / static_cast<double>(m) : 0.0) +
           " the median (" + (data ? "data " : "compute ") + ms(mine) + " vs " + ms(theirs) +
           " ms a step) for " + std::to_string(w->steps) + " steps;";
  }
  std::string op;
  int most = 0;
  for (const auto& [name, n] : ops) {
    if (n > most) {
      op = name;
      most = n;
    }
  }
  if (marks_collectives) {
    out += " the others wait for " + std::string(slow.size() == 1 ? "it" : "them") +
           (op.empty() ? "" : " in " + op) + " (median " + ms(median(other_waits)) + " ms a step)";
  } else {
    out += " the others wait for " + std::string(slow.size() == 1 ? "it" : "them");
  }
  return out;
}

}  // namespace slurmddp::progress
