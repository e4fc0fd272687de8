// slurmddp::init() choosing NCCL (SLURMDDP_BACKEND=nccl) for one rank, with
// the torchrun variables: the communicator must be NCCL's, on the GPU that
// SLURMDDP_LOCAL_DEVICE names (the last one here, so that with several GPUs it
// is not the default device 0), and work. Exits 77 (meson's skip) only when no
// CUDA device exists (device_presence.h).
#include <arpa/inet.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda_device_guard.h"
#include "gpu_test_main.h"
#include "loopback_port.h"
#include "slurmddp/nccl_communicator.h"
#include "slurmddp/process_group.h"

namespace slurmddp::support {
namespace {

int g_device_count = 0;

TEST(InitNccl, OneRankGetsTheNcclCommunicatorOnItsLocalDevice) {
  const int device = g_device_count - 1;
  const uint16_t port = slurmddp::support::free_loopback_port();
  ASSERT_NE(port, 0);
  // Only the torchrun variables: no plugin step, no PMIx, no Slurm identity.
  for (const char* name : {"SLURMDDP_STEP", "PMIX_RANK", "SLURM_PROCID", "SLURM_JOB_ID",
                           "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURMDDP_TOKEN", "SLURMDDP_IFNAME"}) {
    unsetenv(name);
  }
  setenv("SLURMDDP_BACKEND", "nccl", 1);
  setenv("SLURMDDP_BOOTSTRAP", "tcp", 1);
  setenv("SLURMDDP_TIMEOUT", "60s", 1);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("SLURMDDP_LOCAL_DEVICE", std::to_string(device).c_str(), 1);

  std::unique_ptr<ProcessGroup> pg = init();
  ASSERT_NE(pg, nullptr);
  EXPECT_EQ(pg->comm()->backend(), Backend::kNccl);
  EXPECT_EQ(pg->comm()->device(), DeviceKind::kCuda);
  ASSERT_TRUE(pg->identity().local_device.has_value());
  EXPECT_EQ(*pg->identity().local_device, device);
  NcclCommunicator* nccl = as_nccl_communicator(pg->comm().get());
  ASSERT_NE(nccl, nullptr) << "init() did not build the NCCL communicator";
  EXPECT_EQ(nccl->cuda_device(), device) << "not the device SLURMDDP_LOCAL_DEVICE names";

  // It works: a float allreduce on that device (one rank: the sum is the data).
  ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 7 + 1);
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, host.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(buf, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  pg->comm()->allreduce(buf, host.size(), DataType::kFloat32, ReduceOp::kSum)->wait(pg->timeout());
  std::vector<float> got(host.size(), -1.0f);
  ASSERT_EQ(cudaMemcpy(got.data(), buf, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, host);
  cudaFree(buf);
  pg->shutdown();
  pg.reset();
  if (device != 0) {
    // Nothing in this process used GPU 0 (Note [Device guard without stray
    // contexts]).
    EXPECT_FALSE(cuda_util::primary_context_active(0)) << "init() made a context on GPU 0";
  }
}

}  // namespace
}  // namespace slurmddp::support

int main(int argc, char** argv) {
  return slurmddp::support::run_gpu_tests("gpu_init_nccl", argc, argv,
                                          &slurmddp::support::g_device_count);
}
