// The NCCL communicator's creation errors: a device that is not visible, a
// rank that never arrives, ranks that disagree on the world size.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "nccl_ranks.h"
#include "slurmddp/error.h"
#include "slurmddp/nccl_communicator.h"
#include "slurmddp/store.h"

namespace slurmddp::support {
namespace {

TEST(Errors, InvalidDeviceOrdinalNamesTheVariables) {
  const int bad = g_device_count + 3;
  NcclOptions o = single_rank(bad);
  try {
    make_nccl_communicator(o);
    ADD_FAILURE() << "no error for device " << bad;
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "device ordinal " + std::to_string(bad))) << m;
    EXPECT_TRUE(contains(m, "CUDA_VISIBLE_DEVICES")) << m;
    EXPECT_TRUE(contains(m, "SLURMDDP_LOCAL_DEVICE")) << m;
    EXPECT_TRUE(contains(m, "rank=0")) << m;
  }
  // The same ordinal from the plugin's variable.
  setenv("SLURMDDP_LOCAL_DEVICE", std::to_string(bad).c_str(), 1);
  o.device.reset();
  try {
    make_nccl_communicator(o);
    ADD_FAILURE() << "no error for SLURMDDP_LOCAL_DEVICE=" << bad;
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "from SLURMDDP_LOCAL_DEVICE=" + std::to_string(bad)))
        << e.what();
  }
  unsetenv("SLURMDDP_LOCAL_DEVICE");
}

// A rank that never arrives: the others end in TimeoutError after the
// timeout, naming themselves and who joined, instead of hanging in NCCL.
// The creation is meant to fail, so the short timeout is the subject: even
// when CUDA's setup eats most of it, the rank still records itself and then
// times out with the same diagnosis.
TEST(Errors, InitTimesOutWhenARankNeverArrives) {
  for (int present : {0, 1}) {
    auto store = make_in_process_store();
    NcclOptions o;
    o.rank = present;
    o.size = 2;
    o.device = 0;
    o.store = store;
    o.timeout = milliseconds(3000);
    const auto start = Clock::now();
    try {
      make_nccl_communicator(o);
      ADD_FAILURE() << "rank " << present << " created a communicator alone";
    } catch (const TimeoutError& e) {
      const std::string m = e.what();
      const double took = seconds_since(start);
      EXPECT_GE(took, 2.9) << m;
      EXPECT_LE(took, 20.0) << m;
      EXPECT_TRUE(contains(m, "1/2 ranks joined; missing: [" + std::to_string(1 - present) + "]"))
          << m;
      EXPECT_TRUE(contains(m, "rank=" + std::to_string(present))) << m;
    }
  }
}

// Rank 1 fails at once on the mismatch; rank 0, whose peer never starts NCCL,
// gives up after its timeout (the detection bound here), naming rank 1's size.
// Both timeouts also bound a creation (CUDA context included) that has to get
// as far as the store: kCreationTimeout (Note [Fault test timeouts]).
TEST(Errors, WorldSizeMismatchIsNamed) {
  auto store = make_in_process_store();
  std::string root_message;
  std::thread root([&] {
    NcclOptions o;
    o.rank = 0;
    o.size = 2;
    o.device = 0;
    o.store = store;
    o.timeout = kCreationTimeout;
    try {
      make_nccl_communicator(o);
    } catch (const std::exception& e) {
      root_message = e.what();
    }
  });
  NcclOptions o;
  o.rank = 1;
  o.size = 3;
  o.device = 0;
  o.store = store;
  o.timeout = kCreationTimeout;
  try {
    make_nccl_communicator(o);
    ADD_FAILURE() << "sizes 2 and 3 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "size=3 (rank 1), size=2 (rank 0)")) << e.what();
  }
  root.join();
  EXPECT_TRUE(contains(root_message, "ranks with another world size: [1 (size=3)]"))
      << root_message;
}

}  // namespace
}  // namespace slurmddp::support
