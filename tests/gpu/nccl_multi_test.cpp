// The NCCL communicator across rank processes (nccl_ranks.h): every
// collective on 2 and 3 ranks, and the faults: a Work::wait timeout, the
// watchdog, a killed peer.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <vector>

#include "nccl_ranks.h"
#include "slurmddp/store.h"

namespace slurmddp::support {
namespace {

class Multi : public ::testing::TestWithParam<int> {};

TEST_P(Multi, EveryCollectiveTypeOpAndCount) {
  REQUIRE_MULTI_RANK();
  const Launch l =
      run_ranks("collectives", GetParam(), milliseconds(60000), std::chrono::seconds(240));
  for (const auto& c : l.exit_codes) EXPECT_TRUE(c && *c == 0) << describe(l);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Multi, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "ranks" + std::to_string(i.param);
                         });

TEST(MultiFailures, WorkWaitTimeoutAbortsAndBreaks) {
  REQUIRE_MULTI_RANK();
  const Launch l = run_ranks("wait_timeout", 2, kCreationTimeout, std::chrono::seconds(120));
  ASSERT_TRUE(l.exit_codes[0] && *l.exit_codes[0] == 0) << describe(l);
}

TEST(MultiFailures, WatchdogAbortsAnOperationPastTheTimeout) {
  REQUIRE_MULTI_RANK();
  // The timeout bounds the creation too: kCreationTimeout, and the watchdog
  // must act within it (checked by rank 0; Note [Fault test timeouts]).
  const Launch l = run_ranks("watchdog", 2, kCreationTimeout, std::chrono::seconds(150));
  ASSERT_TRUE(l.exit_codes[0] && *l.exit_codes[0] == 0) << describe(l);
}

TEST(MultiFailures, KilledPeerEndsInAnErrorWithinTheTimeout) {
  REQUIRE_MULTI_RANK();
  const Launch l = run_ranks("peer_killed", 2, kCreationTimeout, std::chrono::seconds(150),
                             [](Store& store, const std::vector<pid_t>& pids) {
                               try {
                                 store.wait({"test/ready/1"},
                                            std::chrono::seconds(90));  // creation + one allreduce
                               } catch (const std::exception& e) {
                                 ADD_FAILURE() << "rank 1 never became ready: " << e.what();
                               }
                               kill(pids[1], SIGKILL);
                               store.set("test/killed", Bytes{'1'});
                             });
  ASSERT_TRUE(l.exit_codes[0] && *l.exit_codes[0] == 0) << describe(l);
}

}  // namespace
}  // namespace slurmddp::support
