// The sbatch scripts of examples/jobs, submitted unchanged to the test cluster.
// Their `./train` is a stand-in in the submit directory: it records what the
// script's srun line gave the task (rank, port, reserved ports, arguments) and
// runs the runtime probe (init from the environment, allreduces, checks), so
// that each script's launch line is proven, not the training (tests/system/
// train_test.cpp covers that).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <set>
#include <sstream>

#include "batch_jobs.h"
#include "cluster.h"

namespace slurmddp::systest {
namespace {

using ::testing::HasSubstr;

struct Job {
  std::string out;            // the job's output file (stdout and stderr)
  std::vector<Fields> tasks;  // "job ..." lines: what each task was given
  std::vector<Fields> ranks;  // "runtime ... ok=" lines: the probe's verdicts
};

Job submit(const std::string& script) {
  std::string dir = fresh_dir("job-" + script.substr(0, script.find('.')));
  {
    std::ofstream train(dir + "/train");
    train << "#!/bin/bash\n"
          << "echo \"job rank=$RANK node=$NODE_RANK port=$MASTER_PORT step=$SLURM_STEP_ID "
             "resv=${SLURM_STEP_RESV_PORTS-<unset>} args=$(IFS=,; echo \"$*\")\"\n"
          << "exec " << env_or_empty("SLURMDDP_RUNTIME_PROBE") << " --steps 5\n";
  }
  chmod((dir + "/train").c_str(), 0755);
  Job job;
  Result r = sbatch_wait("-o out.txt " + source_dir() + "/examples/jobs/" + script,
                         std::chrono::seconds(180), dir);
  std::ifstream in(dir + "/out.txt");
  std::stringstream text;
  text << in.rdbuf();
  job.out = text.str();
  EXPECT_EQ(r.rc, 0) << script << "\n" << r.out << r.err << job.out;
  job.tasks = parse_lines(job.out, "job ");
  for (auto& l : parse_lines(job.out, "runtime ")) {
    if (l.count("ok") != 0) job.ranks.push_back(l);  // (not the "training" lines)
  }
  for (const auto& l : job.ranks) EXPECT_EQ(l.at("ok"), "1") << job.out;
  return job;
}

// Ranks 0..n-1 each exactly once among `lines`.
void expect_ranks(const std::vector<Fields>& lines, int n, const std::string& key = "rank") {
  std::multiset<std::string> got;
  for (const auto& l : lines) got.insert(l.at(key));
  std::multiset<std::string> want;
  for (int i = 0; i < n; ++i) want.insert(std::to_string(i));
  EXPECT_EQ(got, want);
}

bool port_in(int port, const std::string& ranges) {  // "30000-30004,30010"
  std::istringstream in(ranges);
  std::string part;
  while (std::getline(in, part, ',')) {
    auto dash = part.find('-');
    int lo = std::stoi(part.substr(0, dash));
    int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    if (port >= lo && port <= hi) return true;
  }
  return false;
}

TEST(JobScripts, OneNodeFourGpus) {
  REQUIRE_CLUSTER();
  Job job = submit("one-node-4gpus.sbatch");
  ASSERT_EQ(job.ranks.size(), 4u) << job.out;
  expect_ranks(job.ranks, 4);
  for (const auto& l : job.ranks) {
    EXPECT_EQ(l.at("world"), "4");
    EXPECT_EQ(l.at("node"), "0");
    EXPECT_EQ(l.at("bootstrap"), "tcp");
  }
  ASSERT_EQ(job.tasks.size(), 4u);
  for (const auto& t : job.tasks) EXPECT_EQ(t.at("args"), "--epochs=10");
}

TEST(JobScripts, TwoNodesFourGpusPrintsTheRendezvous) {
  REQUIRE_CLUSTER();
  Job job = submit("two-nodes-4gpus.sbatch");
  ASSERT_EQ(job.ranks.size(), 8u) << job.out;
  expect_ranks(job.ranks, 8);
  std::set<std::string> nodes;
  for (const auto& l : job.ranks) {
    EXPECT_EQ(l.at("world"), "8");
    EXPECT_EQ(l.at("local").substr(l.at("local").find('/')), "/4");
    nodes.insert(l.at("node"));
  }
  EXPECT_EQ(nodes, (std::set<std::string>{"0", "1"}));
  // #SBATCH --ddp-verbose reached the step: srun printed the rendezvous.
  EXPECT_THAT(job.out, HasSubstr("slurm-ddp: step "));
}

TEST(JobScripts, PmixBootstrapsWithoutAPort) {
  REQUIRE_CLUSTER();
  Job job = submit("pmix.sbatch");
  ASSERT_EQ(job.ranks.size(), 8u) << job.out;
  expect_ranks(job.ranks, 8);
  for (const auto& l : job.ranks) {
    EXPECT_EQ(l.at("bootstrap"), "pmix");
    EXPECT_EQ(l.at("world"), "8");
  }
}

TEST(JobScripts, ReservedPortsGiveConcurrentStepsTheirOwnPort) {
  REQUIRE_CLUSTER();
  Job job = submit("reserved-ports.sbatch");
  ASSERT_EQ(job.tasks.size(), 8u) << job.out;
  ASSERT_EQ(job.ranks.size(), 8u) << job.out;
  // Two steps of four ranks each, side by side.
  std::map<std::string, std::vector<Fields>> steps;
  for (const auto& t : job.tasks) steps[t.at("step")].push_back(t);
  ASSERT_EQ(steps.size(), 2u) << job.out;
  std::set<std::string> ports;
  for (const auto& [step, tasks] : steps) {
    ASSERT_EQ(tasks.size(), 4u) << "step " << step;
    expect_ranks(tasks, 4);
    for (const auto& t : tasks) {
      EXPECT_EQ(t.at("port"), tasks.front().at("port")) << "step " << step;
      EXPECT_TRUE(port_in(std::stoi(t.at("port")), t.at("resv")))
          << "MASTER_PORT=" << t.at("port") << " SLURM_STEP_RESV_PORTS=" << t.at("resv");
    }
    ports.insert(tasks.front().at("port"));
  }
  EXPECT_EQ(ports.size(), 2u) << "both steps got MASTER_PORT " << *ports.begin();
  std::set<std::string> seeds;
  for (const auto& t : job.tasks) seeds.insert(t.at("args"));
  EXPECT_EQ(seeds, (std::set<std::string>{"--epochs=10,--seed=1", "--epochs=10,--seed=2"}));
  for (const auto& l : job.ranks) EXPECT_EQ(l.at("world"), "4");
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
