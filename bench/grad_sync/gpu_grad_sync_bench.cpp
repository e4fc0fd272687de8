// Gradient synchronization on the GPU: GradSync over the NCCL communicator
// against one flat NCCL allreduce of the same bytes, and overlapped with a
// simulated backward, on ResNet-50's parameter layout (161 tensors, 25.6 M
// float32 parameters, 102 MB of gradients), in one run.
//
//   gpu_grad_sync_bench [--ranks N] [--model resnet50|bert] [-r REPS] [-w WARMUP]
//                       [--backward-ms MS] [--timeout-ms MS] [--dry-run]
//
// One process per rank (--ranks N starts them; rank r uses device r modulo the
// visible devices). Experiments, alternated within every repetition so that
// they see the same conditions, each after a barrier; rank 0's wall times,
// medians with [min-max]:
//   flat allreduce     one allreduce (avg) of a buffer as large as all gradients
//   sync (views)       gradients in bucket memory, all ready: mark_ready in
//                      reverse order, wait(), compute stream synchronized
//   sync (copies)      the same with the gradients in their own buffers
//   backward alone     per parameter, last to first: a kernel that keeps the GPU
//                      busy for its share of --backward-ms, then writes the
//                      gradient (Note [Simulated backward] in grad_sync_bench.cpp)
//   backward+sync      the same with mark_ready after each gradient's kernels,
//                      then wait(): communication overlapped with backward
// Derived: sync (views) / flat (target <= 1.10), overhead = backward+sync -
// backward alone, hidden = 1 - overhead / sync (views) (target >= 90 %).
// Correctness: after the last repetition every gradient of both GradSync
// variants is compared with its closed-form average; any difference makes the
// exit status 1. Exit 77 without a CUDA device (and only then).
// --dry-run: what a rank does before its first CUDA call, on any machine: the
// options, the model's parameter list as both variants register it and
// GradSync's checks of them (Note [Checks before the device] in
// runtime/grad_sync/arguments.h); exit 0, or 1 saying what failed.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpu_bench_main.h"
#include "gpu_kernels.h"
#include "models.h"
#include "slurmddp/error.h"
#include "slurmddp/grad_sync.h"
#include "slurmddp/nccl_communicator.h"
#include "slurmddp/tcp_store.h"
#include "stats.h"

namespace {

using Clock = std::chrono::steady_clock;
using slurmddp::Backend;
using slurmddp::DataType;
using slurmddp::DeviceKind;
using slurmddp::ReduceOp;
using slurmddp::bench::spread_of;
using Stat = slurmddp::bench::Spread;

struct Args : slurmddp::support::RankOptions {
  std::string model = "resnet50";
  int reps = 10;
  int warmup = 2;
  double backward_ms = 0;  // 0: the flat allreduce's median (communication fully hideable)
  long timeout_ms = 120000;
  bool dry_run = false;
};

// The communicator's kind (make_nccl_communicator's): where GradSync wants
// the parameters. Rank checks it against the communicator it built.
constexpr Backend kBackend = Backend::kNccl;
constexpr DeviceKind kDevice = DeviceKind::kCuda;

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "gpu_grad_sync_bench: %s\nusage: gpu_grad_sync_bench [--ranks N] "
               "[--model resnet50|bert] [-r REPS] [-w WARMUP] [--backward-ms MS] "
               "[--timeout-ms MS] [--dry-run]\n",
               why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--dry-run") {
      a.dry_run = true;
      continue;
    }
    if (i + 1 >= argc) usage("missing value after " + k);
    const std::string v = argv[++i];
    if (a.take(k, v)) continue;  // the launcher's, not forwarded
    if (k == "--model") {
      a.model = v;
    } else if (k == "-r") {
      a.reps = std::atoi(v.c_str());
    } else if (k == "-w") {
      a.warmup = std::atoi(v.c_str());
    } else if (k == "--backward-ms") {
      a.backward_ms = std::atof(v.c_str());
    } else if (k == "--timeout-ms") {
      a.timeout_ms = std::atol(v.c_str());
    } else {
      usage("unknown option " + k);
    }
    a.forwarded.push_back(k);
    a.forwarded.push_back(v);
  }
  if (a.ranks < 1 || a.reps < 1 || a.warmup < 0 || a.backward_ms < 0 || a.timeout_ms <= 0 ||
      (a.model != "resnet50" && a.model != "bert")) {
    usage("invalid option values");
  }
  return a;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw slurmddp::CudaError(std::string("gpu_grad_sync_bench: failed to ") + what + ": " +
                              cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
  }
}

// The parameters a GradSync registers, one per spec, on the GPU: the spec's
// slice of the parameter memory (data(offset)) and, for the copies variant,
// of the gradient memory (grad(offset)); the views variant keeps gradients in
// bucket memory (grad null).
std::vector<slurmddp::GradParameter> parameters(
    const std::vector<slurmddp::bench::ParamSpec>& specs, const std::function<void*(size_t)>& data,
    const std::function<void*(size_t)>& grad) {
  std::vector<slurmddp::GradParameter> out;
  size_t off = 0;
  for (const auto& s : specs) {
    slurmddp::GradParameter p;
    p.name = s.name;
    p.data = data(off);
    p.grad = grad ? grad(off) : nullptr;
    p.count = s.count;
    p.device = kDevice;
    out.push_back(p);
    off += s.count;
  }
  return out;
}

slurmddp::GradSyncOptions sync_options(bool views, cudaStream_t compute) {
  slurmddp::GradSyncOptions o;
  o.gradient_as_bucket_view = views;
  o.cuda_stream = compute;
  o.broadcast_parameters = false;
  return o;
}

std::vector<slurmddp::bench::ParamSpec> model_specs(const Args& a) {
  return a.model == "bert" ? slurmddp::bench::bert_base() : slurmddp::bench::resnet50();
}

// --dry-run: a rank's work up to its first CUDA call, with placeholders for
// the device memory (GradSync's checks read none of it).
int dry_run(const Args& a) {
  static float placeholder = 0;
  const std::function<void*(size_t)> at = [](size_t) -> void* { return &placeholder; };
  const std::function<void*(size_t)> none;  // views: gradients in bucket memory
  const auto specs = model_specs(a);
  size_t total = 0;
  for (const auto& s : specs) total += s.count;
  for (const bool views : {true, false}) {
    slurmddp::GradSync::check_arguments(parameters(specs, at, views ? none : at),
                                        sync_options(views, nullptr), kBackend, kDevice);
  }
  std::printf(
      "# dry run: --ranks %d, model %s: %zu tensors, %zu parameters; GradSync's checks passed "
      "for both variants (views, copies) on %s (%s); stopping before the first CUDA call\n",
      a.ranks, a.model.c_str(), specs.size(), total, slurmddp::to_string(kBackend),
      slurmddp::to_string(kDevice));
  return 0;
}

class Rank {
 public:
  Rank(const Args& a, int devices) : a_(a), rank_(a.my_rank()) {
    const std::shared_ptr<slurmddp::Store> store =
        a.connect(std::chrono::milliseconds(a.timeout_ms));
    device_ = rank_ % devices;
    check(cudaSetDevice(device_), "select the device");
    slurmddp::NcclOptions o;
    o.rank = rank_;
    o.size = a.ranks;
    o.device = device_;
    o.store = store;
    o.prefix = "bench/gpu_grad_sync";
    o.timeout = std::chrono::milliseconds(a.timeout_ms);
    comm_ = std::shared_ptr<slurmddp::Communicator>(slurmddp::make_nccl_communicator(o));
    if (comm_->backend() != kBackend || comm_->device() != kDevice) {
      throw slurmddp::InvalidArgument(
          std::string("gpu_grad_sync_bench: the communicator is ") +
          slurmddp::to_string(comm_->backend()) + " (" + slurmddp::to_string(comm_->device()) +
          "); the dry run checks the parameters for " + slurmddp::to_string(kBackend) + " (" +
          slurmddp::to_string(kDevice) + ")");
    }
    check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "create the compute stream");
    specs_ = model_specs(a);
    for (const auto& s : specs_) total_ += s.count;
    check(cudaMalloc(reinterpret_cast<void**>(&flat_), total_ * sizeof(float)), "allocate");
    check(cudaMalloc(reinterpret_cast<void**>(&params_), total_ * sizeof(float)), "allocate");
    check(cudaMalloc(reinterpret_cast<void**>(&grads_), total_ * sizeof(float)), "allocate");
    check(cudaMemset(params_, 0, total_ * sizeof(float)), "clear the parameters");
    check(cudaDeviceSynchronize(), "synchronize");
    const auto params_at = [this](size_t off) -> void* { return params_ + off; };
    const auto grads_at = [this](size_t off) -> void* { return grads_ + off; };
    views_ = std::make_unique<slurmddp::GradSync>(comm_, parameters(specs_, params_at, nullptr),
                                                  sync_options(true, compute_));
    copies_ = std::make_unique<slurmddp::GradSync>(comm_, parameters(specs_, params_at, grads_at),
                                                   sync_options(false, compute_));
    int khz = 0;
    check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device_), "read the clock rate");
    cycles_per_ms_ = static_cast<double>(khz);
  }

  ~Rank() {
    views_.reset();
    copies_.reset();
    cudaFree(flat_);
    cudaFree(params_);
    cudaFree(grads_);
    cudaStreamDestroy(compute_);
  }

  float scale() const { return static_cast<float>(rank_ + 1); }

  void barrier() { comm_->barrier()->wait(limit()); }
  std::chrono::milliseconds limit() const { return std::chrono::milliseconds(a_.timeout_ms); }

  double flat() {
    slurmddp::bench::fill_pattern(flat_, total_, scale(), compute_);
    check(cudaStreamSynchronize(compute_), "synchronize");
    barrier();
    const auto t0 = Clock::now();
    comm_->allreduce(flat_, total_, DataType::kFloat32, ReduceOp::kAvg)->wait(limit());
    return ms_since(t0);
  }

  // All gradients ready at once, then the sync alone.
  double sync(bool views) {
    fill_all(views);
    check(cudaStreamSynchronize(compute_), "synchronize");
    barrier();
    auto& s = views ? *views_ : *copies_;
    const auto t0 = Clock::now();
    for (size_t i = specs_.size(); i-- > 0;) s.mark_ready(i);
    s.wait();
    check(cudaStreamSynchronize(compute_), "synchronize");
    return ms_since(t0);
  }

  // The simulated backward, with or without the sync overlapped (views).
  double backward(bool with_sync, double backward_ms) {
    barrier();
    const auto t0 = Clock::now();
    size_t off = total_;
    for (size_t i = specs_.size(); i-- > 0;) {
      off -= specs_[i].count;
      const double share =
          backward_ms * static_cast<double>(specs_[i].count) / static_cast<double>(total_);
      // backward alone writes into scratch memory (the flat buffer), so that the
      // copies variant's averaged gradients stay for the final check
      float* g = with_sync ? static_cast<float*>(views_->gradient(i)) : flat_ + off;
      slurmddp::bench::spin_then_fill(static_cast<long long>(share * cycles_per_ms_), g,
                                      specs_[i].count, scale(), compute_);
      if (with_sync) views_->mark_ready(i);
    }
    if (with_sync) views_->wait();
    check(cudaStreamSynchronize(compute_), "synchronize");
    return ms_since(t0);
  }

  // Every gradient of both variants equals the average of (r+1)*(j%7+1) over
  // ranks: (j%7+1)*(n+1)/2, exact in float32 for the ranks used here.
  long long wrong_values() {
    check(cudaStreamSynchronize(compute_), "synchronize");
    std::vector<float> host;
    long long wrong = 0;
    const double mean_scale = (a_.ranks + 1) / 2.0;
    size_t off = 0;
    for (size_t i = 0; i < specs_.size(); ++i) {
      const size_t n = specs_[i].count;
      host.resize(n);
      for (int variant = 0; variant < 2; ++variant) {
        const void* src = variant == 0 ? views_->gradient(i) : static_cast<void*>(grads_ + off);
        check(cudaMemcpy(host.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost),
              "copy a gradient back");
        for (size_t j = 0; j < n; ++j) {
          const double want = mean_scale * static_cast<double>(j % 7 + 1);
          wrong += std::fabs(host[j] - want) > 1e-6 * want;
        }
      }
      off += n;
    }
    return wrong;
  }

  int rank() const { return rank_; }
  int nccl_version() const { return slurmddp::as_nccl_communicator(comm_.get())->nccl_version(); }
  int device() const { return device_; }
  size_t total() const { return total_; }
  size_t tensors() const { return specs_.size(); }
  size_t buckets() const { return views_->buckets().size(); }

 private:
  static double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  void fill_all(bool views) {
    size_t off = 0;
    for (size_t i = 0; i < specs_.size(); ++i) {
      float* g = views ? static_cast<float*>(views_->gradient(i)) : grads_ + off;
      slurmddp::bench::fill_pattern(g, specs_[i].count, scale(), compute_);
      off += specs_[i].count;
    }
  }

  const Args& a_;
  int rank_;
  int device_ = 0;
  std::shared_ptr<slurmddp::Communicator> comm_;
  cudaStream_t compute_ = nullptr;
  std::vector<slurmddp::bench::ParamSpec> specs_;
  size_t total_ = 0;
  float* flat_ = nullptr;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  std::unique_ptr<slurmddp::GradSync> views_, copies_;
  double cycles_per_ms_ = 0;
};

int run_rank(const Args& a, int devices) {
  Rank r(a, devices);
  std::map<std::string, std::vector<double>> t;
  for (int i = 0; i < a.warmup; ++i) {
    r.flat();
    r.sync(true);
    r.sync(false);
  }
  // The simulated backward lasts as long as the flat allreduce unless told:
  // then all communication could in principle hide behind it.
  double backward_ms = a.backward_ms;
  if (backward_ms == 0) {
    std::vector<double> f;
    for (int i = 0; i < 3; ++i) f.push_back(r.flat());
    backward_ms = spread_of(f).median;
  }
  for (int i = 0; i < a.reps; ++i) {
    t["flat"].push_back(r.flat());
    t["views"].push_back(r.sync(true));
    t["copies"].push_back(r.sync(false));
    t["backward"].push_back(r.backward(false, backward_ms));
    t["backward+sync"].push_back(r.backward(true, backward_ms));
  }
  const long long wrong = r.wrong_values();
  if (r.rank() == 0) {
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, r.device()), "read the device properties");
    std::printf("# slurm-ddp GradSync on the GPU vs one flat NCCL allreduce (float32, avg)\n");
    std::printf("# model %s: %zu tensors, %zu parameters, %.1f MB of gradients, %zu buckets\n",
                a.model.c_str(), r.tensors(), r.total(), r.total() * 4 / 1e6, r.buckets());
    std::printf(
        "# ranks %d on %d device(s) (%s), NCCL %d, CUDA runtime %d, reps %d, warmup %d, "
        "simulated backward %.2f ms%s\n",
        a.ranks, devices, prop.name, r.nccl_version(), runtime, a.reps, a.warmup, backward_ms,
        a.backward_ms == 0 ? " (= flat allreduce median)" : "");
    if (devices < a.ranks) {
      std::printf(
          "# ranks share devices over loopback TCP: a check of the path, not a bandwidth "
          "figure\n");
    }
    std::printf("# %-22s %12s %12s %12s %12s %9s\n", "experiment", "median(ms)", "min(ms)",
                "max(ms)", "busbw(GB/s)", "vs_flat");
    const Stat flat = spread_of(t["flat"]);
    const double bus =
        slurmddp::bench::bus_factor(slurmddp::bench::Collective::kAllreduce, a.ranks);
    auto row = [&](const char* name, const Stat& s, bool comm_only) {
      const double busbw = comm_only ? r.total() * 4.0 / (s.median * 1e-3) / 1e9 * bus : 0.0;
      std::printf("  %-22s %12.3f %12.3f %12.3f %12.2f %9.3f\n", name, s.median, s.min, s.max,
                  busbw, s.median / flat.median);
    };
    const Stat views = spread_of(t["views"]), copies = spread_of(t["copies"]);
    const Stat bwd = spread_of(t["backward"]), both = spread_of(t["backward+sync"]);
    row("flat allreduce", flat, true);
    row("sync (views)", views, true);
    row("sync (copies)", copies, true);
    row("backward alone", bwd, false);
    row("backward+sync", both, false);
    const double overhead = both.median - bwd.median;
    const double hidden = views.median > 0 ? 1.0 - overhead / views.median : 0.0;
    std::printf("# overhead %.3f ms, hidden %.1f %%\n", overhead, 100 * hidden);
    std::printf("# targets: sync (views)/flat %.3f (<= 1.10: %s); hidden %.1f %% (>= 90 %%: %s)\n",
                views.median / flat.median, views.median / flat.median <= 1.10 ? "met" : "NOT met",
                100 * hidden, hidden >= 0.90 ? "met" : "NOT met");
    std::printf("# wrong values on rank 0: %lld %s\n", wrong, wrong ? "FAILED" : "OK");
    std::fflush(stdout);
  } else if (wrong != 0) {
    std::fprintf(stderr, "gpu_grad_sync_bench: rank %d: %lld wrong values\n", r.rank(), wrong);
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.dry_run) {
    try {
      return dry_run(a);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpu_grad_sync_bench: dry run: %s\n", e.what());
      return 1;
    }
  }
  return slurmddp::support::gpu_bench_main("gpu_grad_sync_bench", a,
                                           [&a](int devices) { return run_rank(a, devices); });
}
