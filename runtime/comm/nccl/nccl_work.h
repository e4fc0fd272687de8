// The failure state an NCCL communicator shares with its Work handles and its
// watchdog, and the Work handle itself (a CUDA event recorded after the
// operation on the communicator's stream).
//
// Note [Breaking an NCCL communicator]: operations complete in issue order
// (one stream), so the state tracks the highest sequence number seen complete.
// fail() records the first error for every operation after that one, then
// calls ncclCommAbort. Because the error is recorded before the abort, an
// event that completes only because the abort made NCCL's kernels exit is
// never mistaken for success: observe_complete() sees the error first.
// Lock order: the NCCL mutex before the state mutex, never the reverse.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "slurmddp/communicator.h"

namespace slurmddp::comm {

class NcclWork;

class NcclState {
 public:
  using Clock = std::chrono::steady_clock;

  // `device`: the communicator's CUDA device, made current (Note [Device guard
  // without stray contexts]) wherever this state or a Work handle calls CUDA or
  // NCCL: whichever thread waits, polls or aborts.
  NcclState(std::string where, int device);

  // "rank=.., size=.., device=.., host=.., pid=.." for messages.
  const std::string& where() const { return where_; }
  int device() const { return device_; }

  // Serializes every call on the ncclComm_t (enqueue, polling, abort, destroy).
  std::mutex& nccl_mutex() { return nccl_mu_; }
  // The communicator while usable; null once aborted or destroyed. Needs nccl_mutex().
  ncclComm_t comm_locked() const { return comm_; }
  void set_comm_locked(ncclComm_t comm) { comm_ = comm; }

  // The error in force, or null while the communicator works.
  std::exception_ptr error() const;
  // The error that operation `seq` fails with, or null (never for seq 0).
  std::exception_ptr error_for(uint64_t seq) const;
  // Records that every operation up to `seq` completed; returns error_for(seq).
  std::exception_ptr observe_complete(uint64_t seq);
  // Breaks the communicator (Note above): the first error wins; then aborts
  // NCCL, taking nccl_mutex() unless the caller already holds it. Returns the
  // error in force.
  std::exception_ptr fail(std::exception_ptr error, bool nccl_locked);
  // True once fail() was called: whoever polls NCCL under the mutex gives up.
  bool abort_requested() const { return abort_requested_.load(std::memory_order_acquire); }

  // When nccl_mutex() is free: asks NCCL for an asynchronous error and breaks
  // the communicator with one naming `what` (the operation in flight).
  void poll_async_error(const std::string& what);

  // Note [NCCL failure notes]: a failure that may be another rank's doing (an
  // operation that does not complete, NCCL's remote or system error) is
  // diagnosed with the group's failure notes (membership/notes.h) before the
  // abort, so that every surviving rank names the rank that did not answer.
  // Local failures (a CUDA error, a bad argument) are not: their cause is here.
  // The diagnoser gets the operation ("complete allreduce of ..."), the plain
  // error and whether the failure looked like a lost connection; it returns
  // the error to report. Set once, before any operation is issued.
  using Diagnoser = std::function<std::exception_ptr(const std::string& op,
                                                     const std::exception_ptr& plain, bool lost)>;
  void set_diagnoser(Diagnoser diagnoser) { diagnoser_ = std::move(diagnoser); }
  // `plain`, or the diagnoser's verdict when the communicator is not broken yet.
  std::exception_ptr diagnose(const std::string& op, const std::exception_ptr& plain,
                              bool lost) const;

  // In-flight operations, oldest first (only the watchdog and the destructor pop).
  void push(std::shared_ptr<NcclWork> work);
  // Pops the operations found complete; returns the oldest still pending (or null).
  std::shared_ptr<NcclWork> drain_completed();
  bool idle() const;

 private:
  void abort_locked(const std::exception_ptr& cause);

  const std::string where_;
  const int device_;
  std::mutex nccl_mu_;
  ncclComm_t comm_ = nullptr;

  mutable std::mutex mu_;
  std::exception_ptr error_;
  uint64_t completed_through_ = 0;
  uint64_t failed_from_ = 0;
  std::deque<std::shared_ptr<NcclWork>> in_flight_;
  std::atomic<bool> abort_requested_{false};
  Diagnoser diagnoser_;
};

class NcclWork final : public Work {
 public:
  using Clock = NcclState::Clock;
  enum class Poll { kPending, kDone, kFailed };

  // `end` (owned from now on) is recorded after the operation; null with seq 0
  // for an operation with nothing to do (already complete).
  NcclWork(std::string what, uint64_t seq, std::shared_ptr<NcclState> state, cudaEvent_t end,
           Clock::time_point issued, std::chrono::milliseconds default_timeout);
  using Work::wait;
  ~NcclWork() override;
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  // See Work::wait. Polls the event and NCCL's asynchronous error with a
  // backoff (a few yields, then sleeps from 10 us growing to 1 ms).
  void wait(std::chrono::milliseconds timeout) override;
  bool is_completed() override;

  // Non-blocking check of the event; breaks the communicator on a CUDA error.
  Poll poll();

  const std::string& what() const { return what_; }
  uint64_t seq() const { return seq_; }
  Clock::time_point issued() const { return issued_; }
  cudaEvent_t end_event() const { return end_; }
  const NcclState* state() const { return state_.get(); }

 private:
  const std::string what_;
  const uint64_t seq_;
  const std::shared_ptr<NcclState> state_;
  cudaEvent_t end_;
  const Clock::time_point issued_;
  std::atomic<bool> done_{false};
};

}  // namespace slurmddp::comm
