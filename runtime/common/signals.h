// Signal names as messages and settings spell them ("USR1", "SIGTERM"),
// without glibc's sigabbrev_np (2.32 and newer), so the runtime and the Python
// package build and run on the glibc of RHEL 8 and Ubuntu 20.04.
#pragma once

#include <signal.h>

#include <string_view>

namespace slurmddp::common {

// The abbreviation of `signal` ("USR1"), as sigabbrev_np gives it; nullptr for
// a number that has none (0, a real-time signal, out of range).
const char* signal_abbrev(int signal);

// The signal named `abbrev` ("USR1", exact case, no "SIG"); 0 when none is.
int signal_number(std::string_view abbrev);

// Note [Restoring a handler]
//   A component that installed a handler and now removes it puts back the one
//   it found, but only while its own is still the installed one: a handler
//   that a library or the program installed later (Python's signal.signal, a
//   trainer's) stays. Restoring blindly would remove it and could turn the
//   signal back to its default action (terminate) in the middle of a job.
// Restores `previous` for `signal` if `ours` is the installed handler; returns
// whether it did.
bool restore_if_ours(int signal, void (*ours)(int, siginfo_t*, void*),
                     const struct sigaction& previous);

}  // namespace slurmddp::common
