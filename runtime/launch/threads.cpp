#include "launch/threads.h"

#include <algorithm>

namespace slurmddp::launch {

namespace {

// "1 CPU", "8 CPUs".
std::string cpus(uint32_t n) {
  return std::to_string(n) + (n == 1 ? " CPU" : " CPUs");
}

// A positive base-10 integer that fits comfortably in 32 bits; nullopt for
// anything else (Slurm's own variables are read leniently: a garbled value is
// ignored, not an error).
std::optional<uint32_t> positive(const std::optional<std::string>& text) {
  if (!text || text->empty() || text->size() > 9) return std::nullopt;
  uint32_t v = 0;
  for (char c : *text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v == 0) return std::nullopt;
  return v;
}

std::optional<uint32_t> nonzero(const std::optional<uint32_t>& v) {
  if (!v || *v == 0) return std::nullopt;
  return v;
}

// The count and why (Note [Thread counts]).
void choose_count(const ThreadFacts& f, std::optional<uint32_t> env_value, ThreadPlan& p) {
  const auto step = nonzero(f.step_cpus_per_task);
  const auto mask = nonzero(f.affinity_cpus);
  const uint32_t tasks = std::max<uint32_t>(1, f.local_task_count);
  const bool bound = mask && f.online_cpus > 0 && *mask < f.online_cpus;

  if (step) {
    std::string step_text = "step: " + cpus(*step) + " per task";
    if (mask && *mask < *step) {
      p.threads = *mask;
      p.source = "affinity mask of " + cpus(*mask) + " (" + step_text + ")";
    } else {
      p.threads = *step;
      p.source = env_value == step
                     ? "SLURM_CPUS_PER_TASK=" + std::to_string(*step) + " (" + step_text + ")"
                     : step_text;
    }
  } else if (bound) {
    p.threads = *mask;
    p.source = "affinity mask of " + cpus(*mask);
  } else if (mask || f.online_cpus > 0) {
    const uint32_t n = mask ? *mask : f.online_cpus;
    p.threads = std::max<uint32_t>(1, n / tasks);
    p.source = cpus(n) +
               (tasks == 1 ? " for 1 task" : " shared by " + std::to_string(tasks) + " tasks") +
               " (no CPU binding)";
  } else {
    p.threads = 0;
    p.source = "no CPU count known";
  }
}

}  // namespace

ThreadPlan plan_threads(const ThreadFacts& f) {
  ThreadPlan p;
  const auto env_value = positive(f.env_cpus_per_task);
  choose_count(f, env_value, p);

  // The job's --cpus-per-task that srun does not pass on (Slurm 22.05 to 23.02;
  // 23.11 reads SLURM_CPUS_PER_TASK again).
  const auto step = nonzero(f.step_cpus_per_task);
  const bool srun_set = f.srun_cpus_per_task && !f.srun_cpus_per_task->empty();
  if (env_value && step && *env_value > *step && !srun_set) {
    const std::string n = std::to_string(*env_value);
    p.warning =
        "SLURM_CPUS_PER_TASK=" + n + " (the job's --cpus-per-task) but this step gave each task " +
        cpus(*step) +
        ": in Slurm 22.05 to 23.02 srun does not inherit it; use srun --cpus-per-task=" + n +
        " or export SRUN_CPUS_PER_TASK=" + n;
  }

  if (p.threads == 0) return p;
  for (const char* name : kThreadVars) {
    std::optional<std::string> user = f.env ? f.env(name) : std::nullopt;
    if (user) {
      p.kept.push_back(std::string(name) + "=" + *user);
    } else {
      p.set.emplace_back(name);
    }
  }
  return p;
}

std::string describe(const ThreadPlan& p) {
  if (p.threads == 0) return "threads: none exported (" + p.source + ")";
  std::string s = "threads=" + std::to_string(p.threads) + " from " + p.source + "; set ";
  if (p.set.empty()) s += "none";
  for (size_t i = 0; i < p.set.size(); ++i) s += (i == 0 ? "" : ",") + p.set[i];
  if (!p.kept.empty()) {
    s += "; kept the user's ";
    for (size_t i = 0; i < p.kept.size(); ++i) s += (i == 0 ? "" : " ") + p.kept[i];
  }
  return s;
}

}  // namespace slurmddp::launch
