// Note [Report signal] in report_signal.h.
#include "progress/report_signal.h"

#include <string.h>

#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <mutex>

#include "common/signals.h"
#include "slurmddp/error.h"
#include "slurmddp/stop.h"

namespace slurmddp::progress {

namespace {

std::atomic<uint64_t> g_requests{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the handler needs a lock-free counter");

std::mutex g_mutex;
int g_users = 0;      // live ReportSignal objects
int g_installed = 0;  // the signal handled while g_users > 0
struct sigaction g_previous {};

void on_signal(int sig, siginfo_t* info, void* context) {
  g_requests.fetch_add(1, std::memory_order_relaxed);
  const struct sigaction& prev = g_previous;
  if ((prev.sa_flags & SA_SIGINFO) != 0) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN &&
             prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
  }
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::optional<int> parse_report_signal(const char* variable, const std::string& value) {
  const std::string v = upper(value);
  if (v == "NONE" || v == "0") return std::nullopt;
  int sig = 0;
  if (!v.empty() && std::isdigit(static_cast<unsigned char>(v[0])) != 0) {
    char* end = nullptr;
    long n = std::strtol(v.c_str(), &end, 10);
    if (*end == '\0' && n > 0 && n < NSIG) sig = static_cast<int>(n);
  } else {
    const std::string bare = v.rfind("SIG", 0) == 0 ? v.substr(3) : v;
    sig = common::signal_number(bare);
  }
  const std::string expected =
      "; expected a signal name or number a program can catch (default URG: scancel "
      "--signal=URG <job>), or none";
  if (sig == 0) {
    throw InvalidArgument(std::string(variable) + "=" + value + " is not a signal" + expected);
  }
  switch (sig) {
    case SIGKILL:
    case SIGSTOP:
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
    case SIGABRT:
    case SIGTRAP:
    case SIGCHLD:
    case SIGPIPE:
      throw InvalidArgument(std::string(variable) + "=" + value + " (" + signal_name(sig) +
                            ") cannot ask for a report" + expected);
    case SIGTERM:
    case SIGUSR1:
    case SIGUSR2:
    case SIGHUP:
    case SIGINT:
      // Note [Report signal]: a stop signal asking for a report would be taken
      // by StopSignal's handler too, or, once StopSignal restores it, end the job
      throw InvalidArgument(std::string(variable) + "=" + value + " (" + signal_name(sig) +
                            ") is a signal that stops the job (Slurm's preemption and time-limit "
                            "signals, StopSignal's; SIGINT ends the program)" +
                            expected);
    default:
      return sig;
  }
}

std::optional<int> report_signal_from_environment() {
  const char* v = std::getenv(kReportSignalVariable);
  if (v == nullptr || *v == '\0') return SIGURG;
  return parse_report_signal(kReportSignalVariable, v);
}

ReportSignal::ReportSignal(int signal) : signal_(signal) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_users > 0) {
    if (g_installed != signal) {
      throw InvalidArgument("report signal: " + signal_name(signal) + " asked while " +
                            signal_name(g_installed) +
                            " already asks for reports in this process; expected one signal "
                            "(SLURMDDP_REPORT_SIGNAL) for every group");
    }
    ++g_users;
    return;
  }
  struct sigaction act {};
  act.sa_sigaction = on_signal;
  act.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&act.sa_mask);
  if (sigaction(signal, &act, &g_previous) != 0) {
    int err = errno;
    throw Error("report signal: failed to install a handler for " + signal_name(signal) + ": " +
                strerror(err));
  }
  g_installed = signal;
  g_users = 1;
}

ReportSignal::~ReportSignal() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_users > 0) return;
  common::restore_if_ours(g_installed, on_signal, g_previous);  // Note [Restoring a handler]
  g_installed = 0;
}

uint64_t report_requests() {
  return g_requests.load(std::memory_order_relaxed);
}

}  // namespace slurmddp::progress
