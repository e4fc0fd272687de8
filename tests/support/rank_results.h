// The stdout protocol of the multiproc suites' rank processes (comm_rank for
// Gloo, mpi_rank for MPI): "RESULT ok", or "RESULT wrong <what>" and exit
// status 1; and the conformance suite (conformance.h) on host memory, told
// that way.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "conformance.h"
#include "slurmddp/communicator.h"

namespace slurmddp::support {

inline void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

[[noreturn]] inline void wrong(const std::string& what) {
  say("RESULT wrong " + what);
  std::exit(1);
}

// Every collective, type and reduction (ConformanceOptions::host()); prints
// "RESULT ok" and returns 0, or prints "RESULT wrong <first failure> (N
// failures)" and returns 1.
inline int run_collectives(Communicator& c) {
  const auto failures = check_collectives(c, host_memory(), ConformanceOptions::host());
  if (failures.empty()) {
    say("RESULT ok");
    return 0;
  }
  say("RESULT wrong " + failures.front() + " (" + std::to_string(failures.size()) + " failures)");
  return 1;
}

}  // namespace slurmddp::support
