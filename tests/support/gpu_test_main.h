// The end of every gpu test program's main(): the gpu suite's skip rule
// (device_presence.h: 77 only without a device, 1 when CUDA is broken), then
// GoogleTest. The device count is stored in *device_count for the tests.
#pragma once

#include <gtest/gtest.h>

#include "device_presence.h"

namespace slurmddp::support {

inline int run_gpu_tests(const char* program, int argc, char** argv, int* device_count) {
  if (const int status = gpu_gate(program, device_count); status != 0) return status;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace slurmddp::support
