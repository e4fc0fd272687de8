// Signal names as messages and settings spell them ("USR1", "SIGTERM"),
// without glibc's sigabbrev_np (2.32 and newer), so the runtime and the Python
// package build and run on the glibc of RHEL 8 and Ubuntu 20.04.
#pragma once

#include <string_view>

namespace slurmddp::common {

// The abbreviation of `signal` ("USR1"), as sigabbrev_np gives it; nullptr for
// a number that has none (0, a real-time signal, out of range).
const char* signal_abbrev(int signal);

// The signal named `abbrev` ("USR1", exact case, no "SIG"); 0 when none is.
int signal_number(std::string_view abbrev);

}  // namespace slurmddp::common
