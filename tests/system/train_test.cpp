// The example training program on the real test cluster: it trains (the loss
// falls, every rank ends with identical parameters) and is equivalent to
// single-process training with an R-times larger batch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>

#include "cluster.h"

namespace slurmddp::systest {
namespace {

using ::testing::HasSubstr;

std::string train() {
  return env_or_empty("SLURMDDP_TRAIN");
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

std::set<std::string> checksums(const std::string& out) {
  return captures(out, "rank [0-9]+: [0-9]+ steps, parameter checksum ([0-9a-f]+)");
}

// Note [Equivalence tolerance]
//   8 ranks x batch b and 1 rank x batch 8b see the same samples in each step
//   and average the same per-sample gradients; only the order of float32
//   additions differs (per-rank partial sums, then the allreduce). After k SGD
//   steps parameters agree to ~1e-6 relative; the test allows an absolute
//   1e-4 + 1e-3 relative per parameter, far below the size of one step
//   (lr * gradient ~ 1e-3 .. 1e-2), so a wrong sample, a missing average or an
//   unsynchronized rank fails it.
TEST(TrainSystem, EightRanksEqualOneProcessWithEightTimesTheBatch) {
  REQUIRE_CLUSTER();
  std::string dir = fresh_dir("equivalence");
  const std::string common = " --steps=20 --hidden=64 --lr=0.05 --seed=7";
  Result r8 = run("srun -n 8 --ntasks-per-node=4 " + train() + common + " --batch-size=16" +
                      " --dump-params=" + dir + "/r8.bin",
                  std::chrono::seconds(300));
  ASSERT_EQ(r8.rc, 0) << r8.out << r8.err;
  auto sums8 = checksums(r8.out);
  EXPECT_EQ(sums8.size(), 1u) << "ranks ended with different parameters:\n" << r8.out;
  Result r1 =
      run("srun -n 1 " + train() + common + " --batch-size=128 --dump-params=" + dir + "/r1.bin",
          std::chrono::seconds(300));
  ASSERT_EQ(r1.rc, 0) << r1.out << r1.err;
  EXPECT_THAT(r1.out, HasSubstr("rank 0: 20 steps"));
  EXPECT_THAT(r8.out, HasSubstr("rank 7: 20 steps"));
  auto p8 = read_floats(dir + "/r8.bin"), p1 = read_floats(dir + "/r1.bin");
  ASSERT_EQ(p8.size(), p1.size());
  ASSERT_EQ(p8.size(), 784u * 64 + 64 + 64 * 10 + 10);
  double worst = 0.0;
  size_t differ = 0;
  for (size_t i = 0; i < p8.size(); ++i) {
    double d = std::fabs(double(p8[i]) - double(p1[i]));
    worst = std::max(worst, d);
    differ += d > 1e-4 + 1e-3 * std::fabs(double(p1[i]));  // Note [Equivalence tolerance]
  }
  EXPECT_EQ(differ, 0u) << "largest difference " << worst;
  std::printf("equivalence: %zu parameters, largest |difference| %.3g\n", p8.size(), worst);
  // and the two runs did move away from the initialization in the same way
  Result r0 = run("srun -n 1 " + train() + " --steps=1 --hidden=64 --lr=0 --seed=7 --batch-size=8" +
                      " --dump-params=" + dir + "/init.bin",
                  std::chrono::seconds(300));
  ASSERT_EQ(r0.rc, 0) << r0.err;
  auto p0 = read_floats(dir + "/init.bin");
  double moved = 0.0;
  for (size_t i = 0; i < p0.size(); ++i) moved = std::max(moved, std::fabs(double(p1[i]) - p0[i]));
  EXPECT_GT(moved, 100 * worst) << "training did not move the parameters";
}

TEST(TrainSystem, MissingDatasetIsAClearError) {
  REQUIRE_CLUSTER();
  Result r = run("srun --kill-on-bad-exit=0 -n 2 " + train() + " --data=/nonexistent --steps=1",
                 std::chrono::seconds(120));
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err,
              HasSubstr("failed to open dataset file /nonexistent/train-images-idx3-ubyte.gz"));
  EXPECT_THAT(r.err, HasSubstr("dataset-fashion-mnist"));
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
