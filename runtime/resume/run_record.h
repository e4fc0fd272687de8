// Which run a job's own checkpoint directory belongs to (Note [Run identity]).
//
// Note [Run identity]
//   A per-job directory (<base>/job-<id>) is named by the job id alone, so it
//   is the same across requeues; but job ids are not unique forever: clusters
//   that share a file system count their own ids, and a cluster whose job
//   counter was reset (state lost, FirstJobId) hands the same ids out again.
//   Without more, a new job would resume an unrelated job's training, or
//   prune its checkpoints. So rank 0 keeps a record in the directory, RUN:
//     run cluster=<SLURM_CLUSTER_NAME> job=<id> started=<SLURM_JOB_START_TIME> nonce=<16 hex>
//   written once, by the first run that uses the directory (exclusively:
//   link(2), so that of two jobs racing for it one wins and the other reads
//   its record), with `started` the start of that run and `nonce` random.
//   A later run accepts the directory when the record names its cluster and
//   job, and either it is a requeued run (SLURM_RESTART_COUNT > 0: the record
//   is its first run's) or it is the run that wrote it (the same start time:
//   a step started again in the same allocation). A run that was never
//   requeued cannot have checkpoints yet, so a record of another start, or
//   complete checkpoints without a record, belong to another job: refused,
//   saying whose they are and what to do, never resumed or pruned. Each
//   COMPLETE marker carries the nonce, and a checkpoint with another nonce
//   is refused like a foreign one.
//   What this cannot tell apart: a job requeued before its first run made a
//   Checkpointer, in a directory another job with its id left (the record is
//   then the other job's, and accepted). Where clusters share a file system,
//   the cluster name keeps their directories apart only if it is set
//   (SLURM_CLUSTER_NAME, from ClusterName in slurm.conf).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace slurmddp::resume {

struct RunIdentity {
  std::string cluster;   // SLURM_CLUSTER_NAME; "" when unknown
  std::string job;       // job_id()
  std::string started;   // SLURM_JOB_START_TIME (seconds since the epoch); "" when unknown
  int64_t restarts = 0;  // SLURM_RESTART_COUNT; 0 when the job was never requeued
};

// Reads the environment (nullptr: the process's own).
using Getenv = std::function<const char*(const char*)>;

// The job as Slurm's variables name it: "<array job>_<task>" in a job array,
// else SLURM_JOB_ID; "" outside Slurm.
std::string job_id(const Getenv& getenv = nullptr);

// This process's run, read through `getenv`. Throws InvalidArgument naming
// the variable when SLURM_RESTART_COUNT or SLURM_JOB_START_TIME is not a number.
RunIdentity run_identity(const Getenv& getenv = nullptr);

// Claims `dir` (a per-job directory, existing) for `self`, or checks that it is
// `self`'s (Note [Run identity]); returns the run's nonce. Throws Error naming
// the directory, whose run it holds and what to do, when it belongs to
// another run, and when the record is damaged.
std::string claim_run(const std::string& dir, const RunIdentity& self);

// The value of `key` in a "word key=value ..." line (a RUN record, a COMPLETE
// marker); "" when absent.
std::string record_value(const std::string& line, const std::string& key);

}  // namespace slurmddp::resume
