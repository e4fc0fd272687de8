#include "common/signals.h"

#include <csignal>
#include <iterator>

namespace slurmddp::common {

namespace {

struct Named {
  int signal;
  const char* abbrev;
};

// The numbers come from <csignal>, so the table holds on every architecture.
// Where two names share a number (POLL and IO) the first is the one
// sigabbrev_np returns; both are read.
constexpr Named kSignals[] = {
    {SIGHUP, "HUP"},       {SIGINT, "INT"},       {SIGQUIT, "QUIT"}, {SIGILL, "ILL"},
    {SIGTRAP, "TRAP"},     {SIGABRT, "ABRT"},     {SIGBUS, "BUS"},   {SIGFPE, "FPE"},
    {SIGKILL, "KILL"},     {SIGUSR1, "USR1"},     {SIGSEGV, "SEGV"}, {SIGUSR2, "USR2"},
    {SIGPIPE, "PIPE"},     {SIGALRM, "ALRM"},     {SIGTERM, "TERM"},
#ifdef SIGSTKFLT
    {SIGSTKFLT, "STKFLT"},
#endif
    {SIGCHLD, "CHLD"},     {SIGCONT, "CONT"},     {SIGSTOP, "STOP"}, {SIGTSTP, "TSTP"},
    {SIGTTIN, "TTIN"},     {SIGTTOU, "TTOU"},     {SIGURG, "URG"},   {SIGXCPU, "XCPU"},
    {SIGXFSZ, "XFSZ"},     {SIGVTALRM, "VTALRM"}, {SIGPROF, "PROF"}, {SIGWINCH, "WINCH"},
#ifdef SIGPOLL
    {SIGPOLL, "POLL"},
#endif
    {SIGIO, "IO"},
#ifdef SIGPWR
    {SIGPWR, "PWR"},
#endif
    {SIGSYS, "SYS"},
};

}  // namespace

const char* signal_abbrev(int signal) {
  for (const Named& n : kSignals) {
    if (n.signal == signal) return n.abbrev;
  }
  return nullptr;
}

int signal_number(std::string_view abbrev) {
  for (const Named& n : kSignals) {
    if (abbrev == n.abbrev) return n.signal;
  }
  return 0;
}

bool restore_if_ours(int signal, void (*ours)(int, siginfo_t*, void*),
                     const struct sigaction& previous) {
  struct sigaction now {};
  if (sigaction(signal, nullptr, &now) != 0) return false;
  if ((now.sa_flags & SA_SIGINFO) == 0 || now.sa_sigaction != ours) return false;
  return sigaction(signal, &previous, nullptr) == 0;
}

}  // namespace slurmddp::common
