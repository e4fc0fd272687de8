// Note [Progress records] in record.h.
#include "progress/record.h"

#include <sstream>

namespace slurmddp::progress {

namespace {

// One line: newlines would start a new field.
std::string one_line(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

std::optional<int64_t> parse_int(const std::string& s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return std::nullopt;
  for (size_t k = i; k < s.size(); ++k) {
    if (s[k] < '0' || s[k] > '9') return std::nullopt;
  }
  return std::stoll(s);
}

}  // namespace

std::string encode(const Record& r) {
  std::ostringstream os;
  os << "rank=" << r.rank << "\nnode=" << one_line(r.node) << "\nstep=" << r.step
     << "\nphase=" << (r.phase == Phase::kCollective ? "collective" : "user")
     << "\nop=" << one_line(r.op) << "\nseq=" << r.seq << "\nsince_ms=" << r.since_ms
     << "\nwhere=" << one_line(r.where) << "\n";
  if (!r.stack.empty()) os << "stack:\n" << r.stack << (r.stack.back() == '\n' ? "" : "\n");
  return os.str();
}

std::optional<Record> decode(const std::string& text, std::string* why) {
  Record r;
  std::istringstream is(text);
  std::string line;
  bool rank = false, phase = false;
  while (std::getline(is, line)) {
    if (line == "stack:") {
      std::ostringstream rest;
      rest << is.rdbuf();
      r.stack = rest.str();
      break;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = line.substr(0, eq), value = line.substr(eq + 1);
    if (name == "rank" || name == "step" || name == "seq" || name == "since_ms") {
      const auto v = parse_int(value);
      if (!v) {
        if (why != nullptr) {
          *why = "field " + name;
          why->append("='").append(value).append("' is not an integer");
        }
        return std::nullopt;
      }
      if (name == "rank") {
        r.rank = static_cast<int>(*v);
        rank = true;
      } else if (name == "step") {
        r.step = *v;
      } else if (name == "seq") {
        r.seq = *v;
      } else {
        r.since_ms = *v;
      }
    } else if (name == "phase") {
      if (value != "user" && value != "collective") {
        if (why != nullptr) {
          *why = "field phase='" + value;
          why->append("': expected user or collective");
        }
        return std::nullopt;
      }
      r.phase = value == "collective" ? Phase::kCollective : Phase::kUser;
      phase = true;
    } else if (name == "node") {
      r.node = value;
    } else if (name == "op") {
      r.op = value;
    } else if (name == "where") {
      r.where = value;
    }
  }
  if (!rank || !phase || r.rank < 0) {
    if (why != nullptr) *why = "no rank or phase: not a progress record";
    return std::nullopt;
  }
  return r;
}

}  // namespace slurmddp::progress
