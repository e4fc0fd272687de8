// Note [Launch errors and pending errors] (common/cuda_launch.h): which error
// a kernel launch reports as its own, decided without a device.
#include "common/cuda_launch.h"

#include <gtest/gtest.h>

namespace slurmddp::cuda_util {
namespace {

TEST(LaunchError, NothingPendingEverythingIsOurs) {
  EXPECT_EQ(launch_error(cudaSuccess, cudaSuccess), cudaSuccess);
  EXPECT_EQ(launch_error(cudaSuccess, cudaErrorInvalidConfiguration),
            cudaErrorInvalidConfiguration);
}

TEST(LaunchError, APendingErrorIsNotOurs) {
  // The user's failed call left cudaErrorInvalidDevice; our launch worked.
  EXPECT_EQ(launch_error(cudaErrorInvalidDevice, cudaErrorInvalidDevice), cudaSuccess);
  // Our launch failed with another code: that one is ours.
  EXPECT_EQ(launch_error(cudaErrorInvalidDevice, cudaErrorInvalidConfiguration),
            cudaErrorInvalidConfiguration);
}

TEST(LaunchError, TheSameCodeCannotBeToldApart) {
  // The residual ambiguity of the Note, pinned down.
  EXPECT_EQ(launch_error(cudaErrorLaunchOutOfResources, cudaErrorLaunchOutOfResources),
            cudaSuccess);
}

}  // namespace
}  // namespace slurmddp::cuda_util
