// The one default timeout of the runtime: what init(), the communicators and
// the TCP store use when nothing else is set (SLURMDDP_TIMEOUT overrides it
// for init()).
#pragma once

#include <chrono>

namespace slurmddp {

inline constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::minutes(5)};

}  // namespace slurmddp
