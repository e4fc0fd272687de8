#include "launch/hostlist.h"

#include <cstdint>
#include <optional>

#include "common/quote.h"
#include "launch/error.h"
#include "launch/parse.h"

namespace slurmddp::launch {

using common::quote;

namespace {

struct Range {
  uint64_t lo = 0;
  uint64_t hi = 0;
  size_t width = 0;  // zero-padding width: the length of the low bound as written
};

struct Group {
  std::string text;           // literal text before the bracket
  std::vector<Range> ranges;  // the bracket's ranges
  // Saturates: the ranges of one bracket can add up to more than 2^64 hosts
  // (a wrapped count could be 0, a divisor in host_of).
  uint64_t count() const {
    uint64_t n = 0;
    for (const auto& r : ranges) {
      if (__builtin_add_overflow(n, r.hi - r.lo + 1, &n)) return UINT64_MAX;
    }
    return n;
  }
  // The i-th value of the bracket, formatted.
  std::string value(uint64_t i) const {
    for (const auto& r : ranges) {
      uint64_t n = r.hi - r.lo + 1;
      if (i < n) {
        std::string digits = std::to_string(r.lo + i);
        if (digits.size() < r.width) digits.insert(0, r.width - digits.size(), '0');
        return digits;
      }
      i -= n;
    }
    return {};
  }
};

// One comma-separated item: either a plain host or groups of text+bracket,
// then the text after the last ']' (Slurm 23.02.5 and later: "n[1-4]-ib").
struct Item {
  std::string plain;  // when groups is empty
  std::vector<Group> groups;
  std::string suffix;
};

[[noreturn]] void fail(std::string_view name, std::string_view expr, std::string_view why) {
  throw LaunchError("invalid " + std::string(name) + "=" + quote(expr) + ": " + std::string(why) +
                    "; expected a Slurm hostlist such as n[01-04,7],gpu1");
}

std::optional<uint64_t> number(std::string_view s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

std::vector<Range> parse_ranges(std::string_view name, std::string_view expr,
                                std::string_view inside) {
  std::vector<Range> ranges;
  for (const auto& part : split(inside, ',')) {
    std::string_view p(part);
    auto dash = p.find('-');
    std::string_view lo_s = p.substr(0, dash);
    std::string_view hi_s = dash == std::string_view::npos ? lo_s : p.substr(dash + 1);
    auto lo = number(lo_s);
    auto hi = number(hi_s);
    if (!lo || !hi || *lo > *hi) fail(name, expr, "bad range " + quote(p));
    ranges.push_back(Range{*lo, *hi, lo_s.size()});
  }
  return ranges;
}

Item parse_item(std::string_view name, std::string_view expr, std::string_view item) {
  Item out;
  if (item.find_first_of("[]") == std::string_view::npos) {
    out.plain = std::string(item);
    return out;
  }
  size_t pos = 0;
  while (pos < item.size()) {
    auto open = item.find('[', pos);
    if (open == std::string_view::npos) {
      // A suffix, as Slurm reads it since 23.02.5 (older releases refuse it).
      out.suffix = std::string(item.substr(pos));
      if (out.suffix.find(']') != std::string::npos) {
        fail(name, expr, "unbalanced ']' in " + quote(item));
      }
      break;
    }
    auto close = item.find(']', open);
    if (close == std::string_view::npos) fail(name, expr, "unbalanced '[' in " + quote(item));
    std::string_view text = item.substr(pos, open - pos);
    if (text.find(']') != std::string_view::npos) {
      fail(name, expr, "unbalanced ']' in " + quote(item));
    }
    std::string_view inside = item.substr(open + 1, close - open - 1);
    if (inside.find('[') != std::string_view::npos) {
      fail(name, expr, "nested '[' in " + quote(item));
    }
    out.groups.push_back(Group{std::string(text), parse_ranges(name, expr, inside)});
    pos = close + 1;
  }
  return out;
}

// Splits on commas and whitespace outside brackets.
std::vector<Item> parse(std::string_view name, std::string_view expr) {
  std::vector<Item> items;
  int depth = 0;
  size_t start = 0;
  auto flush = [&](size_t end) {
    if (end > start) items.push_back(parse_item(name, expr, expr.substr(start, end - start)));
    start = end + 1;
  };
  for (size_t i = 0; i < expr.size(); ++i) {
    char c = expr[i];
    if (c == '[') {
      if (++depth > 1) fail(name, expr, "nested '['");
    } else if (c == ']') {
      if (--depth < 0) fail(name, expr, "unbalanced ']'");
    } else if (depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n')) {
      flush(i);
    }
  }
  if (depth != 0) fail(name, expr, "unbalanced '['");
  flush(expr.size());
  if (items.empty()) fail(name, expr, "no host");
  return items;
}

// Host number `index` of an item with groups: Slurm's order, the last group
// varying fastest, then the first, second, ... group.
std::string host_of(const Item& item, uint64_t index) {
  const size_t k = item.groups.size();
  std::vector<uint64_t> digit(k, 0);
  digit[k - 1] = index % item.groups[k - 1].count();
  index /= item.groups[k - 1].count();
  for (size_t g = 0; g + 1 < k; ++g) {
    digit[g] = index % item.groups[g].count();
    index /= item.groups[g].count();
  }
  std::string host;
  for (size_t g = 0; g < k; ++g) host += item.groups[g].text + item.groups[g].value(digit[g]);
  return host + item.suffix;
}

}  // namespace

void for_each_host(std::string_view name, std::string_view expr, HostBudget& budget,
                   const std::function<bool(const std::string& host)>& visit) {
  check_length(name, expr, kMaxHostlistBytes, "a Slurm hostlist such as n[01-04,7],gpu1");
  const auto too_many = [&] {
    fail(name, expr, "more hosts than the limit (" + std::to_string(budget.hosts) + " left)");
  };
  const auto take = [&](const std::string& host) {
    if (budget.hosts == 0) too_many();
    if (host.size() > budget.bytes) {
      fail(name, expr,
           "more bytes of host names than the limit (" + std::to_string(budget.bytes) + " left)");
    }
    --budget.hosts;
    budget.bytes -= host.size();
    return visit(host);
  };
  for (const auto& item : parse(name, expr)) {
    if (item.groups.empty()) {
      if (!take(item.plain)) return;
      continue;
    }
    uint64_t total = 1;
    for (const auto& g : item.groups) {
      if (__builtin_mul_overflow(total, g.count(), &total)) total = UINT64_MAX;
    }
    // Known before generating any: an item of more hosts than are left fails
    // at once (a count over the budget is an error whoever looks at it).
    if (total > budget.hosts) too_many();
    for (uint64_t i = 0; i < total; ++i) {
      if (!take(host_of(item, i))) return;
    }
  }
}

std::vector<std::string> expand_hostlist(std::string_view name, std::string_view expr,
                                         size_t max_hosts, size_t max_bytes) {
  HostBudget budget{max_hosts, max_bytes};
  std::vector<std::string> hosts;
  for_each_host(name, expr, budget, [&hosts](const std::string& host) {
    hosts.push_back(host);
    return true;
  });
  return hosts;
}

std::string first_host(std::string_view name, std::string_view expr) {
  check_length(name, expr, kMaxHostlistBytes, "a Slurm hostlist such as n[01-04,7],gpu1");
  auto items = parse(name, expr);
  const Item& first = items.front();
  return first.groups.empty() ? first.plain : host_of(first, 0);
}

}  // namespace slurmddp::launch
