// Runtime logging: one line per message on stderr,
//   "slurm-ddp[<level> rank=<r> host=<h> pid=<p>] <component>: <message>"
// filtered by SLURMDDP_LOG_LEVEL (error, warn, info, debug, trace; default warn),
// read once at first use.
#pragma once

#include <sstream>
#include <string>

namespace slurmddp::log {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

bool enabled(Level level);
void write(Level level, const char* component, const std::string& message);

// The rank shown on every line once known (-1: unknown).
void set_rank(int rank);

// Parses a level name; returns false when `name` is not one.
bool parse_level(const std::string& name, Level* out);

}  // namespace slurmddp::log

#define SLURMDDP_LOG(level, component, expr)                                         \
  do {                                                                               \
    if (::slurmddp::log::enabled(level)) {                                           \
      std::ostringstream slurmddp_log_os_;                                           \
      slurmddp_log_os_ << expr; /* NOLINT(bugprone-macro-parentheses): a << chain */ \
      ::slurmddp::log::write(level, component, slurmddp_log_os_.str());              \
    }                                                                                \
  } while (0)

#define SLURMDDP_LOG_ERROR(c, e) SLURMDDP_LOG(::slurmddp::log::Level::kError, c, e)
#define SLURMDDP_LOG_WARN(c, e) SLURMDDP_LOG(::slurmddp::log::Level::kWarn, c, e)
#define SLURMDDP_LOG_INFO(c, e) SLURMDDP_LOG(::slurmddp::log::Level::kInfo, c, e)
#define SLURMDDP_LOG_DEBUG(c, e) SLURMDDP_LOG(::slurmddp::log::Level::kDebug, c, e)
