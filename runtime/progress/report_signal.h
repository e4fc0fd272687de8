// The hang report on demand: a signal sent to the step's tasks, e.g.
//   scancel --signal=URG <jobid>
// asks every watchdog of the process for a report without stopping the job.
//
// Note [Report signal]
//   The default is SIGURG: its default action is to ignore it, so a task of
//   the step that does not run slurm-ddp (a wrapper, a helper) is not harmed
//   when the signal reaches it, and nothing sends it to a training process
//   otherwise (it means out-of-band data on a socket that asked for it with
//   F_SETOWN). SIGUSR1, SIGUSR2, SIGTERM and SIGHUP are Slurm's preemption
//   signals (StopSignal); SIGQUIT, SIGTTIN and SIGWINCH end, stop or are
//   sent on a terminal resize. SLURMDDP_REPORT_SIGNAL picks another ("USR2",
//   "SIGUSR2" or a number) or none ("none"). The handler only bumps a
//   lock-free counter and calls the previous handler; the watchdogs read the
//   counter at their next poll.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace slurmddp::progress {

inline constexpr const char* kReportSignalVariable = "SLURMDDP_REPORT_SIGNAL";

// "URG", "SIGURG", "23" -> the signal; "none" or "0" -> std::nullopt. Throws
// InvalidArgument naming `variable` and the value for anything else, and for
// signals that cannot be caught or that end the program when a task has no
// handler for them is not what is asked (SIGKILL, SIGSTOP, SIGSEGV, ...).
std::optional<int> parse_report_signal(const char* variable, const std::string& value);
// From SLURMDDP_REPORT_SIGNAL, default SIGURG.
std::optional<int> report_signal_from_environment();

// Installs the handler while at least one ReportSignal lives (counted; the
// previous handler is restored when the last one goes). Several groups of a
// process share it.
class ReportSignal {
 public:
  explicit ReportSignal(int signal);
  ~ReportSignal();
  ReportSignal(const ReportSignal&) = delete;
  ReportSignal& operator=(const ReportSignal&) = delete;
  int signal() const { return signal_; }

 private:
  int signal_;
};

// How many report signals this process has received (any ReportSignal).
uint64_t report_requests();

}  // namespace slurmddp::progress
