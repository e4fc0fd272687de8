// Asking Slurm to requeue the running job after a checkpoint, so that a
// preempted or time-limited job continues where it stopped.
//
// Note [Requeue]
//   `scontrol requeue <job>` puts the job back in the queue: Slurm ends every
//   step (the ranks have already written their checkpoint and agreed to stop)
//   and starts the batch script again, with SLURM_RESTART_COUNT (and the
//   plugin's SLURMDDP_RESTART_COUNT) one higher. In a job array the target is
//   the array task ("<array job>_<task>"), so only this task is requeued. The
//   job must be requeueable (#SBATCH --requeue, or JobRequeue=1 in slurm.conf).
//   Where scontrol is missing (a container image) or not allowed, the error
//   says so; the alternative is to let the batch script requeue
//   (docs/user-guide.md, "Preemption and requeue"). scontrol has a deadline,
//   SLURMDDP_REQUEUE_TIMEOUT seconds (default 30), after which it is killed
//   (Note [Requeue deadline] in requeue.cpp).
#pragma once

#include <chrono>
#include <string>

#include "slurmddp/identity.h"

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

// The job `scontrol requeue` must name: "<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>"
// in an array task, else SLURM_JOB_ID. Throws InvalidArgument outside a Slurm job.
std::string requeue_target(const EnvReader& env);
std::string requeue_target();

// How long requeue_job() waits for scontrol: SLURMDDP_REQUEUE_TIMEOUT seconds
// ("45" or "45s", 1 to 86400), else 30.
inline constexpr const char* kRequeueTimeoutVariable = "SLURMDDP_REQUEUE_TIMEOUT";
inline constexpr std::chrono::seconds kRequeueTimeout{30};

// Runs `<scontrol> requeue <requeue_target()>` and waits for it, at most
// SLURMDDP_REQUEUE_TIMEOUT (above). Throws Error with scontrol's own message
// (and what to do) when it is missing, fails, or does not finish in time (it is
// then killed); InvalidArgument for a bad SLURMDDP_REQUEUE_TIMEOUT.
void requeue_job(const std::string& scontrol = "scontrol");

}  // namespace slurmddp

#pragma GCC visibility pop
