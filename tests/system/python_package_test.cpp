// The Python package on the real cluster (Note [The Python under test]):
// examples/pytorch/train.py with init_method="slurmddp://" trains, all ranks
// agree, and bit for bit with plain torch (env://, torch's sampler); a
// stranger on another node knocking on the store's port is refused and
// logged while the job goes on; a missing rank is named with its node.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "cluster.h"

namespace slurmddp::systest {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string rank_script() {
  return python() + " '" + source_dir() + "/tests/python/torch_rank.py'";
}

TEST(PythonPackage, TrainsWithTheSlurmddpInitMethodLikePlainTorch) {
  REQUIRE_CLUSTER();
  const std::string train = "srun -N 2 -n 4 " + python() + " '" + source_dir() +
                            "/examples/pytorch/train.py' --epochs 1 --steps 120";
  Result ours = run(with_package() + train, std::chrono::seconds(300));
  ASSERT_EQ(ours.rc, 0) << ours.out << ours.err;
  EXPECT_THAT(ours.out, HasSubstr("init_method=slurmddp://, slurmddp.torch.DistributedSampler"));
  const auto digests = captures(ours.out, R"(rank \d: parameter sha256 ([0-9a-f]{16}))");
  EXPECT_EQ(digests.size(), 1u) << "ranks disagree:\n" << ours.out;
  Result plain = run(with_package() + train + " --plain", std::chrono::seconds(300));
  ASSERT_EQ(plain.rc, 0) << plain.out << plain.err;
  EXPECT_THAT(plain.out, HasSubstr("--plain: init_method=env://, torch's DistributedSampler"));
  EXPECT_EQ(captures(plain.out, R"(rank \d: parameter sha256 ([0-9a-f]{16}))"), digests)
      << "the same indices and the same reductions must give the same model";
}

TEST(PythonPackage, AStrangerIsRefusedAndLoggedWhileTheJobGoesOn) {
  REQUIRE_CLUSTER();
  // Rank 3 runs on n2; the store on n1 (rank 0).
  Result r =
      run(with_package() + "srun -N 2 -n 4 --ntasks-per-node=2 " + rank_script() + " stranger",
          std::chrono::seconds(180));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("stranger no-token: refused (ProtocolError"));
  EXPECT_THAT(r.out, HasSubstr("stranger wrong-token: refused (ProtocolError"));
  EXPECT_THAT(r.out, HasSubstr("stranger torch-tcpstore: refused ("));
  // Refused by our store, not by a torch that could not build its client.
  EXPECT_THAT(r.out, Not(HasSubstr("libuv")));
  EXPECT_THAT(r.out, Not(HasSubstr("ADMITTED")));
  // The job was undisturbed: every rank reduced and took the same DDP step.
  EXPECT_EQ(captures(r.out, R"((rank \d/4 sum=10) )"),
            (std::set<std::string>{"rank 0/4 sum=10", "rank 1/4 sum=10", "rank 2/4 sum=10",
                                   "rank 3/4 sum=10"}));
  EXPECT_EQ(captures(r.out, R"(params=([0-9a-f]{16}))").size(), 1u) << r.out;
  // Rank 0's server logged each refusal, naming the stranger's address.
  EXPECT_GE(captures(r.err, R"((refused connection from \S+))").size(), 1u) << r.err;
  EXPECT_THAT(r.err, HasSubstr("reason=no-token"));
  EXPECT_THAT(r.err, HasSubstr("reason=wrong-token"));
}

TEST(PythonPackage, AMissingRankIsNamedWithItsNode) {
  REQUIRE_CLUSTER();
  // Rank 3 (on n2) never starts Python; rank 2 on n2 vouches for it. Slurm
  // must not end the step when the first waiting rank fails, or the others
  // could not say it too. The timeout leaves the ranks that do start time to
  // import torch and join, however loaded the machine: with 5 s, rank 2 was
  // once still importing when ranks 0 and 1 gave up, beside every other lane.
  Result one = run(
      with_package() +
          "SLURMDDP_TIMEOUT=30s srun --kill-on-bad-exit=0 -N 2 -n 4 --ntasks-per-node=2 bash -c '" +
          "[ $SLURM_PROCID = 3 ] && exit 0; exec " + rank_script() + " allreduce'",
      std::chrono::seconds(180));
  EXPECT_NE(one.rc, 0);
  EXPECT_THAT(one.err, HasSubstr("slurmddp:// rendezvous: 3/4 ranks joined; missing: [3] "
                                 "(hosts: n2 [3])"));
  for (const char* rank : {"rank=0,", "rank=1,", "rank=2,"}) {
    EXPECT_THAT(one.err, HasSubstr(rank)) << "every waiting rank says it";
  }
  // Nobody from n2: its ranks are named with it.
  Result node = run(
      with_package() +
          "SLURMDDP_TIMEOUT=30s srun --kill-on-bad-exit=0 -N 2 -n 4 --ntasks-per-node=2 bash -c '" +
          "[ $SLURMD_NODENAME = n2 ] && exit 0; exec " + rank_script() + " allreduce'",
      std::chrono::seconds(180));
  EXPECT_NE(node.rc, 0);
  EXPECT_THAT(node.err, HasSubstr("2/4 ranks joined; missing: [2, 3] (hosts: n2 [2, 3], where "
                                  "no rank joined)"));
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
