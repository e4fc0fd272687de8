// A rank touches only its own GPU: the NCCL communicator and GradSync make
// their CUDA objects on the communicator's device whatever the calling
// thread's current device is, and never create a context on another GPU
// (Note [Device guard without stray contexts] in
// runtime/common/cuda_device_guard.h). Needs two GPUs; with one, the tests
// skip and say so. Exits 77 (meson's skip) only when no CUDA device exists
// (device_presence.h).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_device_guard.h"
#include "gpu_test_main.h"
#include "slurmddp/grad_sync.h"
#include "slurmddp/nccl_communicator.h"
#include "subprocess.h"

namespace slurmddp::support {
namespace {

using support::spawn_self;
using support::wait_for;

int g_device_count = 0;
constexpr size_t kCount = 3000;  // two buckets of float32 with the options below

// The last GPU: not device 0, which a thread reports when it never chose one.
int other_gpu() {
  return g_device_count - 1;
}

#define SKIP_WITHOUT_TWO_GPUS()                                                        \
  do {                                                                                 \
    if (g_device_count < 2)                                                            \
      GTEST_SKIP() << "needs 2 GPUs to tell the communicator's device from device 0; " \
                   << g_device_count << " here";                                       \
  } while (0)

NcclOptions one_rank_on(int device) {
  NcclOptions o;
  o.rank = 0;
  o.size = 1;
  o.device = device;
  o.timeout = std::chrono::seconds(60);
  return o;
}

GradSyncOptions small_buckets(bool views, cudaStream_t stream) {
  GradSyncOptions o;
  o.first_bucket_bytes = 4096;
  o.bucket_cap_bytes = 8192;
  o.gradient_as_bucket_view = views;
  o.cuda_stream = stream;
  return o;
}

// ---------------------------------------------------------------- a fresh process

// Runs in a process of its own (nothing touched device 0 before): creates the
// communicator and a GradSync on the last GPU from a thread that never chose
// a device, runs a step, and checks that device 0 never got a context.
// Returns 0 on success; prints what went wrong otherwise.
int fresh_process_main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
    std::fprintf(stderr, "fresh process: needs 2 GPUs, sees %d\n", count);
    return 1;
  }
  const int target = count - 1;
  auto fail = [](const std::string& what) {
    std::fprintf(stderr, "fresh process: %s\n", what.c_str());
    return 1;
  };
  auto gpu0_clean = [&](const char* when) -> std::string {
    return cuda_util::primary_context_active(0)
               ? std::string("a CUDA context appeared on GPU 0 ") + when
               : std::string();
  };
  try {
    std::shared_ptr<Communicator> comm = make_nccl_communicator(one_rank_on(target));
    if (auto e = gpu0_clean("while the communicator was created"); !e.empty()) return fail(e);
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != target) {
      return fail("the thread's current device is " + std::to_string(current) +
                  " after creating the communicator on device " + std::to_string(target) +
                  " (it never used device 0, so it keeps the communicator's)");
    }
    std::vector<void*> owned(4, nullptr);
    for (void*& b : owned) {
      if (cudaMalloc(&b, kCount * 4) != cudaSuccess) {
        return fail("cudaMalloc on the communicator's device failed");
      }
    }
    std::vector<GradParameter> params(2);
    for (size_t i = 0; i < 2; ++i) {
      params[i].data = owned[2 * i];
      params[i].grad = owned[2 * i + 1];
      params[i].count = kCount;
      params[i].device = DeviceKind::kCuda;
    }
    {
      GradSync sync(comm, params, small_buckets(false, nullptr));
      sync.mark_ready(1);
      sync.mark_ready(0);
      sync.wait();
      if (cudaDeviceSynchronize() != cudaSuccess) return fail("cudaDeviceSynchronize failed");
      if (auto e = gpu0_clean("during a GradSync step"); !e.empty()) return fail(e);
    }
    comm->barrier()->wait(std::chrono::seconds(30));
    comm.reset();
    for (void* b : owned) cudaFree(b);
    if (auto e = gpu0_clean("when the communicator was destroyed"); !e.empty()) return fail(e);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}

TEST(OwnGpu, NoContextOnAnotherGpuInAFreshProcess) {
  SKIP_WITHOUT_TWO_GPUS();
  const pid_t pid = spawn_self({"--fresh-process"});
  ASSERT_GT(pid, 0);
  const auto code = wait_for(pid, std::chrono::steady_clock::now() + std::chrono::seconds(120));
  ASSERT_TRUE(code.has_value()) << "the fresh process did not finish within 120 s";
  EXPECT_EQ(*code, 0) << "the fresh process failed (its stderr is above)";
}

// ---------------------------------------------------------------- this process

void fill(cudaStream_t stream, void* dst, float value, size_t count) {
  std::vector<float> host(count, value);
  ASSERT_EQ(cudaMemcpyAsync(dst, host.data(), count * 4, cudaMemcpyHostToDevice, stream),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // the pageable source dies here
}

// The constructing and stepping thread sits on device 0 while the
// communicator lives on the last GPU: buckets, streams and events must be
// made on the communicator's GPU, and the thread keeps device 0.
class OwnGpuGradSync : public ::testing::TestWithParam<bool> {};

TEST_P(OwnGpuGradSync, BucketsLiveOnTheCommunicatorsGpu) {
  SKIP_WITHOUT_TWO_GPUS();
  const bool views = GetParam();
  const int target = other_gpu();
  ASSERT_EQ(cudaSetDevice(target), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<void*> owned;
  std::vector<GradParameter> params;
  for (int i = 0; i < 2; ++i) {
    GradParameter p;
    p.name = "p" + std::to_string(i);
    p.count = kCount;
    p.device = DeviceKind::kCuda;
    ASSERT_EQ(cudaMalloc(&p.data, kCount * 4), cudaSuccess);
    owned.push_back(p.data);
    if (!views) {
      ASSERT_EQ(cudaMalloc(&p.grad, kCount * 4), cudaSuccess);
      owned.push_back(p.grad);
    }
    params.push_back(p);
  }
  std::shared_ptr<Communicator> comm = make_nccl_communicator(one_rank_on(target));

  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // the caller's thread works elsewhere
  {
    GradSync sync(comm, params, small_buckets(views, stream));
    int current = -1;
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, 0) << "constructing the GradSync moved the thread off its device";
    ASSERT_GE(sync.buckets().size(), 2u);
    if (views) {
      cudaPointerAttributes a{};
      ASSERT_EQ(cudaPointerGetAttributes(&a, sync.gradient(0)), cudaSuccess);
      EXPECT_EQ(a.device, target) << "bucket memory is not on the communicator's GPU";
    }
    for (int step = 0; step < 2; ++step) {
      for (size_t i : {size_t{1}, size_t{0}}) {
        void* g = views ? sync.gradient(i) : params[i].grad;
        ASSERT_NO_FATAL_FAILURE(
            fill(stream, g, static_cast<float>(3 * step + static_cast<int>(i) + 1), kCount));
        sync.mark_ready(i);
      }
      sync.wait();
      for (size_t i = 0; i < 2; ++i) {
        std::vector<float> got(kCount, -1.0f);
        const void* g = views ? sync.gradient(i) : params[i].grad;
        ASSERT_EQ(cudaMemcpyAsync(got.data(), g, kCount * 4, cudaMemcpyDeviceToHost, stream),
                  cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        const float want = static_cast<float>(3 * step + static_cast<int>(i) + 1);
        size_t wrong = 0;
        for (float v : got) wrong += v != want;
        EXPECT_EQ(wrong, 0u) << "step " << step << " parameter " << i << " (one rank: the "
                             << "average is the gradient itself)";
      }
      ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
      EXPECT_EQ(current, 0) << "a step moved the thread off its device";
    }
  }
  comm.reset();
  ASSERT_EQ(cudaSetDevice(target), cudaSuccess);
  for (void* p : owned) cudaFree(p);
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Grads, OwnGpuGradSync, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "BucketViews" : "SeparateGrads";
                         });

}  // namespace
}  // namespace slurmddp::support

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--fresh-process") == 0) {
    return slurmddp::support::fresh_process_main();
  }
  return slurmddp::support::run_gpu_tests("gpu_own_gpu", argc, argv,
                                          &slurmddp::support::g_device_count);
}
