// Work handles of the host-side communicators (Gloo, MPI) and the "broken"
// state they share with it (a handle may outlive its communicator).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "slurmddp/communicator.h"

namespace slurmddp::comm {

// Whether a communicator is broken, and by which error (the first one wins).
class BreakState {
 public:
  // Records `error` unless already broken; returns the error in force.
  std::exception_ptr break_with(std::exception_ptr error);
  // The error in force, or null while the communicator works.
  std::exception_ptr error() const;

  // Turns a Work::wait timeout of operation `what` into the error to report
  // (Note [Failure notes]: it names the ranks that did not report). Set once by
  // the communicator before any operation; it must not refer to the
  // communicator itself (a handle may outlive it).
  using TimeoutDiagnoser =
      std::function<std::exception_ptr(const std::string& what, const std::exception_ptr& plain)>;
  void set_timeout_diagnoser(TimeoutDiagnoser d) { diagnose_timeout_ = std::move(d); }
  std::exception_ptr diagnose_timeout(const std::string& what,
                                      const std::exception_ptr& plain) const {
    return diagnose_timeout_ ? diagnose_timeout_(what, plain) : plain;
  }

 private:
  mutable std::mutex m_;
  std::exception_ptr error_;
  TimeoutDiagnoser diagnose_timeout_;
};

class HostWork final : public Work {
 public:
  // `what` names the operation in messages ("allreduce 1024 float32 ... op #3").
  HostWork(std::string what, int rank, std::shared_ptr<BreakState> state,
           std::chrono::milliseconds default_timeout, std::string backend = "gloo");
  using Work::wait;

  // See Work::wait. A timeout breaks the communicator with a TimeoutError
  // naming the ranks that did not report (after the diagnosis grace period),
  // unless it is already broken: then that error. Every later wait on this
  // handle rethrows it.
  void wait(std::chrono::milliseconds timeout) override;
  // True once the backend finished with the buffers (after success or failure).
  bool is_completed() override;

  // Called once by the worker when the operation ended; `error` null on success.
  void finish(std::exception_ptr error);

  const std::string& what() const { return what_; }

 private:
  const std::string what_;
  const std::string backend_;  // the messages' prefix
  const int rank_;
  const std::shared_ptr<BreakState> state_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace slurmddp::comm
