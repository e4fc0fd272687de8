// When a GPU test may skip (device_presence.h), on any machine with the CUDA
// headers: the rule on cudaGetDeviceCount's answers, and the device-node scan.
#include "device_presence.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

namespace slurmddp::support {
namespace {

TEST(GpuPresence, DevicesPresent) {
  EXPECT_EQ(classify_gpu_presence(cudaSuccess, 2, true), GpuPresence::kPresent);
  EXPECT_EQ(classify_gpu_presence(cudaSuccess, 0, true), GpuPresence::kAbsent);
}

TEST(GpuPresence, OnlyAMissingDeviceSkips) {
  EXPECT_EQ(classify_gpu_presence(cudaErrorNoDevice, 0, false), GpuPresence::kAbsent);
  EXPECT_EQ(classify_gpu_presence(cudaErrorNoDevice, 0, true), GpuPresence::kAbsent);
  // No driver at all (what a CPU-only machine with the CUDA 13 toolkit says).
  EXPECT_EQ(classify_gpu_presence(cudaErrorInsufficientDriver, 0, false), GpuPresence::kAbsent);
}

TEST(GpuPresence, BrokenCudaOnAGpuMachineFails) {
  // A driver too old for the runtime where a GPU exists.
  EXPECT_EQ(classify_gpu_presence(cudaErrorInsufficientDriver, 0, true), GpuPresence::kBroken);
  for (cudaError_t e :
       {cudaErrorInitializationError, cudaErrorNotPermitted, cudaErrorSystemNotReady,
        cudaErrorSystemDriverMismatch, cudaErrorCompatNotSupportedOnDevice, cudaErrorUnknown}) {
    EXPECT_EQ(classify_gpu_presence(e, 0, false), GpuPresence::kBroken) << cudaGetErrorName(e);
    EXPECT_EQ(classify_gpu_presence(e, 0, true), GpuPresence::kBroken) << cudaGetErrorName(e);
  }
}

class DevDir {
 public:
  explicit DevDir(const std::vector<std::string>& names) {
    char tmpl[] = "/tmp/slurmddp-devdir-XXXXXX";
    path_ = mkdtemp(tmpl);
    for (const auto& n : names) std::ofstream(path_ + "/" + n).put('x');
    names_ = names;
  }
  ~DevDir() {
    for (const auto& n : names_) unlink((path_ + "/" + n).c_str());
    rmdir(path_.c_str());
  }
  const char* path() const { return path_.c_str(); }

 private:
  std::string path_;
  std::vector<std::string> names_;
};

TEST(GpuPresence, DeviceNodesAreNvidiaAndANumber) {
  EXPECT_FALSE(nvidia_device_node_exists(DevDir({}).path()));
  EXPECT_FALSE(nvidia_device_node_exists(
      DevDir({"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia", "nvidia0x"}).path()));
  EXPECT_TRUE(nvidia_device_node_exists(DevDir({"nvidiactl", "nvidia0"}).path()));
  EXPECT_TRUE(nvidia_device_node_exists(DevDir({"nvidia3"}).path()));  // only GPU 3 mapped
  EXPECT_FALSE(nvidia_device_node_exists("/nonexistent-slurmddp-dir"));
}

}  // namespace
}  // namespace slurmddp::support
