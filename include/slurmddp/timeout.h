// The one default timeout of the runtime: what init(), the communicators and
// the TCP store use when nothing else is set (SLURMDDP_TIMEOUT overrides it
// for init()).
#pragma once

#include <chrono>

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

inline constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::minutes(5)};

// How long destroying an NCCL communicator waits for ncclCommFinalize before
// it aborts instead (NcclOptions::finalize_timeout).
inline constexpr std::chrono::milliseconds kDefaultFinalizeTimeout{std::chrono::seconds(10)};

}  // namespace slurmddp

#pragma GCC visibility pop
