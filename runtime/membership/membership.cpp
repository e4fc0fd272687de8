// Note [Rendezvous generations] in membership.h.
#include "membership/membership.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <sstream>

#include "membership/ranks.h"

namespace slurmddp::membership {

namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string text(const Bytes& b) {
  return std::string(b.begin(), b.end());
}
Bytes bytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

std::optional<int64_t> parse_int(const std::string& s) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoll(s);
}

// Missing ranks named with their generation are listed up to this many.
constexpr int kListedGenerations = 32;

// Note [One verdict on a timeout]
//   When the join times out, every rank used to find out for itself who is
//   missing: O(log size) probes each, all at the same moment, against rank 0's
//   store. At 1,024 ranks on the 64-node test cluster (2 cores) that was
//   ~20,000 requests in one burst and ranks reporting up to 5 s past the
//   timeout. Rank 0 now stops waiting a little early (a tenth of what is left,
//   at most 1 s), finds the missing ranks once and publishes them as its
//   verdict; the others, waiting for the verdict anyway, report its text with
//   their own rank and host: one request each, within their timeout. A rank
//   whose deadline comes before rank 0's verdict finds out for itself.
constexpr const char* kTimedOutVerdict = "timeout\n";

// A record value as part of a store key: [A-Za-z0-9_.-] kept, the rest as %XX.
std::string key_part(const std::string& value) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string field_of(const std::vector<std::pair<std::string, std::string>>& fields,
                     const std::string& name) {
  for (const auto& [n, v] : fields) {
    if (n == name) return v;
  }
  return "";
}

}  // namespace

std::string Record::field(const std::string& name) const {
  const auto it = fields.find(name);
  return it == fields.end() ? "" : it->second;
}

Record Membership::record(int r) const {
  if (!o_.store) {
    Record own;
    own.size = o_.size;
    for (const auto& [k, v] : o_.fields) own.fields[k] = v;
    own.fields["size"] = std::to_string(o_.size);
    return own;
  }
  return parse_record(o_.store->get(join_key(r), remaining()));
}

Record parse_record(const Bytes& value) {
  Record r;
  std::istringstream is(text(value));
  std::string line;
  while (std::getline(is, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    r.fields[line.substr(0, eq)] = line.substr(eq + 1);
  }
  const auto size = parse_int(r.field("size"));
  r.size = size && *size <= 1000000000 ? static_cast<int>(*size) : -1;
  r.host = r.field("host");
  r.pid = r.field("pid");
  return r;
}

Membership::Membership(JoinOptions options) : o_(std::move(options)) {
  if (o_.size < 1 || o_.rank < 0 || o_.rank >= o_.size) {
    throw InvalidArgument(o_.head + "the rank must be in [0, size); " + o_.where);
  }
}

std::chrono::milliseconds Membership::remaining() const {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(o_.deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

std::string Membership::scope() const {
  return o_.prefix + "/" + std::to_string(generation_);
}

std::string Membership::key(const std::string& name) const {
  return scope() + "/" + name;
}

std::string Membership::previous_key(const std::string& name) const {
  if (generation_ <= 1) return "";
  return o_.prefix + "/" + std::to_string(generation_ - 1) + "/" + name;
}

void Membership::announce() {
  if (!o_.store || generation_ != 0) return;
  generation_ = o_.store->add(o_.prefix + "/generation/" + std::to_string(o_.rank), 1);
  std::string record = "size=" + std::to_string(o_.size) + "\nhost=" + host_name() +
                       "\npid=" + std::to_string(getpid()) +
                       "\ngeneration=" + std::to_string(generation_) + "\n";
  for (const auto& [name, value] : o_.fields) {
    record.append(name).append("=").append(value).append("\n");
  }
  // The sum of the sizes announced lets rank 0 see at a glance whether anyone
  // disagrees (complete()); it is counted before the record is visible.
  o_.store->add(key("size_sum"), o_.size);
  // Note [Equal fields]: likewise one counter per value of each field that
  // must be equal; rank 0 reads the count of its own value, and reads the
  // records (O(size)) only to name who differs.
  for (const auto& name : o_.agree_equal) {
    o_.store->add(key("equal/" + name + "/" + key_part(field_of(o_.fields, name))), 1);
  }
  announce_locality();  // before the record: once it is seen, so is where this node's ranks are
  o_.store->set(join_key(o_.rank), bytes(record));
  if (generation_ > 1) {
    // This rank's previous group is over: its record there goes.
    o_.store->erase(previous_key("join/" + std::to_string(o_.rank)));
  }
}

std::string Membership::not_joined_text(const std::string& also) const {
  std::vector<int> missing;
  try {
    missing = probe_missing(*o_.store, o_.size, [this](int r) { return join_key(r); });
  } catch (const std::exception& e) {
    return "the rendezvous did not complete in time, and the store could not tell who joined (" +
           std::string(e.what()) + ")";
  }
  std::string hosts;
  try {
    hosts = where_missing(missing);
  } catch (const std::exception& e) {
    hosts = std::string(" (hosts unknown: ") + e.what() + ")";
  }
  return joined_text(o_.size, missing) + hosts + other_generations(missing) + also;
}

void Membership::throw_not_joined(const std::string& also) const {
  throw TimeoutError(o_.head + not_joined_text(also) + "; " + o_.where);
}

void Membership::complete(const std::vector<std::string>& agree_min) {
  if (completed_) return;
  announce();
  std::map<std::string, int64_t> mins;
  for (const auto& f : agree_min) {
    for (const auto& [name, value] : o_.fields) {
      if (name == f) {
        if (auto v = parse_int(value)) mins[f] = *v;
      }
    }
  }
  std::string verdict;
  if (!o_.store || o_.size == 1) {
    verdict = "ok";
  } else if (o_.rank != 0) {
    Record root;
    try {
      root = parse_record(o_.store->get(join_key(0), remaining()));
    } catch (const TimeoutError&) {
      throw_not_joined();
    }
    if (root.size != o_.size) {
      throw SizeMismatch(o_.head + "world size mismatch: rank " + std::to_string(o_.rank) +
                             " has size=" + std::to_string(o_.size) +
                             ", rank 0 has size=" + std::to_string(root.size) + "; " + o_.where,
                         o_.rank, o_.size, 0, root.size);
    }
    try {
      verdict = text(o_.store->get(key("verdict"), remaining()));
    } catch (const TimeoutError&) {
      throw_not_joined("; rank 0 published no verdict");
    }
    if (verdict.rfind(kTimedOutVerdict, 0) == 0) {  // Note [One verdict on a timeout]
      throw TimeoutError(o_.head + verdict.substr(std::strlen(kTimedOutVerdict)) + "; " + o_.where);
    }
  } else {
    std::vector<std::string> all;
    all.reserve(static_cast<size_t>(o_.size));
    for (int j = 0; j < o_.size; ++j) all.push_back(join_key(j));
    // Note [One verdict on a timeout]: rank 0 gives up a little before the
    // others and tells them who is missing.
    const auto lead = std::min(std::chrono::milliseconds(1000), remaining() / 10);
    try {
      o_.store->wait(all, remaining() - lead);
    } catch (const TimeoutError&) {
      const std::string why = not_joined_text();
      try {
        o_.store->set(key("verdict"), bytes(kTimedOutVerdict + why));
      } catch (const std::exception&) {
        // The others then find who is missing themselves, as without it.
      }
      throw TimeoutError(o_.head + why + "; " + o_.where);
    }
    // Every record is visible, so every size was added.
    const auto sum = parse_int(text(o_.store->get(key("size_sum"), remaining())));
    const bool agree = sum && *sum == static_cast<int64_t>(o_.size) * static_cast<int64_t>(o_.size);
    std::string problem;
    if (!agree || !agree_min.empty()) {
      for (int j = 1; j < o_.size && problem.empty(); ++j) {
        const Record r = parse_record(o_.store->get(join_key(j), remaining()));
        if (r.size != o_.size) {
          problem = "world size mismatch: rank " + std::to_string(j) +
                    " has size=" + std::to_string(r.size) +
                    ", rank 0 has size=" + std::to_string(o_.size);
        }
        for (const auto& f : agree_min) {
          if (auto v = parse_int(r.field(f))) {
            auto it = mins.find(f);
            if (it == mins.end() || *v < it->second) mins[f] = *v;
          }
        }
      }
    }
    if (problem.empty()) problem = unequal_fields();
    if (problem.empty()) {
      verdict = "ok";
      for (const auto& [name, value] : mins) verdict += "\n" + name + "=" + std::to_string(value);
    } else {
      verdict = problem;
    }
    o_.store->set(key("verdict"), bytes(verdict));
  }
  if (verdict != "ok" && verdict.rfind("ok\n", 0) != 0) {
    throw InvalidArgument(o_.head + verdict + "; " + o_.where);
  }
  if (o_.store && o_.size > 1) {
    mins.clear();
    const Record v = parse_record(bytes(verdict));
    for (const auto& f : agree_min) {
      if (auto x = parse_int(v.field(f))) mins[f] = *x;
    }
  }
  agreed_ = std::move(mins);
  completed_ = true;
}

std::string Membership::unequal_fields() const {
  for (const auto& name : o_.agree_equal) {
    const std::string mine = field_of(o_.fields, name);
    const auto count = o_.store->add(key("equal/" + name + "/" + key_part(mine)), 0);
    if (count == o_.size) continue;
    auto described = [&](int rank, const std::string& host, const std::string& value,
                         const std::string& why) {
      std::string out = "rank ";
      out.append(std::to_string(rank)).append(" on ").append(host.empty() ? "?" : host);
      out.append(" has ").append(name).append("=").append(value);
      if (!why.empty()) out.append(" (").append(why).append(")");
      return out;
    };
    for (int j = 1; j < o_.size; ++j) {
      const Record r = parse_record(o_.store->get(join_key(j), remaining()));
      if (r.field(name) != mine) {
        return "ranks disagree on " + name + ": " +
               described(0, host_name(), mine, field_of(o_.fields, name + "_why")) + ", " +
               described(j, r.host, r.field(name), r.field(name + "_why")) + "; " +
               std::to_string(o_.size - count) + " of " + std::to_string(o_.size) +
               " ranks differ from rank 0";
      }
    }
  }
  return "";
}

std::shared_ptr<Membership> Membership::join(JoinOptions options,
                                             const std::vector<std::string>& agree_min) {
  auto m = std::make_shared<Membership>(std::move(options));
  m->complete(agree_min);
  return m;
}

std::optional<int64_t> Membership::agreed(const std::string& field) const {
  const auto it = agreed_.find(field);
  if (it == agreed_.end()) return std::nullopt;
  return it->second;
}

// Missing ranks that are at another generation on this prefix (the usual
// cause: a retry after one rank failed before joining), e.g. "; ranks at
// another generation of prefix 'p': [1 (generation 3)], this rank is at
// generation 2 (Note [Rendezvous generations])".
std::string Membership::other_generations(const std::vector<int>& missing) const {
  std::string listed;
  int probed = 0;
  for (int r : missing) {
    if (++probed > kListedGenerations) break;
    const std::string k = o_.prefix + "/generation/" + std::to_string(r);
    if (!o_.store->check({k})) continue;
    const std::string g = text(o_.store->get(k, std::chrono::milliseconds(0)));
    if (g == std::to_string(generation_)) continue;
    listed += (listed.empty() ? "" : ", ") + std::to_string(r) + " (generation " + g + ")";
  }
  if (listed.empty()) return "";
  return "; ranks at another generation of prefix '" + o_.prefix + "': [" + listed +
         "], this rank is at generation " + std::to_string(generation_) +
         " (Note [Rendezvous generations])";
}

std::string Membership::diagnosis() const {
  if (!o_.store) return "no store to tell which ranks joined";
  try {
    const auto missing = probe_missing(*o_.store, o_.size, [this](int r) { return join_key(r); });
    const int joined = o_.size - static_cast<int>(missing.size());
    std::string out = joined_text(o_.size, missing) + where_missing(missing);
    // Who announced another world size: only looked for when the sizes
    // announced do not add up.
    const std::string sum_key = key("size_sum");
    const auto sum =
        o_.store->check({sum_key}) ? parse_int(text(o_.store->get(sum_key, {}))) : std::nullopt;
    if (!sum || *sum != static_cast<int64_t>(joined) * o_.size) {
      std::string others;
      int listed = 0;
      size_t m = 0;
      for (int r = 0; r < o_.size && listed < kListedGenerations; ++r) {
        while (m < missing.size() && missing[m] < r) ++m;
        if (m < missing.size() && missing[m] == r) continue;
        const Record rec = parse_record(o_.store->get(join_key(r), {}));
        if (rec.size == o_.size) continue;
        others += (others.empty() ? "" : ", ") + std::to_string(r) +
                  " (size=" + std::to_string(rec.size) + ")";
        ++listed;
      }
      if (!others.empty()) out += "; ranks with another world size: [" + others + "]";
    }
    return out + other_generations(missing);
  } catch (const std::exception& e) {
    return std::string("the store could not tell which ranks joined (") + e.what() + ")";
  }
}

}  // namespace slurmddp::membership
