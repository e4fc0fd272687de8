#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace slurmddp::log {

namespace {

const char* const kNames[] = {"error", "warn", "info", "debug", "trace"};

Level initial_level() {
  const char* v = std::getenv("SLURMDDP_LOG_LEVEL");
  Level l = Level::kWarn;
  if (v != nullptr && *v != '\0' && !parse_level(v, &l)) {
    std::fprintf(stderr,
                 "slurm-ddp: log: invalid SLURMDDP_LOG_LEVEL='%s': expected one of error, warn, "
                 "info, debug, trace; using warn\n",
                 v);
    l = Level::kWarn;
  }
  return l;
}

Level current_level() {
  static const Level level = initial_level();
  return level;
}

std::atomic<int> g_rank{-1};

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

}  // namespace

bool parse_level(const std::string& name, Level* out) {
  for (int i = 0; i < 5; ++i) {
    if (name == kNames[i]) {
      *out = static_cast<Level>(i);
      return true;
    }
  }
  return false;
}

bool enabled(Level level) {
  return static_cast<int>(level) <= static_cast<int>(current_level());
}

void set_rank(int rank) {
  g_rank.store(rank);
}

void write(Level level, const char* component, const std::string& message) {
  static const std::string host = hostname();
  static std::mutex mu;
  std::string line = "slurm-ddp[" + std::string(kNames[static_cast<int>(level)]);
  int r = g_rank.load();
  if (r >= 0) line += " rank=" + std::to_string(r);
  line += " host=" + host + " pid=" + std::to_string(getpid()) + "] " + component + ": " + message +
          "\n";
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace slurmddp::log
