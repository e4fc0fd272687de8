// parse_duration on its own, so that the parsers of outside input build and
// fuzz without the rest of the process group.
#include "group/duration.h"

#include <string>

#include "slurmddp/error.h"

namespace slurmddp {

std::chrono::milliseconds parse_duration(const char* name, const std::string& value) {
  size_t i = 0;
  while (i < value.size() && value[i] >= '0' && value[i] <= '9') ++i;
  std::string digits = value.substr(0, i), unit = value.substr(i);
  long long scale = unit.empty() || unit == "s" ? 1000 : unit == "ms" ? 1 : unit == "m" ? 60000 : 0;
  if (digits.empty() || digits.size() > 9 || scale == 0) {
    throw InvalidArgument(std::string("init: invalid ") + name + "='" + value +
                          "': expected a duration such as 300, 30s, 500ms or 5m");
  }
  return std::chrono::milliseconds(std::stoll(digits) * scale);
}

}  // namespace slurmddp
