// Reading SLURMDDP_TIMEOUT-style durations (internal: init() and the fuzzers).
#pragma once

#include <chrono>
#include <string>

namespace slurmddp {

// Parses a duration such as "300", "30s", "500ms", "5m" (bare numbers are
// seconds). Throws InvalidArgument naming `name` and the value.
std::chrono::milliseconds parse_duration(const char* name, const std::string& value);

}  // namespace slurmddp
