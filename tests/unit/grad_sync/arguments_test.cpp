// GradSync::check_arguments: the constructor's checks before any communicator
// or device (Note [Checks before the device] in runtime/grad_sync/arguments.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "slurmddp/error.h"
#include "slurmddp/grad_sync.h"

namespace slurmddp {
namespace {

using ::testing::HasSubstr;

// Parameters that no check reads through: only their addresses matter.
std::vector<GradParameter> params(DeviceKind device, bool with_grad) {
  static float placeholder[4];
  std::vector<GradParameter> ps;
  for (const char* name : {"conv.weight", "fc.bias"}) {
    GradParameter p;
    p.name = name;
    p.data = placeholder;
    p.grad = with_grad ? placeholder : nullptr;
    p.count = 1000;
    p.device = device;
    ps.push_back(p);
  }
  return ps;
}

std::string error_of(const std::vector<GradParameter>& ps, const GradSyncOptions& o,
                     Backend backend, DeviceKind device) {
  try {
    GradSync::check_arguments(ps, o, backend, device);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(GradSyncArguments, HostParametersWithTheNcclCommunicatorAreRefused) {
  // A parameter left at the default device (host) beside a CUDA communicator.
  GradParameter p;
  p.name = "layer1.weight";
  p.data = p.grad = &p;
  p.count = 10;
  const std::string m = error_of({p}, {}, Backend::kNccl, DeviceKind::kCuda);
  EXPECT_THAT(m, HasSubstr("parameter 0 ('layer1.weight') is not where the communicator's "
                           "buffers live; device=host, communicator=nccl (cuda)"));
}

TEST(GradSyncArguments, CudaParametersWithTheNcclCommunicatorPass) {
  EXPECT_EQ(error_of(params(DeviceKind::kCuda, true), {}, Backend::kNccl, DeviceKind::kCuda), "");
  GradSyncOptions views;
  views.gradient_as_bucket_view = true;
  EXPECT_EQ(error_of(params(DeviceKind::kCuda, false), views, Backend::kNccl, DeviceKind::kCuda),
            "");
}

TEST(GradSyncArguments, TheConstructorsOtherChecksToo) {
  GradSyncOptions views;
  views.gradient_as_bucket_view = true;
  EXPECT_THAT(error_of(params(DeviceKind::kHost, true), views, Backend::kGloo, DeviceKind::kHost),
              HasSubstr("parameter 0 ('conv.weight') has a grad buffer although gradients live "
                        "in bucket memory"));
  EXPECT_THAT(error_of(params(DeviceKind::kHost, false), {}, Backend::kGloo, DeviceKind::kHost),
              HasSubstr("parameter 0 ('conv.weight') has no grad buffer"));
  GradSyncOptions no_cap;
  no_cap.bucket_cap_bytes = 0;
  EXPECT_THAT(error_of(params(DeviceKind::kHost, true), no_cap, Backend::kGloo, DeviceKind::kHost),
              HasSubstr("bucket_cap_bytes"));
  GradSyncOptions zero_timeout;
  zero_timeout.timeout = std::chrono::milliseconds(0);
  EXPECT_THAT(
      error_of(params(DeviceKind::kHost, true), zero_timeout, Backend::kGloo, DeviceKind::kHost),
      HasSubstr("GradSyncOptions::timeout=0ms; expected a positive duration"));
}

}  // namespace
}  // namespace slurmddp
