#include "launch/parse.h"

#include <cctype>
#include <cstdio>

#include "common/quote.h"
#include "launch/error.h"

namespace slurmddp::launch {

using common::quote;

namespace {

[[noreturn]] void fail(std::string_view name, std::string_view value, std::string_view expected) {
  throw LaunchError("invalid " + std::string(name) + "=" + quote(value) + ": expected " +
                    std::string(expected));
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Digits only, no overflow; nullopt on anything else.
std::optional<uint64_t> to_u64(std::string_view s) {
  if (!all_digits(s) || s.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) v = v * 10 + static_cast<uint64_t>(c - '0');
  return v;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

uint64_t parse_uint(std::string_view name, std::string_view value, uint64_t lo, uint64_t hi) {
  auto v = to_u64(value);
  if (!v || *v < lo || *v > hi) {
    fail(name, value, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return *v;
}

uint16_t parse_port(std::string_view name, std::string_view value) {
  auto v = to_u64(value);
  if (!v || *v < 1 || *v > 65535) fail(name, value, "a TCP port number in [1, 65535]");
  return static_cast<uint16_t>(*v);
}

bool parse_bool(std::string_view name, std::string_view value) {
  std::string v = lower(value);
  if (v == "1" || v == "yes" || v == "true" || v == "on") return true;
  if (v == "0" || v == "no" || v == "false" || v == "off") return false;
  fail(name, value, "one of yes|no|true|false|on|off|1|0");
}

PortRange parse_port_range(std::string_view name, std::string_view value) {
  auto dash = value.find('-');
  PortRange r;
  auto expected = "a port range LO-HI with 1 <= LO <= HI <= 65535";
  auto lo = to_u64(value.substr(0, dash));
  auto hi = dash == std::string_view::npos ? lo : to_u64(value.substr(dash + 1));
  if (!lo || !hi || *lo < 1 || *hi > 65535 || *lo > *hi) fail(name, value, expected);
  r.lo = static_cast<uint16_t>(*lo);
  r.hi = static_cast<uint16_t>(*hi);
  return r;
}

std::string join(const std::vector<std::string>& items, char sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) s += sep;
    s += items[i];
  }
  return s;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.emplace_back(s.substr(start, pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

void check_length(std::string_view name, std::string_view value, size_t max_bytes,
                  std::string_view expected) {
  if (value.size() <= max_bytes) return;
  throw LaunchError("invalid " + std::string(name) + ": " + std::to_string(value.size()) +
                    " bytes long, over the limit of " + std::to_string(max_bytes) +
                    " bytes; expected " + std::string(expected));
}

std::vector<PortRange> parse_port_list(std::string_view name, std::string_view value) {
  auto expected = "a port list such as 20000-20004 or 12000,12003-12004";
  check_length(name, value, kMaxPortListBytes, expected);
  if (value.empty()) fail(name, value, expected);
  std::vector<PortRange> ranges;
  size_t start = 0;
  while (true) {  // items one by one: no copy of the value, no port expanded
    const size_t comma = value.find(',', start);
    const std::string_view item = value.substr(start, comma - start);
    const auto dash = item.find('-');
    const auto lo = to_u64(item.substr(0, dash));
    const auto hi = dash == std::string_view::npos ? lo : to_u64(item.substr(dash + 1));
    if (!lo || !hi || *lo < 1 || *hi > 65535 || *lo > *hi) fail(name, value, expected);
    ranges.push_back(PortRange{static_cast<uint16_t>(*lo), static_cast<uint16_t>(*hi)});
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ranges;
}

std::vector<uint32_t> parse_tasks_per_node(std::string_view name, std::string_view value) {
  auto expected = "a tasks-per-node list such as 4(x2),3";
  if (value.empty()) fail(name, value, expected);
  std::vector<uint32_t> counts;
  for (const auto& item : split(value, ',')) {
    std::string_view it(item);
    uint64_t reps = 1;
    auto paren = it.find('(');
    if (paren != std::string_view::npos) {
      if (it.size() < paren + 4 || it.substr(paren, 2) != "(x" || it.back() != ')') {
        fail(name, value, expected);
      }
      auto r = to_u64(it.substr(paren + 2, it.size() - paren - 3));
      if (!r || *r < 1 || *r > (1u << 24)) fail(name, value, expected);
      reps = *r;
      it = it.substr(0, paren);
    }
    auto c = to_u64(it);
    if (!c || *c < 1 || *c > (1u << 24)) fail(name, value, expected);
    if (counts.size() + reps > (1u << 24)) fail(name, value, "at most 16777216 nodes");
    counts.insert(counts.end(), reps, static_cast<uint32_t>(*c));
  }
  return counts;
}

}  // namespace slurmddp::launch
