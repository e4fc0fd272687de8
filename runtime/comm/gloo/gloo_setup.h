// Setting up the Gloo communicator's transport: which local address to bind
// (interface choice), SIGPIPE (Note [SIGPIPE]) and the socket send-buffer
// limit the group agrees on (Note [Priming send buffers]).
#pragma once

#include <pthread.h>
#include <signal.h>

#include <cstddef>
#include <ctime>
#include <string>

#include "slurmddp/gloo_communicator.h"

namespace slurmddp::comm {

// net.core.wmem_max where it cannot be read: Linux's default.
inline constexpr size_t kDefaultWmemMax = 212992;

struct Bind {
  std::string ifname;
  std::string hostname;
  std::string source;  // where the choice came from, for messages
};

// GlooOptions' ifname or hostname, else SLURMDDP_IFNAME or GLOO_SOCKET_IFNAME
// (the first of a list), else this host's name where it resolves, else
// 127.0.0.1 (with a warning). Throws InvalidArgument when both are set.
Bind choose_bind(const GlooOptions& o);

// Note [SIGPIPE]: Gloo writes to its sockets with plain write/writev. When a
// peer has died, that raises SIGPIPE, whose default action ends the process
// without a word (Python programs never see it: the interpreter ignores
// SIGPIPE). Every thread that can write to Gloo's sockets blocks it instead,
// so the write fails with EPIPE and becomes an error naming the peer: our
// worker thread (blocked for its lifetime), Gloo's event-loop thread (it
// inherits the mask of the thread that creates the device) and the caller's
// thread during setup (restored afterwards, with any SIGPIPE raised meanwhile
// consumed).
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~ScopedSigpipeBlock() {
    if (sigismember(&old_, SIGPIPE)) return;  // it was blocked before: leave it
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    const timespec zero{0, 0};
    siginfo_t info;
    sigset_t pending;
    while (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) &&
           sigtimedwait(&set, &info, &zero) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t old_{};
};

// The largest send buffer this host lets a socket ask for (SO_SNDBUF).
size_t local_wmem_max();

// The blocking-socket threshold in force (see GlooOptions::small_max_bytes):
// Note [Priming send buffers] sizes the send buffers for it, so large groups
// shrink it to keep their kernel memory under 16 MiB a rank; and a primed send buffer
// (twice the smaller of it and wmem_max) must hold any blocking message.
size_t effective_small_max(size_t requested, int size, size_t group_wmem_max);

}  // namespace slurmddp::comm
