// Allreduce through slurm-ddp's NCCL communicator, in nccl-tests' columns:
//
//   size(B) count type redop time(us) algbw(GB/s) busbw(GB/s) #wrong
//
// GB = 1e9; algbw = size / time; busbw = algbw * 2(n-1)/n. Each size runs
// untimed warm-up iterations, then `reps` timed samples of `iters` back-to-back
// in-place allreduces (the CPU waits for the last; the wall time over iters
// is one sample); the row shows the median sample, the largest over ranks.
// Then the data is set to v(r, i) = ((i + r) mod n + 1) * (i % 7 + 1) and one
// allreduce is checked against its closed form: #wrong counts wrong elements
// over all ranks, and any wrong value makes the exit status non-zero. The
// rank holding the smallest and the largest value rotates with i, so no rank's
// own data equals the result on most elements: a reduction that skips or
// mixes up a rank's contribution is caught on every rank, for every redop
// (with v(r, i) = (r+1) * (i % 7 + 1), a min left undone passed on rank 0 and
// a max on the last rank). With one rank an allreduce is the identity: there
// the check catches corrupted or misplaced elements only, and the preamble
// says so.
//
// Ranks: --ranks N starts N processes of this program around a TCP store on
// loopback; rank r takes device r modulo the visible devices. With fewer
// devices than ranks they share devices the way NCCL allows it (each claims
// another host with NCCL_HOSTID, NCCL >= 2.30 also gets
// NCCL_MULTI_RANK_GPU_ENABLE=1, and they talk over loopback TCP): a check of
// the multi-process path, not a bandwidth figure; the preamble says so.
//
//   nccl_allreduce_bench [--ranks N] [-b MIN_BYTES] [-e MAX_BYTES] [-f FACTOR]
//                        [-t float32|float64|float16|bfloat16|int32|int64]
//                        [-o sum|avg|min|max] [-n ITERS] [-w WARMUP] [-r REPS]
//                        [--timeout-ms MS] [--raw 0|1]
//
// --raw 1 (default): every size is also timed, in the same run and the same
// way, with ncclAllReduce on a raw NCCL communicator of the same ranks and
// devices (its own unique id through the same store) on a stream of its own;
// the row then adds raw_time(us), raw_busbw(GB/s) and ours/raw (busbw), and
// the trailer the median of ours/raw over sizes >= 64 MiB (target >= 0.95).
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu_bench_main.h"
#include "gpu_values.h"
#include "slurmddp/error.h"
#include "slurmddp/nccl_communicator.h"
#include "slurmddp/tcp_store.h"
#include "slurmddp_config.h"
#include "stats.h"

namespace {

using Clock = std::chrono::steady_clock;
using slurmddp::DataType;
using slurmddp::ReduceOp;
using slurmddp::bench::median_of;
using slurmddp::support::scale_of;

struct Args : slurmddp::support::RankOptions {
  size_t min_bytes = 8;
  size_t max_bytes = size_t{256} << 20;
  size_t factor = 2;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int iters = 20;
  int warmup = 5;
  int reps = 5;
  long timeout_ms = 120000;
  bool raw = true;  // also time raw NCCL (ncclAllReduce on its own communicator), same run
};

// The value of `all` whose to_string() is `text`.
template <typename T>
bool by_name(const std::vector<T>& all, const std::string& text, T* out) {
  for (T v : all) {
    if (text == slurmddp::to_string(v)) {
      *out = v;
      return true;
    }
  }
  return false;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "nccl_allreduce_bench: %s\nusage: nccl_allreduce_bench [--ranks N] [-b MIN_BYTES] "
               "[-e MAX_BYTES] [-f FACTOR] [-t TYPE] [-o OP] [-n ITERS] [-w WARMUP] [-r REPS] "
               "[--timeout-ms MS] [--raw 0|1]\n",
               why);
  std::exit(2);
}

// "64M", "1G", "8" -> bytes.
size_t parse_size(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) usage(("bad size " + s).c_str());
  double scale = 1;
  switch (*end) {
    case 'K':
    case 'k':
      scale = 1024.0;
      break;
    case 'M':
    case 'm':
      scale = 1024.0 * 1024;
      break;
    case 'G':
    case 'g':
      scale = 1024.0 * 1024 * 1024;
      break;
    case '\0':
      break;
    default:
      usage(("bad size " + s).c_str());
  }
  return static_cast<size_t>(v * scale);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + k).c_str());
    const std::string v = argv[++i];
    if (a.take(k, v)) continue;  // the launcher's, not forwarded
    if (k == "-b") {
      a.min_bytes = parse_size(v);
    } else if (k == "-e") {
      a.max_bytes = parse_size(v);
    } else if (k == "-f") {
      a.factor = static_cast<size_t>(std::atoi(v.c_str()));
    } else if (k == "-t") {
      if (!by_name(slurmddp::support::all_types(), v, &a.type)) {
        usage(("unknown type " + v).c_str());
      }
    } else if (k == "-o") {
      if (!by_name(slurmddp::support::all_ops(), v, &a.op)) {
        usage(("unknown redop " + v).c_str());
      }
    } else if (k == "-n") {
      a.iters = std::atoi(v.c_str());
    } else if (k == "-w") {
      a.warmup = std::atoi(v.c_str());
    } else if (k == "-r") {
      a.reps = std::atoi(v.c_str());
    } else if (k == "--raw") {
      a.raw = v != "0";
    } else if (k == "--timeout-ms") {
      a.timeout_ms = std::atol(v.c_str());
    } else {
      usage(("unknown option " + k).c_str());
    }
    a.forwarded.push_back(k);
    a.forwarded.push_back(v);
  }
  if (a.ranks < 1 || a.iters < 1 || a.reps < 1 || a.warmup < 0 || a.factor < 2 ||
      a.min_bytes > a.max_bytes || a.timeout_ms <= 0) {
    usage("invalid option values");
  }
  return a;
}

// ---- data with a closed form (positive, exact in every type for n <= 8)

// v(r, i) over n ranks (see the header): sum, min and max over r are those of
// (rank + 1) * k, so device_expected_reduction() (gpu_values.h) does not depend on
// the rotation.
double input(DataType t, int rank, int n, size_t i) {
  const size_t slot = (i + static_cast<size_t>(rank)) % static_cast<size_t>(n);
  return static_cast<double>(slot + 1) * static_cast<double>(i % 7 + 1) * scale_of(t);
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "nccl_allreduce_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

std::string version_text(int v) {  // CUDA's 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string nccl_text(int v) {
  return v >= 10000 ? std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." +
                          std::to_string(v % 100)
                    : std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 100) + "." +
                          std::to_string(v % 100);
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

bool devices_shared(int ranks, int devices) {
  return devices < ranks;
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    throw slurmddp::NcclError(std::string("nccl_allreduce_bench: raw NCCL: failed to ") + what +
                              ": " + ncclGetErrorString(r) + " (" + ncclGetLastError(nullptr) +
                              ")");
  }
}

// The raw baseline maps types and ops itself, as a program that calls NCCL
// directly does.
ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  throw slurmddp::InvalidArgument("nccl_allreduce_bench: no NCCL type for DataType " +
                                  std::to_string(static_cast<int>(t)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

// The baseline: a plain NCCL communicator of the same ranks on the current
// device, its unique id through the benchmark's store, its own stream. No
// watchdog, no ordering, no checks: what an application calling NCCL gets.
class RawNccl {
 public:
  RawNccl() = default;
  RawNccl(slurmddp::Store* store, int rank, int size, std::chrono::milliseconds limit) {
    ncclUniqueId id{};
    if (rank == 0) nccl_check(ncclGetUniqueId(&id), "create a unique id");
    if (store != nullptr) {
      const std::string key = "bench/raw_nccl_id";
      if (rank == 0) {
        store->set(key, slurmddp::Bytes(id.internal, id.internal + sizeof id.internal));
      } else {
        const auto v = store->get(key, limit);
        if (v.size() != sizeof id.internal) {
          throw slurmddp::Error(
              "nccl_allreduce_bench: raw NCCL: failed to read the unique id: "
              "size " +
              std::to_string(v.size()));
        }
        std::memcpy(id.internal, v.data(), v.size());
      }
    }
    nccl_check(ncclCommInitRank(&comm_, size, id, rank), "create a communicator");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  RawNccl(const RawNccl&) = delete;
  RawNccl& operator=(const RawNccl&) = delete;
  RawNccl& operator=(RawNccl&& o) noexcept {
    std::swap(comm_, o.comm_);
    std::swap(stream_, o.stream_);
    return *this;
  }
  ~RawNccl() {
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  // `times` in-place allreduces back to back, then waits for the last.
  void allreduce(void* buf, size_t count, DataType t, ReduceOp op, int times) {
    for (int i = 0; i < times; ++i) {
      nccl_check(ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), comm_, stream_),
                 "run ncclAllReduce");
    }
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// ---- one rank

int run_rank(const Args& a, int devices) {
  const int size = a.ranks;
  const int rank = a.my_rank();
  const std::shared_ptr<slurmddp::Store> store = a.connect(std::chrono::milliseconds(a.timeout_ms));
  slurmddp::NcclOptions o;
  o.rank = rank;
  o.size = size;
  const int device = rank % devices;
  o.device = device;
  // The rank's GPU before any other CUDA work: buffers go there, and no
  // context appears on a GPU this rank does not use.
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  o.store = store;
  o.prefix = "bench/nccl";
  o.timeout = std::chrono::milliseconds(a.timeout_ms);
  auto comm = slurmddp::make_nccl_communicator(o);
  slurmddp::NcclCommunicator* nccl = comm.get();
  const std::chrono::milliseconds wait_limit(a.timeout_ms);
  RawNccl raw;
  if (a.raw) raw = RawNccl(store.get(), rank, size, wait_limit);

  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  char bus[32] = {};
  cuda_check(cudaDeviceGetPCIBusId(bus, sizeof bus, device), "cudaDeviceGetPCIBusId");
  const std::string me = "#   rank " + std::to_string(rank) + ": host " + host_name() + " pid " +
                         std::to_string(getpid()) + " device " + std::to_string(device) + " (" +
                         prop.name + ", bus " + bus + ")";
  if (store) store->set("bench/map/" + std::to_string(rank), slurmddp::Bytes(me.begin(), me.end()));

  const size_t esz = slurmddp::element_size(a.type);
  const size_t max_count = a.max_bytes / esz;
  void* buf = nullptr;
  cuda_check(cudaMalloc(&buf, std::max<size_t>(max_count, 1) * esz), "cudaMalloc");
  double* stat = nullptr;  // per-rank figures reduced over ranks on the GPU
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&stat), 3 * sizeof(double)), "cudaMalloc");

  slurmddp::bench::TableOptions columns;
  columns.ranks = size;
  if (a.raw) {
    columns.extra = {{"raw_time(us)", 12, 2}, {"raw_busbw(GB/s)", 15, 2}, {"ours/raw", 9, 3}};
  }
  slurmddp::bench::Table table(columns);
  if (rank == 0) {
    int runtime = 0;
    int driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    std::printf(
        "# slurm-ddp NCCL allreduce benchmark (nccl-tests columns; in place; GB = 1e9; "
        "busbw = algbw * 2(n-1)/n)\n");
    std::printf("# slurm-ddp %s, NCCL %s (built against %s), CUDA runtime %s, driver %s\n",
                SLURMDDP_VERSION, nccl_text(nccl->nccl_version()).c_str(),
                nccl_text(NCCL_VERSION_CODE).c_str(), version_text(runtime).c_str(),
                version_text(driver).c_str());
    std::printf(
        "# ranks %d, iters %d, reps %d (median of reps, max over ranks), warmup %d, "
        "type %s, redop %s, timeout %ld ms\n",
        size, a.iters, a.reps, a.warmup, slurmddp::to_string(a.type), slurmddp::to_string(a.op),
        a.timeout_ms);
    if (store) {
      for (int r = 0; r < size; ++r) {
        const auto v = store->get("bench/map/" + std::to_string(r), wait_limit);
        std::printf("%s\n", std::string(v.begin(), v.end()).c_str());
      }
    } else {
      std::printf("%s\n", me.c_str());
    }
    if (size == 1) {
      std::printf(
          "# one rank: allreduce is the identity, so the check catches corrupted or "
          "misplaced elements only; run --ranks 2 or more to check the reduction\n");
    }
    if (devices_shared(size, devices)) {
      std::printf(
          "# %d ranks on %d device(s): ranks share a GPU over loopback TCP (NCCL_HOSTID); "
          "a check of the multi-process path, not a bandwidth figure\n",
          size, devices);
    }
    std::printf("#\n");
    table.print_header();
  }

  long long wrong_total = 0;
  std::vector<double> ratios_large;  // ours/raw busbw at >= 64 MiB
  std::vector<uint8_t> host;
  for (size_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= a.factor) {
    const size_t count = bytes / esz;
    if (count == 0) {
      if (bytes == 0) break;
      continue;
    }
    cuda_check(cudaMemset(buf, 0, count * esz), "cudaMemset");
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    for (int i = 0; i < a.warmup; ++i) {
      comm->allreduce(buf, count, a.type, a.op)->wait(wait_limit);
    }
    std::vector<double> samples;
    for (int r = 0; r < a.reps; ++r) {
      const auto t0 = Clock::now();
      slurmddp::WorkHandle last;
      for (int i = 0; i < a.iters; ++i) last = comm->allreduce(buf, count, a.type, a.op);
      last->wait(wait_limit);  // operations complete in issue order
      samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                        a.iters);
    }
    const double median = median_of(samples);
    double raw_median = 0;
    if (a.raw) {
      for (int i = 0; i < a.warmup; ++i) raw.allreduce(buf, count, a.type, a.op, 1);
      std::vector<double> raw_samples;
      for (int r = 0; r < a.reps; ++r) {
        const auto t0 = Clock::now();
        raw.allreduce(buf, count, a.type, a.op, a.iters);  // back to back, then one stream sync
        raw_samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                              a.iters);
      }
      raw_median = median_of(raw_samples);
    }

    // The check: closed-form data, one allreduce, count what is wrong.
    host = slurmddp::support::encode(a.type, count,
                                     [&](size_t i) { return input(a.type, rank, size, i); });
    cuda_check(cudaMemcpy(buf, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    comm->allreduce(buf, count, a.type, a.op)->wait(wait_limit);
    cuda_check(cudaMemcpy(host.data(), buf, host.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    double wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      const double want = slurmddp::support::device_expected_reduction(a.type, a.op, size, i);
      const double got = slurmddp::support::decode(a.type, host.data() + i * esz);
      if (!(std::fabs(got - want) <= slurmddp::support::device_tolerance(a.type, a.op, want))) {
        wrong += 1;
      }
    }
    // Over ranks: the slowest median and the total of wrong values.
    const double mine[3] = {median, wrong, raw_median};
    cuda_check(cudaMemcpy(stat, mine, sizeof mine, cudaMemcpyHostToDevice), "cudaMemcpy");
    comm->allreduce(stat, 1, DataType::kFloat64, ReduceOp::kMax)->wait(wait_limit);
    comm->allreduce(stat + 1, 1, DataType::kFloat64, ReduceOp::kSum)->wait(wait_limit);
    comm->allreduce(stat + 2, 1, DataType::kFloat64, ReduceOp::kMax)->wait(wait_limit);
    double all[3] = {0, 0, 0};
    cuda_check(cudaMemcpy(all, stat, sizeof all, cudaMemcpyDeviceToHost), "cudaMemcpy");
    wrong_total += static_cast<long long>(all[1]);
    if (rank == 0) {
      slurmddp::bench::TableRow row;
      row.bytes = count * esz;
      row.count = count;
      row.type = slurmddp::to_string(a.type);
      row.redop = slurmddp::to_string(a.op);
      row.time_us = all[0];
      row.wrong = static_cast<long long>(all[1]);
      if (a.raw) {
        const double raw_busbw =
            slurmddp::bench::gbps(static_cast<double>(row.bytes), all[2]) * table.bus_factor();
        // busbw ratio = time ratio (same bytes, same factor); 1 rank: algbw ratio
        const double ratio = all[2] / all[0];
        row.extra = {all[2], raw_busbw, ratio};
        if (row.bytes >= (size_t{64} << 20)) ratios_large.push_back(ratio);
      }
      table.print_row(row);
    }
    if (bytes > a.max_bytes / a.factor) break;  // next step would overflow or pass the end
  }
  if (rank == 0) {
    table.print_trailer();
    if (a.raw && !ratios_large.empty()) {
      const double r = median_of(ratios_large);
      std::printf(
          "# ours/raw busbw at >= 64 MiB: median %.3f over %zu sizes (target >= 0.95: %s)\n", r,
          ratios_large.size(), r >= 0.95 ? "met" : "NOT met");
    } else if (a.raw) {
      std::printf("# ours/raw busbw at >= 64 MiB: no such size in this sweep\n");
    }
    std::printf("#\n");
    std::fflush(stdout);
  }
  raw = RawNccl();
  cudaFree(buf);
  cudaFree(stat);
  comm.reset();
  // Rank 0 hosts no store here (the parent does), so ranks may leave at once.
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  return slurmddp::support::gpu_bench_main("nccl_allreduce_bench", a,
                                           [&a](int devices) { return run_rank(a, devices); });
}
