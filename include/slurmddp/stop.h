// A stop request that every rank agrees on: signal handlers that only record
// the signal, and a collective check that makes all ranks stop after the same
// step, so that a preempted job checkpoints one consistent step everywhere.
//
// Example, given const slurmddp::ProcessGroup& pg, int64_t first, int64_t steps,
// std::function<void()> train_one_step, std::function<void(int64_t)> save_checkpoint:
//   slurmddp::StopSignal stop(pg.comm());           // SIGTERM, SIGUSR1, SIGUSR2, SIGHUP
//   for (int64_t step = first; step < steps; ++step) {
//     train_one_step();
//     if (stop.should_stop(step)) {
//       save_checkpoint(step);
//       slurmddp::requeue_job();                    // requeue.h
//       return;
//     }
//   }
//
// Note [Stop requests]
//   Slurm announces the end of a job with a signal: --signal=USR1@60 before a
//   time limit, SIGTERM on preemption or scancel, and some sites use USR2 or
//   HUP (NCCL and other libraries take SIGUSR1 for themselves, so submitit moved
//   to USR2 and then HUP). The signal reaches the ranks at different steps,
//   or only one rank (scancel --signal to one task, the batch shell forwarding
//   to one step). The handler only stores the signal number in a lock-free
//   atomic (async-signal-safe) and then calls the handler that was installed
//   before it, if that was a function: a handler the program or a library set
//   keeps working, while the default action (terminate) is what this replaces.
//   One exception: UCX's debug-signal handler (SIGHUP by default, in libucs,
//   which any MPI built on UCX loads) switches UCX's log to trace level on
//   stdout; a stop request does not call it.
//   should_stop(step) is collective: at steps that are multiples of
//   check_every, every rank contributes the signal it saw (0 if none) to one
//   allreduce(max) of a single int64, so all ranks get the same answer after
//   the same step. Between checks it returns false without communicating. A
//   dead or stuck rank makes the check fail like any collective, within the
//   communicator's timeout, naming the rank.
//   Once a stop was agreed, the destructor ignores the signals instead of
//   restoring the previous handlers: the process is on its way out with its
//   checkpoint written, and the SIGTERM that Slurm sends the other tasks when
//   one exits early (KillOnBadExit) must not turn its exit status into 143.
#pragma once

#include <csignal>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "slurmddp/communicator.h"

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

struct StopOptions {
  // Signals that request a stop. Each must be a catchable signal (not SIGKILL
  // or SIGSTOP), or the constructor throws InvalidArgument naming it.
  std::vector<int> signals = {SIGTERM, SIGUSR1, SIGUSR2, SIGHUP};
  // should_stop(step) communicates at steps that are multiples of this (>= 1):
  // a larger value amortises the allreduce, and delays the stop by at most
  // check_every - 1 steps.
  int64_t check_every = 1;
};

class StopSignal {
 public:
  // Installs the handlers (Note [Stop requests]). One StopSignal may exist in a
  // process at a time: a second throws InvalidArgument. `comm` is the
  // communicator the ranks train on (host or CUDA).
  explicit StopSignal(std::shared_ptr<Communicator> comm, StopOptions options = {});
  // Installs the handlers now, before there is a communicator: a signal that
  // arrives while the program starts (rendezvous, loading data) is kept
  // instead of ending the process. attach() the communicator before the
  // first should_stop().
  explicit StopSignal(StopOptions options = {});
  void attach(std::shared_ptr<Communicator> comm);
  // Restores the handlers that were installed before (or ignores the signals
  // once a stop was agreed, see the Note).
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // The signal this process received (nullopt: none yet). Local: no
  // communication.
  std::optional<int> local_signal() const;

  // Collective; every rank calls it with the same step numbers. True on every
  // rank when any rank received one of the signals by the check at `step`.
  bool should_stop(int64_t step);

  // After should_stop returned true: the signal that decided it (the largest
  // signal number any rank saw); nullopt while no stop was agreed.
  std::optional<int> agreed_signal() const;

  // Puts the handlers back in front of any handler installed after them (by
  // the program or a library), which they then call after recording the
  // signal: both see it. Returns the signals whose handler had been replaced.
  // should_stop() does this at every check (Note [Handlers installed after
  // ours] in runtime/resume/stop_signal.cpp).
  std::vector<int> reinstall();
  // Sets the local request as if `signal` had arrived (tests, or a program
  // that decides to stop for its own reasons).
  void request(int signal);

  // Records a stop that the program agreed on over its own collectives (the
  // Python package agrees over torch.distributed): agreed_signal() returns
  // `signal` and the destructor ignores the signals (Note [Stop requests]).
  void agree(int signal);

 private:
  class __attribute__((visibility("hidden"))) Impl;  // internal: not exported
  std::unique_ptr<Impl> impl_;
};

// "SIGUSR1" for a signal number; "signal N" when it has no name.
std::string signal_name(int signal);

}  // namespace slurmddp

#pragma GCC visibility pop
