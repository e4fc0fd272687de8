// Slurm hostlist expressions ("n[01-04,7],gpu[1-2]x[1-2]") outside Slurm.
//
// The plugin uses Slurm's own slurm_hostlist_* functions; this parser exists for
// the runtime's fallback when the plugin is not installed and agrees with
// `scontrol show hostnames` (a differential test checks it), including Slurm's
// quirks: the zero-padding width is the length of the range's low bound, several
// bracket groups expand with the last group varying fastest, then the first,
// second, ... group, and text after the last bracket group is a suffix of every
// host ("n[1-2]-ib": n1-ib, n2-ib), as Slurm reads it since 23.02.5 (older
// releases refuse that form; accepting it there is harmless).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace slurmddp::launch {

// Note [Bounded parsing] (parse.h): an expression longer than this is refused
// unread; a few thousand nodes listed one by one fit many times over.
inline constexpr size_t kMaxHostlistBytes = size_t{1} << 20;

// What walking hostlists may still produce: hosts, and bytes of their names
// (a count alone lets a long name take gigabytes). One budget can be shared by
// several walks, each taking its share.
struct HostBudget {
  size_t hosts = size_t{1} << 20;
  size_t bytes = size_t{16} << 20;
};

// Calls `visit` with each host of the hostlist in order (duplicates kept),
// generated one at a time, until it returns false. Takes each host from
// `budget` and throws LaunchError naming `name` when the budget runs out, or
// when the expression is malformed or longer than kMaxHostlistBytes (the error
// then names its length and the cap).
void for_each_host(std::string_view name, std::string_view expr, HostBudget& budget,
                   const std::function<bool(const std::string& host)>& visit);

// Expands a hostlist in order, keeping duplicates. Throws LaunchError naming
// `name` and the value on a malformed expression, more than `max_hosts` hosts
// or more than `max_bytes` bytes of names.
std::vector<std::string> expand_hostlist(std::string_view name, std::string_view expr,
                                         size_t max_hosts = HostBudget{}.hosts,
                                         size_t max_bytes = HostBudget{}.bytes);

// The first host of a hostlist without expanding the rest.
std::string first_host(std::string_view name, std::string_view expr);

}  // namespace slurmddp::launch
