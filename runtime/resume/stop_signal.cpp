#include <dlfcn.h>
#include <string.h>

#include <array>
#include <atomic>
#include <csignal>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/scalar_channel.h"
#include "common/log.h"
#include "common/signals.h"
#include "slurmddp/error.h"
#include "slurmddp/stop.h"

namespace slurmddp {

namespace {

const char* const kComponent = "stop";

// Note [Stop requests]: the state the handler touches. Lock-free atomics only.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler needs a lock-free flag");
constexpr int kMaxSignal = 65;
// Two slots a signal: reinstall() writes the one the handler does not read,
// then switches (Note [Handlers installed after ours]).
std::array<std::array<struct sigaction, 2>, kMaxSignal> g_previous{};
std::array<std::atomic<int>, kMaxSignal> g_slot{};
std::array<std::atomic<bool>, kMaxSignal> g_installed{};
// Note [UCX's debug signal]: previous handlers not to call.
std::array<std::atomic<bool>, kMaxSignal> g_skip_previous{};
std::mutex g_owner_mutex;
bool g_owned = false;

void on_signal(int sig, siginfo_t* info, void* context) {
  int expected = 0;
  // Keep the first signal; later ones do not change the decision.
  g_signal.compare_exchange_strong(expected, sig, std::memory_order_relaxed);
  if (sig <= 0 || sig >= kMaxSignal) return;
  if (g_skip_previous[static_cast<size_t>(sig)].load(std::memory_order_relaxed)) return;
  const auto i = static_cast<size_t>(sig);
  const struct sigaction& prev = g_previous[i][static_cast<size_t>(g_slot[i].load())];
  if ((prev.sa_flags & SA_SIGINFO) != 0) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN &&
             prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
  }
}

// Note [UCX's debug signal]
//   UCX (libucs, loaded with any MPI built on it) installs a handler for its
//   debug signal, SIGHUP unless UCX_DEBUG_SIGNO says otherwise, that switches
//   its log to trace level on stdout for the rest of the process: called on a
//   stop request, it would flood the job's output during the checkpoint and
//   write from a signal handler into the program's stdout. A stop signal is
//   not a request to debug UCX, so that one previous handler is not called;
//   every other one is.
const char* ucx_debug_handler(const struct sigaction& prev) {
  void* fn = (prev.sa_flags & SA_SIGINFO) != 0 ? reinterpret_cast<void*>(prev.sa_sigaction)
                                               : reinterpret_cast<void*>(prev.sa_handler);
  if (fn == nullptr || prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN) return nullptr;
  Dl_info info{};
  if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return nullptr;
  const char* base = strrchr(info.dli_fname, '/');
  base = base != nullptr ? base + 1 : info.dli_fname;
  return strncmp(base, "libucs.so", 9) == 0 ? info.dli_fname : nullptr;
}

}  // namespace

std::string signal_name(int signal) {
  const char* abbrev = common::signal_abbrev(signal);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

class __attribute__((visibility("hidden"))) StopSignal::Impl {
 public:
  Impl(std::shared_ptr<Communicator> comm, StopOptions options)
      : comm_(std::move(comm)), options_(std::move(options)) {
    if (options_.check_every < 1) {
      throw InvalidArgument("StopSignal: check_every=" + std::to_string(options_.check_every) +
                            "; expected at least 1");
    }
    for (int s : options_.signals) {
      if (s <= 0 || s >= kMaxSignal || s == SIGKILL || s == SIGSTOP) {
        throw InvalidArgument("StopSignal: cannot catch " + signal_name(s) +
                              "; expected signals such as SIGTERM, SIGUSR1, SIGUSR2, SIGHUP");
      }
    }
    if (comm_) attach(comm_);
    std::lock_guard<std::mutex> lock(g_owner_mutex);
    if (g_owned) {
      throw InvalidArgument("StopSignal: another StopSignal is installed in this process");
    }
    g_signal.store(0, std::memory_order_relaxed);
    for (int s : options_.signals) {
      auto i = static_cast<size_t>(s);
      if (g_installed[i].load()) continue;  // listed twice
      struct sigaction act {};
      act.sa_sigaction = on_signal;
      act.sa_flags = SA_SIGINFO | SA_RESTART;
      sigemptyset(&act.sa_mask);
      g_slot[i].store(0);
      if (sigaction(s, &act, &g_previous[i][0]) != 0) {
        int err = errno;
        restore();
        throw Error("StopSignal: failed to install a handler for " + signal_name(s) + ": " +
                    strerror(err));
      }
      const char* ucx = ucx_debug_handler(g_previous[i][0]);
      g_skip_previous[i].store(ucx != nullptr);
      if (ucx != nullptr) {
        SLURMDDP_LOG_INFO(kComponent, signal_name(s)
                                          << " requests a stop; UCX's debug handler for it (" << ucx
                                          << ", UCX_DEBUG_SIGNO) is not called");
      }
      g_installed[i].store(true);
    }
    g_owned = true;
  }

  ~Impl() {
    std::lock_guard<std::mutex> lock(g_owner_mutex);
    if (agreed_ != 0) {
      ignore();  // Note [Stop requests]: on the way out, a second signal must not kill
    } else {
      restore();
    }
    g_owned = false;
  }

  void attach(std::shared_ptr<Communicator> comm) {
    if (!comm) throw InvalidArgument("StopSignal::attach: the communicator is null");
    channel_ = comm::make_scalar_channel(*comm);
    comm_ = std::move(comm);
  }

  bool should_stop(int64_t step) {
    if (!channel_) {
      throw InvalidArgument(
          "StopSignal::should_stop: no communicator; pass one to the constructor or attach()");
    }
    if (step % options_.check_every != 0) return false;
    for (int s : reinstall()) {
      SLURMDDP_LOG_WARN(kComponent, "a handler for " << signal_name(s)
                                                     << " was installed after the StopSignal's; "
                                                        "the StopSignal's is back in front and "
                                                        "calls it after recording the signal");
    }
    int mine = g_signal.load(std::memory_order_relaxed);
    auto any = static_cast<int>(channel_->max(mine));
    if (any != 0 && agreed_ == 0) {
      agreed_ = any;
      SLURMDDP_LOG_INFO(kComponent, "stopping after step "
                                        << step << ": " << signal_name(any)
                                        << (mine != 0 ? " (received here)" : " (on another rank)"));
    }
    return any != 0;
  }

  // Note [Handlers installed after ours]
  //   A library that installs its own handler for one of the signals after
  //   the StopSignal (Python's signal.signal, as Lightning and submitit do)
  //   replaces ours silently, and the job then dies at its time limit without
  //   a checkpoint. So each check looks at the installed handlers; one that is
  //   not ours becomes the handler ours calls after recording the signal, and
  //   ours is put back in front: both see the signal. The handler reads the
  //   previous handler from one of two slots and the new one is written to the
  //   other before the switch, so a signal arriving meanwhile calls a whole
  //   one. Returns the signals whose handler was replaced.
  std::vector<int> reinstall() {
    std::vector<int> replaced;
    std::lock_guard<std::mutex> lock(g_owner_mutex);
    for (size_t i = 0; i < g_installed.size(); ++i) {
      if (!g_installed[i].load()) continue;
      struct sigaction now {};
      if (sigaction(static_cast<int>(i), nullptr, &now) != 0) continue;
      if ((now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == on_signal) continue;
      const int next = 1 - g_slot[i].load();
      g_previous[i][static_cast<size_t>(next)] = now;
      g_skip_previous[i].store(ucx_debug_handler(now) != nullptr);
      g_slot[i].store(next);
      struct sigaction act {};
      act.sa_sigaction = on_signal;
      act.sa_flags = SA_SIGINFO | SA_RESTART;
      sigemptyset(&act.sa_mask);
      if (sigaction(static_cast<int>(i), &act, nullptr) != 0) {
        throw Error("StopSignal: failed to reinstall the handler for " +
                    signal_name(static_cast<int>(i)) + ": " + strerror(errno));
      }
      replaced.push_back(static_cast<int>(i));
    }
    return replaced;
  }

  int agreed() const { return agreed_; }
  void agree(int signal) {
    if (agreed_ == 0) agreed_ = signal;
  }

 private:
  void ignore() {
    for (size_t i = 0; i < g_installed.size(); ++i) {
      if (!g_installed[i].load()) continue;
      struct sigaction act {};
      act.sa_handler = SIG_IGN;
      sigemptyset(&act.sa_mask);
      sigaction(static_cast<int>(i), &act, nullptr);
      g_installed[i].store(false);
    }
  }

  void restore() {
    for (size_t i = 0; i < g_installed.size(); ++i) {
      if (!g_installed[i].load()) continue;
      // Note [Restoring a handler]: a handler installed after ours stays
      common::restore_if_ours(static_cast<int>(i), on_signal,
                              g_previous[i][static_cast<size_t>(g_slot[i].load())]);
      g_installed[i].store(false);
    }
  }

  std::shared_ptr<Communicator> comm_;
  StopOptions options_;
  std::unique_ptr<comm::ScalarChannel> channel_;
  int agreed_ = 0;
};

namespace {
std::shared_ptr<Communicator> required(std::shared_ptr<Communicator> comm) {
  if (!comm) throw InvalidArgument("StopSignal: the communicator is null");
  return comm;
}
}  // namespace

StopSignal::StopSignal(std::shared_ptr<Communicator> comm, StopOptions options)
    : impl_(std::make_unique<Impl>(required(std::move(comm)), std::move(options))) {}
StopSignal::StopSignal(StopOptions options)
    : impl_(std::make_unique<Impl>(nullptr, std::move(options))) {}

void StopSignal::attach(std::shared_ptr<Communicator> comm) {
  impl_->attach(std::move(comm));
}
StopSignal::~StopSignal() = default;

std::optional<int> StopSignal::local_signal() const {
  const int signal = g_signal.load(std::memory_order_relaxed);
  if (signal == 0) return std::nullopt;
  return signal;
}

bool StopSignal::should_stop(int64_t step) {
  return impl_->should_stop(step);
}

std::optional<int> StopSignal::agreed_signal() const {
  const int signal = impl_->agreed();
  if (signal == 0) return std::nullopt;
  return signal;
}

void StopSignal::agree(int signal) {
  impl_->agree(signal);
}

std::vector<int> StopSignal::reinstall() {
  return impl_->reinstall();
}

void StopSignal::request(int signal) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, signal, std::memory_order_relaxed);
}

}  // namespace slurmddp
