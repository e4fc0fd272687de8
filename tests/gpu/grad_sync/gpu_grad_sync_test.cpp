// grad_sync's CUDA path on a real device: the batched copy/convert kernel
// against the host casts, and the engine (copy-in/out kernels, compression,
// gradient views, stream ordering) with ranks as threads sharing the device
// through a CUDA-facing fake communicator. Exits 77 (meson's skip) only when
// no CUDA device exists (device_presence.h).
#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "device_buffer.h"
#include "fake_group.h"
#include "gpu_test_main.h"
#include "grad_sync/bucket_plan.h"
#include "grad_sync/cast.h"
#include "grad_sync/device.h"
#include "rank_threads.h"
#include "slurmddp/error.h"
#include "slurmddp/grad_sync.h"
#include "test_values.h"

namespace slurmddp::support {
namespace {

using namespace std::chrono_literals;
using grad_sync::Segment;
using grad_sync::Transfer;

#define CUDA_OK(call)                                                                \
  do {                                                                               \
    const cudaError_t status_ = (call);                                              \
    ASSERT_EQ(status_, cudaSuccess) << #call << ": " << cudaGetErrorString(status_); \
  } while (0)

void cuda_or_throw(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw CudaError(std::string("test: ") + what + ": " + cudaGetErrorString(status));
  }
}

// A Communicator on CUDA buffers over the host FakeGroup: device data is
// copied to host memory when the collective is issued (the engine guarantees
// it is ready then) and back when the Work is waited for, landed before wait()
// returns (Note [Uploads that have landed], device_buffer.h): the engine's
// copy-out kernel runs on its own non-blocking stream right after.
class CudaFacade final : public Communicator {
 public:
  explicit CudaFacade(std::shared_ptr<Communicator> host) : host_(std::move(host)) {}
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  Backend backend() const override { return Backend::kNccl; }  // a CUDA one
  DeviceKind device() const override { return DeviceKind::kCuda; }
  std::chrono::milliseconds timeout() const override { return host_->timeout(); }

  WorkHandle allreduce(void* data, size_t count, DataType type, ReduceOp op) override {
    auto staged = stage(data, count * bytes_of_type(type), count * bytes_of_type(type));
    auto inner = host_->allreduce(staged->host.data(), count, type, op);
    return std::make_shared<StagedWork>(inner, staged, data);
  }
  WorkHandle broadcast(void* data, size_t count, DataType type, int root) override {
    auto staged = stage(data, count * bytes_of_type(type), count * bytes_of_type(type));
    auto inner = host_->broadcast(staged->host.data(), count, type, root);
    return std::make_shared<StagedWork>(inner, staged, data);
  }
  WorkHandle allgather(const void* send, void* recv, size_t count, DataType type) override {
    const size_t bytes = count * bytes_of_type(type);
    auto staged = stage(send, bytes, bytes);
    auto out = std::make_shared<Staged>();
    out->host.resize(bytes * static_cast<size_t>(size()));
    auto inner = host_->allgather(staged->host.data(), out->host.data(), count, type);
    out->keep = staged;
    return std::make_shared<StagedWork>(inner, out, recv);
  }
  WorkHandle reduce_scatter(const void*, void*, size_t, DataType, ReduceOp) override {
    throw Error("fake-cuda: reduce_scatter is not implemented");
  }
  WorkHandle barrier() override { return host_->barrier(); }

 private:
  struct Staged {
    std::vector<uint8_t> host;
    std::shared_ptr<Staged> keep;
  };
  class StagedWork final : public Work {
   public:
    StagedWork(WorkHandle inner, std::shared_ptr<Staged> staged, void* device)
        : inner_(std::move(inner)), staged_(std::move(staged)), device_(device) {}
    void wait(std::chrono::milliseconds timeout) override {
      inner_->wait(timeout);
      if (!copied_ && !staged_->host.empty()) {
        upload_landed(device_, staged_->host.data(), staged_->host.size());
      }
      copied_ = true;
    }
    bool is_completed() override { return inner_->is_completed(); }

   private:
    WorkHandle inner_;
    std::shared_ptr<Staged> staged_;
    void* device_;
    bool copied_ = false;
  };

  static size_t bytes_of_type(DataType t) { return grad_sync::dtype_bytes(t); }

  std::shared_ptr<Staged> stage(const void* device, size_t bytes, size_t host_bytes) {
    auto s = std::make_shared<Staged>();
    s->host.resize(host_bytes);
    if (bytes > 0) {
      cuda_or_throw(cudaMemcpy(s->host.data(), device, bytes, cudaMemcpyDeviceToHost),
                    "copy an input to the host");
    }
    return s;
  }

  std::shared_ptr<Communicator> host_;
};

// The ranks as threads, all on device 0 (the current device is per thread).
std::vector<std::string> run_ranks(int size, const std::function<void(int)>& body) {
  return on_rank_threads(size, [&](int r) {
    cuda_or_throw(cudaSetDevice(0), "cudaSetDevice");
    body(r);
  });
}

std::vector<size_t> shuffled(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// ---- the kernel -----------------------------------------------------------------

TEST(TransferKernel, MatchesTheHostCastsForEveryPairAndSegmentShape) {
  auto device = grad_sync::make_cuda_device(0, 1, nullptr);
  const DataType types[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                            DataType::kBFloat16};
  const std::vector<size_t> counts = {0, 1, 7, 4095, 4096, 4097, 100003};
  std::mt19937_64 rng(11);
  for (DataType src : types) {
    for (DataType dst : types) {
      if (!grad_sync::convertible(src, dst)) continue;
      // One source buffer, segments at odd element offsets (unaligned).
      size_t total = 0;
      for (size_t c : counts) total += c + 3;
      std::vector<uint8_t> host_src(total * element_size(src));
      for (size_t i = 0; i < total; ++i) {
        const double v = std::ldexp(static_cast<double>(rng() % 2000001) - 1000000.0,
                                    static_cast<int>(rng() % 30) - 20);
        set_value(src, host_src.data(), i, v);
      }
      DeviceBuffer d_src(host_src.size());
      DeviceBuffer d_dst(total * element_size(dst));
      d_src.upload(host_src.data());
      std::vector<uint8_t> sentinel(total * element_size(dst), 0x5a);
      d_dst.upload(sentinel.data());
      Transfer t{src, dst, {}};
      size_t at = 0;
      for (size_t c : counts) {
        at += 3;
        t.segments.push_back(Segment{static_cast<uint8_t*>(d_src.get()) + at * element_size(src),
                                     static_cast<uint8_t*>(d_dst.get()) + at * element_size(dst),
                                     c});
        at += c;
      }
      device->run_blocking(device->add_transfer(t));
      std::vector<uint8_t> got(total * element_size(dst));
      d_dst.download(got.data());
      std::vector<uint8_t> want = sentinel;
      at = 0;
      for (size_t c : counts) {
        at += 3;
        grad_sync::convert(host_src.data() + at * element_size(src), src,
                           want.data() + at * element_size(dst), dst, c);
        at += c;
      }
      ASSERT_EQ(got, want) << "src " << static_cast<int>(src) << " dst " << static_cast<int>(dst);
    }
  }
}

// A launch reports only its own error: one the thread had pending before
// (the user's) is neither reported nor cleared (Note [Launch errors and
// pending errors] in common/cuda_launch.h).
TEST(TransferKernel, LeavesAnUnrelatedPendingErrorAlone) {
  CUDA_OK(cudaSetDevice(0));
  auto device = grad_sync::make_cuda_device(0, 1, nullptr);
  const size_t n = 10000;
  std::vector<float> src(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 13);
  DeviceBuffer d_src(n * 4);
  DeviceBuffer d_dst(n * 4);
  d_src.upload(src.data());
  const size_t id = device->add_transfer(
      Transfer{DataType::kFloat32, DataType::kFloat32, {{d_src.get(), d_dst.get(), n}}});
  int bogus = -1;
  ASSERT_NE(cudaDeviceGetAttribute(&bogus, cudaDevAttrMaxThreadsPerBlock, 1 << 20),
            cudaSuccess);  // the user's mistake, pending now
  ASSERT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_NO_THROW(device->run_blocking(id));
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice) << "the pending error was cleared";
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);  // its owner collects it
  std::vector<float> got(n, -1.0f);
  d_dst.download(got.data());
  EXPECT_EQ(got, src);
}

// ---- the engine -----------------------------------------------------------------

struct GpuModel {
  std::vector<Shape> shapes;
  std::vector<std::unique_ptr<DeviceBuffer>> data;
  std::vector<std::unique_ptr<DeviceBuffer>> grads;
  explicit GpuModel(std::vector<Shape> s, bool with_grads) : shapes(std::move(s)) {
    for (const auto& sh : shapes) {
      data.push_back(std::make_unique<DeviceBuffer>(sh.count * element_size(sh.dtype)));
      grads.push_back(
          std::make_unique<DeviceBuffer>(with_grads ? sh.count * element_size(sh.dtype) : 0));
    }
  }
  std::vector<GradParameter> parameters(bool with_grads) {
    std::vector<GradParameter> out;
    for (size_t i = 0; i < shapes.size(); ++i) {
      GradParameter p;
      p.name = "p" + std::to_string(i);
      p.data = data[i]->get();
      p.grad = with_grads ? grads[i]->get() : nullptr;
      p.count = shapes[i].count;
      p.dtype = shapes[i].dtype;
      p.device = DeviceKind::kCuda;
      out.push_back(p);
    }
    return out;
  }
};

struct EngineCase {
  int ranks;
  bool views;
  Compression compression;
  bool own_stream;
};

class GpuEngine : public ::testing::TestWithParam<EngineCase> {};

// Gradients are written with cudaMemcpyAsync on the compute stream right
// before mark_ready, and read back on it right after wait(): wrong event
// ordering would read stale data.
TEST_P(GpuEngine, EveryRankEndsWithTheAverageOnTheDevice) {
  const auto c = GetParam();
  auto group = std::make_shared<FakeGroup>(c.ranks);
  const auto shapes = random_layout(900 + static_cast<uint64_t>(c.ranks), 40, 65536, true);
  const auto errors = run_ranks(c.ranks, [&](int rank) {
    cudaStream_t stream = nullptr;
    if (c.own_stream)
      cuda_or_throw(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    GpuModel m(shapes, !c.views);
    // Parameters: rank-specific values, rank 0's must arrive everywhere.
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::vector<uint8_t> h(shapes[i].count * element_size(shapes[i].dtype));
      for (size_t k = 0; k < shapes[i].count; ++k)
        set_value(shapes[i].dtype, h.data(), k, param_value(rank, i, k));
      m.data[i]->upload(h.data());
    }
    GradSyncOptions o;
    o.first_bucket_bytes = 4096;
    o.bucket_cap_bytes = 65536;
    o.gradient_as_bucket_view = c.views;
    o.compression = c.compression;
    o.cuda_stream = stream;
    GradSync sync(std::make_shared<CudaFacade>(group->communicator(rank)), m.parameters(!c.views),
                  o);
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::vector<uint8_t> h(shapes[i].count * element_size(shapes[i].dtype));
      m.data[i]->download(h.data());
      for (size_t k = 0; k < shapes[i].count; ++k) {
        std::vector<uint8_t> one(8);
        set_value(shapes[i].dtype, one.data(), 0, param_value(0, i, k));
        if (get_value(shapes[i].dtype, h.data(), k) != get_value(shapes[i].dtype, one.data(), 0)) {
          throw Error("parameter " + std::to_string(i) + " not broadcast");
        }
      }
    }
    const bool compressing = c.compression != Compression::kNone;
    std::vector<std::vector<uint8_t>> pinned(shapes.size());
    for (int step = 0; step < 3; ++step) {
      // Pinned host sources so that the copies really are asynchronous.
      std::vector<void*> hosts(shapes.size(), nullptr);
      for (size_t i : shuffled(shapes.size(), 77 * rank + step)) {
        const size_t bytes = shapes[i].count * element_size(shapes[i].dtype);
        if (bytes == 0) {
          sync.mark_ready(i);
          continue;
        }
        cuda_or_throw(cudaMallocHost(&hosts[i], bytes), "cudaMallocHost");
        for (size_t k = 0; k < shapes[i].count; ++k) {
          const double v = compressing ? real_value(rank, i, k + static_cast<size_t>(step))
                                       : grad_value(rank, i, k, step);
          set_value(shapes[i].dtype, hosts[i], k, v);
        }
        void* g = c.views ? sync.gradient(i) : m.grads[i]->get();
        cuda_or_throw(cudaMemcpyAsync(g, hosts[i], bytes, cudaMemcpyHostToDevice, stream), "write");
        sync.mark_ready(i);
      }
      sync.wait();
      for (size_t i = 0; i < shapes.size(); ++i) {
        const DataType t = shapes[i].dtype;
        const size_t bytes = shapes[i].count * element_size(t);
        if (bytes == 0) continue;
        std::vector<uint8_t> got(bytes);
        const void* g = c.views ? sync.gradient(i) : m.grads[i]->get();
        cuda_or_throw(cudaMemcpyAsync(got.data(), g, bytes, cudaMemcpyDeviceToHost, stream),
                      "read");
        cuda_or_throw(cudaStreamSynchronize(stream), "sync");
        for (size_t k = 0; k < shapes[i].count; ++k) {
          double want;
          const bool wide = t == DataType::kFloat32 || t == DataType::kFloat64;
          if (compressing && wide) {
            // What the host casts and the fake's reduction give for this element.
            const DataType wire =
                c.compression == Compression::kFloat16 ? DataType::kFloat16 : DataType::kBFloat16;
            double sum = 0;
            for (int r = 0; r < c.ranks; ++r) {
              std::vector<uint8_t> a(8);
              std::vector<uint8_t> w(8);
              set_value(t, a.data(), 0, real_value(r, i, k + static_cast<size_t>(step)));
              grad_sync::convert(a.data(), t, w.data(), wire, 1);
              sum += get_value(wire, w.data(), 0);
            }
            const double avg = expected_average(wire, sum, c.ranks);
            std::vector<uint8_t> w(8);
            std::vector<uint8_t> back(8);
            set_value(wire, w.data(), 0, avg);
            grad_sync::convert(w.data(), wire, back.data(), t, 1);
            want = get_value(t, back.data(), 0);
          } else if (compressing) {
            double sum = 0;
            for (int r = 0; r < c.ranks; ++r) {
              std::vector<uint8_t> a(8);
              set_value(t, a.data(), 0, real_value(r, i, k + static_cast<size_t>(step)));
              sum += get_value(t, a.data(), 0);
            }
            want = expected_average(t, sum, c.ranks);
          } else {
            double sum = 0;
            for (int r = 0; r < c.ranks; ++r) sum += grad_value(r, i, k, step);
            want = expected_average(t, sum, c.ranks);
          }
          const double v = get_value(t, got.data(), k);
          if (v != want) {
            throw Error("rank " + std::to_string(rank) + " step " + std::to_string(step) +
                        " parameter " + std::to_string(i) + " element " + std::to_string(k) +
                        ": got " + std::to_string(v) + ", want " + std::to_string(want));
          }
        }
      }
      for (void* h : hosts) {
        if (h != nullptr) cudaFreeHost(h);
      }
    }
    if (stream != nullptr) cudaStreamDestroy(stream);
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuEngine,
                         ::testing::Values(EngineCase{1, false, Compression::kNone, false},
                                           EngineCase{2, false, Compression::kNone, true},
                                           EngineCase{3, true, Compression::kNone, true},
                                           EngineCase{2, false, Compression::kFloat16, true},
                                           EngineCase{3, true, Compression::kBFloat16, false},
                                           EngineCase{4, true, Compression::kFloat16, true}));

TEST(GpuEngineChecks, HostPointersAreRefusedOnEveryRank) {
  auto group = std::make_shared<FakeGroup>(2);
  const auto errors = run_ranks(2, [&](int rank) {
    GpuModel m({{16, DataType::kFloat32}, {8, DataType::kFloat32}}, true);
    auto params = m.parameters(true);
    std::vector<float> host(8);
    if (rank == 1) params[1].grad = host.data();
    GradSync sync(std::make_shared<CudaFacade>(group->communicator(rank)), params);
  });
  EXPECT_THAT(errors[1], ::testing::HasSubstr("parameter 1 ('p1') grad is not"));
  EXPECT_THAT(errors[0], ::testing::HasSubstr("rank 1 refused its own parameters"));
}

}  // namespace
}  // namespace slurmddp::support

int main(int argc, char** argv) {
  int devices = 0;
  return slurmddp::support::run_gpu_tests("gpu_grad_sync", argc, argv, &devices);
}
