// The gpu suite's gates, on any machine: when the two-rank probe may turn the
// multi-rank tests into skips (probe_verdict.h).
#include <gtest/gtest.h>

#include "probe_verdict.h"

namespace slurmddp::support {
namespace {

const std::string kRefusal =
    "nccl: failed to initialize the communicator (2/2 ranks joined; missing: []): "
    "ncclInvalidUsage 5 (invalid usage): Duplicate GPU detected : rank 1 and rank 0 both on "
    "CUDA device 1b000; rank=1, size=2, device=0, host=h, pid=7";

TEST(ProbeVerdict, OnlyNcclsDuplicateGpuRefusalIsARefusal) {
  EXPECT_TRUE(is_shared_gpu_refusal(kRefusal));
  // Another NCCL error, or the text without NCCL's error code, is not.
  EXPECT_FALSE(
      is_shared_gpu_refusal("nccl: failed to initialize the communicator: "
                            "ncclSystemError 2 (unhandled system error): Duplicate GPU "
                            "detected"));
  EXPECT_FALSE(
      is_shared_gpu_refusal("nccl: failed to initialize the communicator: "
                            "ncclInvalidUsage 5 (invalid usage): bad config"));
  EXPECT_FALSE(
      is_shared_gpu_refusal("nccl: failed to initialize the communicator: NCCL did not "
                            "connect all ranks within 60000 ms"));
}

TEST(ProbeVerdict, EveryRankSucceeding) {
  EXPECT_EQ(probe_verdict({0, 0}, true), ProbeVerdict::kWorks);
  EXPECT_EQ(probe_verdict({0, 0}, false), ProbeVerdict::kWorks);
}

TEST(ProbeVerdict, RefusalSkipsOnlyWhenEveryRankSharingAGpuReportsIt) {
  const int r = kExitSharedGpuRefused;
  EXPECT_EQ(probe_verdict({r, r}, true), ProbeVerdict::kRefused);
  // Each rank on a GPU of its own: a refusal is a bug, not a limitation.
  EXPECT_EQ(probe_verdict({r, r}, false), ProbeVerdict::kFailed);
  // One rank refused, the other failed otherwise or hung.
  EXPECT_EQ(probe_verdict({r, 1}, true), ProbeVerdict::kFailed);
  EXPECT_EQ(probe_verdict({r, std::nullopt}, true), ProbeVerdict::kFailed);
  EXPECT_EQ(probe_verdict({0, r}, true), ProbeVerdict::kFailed);
}

TEST(ProbeVerdict, AnyOtherFailureFails) {
  EXPECT_EQ(probe_verdict({1, 1}, true), ProbeVerdict::kFailed);
  EXPECT_EQ(probe_verdict({0, 134}, true), ProbeVerdict::kFailed);  // a crash (SIGABRT)
  EXPECT_EQ(probe_verdict({std::nullopt, std::nullopt}, true), ProbeVerdict::kFailed);
  EXPECT_EQ(probe_verdict({}, true), ProbeVerdict::kFailed);
}

}  // namespace
}  // namespace slurmddp::support
