// How many threads each task's OpenMP and BLAS libraries should use: the CPUs
// Slurm gave the task, from the facts the plugin gathers in the task's own
// process. Without these variables, PyTorch and the BLAS libraries start one
// thread per CPU of the node (many tasks of a node then oversubscribe it), and
// torchrun sets OMP_NUM_THREADS=1 with a warning.
//
// Note [Thread counts]
//   The count is the CPUs Slurm gave this task:
//   - the step's CPUs per task (S_STEP_CPUS_PER_TASK) when known (> 0), capped
//     by the task's affinity mask when that is known and smaller: a bound task
//     cannot use more CPUs than its mask;
//   - without the step's value, a bound task (affinity mask smaller than the
//     node) gets the CPUs of its mask;
//   - without the step's value, a task that is not bound (mask unknown or the
//     whole node) shares the CPUs it sees (its mask, else the node's) with the
//     other tasks of the step on the node: max(1, CPUs / local tasks);
//   - never 0 when anything is known; 0 (export nothing) when nothing is.
//   The job's --cpus-per-task lost by srun: in Slurm 22.05 to 23.02 an srun
//   inside `sbatch --cpus-per-task=N` does not inherit N (each task gets 1 CPU
//   unless SRUN_CPUS_PER_TASK is set or srun is given --cpus-per-task; 23.11
//   reads SLURM_CPUS_PER_TASK again), but
//   SLURM_CPUS_PER_TASK=N of the batch job still reaches the tasks. When it is
//   a number larger than the step's value and SRUN_CPUS_PER_TASK is unset, the
//   plan carries a one-line warning naming both values and the two fixes; the
//   count still follows what the step really got. A SLURM_CPUS_PER_TASK that is
//   not a positive integer is ignored (it is Slurm's variable, not the user's
//   option).
//   A variable of kThreadVars that the user set is never changed (`kept`); the
//   others are set to the count (`set`).
//
// Note [Thread counts in containers]
//   "The user set it" means srun's environment had it: the plugin reads the
//   thread variables in user_init, before any plugin's task_init ran, sets the
//   others with overwrite and puts the user's own back. pyxis copies the container's environment
//   into the task in its task_init, and enroot's PyTorch hook puts
//   OMP_NUM_THREADS=1 there: without this the hook's 1 stood for every task,
//   whatever -c gave it, in either plugin order.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace slurmddp::launch {

// What one task's CPUs look like, gathered by the plugin in task_init (in the
// task's own process).
struct ThreadFacts {
  // spank item S_STEP_CPUS_PER_TASK: what Slurm allocated each task of this step
  std::optional<uint32_t> step_cpus_per_task;
  // SLURM_CPUS_PER_TASK in the task's environment (a batch job's value reaches
  // steps even when the step did not get it)
  std::optional<std::string> env_cpus_per_task;
  // SRUN_CPUS_PER_TASK in the task's environment
  std::optional<std::string> srun_cpus_per_task;
  // CPUs in the task's affinity mask (sched_getaffinity), nullopt when unknown
  std::optional<uint32_t> affinity_cpus;
  uint32_t online_cpus = 0;       // CPUs of the node (sysconf), 0 when unknown
  uint32_t local_task_count = 1;  // tasks of the step on this node
  // Reads the task's environment: the user's own values. A variable of
  // kThreadVars that is set is never changed. May be empty (no user values).
  std::function<std::optional<std::string>(const char*)> env;
};

struct ThreadPlan {
  uint32_t threads = 0;  // 0: export nothing
  // Why, e.g. "affinity mask of 8 CPUs", "SLURM_CPUS_PER_TASK=8 (step: 8 CPUs
  // per task)", "16 CPUs shared by 4 tasks (no CPU binding)".
  std::string source;
  std::vector<std::string> set;   // variables to set to `threads` (the user did not set them)
  std::vector<std::string> kept;  // variables the user set, kept as they are ("NAME=value")
  // Non-empty: the job's --cpus-per-task did not reach this step (Note [Thread counts]).
  std::string warning;
};

// The variables that carry a thread count, in the order they are listed.
inline constexpr const char* kThreadVars[] = {"OMP_NUM_THREADS",        "MKL_NUM_THREADS",
                                              "OPENBLAS_NUM_THREADS",   "BLIS_NUM_THREADS",
                                              "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"};

// Note [Thread counts]. Pure: reads only `f` (and f.env).
ThreadPlan plan_threads(const ThreadFacts& f);

// One line for --ddp-verbose, e.g. "threads=8 from SLURM_CPUS_PER_TASK=8 (step:
// 8 CPUs per task); set MKL_NUM_THREADS,...; kept the user's OMP_NUM_THREADS=2",
// or "threads: none exported (no CPU count known)". The warning is not part of
// it (the caller logs it on its own line).
std::string describe(const ThreadPlan& p);

}  // namespace slurmddp::launch
