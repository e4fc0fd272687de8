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
#include <string>
#include <string_view>
#include <vector>

namespace slurmddp::launch {

// Expands a hostlist in order, keeping duplicates. Throws LaunchError naming
// `name` and the value on a malformed expression or more than `max_hosts` hosts.
std::vector<std::string> expand_hostlist(std::string_view name, std::string_view expr,
                                         size_t max_hosts = size_t{1} << 20);

// The first host of a hostlist without expanding the rest.
std::string first_host(std::string_view name, std::string_view expr);

}  // namespace slurmddp::launch
