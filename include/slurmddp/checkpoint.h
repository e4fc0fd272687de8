// Checkpoints for preemption and requeue: the training state a program hands
// over (opaque bytes, from every rank or from rank 0 only) plus each rank's
// sampler state, written atomically into a directory per job, so that a
// requeued job finds its own checkpoint and other jobs do not.
//
// Example, given std::shared_ptr<slurmddp::Communicator> comm, slurmddp::StopSignal& stop,
// slurmddp::DistributedSampler& sampler, std::vector<uint8_t> bytes:
//   slurmddp::Checkpointer ckpt(comm, slurmddp::job_checkpoint_dir("ckpt"));
//   int64_t step = 0;
//   if (auto c = ckpt.load()) {                // nullopt: a fresh start
//     sampler.load_state(c->sampler);
//     step = c->step;                          // and the program's state from c->payload
//   }
//   // ... after each step:
//   if (stop.should_stop(step)) {
//     ckpt.save(step, sampler.state(), bytes);
//   }
//
// Note [Checkpoint layout]
//   <dir>/step-<N>/rank-<r>.ckpt   one file per rank: its sampler state, and the
//                                   payload (every rank, or rank 0 only)
//   <dir>/step-<N>/COMPLETE        written by rank 0 once every rank's file is
//                                   durable (after a barrier)
//   <dir>/LATEST                   "step-<N>", replaced once COMPLETE is durable
//   <dir>/RUN                      in a job's own directory (job_checkpoint_dir):
//                                   the run it belongs to, claimed by the first
//                                   save or load; another job's (the same id on
//                                   another cluster, or handed out again) is
//                                   refused, never resumed or pruned (Note [Run
//                                   identity] in runtime/resume/run_record.h)
//   Every file is written to a temporary name in the same directory, fsynced,
//   renamed into place, and the directory fsynced: a crash at any point leaves
//   either the previous checkpoint or the new one, never a partial one, and
//   LATEST only ever names complete checkpoints. Each rank file starts with a
//   header ("slurmddp-checkpoint v2", step, rank, world size, the sampler
//   state's size) and ends with a line holding the payload's size and an
//   FNV-1a 64 checksum of everything before its digits (version 1 files, with
//   both sizes in the header, still load): a truncated file or a flipped byte
//   is a clear error naming the file, never a silent fresh start or a wrong
//   resume. Every size is checked against what the file holds, never summed.
//   The `keep` newest complete checkpoints are kept. Files are the user's
//   alone (0600, and 0700 for the directories created; Note [Planted files] in
//   runtime/resume/checkpoint_io.cpp).
//   With rank-0 scope every rank reads rank 0's payload: the directory must be
//   on a file system every node sees (it must be anyway, for a requeued job
//   that may land on other nodes). Every rank checks the structure of each
//   file it reads (sizes, header, checksum line); the checksum of rank 0's
//   payload is verified by rank 0, and a damaged one stops every rank (Note
//   [Streaming checkpoints] in runtime/resume/checkpoint_writer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "slurmddp/communicator.h"
#include "slurmddp/sampler.h"

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

enum class CheckpointScope {
  kRankZero,   // the payload is the same on every rank (parameters after sync)
  kEveryRank,  // each rank's payload is its own
};

struct CheckpointOptions {
  CheckpointScope scope = CheckpointScope::kRankZero;
  int keep = 2;  // complete checkpoints kept (>= 1)
};

// The bytes of a payload, borrowed for the length of a call: from a vector or
// array of trivially copyable elements, a string, or a pointer and a size.
class ByteView {
 public:
  ByteView() = default;
  ByteView(const void* data, size_t size) : data_(static_cast<const uint8_t*>(data)), size_(size) {}
  template <typename T, typename = std::enable_if_t<std::is_trivially_copyable_v<T>>>
  ByteView(const std::vector<T>& v)  // NOLINT(google-explicit-constructor): a view of it
      : ByteView(v.data(), v.size() * sizeof(T)) {}
  ByteView(const std::string& s)  // NOLINT(google-explicit-constructor): a view of it
      : ByteView(s.data(), s.size()) {}
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct Checkpoint {
  int64_t step = 0;
  SamplerState sampler;          // this rank's sampler position
  std::vector<uint8_t> payload;  // rank 0's (kRankZero) or this rank's (kEveryRank)
};

class Checkpointer {
 public:
  // `dir` is created when missing. Throws InvalidArgument for bad options.
  Checkpointer(std::shared_ptr<Communicator> comm, std::string dir, CheckpointOptions options = {});
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective: every rank calls it with the same step. With kRankZero only
  // rank 0's payload is written (the others may pass none). Returns once the
  // checkpoint is complete and durable on every rank. Throws Error naming the
  // path and the errno text when a write fails, InvalidArgument for a negative
  // step or a view of null with a non-zero size.
  void save(int64_t step, const SamplerState& sampler, ByteView payload);

  // Collective: the latest complete checkpoint, or nullopt when there is none
  // (a fresh start). Every rank loads the same step (checked: ranks that see
  // different LATEST files fail naming both steps). Throws Error naming the
  // file when it is damaged (checksum, truncation, wrong rank or world size,
  // no valid sampler state) on the rank that read it, and naming that rank on
  // the others; whatever a rank's reading throws, every rank hears of it.
  std::optional<Checkpoint> load();

  const std::string& dir() const;

 private:
  class __attribute__((visibility("hidden"))) Impl;  // internal: not exported
  std::unique_ptr<Impl> impl_;
};

// `base`/<job>: the job's own checkpoint directory, the same across requeues
// of one job and different for other jobs and for each task of a job array:
// <job> is "job-<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>" in an array job,
// else "job-<SLURM_JOB_ID>", else "local" outside Slurm.
std::string job_checkpoint_dir(const std::string& base);

}  // namespace slurmddp

#pragma GCC visibility pop
