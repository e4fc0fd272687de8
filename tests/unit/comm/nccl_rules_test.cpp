// The NCCL communicator's pure rules (device choice, rendezvous diagnosis):
// run in the unit suite on any machine, GPU or not.
#include "comm/nccl/nccl_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "slurmddp/error.h"
#include "slurmddp/nccl_communicator.h"

namespace slurmddp::comm {
namespace {

using ::testing::HasSubstr;

EnvReader env_of(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

const std::string kWhere = "rank=1, size=4, host=h, pid=7";

TEST(NcclDeviceChoice, ExplicitDeviceWins) {
  const auto c = choose_device(1, 2, env_of({{"SLURMDDP_LOCAL_DEVICE", "0"}}), kWhere);
  EXPECT_EQ(c.ordinal, 1);
  EXPECT_EQ(c.source, "NcclOptions::device=1");
}

TEST(NcclDeviceChoice, NegativeExplicitDeviceIsAnError) {
  try {
    choose_device(-1, 2, env_of({{"LOCAL_RANK", "1"}}), kWhere);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("NcclOptions::device=-1 is not a device ordinal (expected >= 0, "
                          "or unset to choose from the environment)"));
    EXPECT_THAT(e.what(), HasSubstr(kWhere));
  }
}

TEST(NcclDeviceChoice, PluginVariableBeforeLocalRank) {
  const auto c = choose_device(
      std::nullopt, 4, env_of({{"SLURMDDP_LOCAL_DEVICE", "3"}, {"LOCAL_RANK", "1"}}), kWhere);
  EXPECT_EQ(c.ordinal, 3);
  EXPECT_EQ(c.source, "SLURMDDP_LOCAL_DEVICE=3");
}

TEST(NcclDeviceChoice, LocalRankModuloVisibleDevices) {
  const auto c = choose_device(std::nullopt, 4, env_of({{"LOCAL_RANK", "7"}}), kWhere);
  EXPECT_EQ(c.ordinal, 3);
  EXPECT_EQ(c.source, "LOCAL_RANK=7 modulo 4 visible devices");
  EXPECT_EQ(choose_device(std::nullopt, 2, env_of({{"SLURM_LOCALID", "5"}}), kWhere).ordinal, 1);
  EXPECT_EQ(choose_device(std::nullopt, 2, env_of({}), kWhere).ordinal, 0);
}

TEST(NcclDeviceChoice, OrdinalOutOfRangeNamesEverything) {
  try {
    choose_device(std::nullopt, 2,
                  env_of({{"SLURMDDP_LOCAL_DEVICE", "5"}, {"CUDA_VISIBLE_DEVICES", "2,3"}}),
                  kWhere);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "nccl: failed to select a GPU: device ordinal 5 (from SLURMDDP_LOCAL_DEVICE=5) "
                 "is not visible: this process sees 2 devices (ordinals 0..1, counted within "
                 "CUDA_VISIBLE_DEVICES); CUDA_VISIBLE_DEVICES=2,3, SLURMDDP_LOCAL_DEVICE=5, "
                 "rank=1, size=4, host=h, pid=7");
  }
  try {
    choose_device(4, 1, env_of({}), kWhere);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device ordinal 4 (from NcclOptions::device=4)"), std::string::npos) << m;
    EXPECT_NE(m.find("CUDA_VISIBLE_DEVICES unset, SLURMDDP_LOCAL_DEVICE unset"), std::string::npos)
        << m;
  }
}

TEST(NcclDeviceChoice, GarbledVariablesAndNoDevice) {
  EXPECT_THROW(choose_device(std::nullopt, 2, env_of({{"SLURMDDP_LOCAL_DEVICE", "gpu1"}}), kWhere),
               InvalidArgument);
  EXPECT_THROW(choose_device(std::nullopt, 2, env_of({{"LOCAL_RANK", "-1"}}), kWhere),
               InvalidArgument);
  try {
    choose_device(std::nullopt, 0, env_of({{"CUDA_VISIBLE_DEVICES", ""}}), kWhere);
    FAIL() << "no error";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device is visible; CUDA_VISIBLE_DEVICES="),
              std::string::npos)
        << e.what();
  }
}

// Note [Finalize bound]: destruction waits for ncclCommFinalize the short
// finalize_timeout (a dead peer never lets it complete), never the operation
// timeout's minutes, and never longer than the operation timeout itself.
TEST(FinalizeLimit, IsTheShortLimitBoundedByTheOperationTimeout) {
  using std::chrono::milliseconds;
  EXPECT_EQ(NcclOptions{}.finalize_timeout, milliseconds(10000));
  EXPECT_LT(NcclOptions{}.finalize_timeout, NcclOptions{}.timeout);
  EXPECT_EQ(finalize_limit(NcclOptions{}.timeout, NcclOptions{}.finalize_timeout),
            milliseconds(10000));
  EXPECT_EQ(finalize_limit(milliseconds(2000), milliseconds(10000)), milliseconds(2000));
  EXPECT_EQ(finalize_limit(milliseconds(300000), milliseconds(500)), milliseconds(500));
  EXPECT_EQ(finalize_limit(milliseconds(300000), milliseconds(-5)), milliseconds(0));
}

// Checked before any CUDA call, so on every machine.
TEST(MakeNcclCommunicator, RejectsBadOptionsFirst) {
  NcclOptions o;
  o.size = 2;
  try {
    make_nccl_communicator(o);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("NcclOptions::rank and NcclOptions::size are required; "
                                    "rank=unset, size=2"));
  }
  o.rank = 2;
  o.size = 2;
  try {
    make_nccl_communicator(o);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 is not in [0, size) for size 2"),
              std::string::npos)
        << e.what();
  }
  o.rank = 0;
  EXPECT_THROW(make_nccl_communicator(o), InvalidArgument);  // no store, no bootstrap
  o.size = 1;
  o.timeout = std::chrono::milliseconds(0);
  EXPECT_THROW(make_nccl_communicator(o), InvalidArgument);
}

}  // namespace
}  // namespace slurmddp::comm
