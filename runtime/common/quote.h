// How a value from outside (an environment variable, an option, a store key)
// appears in a message. Dependency-free: the launch rules, and through them the
// plugin, use it as well as the runtime.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace slurmddp::common {

// Returns the quoted form used in error messages: 'value' (control characters escaped,
// long values shortened), so a garbled variable cannot break the log line.
std::string quote(std::string_view value);

// An optional number as a message shows it: the number, or "unset".
std::string optional_text(const std::optional<int>& value);

}  // namespace slurmddp::common
