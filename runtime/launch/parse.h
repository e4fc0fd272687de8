// Strict parsers for the integers and lists that arrive in environment
// variables and plugin arguments. Every error names the variable, the value and
// the accepted form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace slurmddp::launch {

// Parses a base-10 unsigned integer in [lo, hi]; no sign, no spaces, no suffix.
// `name` is the variable or option the value came from (used in the error).
uint64_t parse_uint(std::string_view name, std::string_view value, uint64_t lo, uint64_t hi);

// Parses a TCP port number 1..65535.
uint16_t parse_port(std::string_view name, std::string_view value);

// Parses a boolean: 1/0, yes/no, true/false, on/off (case-insensitive).
bool parse_bool(std::string_view name, std::string_view value);

// An inclusive port range "LO-HI" (or a single port "P").
struct PortRange {
  uint16_t lo = 0;
  uint16_t hi = 0;
  uint32_t size() const { return static_cast<uint32_t>(hi) - lo + 1; }
  bool operator==(const PortRange& o) const { return lo == o.lo && hi == o.hi; }
};
PortRange parse_port_range(std::string_view name, std::string_view value);

// Note [Bounded parsing]
//   The values parsed here come from the user's environment as much as from
//   Slurm: srun passes the user's SLURM_STEP_RESV_PORTS, SLURM_HET_SIZE,
//   SLURM_JOB_NODELIST_HET_GROUP_<k>, ... to the step unless it sets them
//   itself, and slurmstepd's user_init parses them as root on every node. So
//   each parser takes time and memory in proportion to the bytes it was given,
//   refuses a value longer than its cap before looking at it (the error names
//   the variable, its length and the cap), and expands nothing it does not
//   use: a port list stays a list of ranges (its first port is MASTER_PORT),
//   a hostlist is walked host by host under a budget of hosts and bytes
//   (hostlist.h).

// Throws LaunchError naming `name`, the value's length and `max_bytes` when
// `value` is longer; `expected` says what the value should look like.
void check_length(std::string_view name, std::string_view value, size_t max_bytes,
                  std::string_view expected);

// The longest SLURM_STEP_RESV_PORTS accepted: thousands of ranges, far more
// than Slurm reserves for a step.
inline constexpr size_t kMaxPortListBytes = size_t{64} << 10;

// Parses a Slurm port list such as SLURM_STEP_RESV_PORTS: "20006-20010",
// "12000,12003-12004". Returns its ranges in order, as written (not expanded:
// Note [Bounded parsing]); values over kMaxPortListBytes are refused.
std::vector<PortRange> parse_port_list(std::string_view name, std::string_view value);

// Parses a Slurm tasks-per-node list such as SLURM_STEP_TASKS_PER_NODE:
// "4(x2),3" -> {4, 4, 3}. Counts must be >= 1 and repetitions >= 1.
std::vector<uint32_t> parse_tasks_per_node(std::string_view name, std::string_view value);

// Splits "a,b,c" on commas; empty items are kept (callers decide).
std::vector<std::string> split(std::string_view s, char sep);
// The inverse: the items with `sep` between them.
std::string join(const std::vector<std::string>& items, char sep);

}  // namespace slurmddp::launch
