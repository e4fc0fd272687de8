// The one exception type of the launch rules. Kept separate from the runtime's
// hierarchy because the SPANK plugin links this code without the runtime.
#pragma once

#include <stdexcept>
#include <string>

namespace slurmddp::launch {

// A value the launch rules cannot accept or a decision they cannot make with
// certainty. what() follows the project grammar: "<what failed>: <cause>; key=value, ...".
class LaunchError : public std::runtime_error {
 public:
  explicit LaunchError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace slurmddp::launch
