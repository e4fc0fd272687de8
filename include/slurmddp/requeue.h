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
//   (docs/user-guide.md, "Preemption and requeue").
#pragma once

#include <string>

#include "slurmddp/identity.h"

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

// The job `scontrol requeue` must name: "<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>"
// in an array task, else SLURM_JOB_ID. Throws InvalidArgument outside a Slurm job.
std::string requeue_target(const EnvReader& env);
std::string requeue_target();

// Runs `<scontrol> requeue <requeue_target()>` and waits for it. Throws Error
// with scontrol's own message (and what to do) when it is missing or fails.
void requeue_job(const std::string& scontrol = "scontrol");

}  // namespace slurmddp

#pragma GCC visibility pop
