// GradSync on the real NCCL communicator: two ranks as processes where two
// GPUs exist (one each), else one rank. Every rank checks every gradient
// element against a closed form, exactly: values are small integers, so the
// averages (halves with two ranks) are exact in float32, float64, float16 and
// bfloat16, and ncclAvg (which scales by 1/n, exact for n <= 2, before
// summing) must reproduce them bit for bit. Exits 77 (meson's skip) only when
// no CUDA device exists (device_presence.h).
//
//   parameter value of rank r:  p(r, i, k) = 8 (r + 1) + (i + k) % 8
//   gradient of rank r:         g(r, i, k, s) = (r + 1) m,  m = (i + k + s) % 7 + 1
//   average over n ranks:       (n + 1) / 2 * m
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test_main.h"
#include "gpu_values.h"
#include "rank_launcher.h"
#include "slurmddp/error.h"
#include "slurmddp/grad_sync.h"
#include "slurmddp/nccl_communicator.h"
#include "slurmddp/tcp_store.h"
#include "subprocess.h"

namespace slurmddp::support {
namespace {

int g_device_count = 0;

double param_value(int rank, size_t i, size_t k) {
  return 8.0 * (rank + 1) + static_cast<double>((i + k) % 8);
}
double grad_multiple(size_t i, size_t k, int step) {
  return static_cast<double>((i + k + static_cast<size_t>(step)) % 7 + 1);
}

struct Case {
  const char* name;
  std::vector<DataType> dtypes;  // one parameter per entry, counts from kCounts
  bool views;
  Compression compression;
};

// Counts include 0, 1, odd, and sizes that fill several buckets.
const std::vector<size_t> kCounts = {1, 0, 7, 1001, 4099, 70001};

std::vector<Case> cases() {
  const DataType f32 = DataType::kFloat32;
  const DataType f64 = DataType::kFloat64;
  const DataType f16 = DataType::kFloat16;
  const DataType b16 = DataType::kBFloat16;
  return {
      {"float32", {f32, f32, f32, f32, f32, f32}, false, Compression::kNone},
      {"float32 views", {f32, f32, f32, f32, f32, f32}, true, Compression::kNone},
      {"float32 as float16", {f32, f32, f32, f32, f32, f32}, false, Compression::kFloat16},
      {"float32 views as bfloat16", {f32, f32, f32, f32, f32, f32}, true, Compression::kBFloat16},
      {"mixed dtypes", {f32, f16, b16, f64, f16, f32}, false, Compression::kNone},
      {"mixed dtypes views as float16",
       {f64, b16, f32, f16, f64, b16},
       true,
       Compression::kFloat16},
  };
}

// ---------------------------------------------------------------- one rank's work

struct Rank {
  int rank = 0;
  int size = 1;
  int device = 0;
  std::vector<std::string> failures;

  void fail(const std::string& what) {
    if (failures.size() < 20) failures.push_back("rank " + std::to_string(rank) + ": " + what);
  }
};

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorName(e));
}

// Host bytes -> device memory on `stream`, landed when this returns.
void upload(cudaStream_t stream, void* dst, const std::vector<uint8_t>& host) {
  if (host.empty()) return;
  cuda(cudaMemcpyAsync(dst, host.data(), host.size(), cudaMemcpyHostToDevice, stream), "upload");
  cuda(cudaStreamSynchronize(stream), "upload sync");
}

std::vector<uint8_t> download(cudaStream_t stream, const void* src, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  if (bytes == 0) return host;
  cuda(cudaMemcpyAsync(host.data(), src, bytes, cudaMemcpyDeviceToHost, stream), "download");
  cuda(cudaStreamSynchronize(stream), "download sync");
  return host;
}

void run_case(Rank& me, const std::shared_ptr<Communicator>& comm, const Case& c,
              cudaStream_t stream) {
  NcclCommunicator* nccl = as_nccl_communicator(comm.get());
  const CudaStream comm_compute = nccl->compute_stream();
  const size_t np = c.dtypes.size();
  std::vector<std::unique_ptr<DeviceBuffer>> data;
  std::vector<std::unique_ptr<DeviceBuffer>> grads;
  std::vector<GradParameter> params;
  for (size_t i = 0; i < np; ++i) {
    const DataType t = c.dtypes[i];
    const size_t count = kCounts[i % kCounts.size()];
    data.push_back(std::make_unique<DeviceBuffer>(count * element_size(t)));
    grads.push_back(std::make_unique<DeviceBuffer>(c.views ? 0 : count * element_size(t)));
    upload(stream, data.back()->get(),
           encode(t, count, [&](size_t k) { return param_value(me.rank, i, k); }));
    GradParameter p;
    p.name = std::string(c.name) + "/p" + std::to_string(i);
    p.data = data.back()->get();
    p.grad = c.views ? nullptr : grads.back()->get();
    p.count = count;
    p.dtype = t;
    p.device = DeviceKind::kCuda;
    params.push_back(p);
  }
  GradSyncOptions o;
  o.first_bucket_bytes = 4096;
  o.bucket_cap_bytes = 65536;
  o.gradient_as_bucket_view = c.views;
  o.compression = c.compression;
  o.cuda_stream = stream;
  GradSync sync(comm, params, o);

  const std::string label = std::string(c.name) + ": ";
  for (size_t i = 0; i < np; ++i) {  // rank 0's parameters everywhere
    const DataType t = params[i].dtype;
    const auto got = download(stream, params[i].data, params[i].count * element_size(t));
    size_t wrong = 0;
    for (size_t k = 0; k < params[i].count; ++k) {
      wrong += decode(t, got.data() + k * element_size(t)) != param_value(0, i, k);
    }
    if (wrong > 0)
      me.fail(label + params[i].name + ": " + std::to_string(wrong) +
              " values differ from rank 0's after the broadcast");
  }

  for (int step = 0; step < 3; ++step) {
    // Backward order differs per rank and step; GradSync must still agree.
    std::vector<size_t> order(np);
    for (size_t i = 0; i < np; ++i) order[i] = i;
    std::rotate(order.begin(), order.begin() + static_cast<long>((me.rank + step) % np),
                order.end());
    if ((me.rank + step) % 2 == 1) std::reverse(order.begin(), order.end());
    for (size_t i : order) {
      const DataType t = params[i].dtype;
      void* g = c.views ? sync.gradient(i) : params[i].grad;
      upload(stream, g, encode(t, params[i].count, [&](size_t k) {
               return (me.rank + 1) * grad_multiple(i, k, step);
             }));
      sync.mark_ready(i);
      if (nccl->compute_stream() != comm_compute) {
        me.fail(label + "the step changed the communicator's compute stream");
      }
    }
    sync.wait();
    for (size_t i = 0; i < np; ++i) {
      const DataType t = params[i].dtype;
      const void* g = c.views ? sync.gradient(i) : params[i].grad;
      const auto got = download(stream, g, params[i].count * element_size(t));
      size_t wrong = 0;
      std::string first;
      for (size_t k = 0; k < params[i].count; ++k) {
        const double want = (me.size + 1) / 2.0 * grad_multiple(i, k, step);
        const double have = decode(t, got.data() + k * element_size(t));
        if (have != want) {
          if (wrong == 0) {
            first = " (element " + std::to_string(k) + ": got " + std::to_string(have) + ", want " +
                    std::to_string(want) + ")";
          }
          ++wrong;
        }
      }
      if (wrong > 0) {
        me.fail(label + "step " + std::to_string(step) + " " + params[i].name + ": " +
                std::to_string(wrong) + " of " + std::to_string(params[i].count) +
                " averages wrong" + first);
      }
    }
  }
}

int rank_main(const support::RankArgs& self) {
  Rank me;
  me.rank = self.rank;
  me.size = self.world;
  const char* dev = std::getenv("SLURMDDP_TEST_DEVICE");
  me.device = dev != nullptr ? std::atoi(dev) : 0;
  try {
    cuda(cudaSetDevice(me.device), "cudaSetDevice");  // first: no context elsewhere
    NcclOptions o;
    o.rank = me.rank;
    o.size = me.size;
    o.device = me.device;
    o.store = support::connect_store(self, std::chrono::seconds(60));
    o.prefix = "grad_sync/nccl";
    o.timeout = std::chrono::seconds(60);
    std::shared_ptr<Communicator> comm = make_nccl_communicator(o);
    cudaStream_t stream = nullptr;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (const Case& c : cases()) run_case(me, comm, c, stream);
    comm->barrier()->wait(std::chrono::seconds(60));
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    me.fail(std::string("stopped: ") + e.what());
  }
  for (const auto& f : me.failures) std::fprintf(stderr, "%s\n", f.c_str());
  std::fflush(stderr);
  return me.failures.empty() ? 0 : 1;
}

// ---------------------------------------------------------------- the test

TEST(NcclGradSync, EveryRankEndsWithTheExactAverage) {
  const int size = g_device_count >= 2 ? 2 : 1;
  auto store = support::host_store(std::chrono::seconds(60));
  RankGroup ranks(size,
                  self_with_rank({"--worker"}, store->port(),
                                 [](int r) {
                                   return Env{{"SLURMDDP_TEST_DEVICE", std::to_string(r)}};
                                 }),
                  Output::kInherited);
  const auto codes = ranks.wait_all(std::chrono::seconds(240));
  for (int r = 0; r < size; ++r) {
    const auto& code = codes[static_cast<size_t>(r)];
    EXPECT_TRUE(code && *code == 0)
        << "rank " << r << " of " << size << ": "
        << (code ? "exit " + std::to_string(*code) : std::string("killed after 240 s"))
        << " (its messages are above)";
  }
  if (size == 1) {
    std::printf(
        "note: one GPU here: one rank (the average is the gradient itself); two GPUs "
        "run two ranks\n");
  }
}

}  // namespace
}  // namespace slurmddp::support

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--worker") == 0) {
    try {
      const auto self = slurmddp::support::RankArgs::take_from(argc, argv);
      if (argc == 2 && self.started_as_rank()) return slurmddp::support::rank_main(self);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "gpu_nccl_grad_sync --worker: %s\n", e.what());
      return 2;
    }
    std::fprintf(stderr, "usage: gpu_nccl_grad_sync --worker --rank R --world N --store-port P\n");
    return 2;
  }
  return slurmddp::support::run_gpu_tests("gpu_nccl_grad_sync", argc, argv,
                                          &slurmddp::support::g_device_count);
}
