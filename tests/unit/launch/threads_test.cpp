#include "launch/threads.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

namespace slurmddp::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::vector<std::string> kAllVars(std::begin(kThreadVars), std::end(kThreadVars));

// A task of a 64-CPU node with nothing of the user's.
ThreadFacts node64() {
  ThreadFacts f;
  f.online_cpus = 64;
  f.env = [](const char*) -> std::optional<std::string> { return std::nullopt; };
  return f;
}

TEST(Threads, StepValueIsTheCount) {
  ThreadFacts f = node64();
  f.step_cpus_per_task = 8;
  f.env_cpus_per_task = "8";
  f.affinity_cpus = 8;
  f.local_task_count = 4;
  ThreadPlan p = plan_threads(f);
  EXPECT_EQ(p.threads, 8u);
  EXPECT_EQ(p.source, "SLURM_CPUS_PER_TASK=8 (step: 8 CPUs per task)");
  EXPECT_EQ(p.set, kAllVars);
  EXPECT_THAT(p.kept, IsEmpty());
  EXPECT_EQ(p.warning, "");
}

TEST(Threads, StepValueWithoutTheVariableNamesTheStep) {
  ThreadFacts f = node64();
  f.step_cpus_per_task = 1;
  ThreadPlan p = plan_threads(f);
  EXPECT_EQ(p.threads, 1u);
  EXPECT_EQ(p.source, "step: 1 CPU per task");
  // An unbound task larger than the step's value still follows the step.
  f.step_cpus_per_task = 4;
  f.affinity_cpus = 64;
  p = plan_threads(f);
  EXPECT_EQ(p.threads, 4u);
  EXPECT_EQ(p.source, "step: 4 CPUs per task");
}

TEST(Threads, StepValueCappedByTheMask) {
  ThreadFacts f = node64();
  f.step_cpus_per_task = 8;
  f.env_cpus_per_task = "8";
  f.affinity_cpus = 4;
  ThreadPlan p = plan_threads(f);
  EXPECT_EQ(p.threads, 4u);
  EXPECT_EQ(p.source, "affinity mask of 4 CPUs (step: 8 CPUs per task)");
  // A mask larger than the step's value does not raise it.
  f.affinity_cpus = 16;
  EXPECT_EQ(plan_threads(f).threads, 8u);
}

TEST(Threads, BoundTaskWithoutTheStepValueUsesItsMask) {
  ThreadFacts f = node64();
  f.affinity_cpus = 8;
  f.local_task_count = 8;
  ThreadPlan p = plan_threads(f);
  EXPECT_EQ(p.threads, 8u);
  EXPECT_EQ(p.source, "affinity mask of 8 CPUs");
  f.step_cpus_per_task = 0;  // Slurm's "unknown"
  EXPECT_EQ(plan_threads(f).threads, 8u);
}

TEST(Threads, UnboundTasksShareTheNode) {
  ThreadFacts f = node64();
  f.online_cpus = 16;
  f.affinity_cpus = 16;  // the whole node: not bound
  f.local_task_count = 4;
  ThreadPlan p = plan_threads(f);
  EXPECT_EQ(p.threads, 4u);
  EXPECT_EQ(p.source, "16 CPUs shared by 4 tasks (no CPU binding)");
  // Mask unknown: the node's CPUs.
  f.affinity_cpus.reset();
  f.local_task_count = 3;
  p = plan_threads(f);
  EXPECT_EQ(p.threads, 5u);
  EXPECT_EQ(p.source, "16 CPUs shared by 3 tasks (no CPU binding)");
  // More tasks than CPUs: never 0.
  f.local_task_count = 40;
  EXPECT_EQ(plan_threads(f).threads, 1u);
  f.local_task_count = 1;
  p = plan_threads(f);
  EXPECT_EQ(p.threads, 16u);
  EXPECT_EQ(p.source, "16 CPUs for 1 task (no CPU binding)");
  // A local task count of 0 (unknown) counts as 1.
  f.local_task_count = 0;
  EXPECT_EQ(plan_threads(f).threads, 16u);
}

TEST(Threads, MaskWithoutTheNodeCountIsShared) {
  ThreadFacts f = node64();
  f.online_cpus = 0;
  f.affinity_cpus = 12;
  f.local_task_count = 2;
  ThreadPlan p = plan_threads(f);
  EXPECT_EQ(p.threads, 6u);
  EXPECT_EQ(p.source, "12 CPUs shared by 2 tasks (no CPU binding)");
}

TEST(Threads, NothingKnownExportsNothing) {
  ThreadFacts f = node64();
  f.online_cpus = 0;
  f.step_cpus_per_task = 0;
  f.affinity_cpus = 0;
  ThreadPlan p = plan_threads(f);
  EXPECT_EQ(p.threads, 0u);
  EXPECT_EQ(p.source, "no CPU count known");
  EXPECT_THAT(p.set, IsEmpty());
  EXPECT_THAT(p.kept, IsEmpty());
  EXPECT_EQ(describe(p), "threads: none exported (no CPU count known)");
  EXPECT_EQ(plan_threads(ThreadFacts{}).threads, 0u);  // no env function either
}

TEST(Threads, UserSetVariablesAreKept) {
  std::map<std::string, std::string> user = {{"OMP_NUM_THREADS", "2"}, {"NUMEXPR_NUM_THREADS", ""}};
  ThreadFacts f = node64();
  f.step_cpus_per_task = 8;
  f.env = [&user](const char* n) -> std::optional<std::string> {
    auto it = user.find(n);
    if (it == user.end()) return std::nullopt;
    return it->second;
  };
  ThreadPlan p = plan_threads(f);
  EXPECT_EQ(p.threads, 8u);
  EXPECT_THAT(p.set, ElementsAre("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS",
                                 "VECLIB_MAXIMUM_THREADS"));
  EXPECT_THAT(p.kept, ElementsAre("OMP_NUM_THREADS=2", "NUMEXPR_NUM_THREADS="));
  EXPECT_EQ(describe(p),
            "threads=8 from step: 8 CPUs per task; set MKL_NUM_THREADS,OPENBLAS_NUM_THREADS,"
            "BLIS_NUM_THREADS,VECLIB_MAXIMUM_THREADS; kept the user's OMP_NUM_THREADS=2 "
            "NUMEXPR_NUM_THREADS=");
}

TEST(Threads, AllKeptSetsNone) {
  ThreadFacts f = node64();
  f.affinity_cpus = 4;
  f.env = [](const char*) -> std::optional<std::string> { return "3"; };
  ThreadPlan p = plan_threads(f);
  EXPECT_EQ(p.threads, 4u);
  EXPECT_THAT(p.set, IsEmpty());
  EXPECT_EQ(p.kept.size(), std::size(kThreadVars));
  EXPECT_THAT(describe(p), HasSubstr("threads=4 from affinity mask of 4 CPUs; set none; kept "
                                     "the user's OMP_NUM_THREADS=3 MKL_NUM_THREADS=3"));
}

TEST(Threads, DescribeListsWhatIsSet) {
  ThreadFacts f = node64();
  f.step_cpus_per_task = 8;
  f.env_cpus_per_task = "8";
  EXPECT_EQ(describe(plan_threads(f)),
            "threads=8 from SLURM_CPUS_PER_TASK=8 (step: 8 CPUs per task); set OMP_NUM_THREADS,"
            "MKL_NUM_THREADS,OPENBLAS_NUM_THREADS,BLIS_NUM_THREADS,VECLIB_MAXIMUM_THREADS,"
            "NUMEXPR_NUM_THREADS");
}

TEST(Threads, LostCpusPerTaskWarns) {
  ThreadFacts f = node64();
  f.step_cpus_per_task = 1;
  f.env_cpus_per_task = "8";
  f.affinity_cpus = 1;
  ThreadPlan p = plan_threads(f);
  EXPECT_EQ(p.threads, 1u);  // what the step really got
  EXPECT_EQ(p.source, "step: 1 CPU per task");
  EXPECT_EQ(p.warning,
            "SLURM_CPUS_PER_TASK=8 (the job's --cpus-per-task) but this step gave each task 1 "
            "CPU: in Slurm 22.05 to 23.02 srun does not inherit it; use srun --cpus-per-task=8 or "
            "export SRUN_CPUS_PER_TASK=8");
  f.step_cpus_per_task = 2;
  EXPECT_THAT(plan_threads(f).warning, HasSubstr("gave each task 2 CPUs: in Slurm 22.05 to 23.02"));
  EXPECT_EQ(plan_threads(f).threads, 1u);  // still capped by the mask
}

TEST(Threads, NoWarningWhenTheStepGotItOrSrunWasTold) {
  ThreadFacts f = node64();
  f.step_cpus_per_task = 1;
  f.env_cpus_per_task = "8";
  f.srun_cpus_per_task = "1";  // the user chose the step's value
  EXPECT_EQ(plan_threads(f).warning, "");
  f.srun_cpus_per_task.reset();
  f.step_cpus_per_task = 8;  // equal values
  EXPECT_EQ(plan_threads(f).warning, "");
  f.step_cpus_per_task = 16;  // the step got more than the job's value
  EXPECT_EQ(plan_threads(f).warning, "");
  f.step_cpus_per_task.reset();  // the step's value unknown: nothing to compare
  f.affinity_cpus = 4;
  EXPECT_EQ(plan_threads(f).warning, "");
  EXPECT_EQ(plan_threads(f).threads, 4u);
}

TEST(Threads, GarbledSlurmCpusPerTaskIsIgnored) {
  ThreadFacts f = node64();
  f.step_cpus_per_task = 1;
  for (const char* garbled : {"", "0", "-8", "8x", " 8", "eight", "8,4", "99999999999"}) {
    f.env_cpus_per_task = garbled;
    ThreadPlan p = plan_threads(f);
    EXPECT_EQ(p.warning, "") << garbled;
    EXPECT_EQ(p.threads, 1u) << garbled;
    EXPECT_EQ(p.source, "step: 1 CPU per task") << garbled;
  }
}

}  // namespace
}  // namespace slurmddp::launch
