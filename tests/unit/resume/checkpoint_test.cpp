#include "slurmddp/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "fake_group.h"
#include "rank_threads.h"
#include "resume/checkpoint_file.h"
#include "slurmddp/error.h"

namespace slurmddp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Runs body(rank) on `world` threads, each with its communicator of one
// group; returns what each rank threw ("" for none).
std::vector<std::string> errors_on_ranks(
    int world, const std::function<void(std::shared_ptr<Communicator>, int)>& body) {
  auto group = std::make_shared<support::FakeGroup>(world);
  return support::on_rank_threads(world, [&](int r) { body(group->communicator(r), r); });
}

// The same, expecting no rank to throw.
void on_ranks(int world, const std::function<void(std::shared_ptr<Communicator>, int)>& body) {
  support::expect_no_rank_errors(errors_on_ranks(world, body));
}

std::string fresh(const std::string& name) {
  std::string d = ::testing::TempDir() + "/ckpt-" + name + "-" + std::to_string(::getpid());
  fs::remove_all(d);
  return d;
}

SamplerState sampler_of(int rank, int step) {
  SamplerState s;
  s.epoch = step / 10;
  s.position = step;
  s.fingerprint = 0xabc0u + static_cast<uint64_t>(rank);
  return s;
}

TEST(Checkpointer, FreshStartThenRankZeroPayloadForEveryRank) {
  std::string dir = fresh("rank0");
  on_ranks(3, [&](std::shared_ptr<Communicator> comm, int rank) {
    Checkpointer c(comm, dir);
    EXPECT_FALSE(c.load().has_value());
    for (int step : {10, 20, 30}) {
      std::string payload = rank == 0 ? "params@" + std::to_string(step) : "";
      c.save(step, sampler_of(rank, step), payload);
    }
    auto got = c.load();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->step, 30);
    EXPECT_EQ(got->sampler, sampler_of(rank, 30));
    EXPECT_EQ(std::string(got->payload.begin(), got->payload.end()), "params@30");
  });
  // the two newest are kept, LATEST names the newest
  EXPECT_FALSE(fs::exists(dir + "/step-10"));
  EXPECT_TRUE(fs::exists(dir + "/step-20/COMPLETE"));
  EXPECT_TRUE(fs::exists(dir + "/step-30/rank-2.ckpt"));
  std::ifstream latest(dir + "/LATEST");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step-30");
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST(Checkpointer, EveryRankKeepsItsOwnPayload) {
  std::string dir = fresh("every");
  CheckpointOptions o;
  o.scope = CheckpointScope::kEveryRank;
  on_ranks(2, [&](std::shared_ptr<Communicator> comm, int rank) {
    Checkpointer c(comm, dir, o);
    std::string payload = "rank" + std::to_string(rank);
    c.save(7, sampler_of(rank, 7), payload);
    auto got = c.load();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(std::string(got->payload.begin(), got->payload.end()), payload);
  });
}

TEST(Checkpointer, IncompleteCheckpointIsNeverLoaded) {
  std::string dir = fresh("incomplete");
  on_ranks(2, [&](std::shared_ptr<Communicator> comm, int rank) {
    Checkpointer c(comm, dir);
    c.save(5, sampler_of(rank, 5), std::string("p"));
  });
  // a later save that died after writing rank files but before COMPLETE/LATEST
  fs::create_directories(dir + "/step-9");
  std::ofstream(dir + "/step-9/rank-0.ckpt") << "partial";
  on_ranks(2, [&](std::shared_ptr<Communicator> comm, int) {
    Checkpointer c(comm, dir);
    auto got = c.load();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->step, 5);
  });
}

TEST(Checkpointer, DamagedFileStopsEveryRankNamingIt) {
  std::string dir = fresh("damaged");
  on_ranks(3, [&](std::shared_ptr<Communicator> comm, int rank) {
    Checkpointer c(comm, dir);
    c.save(4, sampler_of(rank, 4), std::string("payload"));
  });
  std::string victim = dir + "/step-4/rank-1.ckpt";
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(50);
    f.put('#');
  }
  const auto errors = errors_on_ranks(3, [&](std::shared_ptr<Communicator> comm, int) {
    Checkpointer c(std::move(comm), dir);
    c.load();
  });
  EXPECT_THAT(errors[1], HasSubstr("checkpoint " + victim + " is damaged: checksum mismatch"));
  EXPECT_THAT(errors[0], HasSubstr("rank 1 could not load " + dir + "/step-4"));
  EXPECT_THAT(errors[2], HasSubstr("rank 1 could not load"));
}

// Note [Streaming checkpoints]: rank 0's payload, read by every rank, is
// verified by rank 0 alone, and the agreement spreads its verdict; its
// structure every rank checks, so a truncated one is named by every rank.
TEST(Checkpointer, RankZerosPayloadIsVerifiedOnceAndItsDamageStopsEveryRank) {
  std::string dir = fresh("rank0-damaged");
  on_ranks(3, [&](std::shared_ptr<Communicator> comm, int rank) {
    Checkpointer c(comm, dir);
    c.save(4, sampler_of(rank, 4), std::string(rank == 0 ? 1000 : 0, 'p'));
  });
  std::string victim = dir + "/step-4/rank-0.ckpt";
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);  // in the payload
    f.put('#');
  }
  auto load_all = [&] {
    return errors_on_ranks(3, [&](std::shared_ptr<Communicator> comm, int) {
      Checkpointer c(std::move(comm), dir);
      c.load();
    });
  };
  auto errors = load_all();
  EXPECT_THAT(errors[0], HasSubstr("checkpoint " + victim + " is damaged: checksum mismatch"));
  EXPECT_THAT(errors[1], HasSubstr("rank 0 could not load " + dir + "/step-4"));
  EXPECT_THAT(errors[2], HasSubstr("rank 0 could not load " + dir + "/step-4"));
  fs::resize_file(victim, 900);
  errors = load_all();
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(errors[static_cast<size_t>(r)],
                HasSubstr("checkpoint " + victim + " is damaged: truncated"))
        << r;
  }
}

// Files written before version 2 still load.
TEST(Checkpointer, AVersionOneCheckpointLoads) {
  std::string dir = fresh("v1");
  auto comm = std::make_shared<support::FakeGroup>(1)->communicator(0);
  {
    Checkpointer c(comm, dir);
    c.save(8, sampler_of(0, 8), std::string("new"));
  }
  resume::RankFile f;
  f.step = 8;
  f.world = 1;
  f.sampler = sampler_of(0, 8).to_string();
  f.payload = {'o', 'l', 'd'};
  std::ofstream(dir + "/step-8/rank-0.ckpt", std::ios::binary | std::ios::trunc)
      << resume::encode_v1(f);
  Checkpointer c(comm, dir);
  auto got = c.load();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(std::string(got->payload.begin(), got->payload.end()), "old");
  EXPECT_EQ(got->sampler, sampler_of(0, 8));
}

TEST(Checkpointer, AnotherWorldSizeIsRefused) {
  std::string dir = fresh("world");
  on_ranks(2, [&](std::shared_ptr<Communicator> comm, int rank) {
    Checkpointer c(comm, dir);
    c.save(3, sampler_of(rank, 3), std::string("p"));
  });
  try {
    Checkpointer c(std::make_shared<support::FakeGroup>(1)->communicator(0), dir);
    c.load();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("in a world of 2; expected step 3 of rank 0 in a world of 1"));
  }
}

// A rank file whose checksum holds but whose sampler state does not parse
// (written by another program, say) is refused naming the file.
TEST(Checkpointer, ASamplerStateThatDoesNotParseIsRefusedNamingTheFile) {
  std::string dir = fresh("sampler");
  auto comm = std::make_shared<support::FakeGroup>(1)->communicator(0);
  {
    Checkpointer c(comm, dir);
    c.save(6, sampler_of(0, 6), std::vector<float>{1.5f, 2.5f});
    auto got = c.load();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->sampler, sampler_of(0, 6));
    ASSERT_EQ(got->payload.size(), 2 * sizeof(float));
    float back[2] = {};
    std::memcpy(back, got->payload.data(), sizeof back);
    EXPECT_EQ(back[1], 2.5f);
  }
  resume::RankFile f;
  f.step = 6;
  f.rank = 0;
  f.world = 1;
  f.sampler = "epoch three";
  std::ofstream(dir + "/step-6/rank-0.ckpt", std::ios::binary | std::ios::trunc)
      << resume::encode(f);
  try {
    Checkpointer c(comm, dir);
    c.load();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir + "/step-6/rank-0.ckpt holds no valid sampler state"));
    EXPECT_THAT(e.what(), HasSubstr("epoch three"));
  }
}

TEST(JobCheckpointDir, OnePerJobAndArrayTask) {
  setenv("SLURM_JOB_ID", "77", 1);
  unsetenv("SLURM_ARRAY_JOB_ID");
  EXPECT_EQ(job_checkpoint_dir("/c"), "/c/job-77");
  setenv("SLURM_ARRAY_JOB_ID", "70", 1);
  setenv("SLURM_ARRAY_TASK_ID", "3", 1);
  EXPECT_EQ(job_checkpoint_dir("/c"), "/c/job-70_3");
  unsetenv("SLURM_ARRAY_JOB_ID");
  unsetenv("SLURM_ARRAY_TASK_ID");
  unsetenv("SLURM_JOB_ID");
  EXPECT_EQ(job_checkpoint_dir("/c"), "/c/local");
}

// Note [Run identity]: a job's own directory left by another job with the same
// id is refused on every rank, and the job's own requeued run resumes.
TEST(Checkpointer, AJobsDirectoryLeftByAnotherJobWithItsIdIsRefusedOnEveryRank) {
  const std::string base = fresh("run");
  setenv("SLURM_CLUSTER_NAME", "north", 1);
  setenv("SLURM_JOB_ID", "4321", 1);
  setenv("SLURM_JOB_START_TIME", "1000", 1);
  unsetenv("SLURM_RESTART_COUNT");
  const std::string dir = job_checkpoint_dir(base);
  on_ranks(2, [&](std::shared_ptr<Communicator> comm, int rank) {
    Checkpointer(comm, dir).save(5, sampler_of(rank, 5), std::string("old job's state"));
  });
  // the cluster hands 4321 out again: a new job, never requeued
  setenv("SLURM_JOB_START_TIME", "2000", 1);
  auto load = [&](std::shared_ptr<Communicator> comm, int) { Checkpointer(comm, dir).load(); };
  std::vector<std::string> errors = errors_on_ranks(2, load);
  EXPECT_THAT(errors[0], HasSubstr(dir + " belongs to another job 4321 of cluster north, which "
                                         "started at 1970-01-01 00:16:40 UTC (1000)"));
  EXPECT_THAT(errors[1], HasSubstr("rank 0 refused " + dir + " (see its error)"));
  // the directory is the old job's, untouched
  EXPECT_TRUE(fs::exists(dir + "/step-5/COMPLETE"));
  // the old job's own requeued run resumes it
  setenv("SLURM_RESTART_COUNT", "1", 1);
  on_ranks(2, [&](std::shared_ptr<Communicator> comm, int rank) {
    auto got = Checkpointer(comm, dir).load();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->step, 5);
    EXPECT_EQ(got->sampler, sampler_of(rank, 5));
  });
  // a checkpoint another run completed (its nonce) is refused
  std::ofstream(dir + "/step-5/COMPLETE") << "complete step=5 world=2 nonce=0123456789abcdef\n";
  errors = errors_on_ranks(2, load);
  EXPECT_THAT(errors[0], HasSubstr(dir + "/step-5 was completed by another run (nonce "
                                         "0123456789abcdef)"));
  EXPECT_THAT(errors[1], HasSubstr("rank 0 could not load " + dir + "/step-5"));
  for (const char* v :
       {"SLURM_CLUSTER_NAME", "SLURM_JOB_ID", "SLURM_JOB_START_TIME", "SLURM_RESTART_COUNT"}) {
    unsetenv(v);
  }
}

}  // namespace
}  // namespace slurmddp
