// The gpu suite of the NCCL communicator. Exits 77 (meson's skip) when no
// CUDA device exists, and only then (device_presence.h).
//
// Single-process tests use one rank (or two ranks of which one never comes,
// for the init timeout). Multi-process tests start this binary again as rank
// processes ("--worker <scenario>") around a TCP store hosted by the test.
// With as many GPUs as ranks each rank takes its own; with fewer, the ranks
// share device 0 the way NCCL allows it: each rank claims another host
// (NCCL_HOSTID) and they talk over loopback sockets (Note [Sharing one GPU]).
// A first two-rank probe decides whether that works here: where NCCL refuses
// it ("Duplicate GPU detected", ncclInvalidUsage) the multi-process tests skip
// and say why; any other failure of the probe fails them (probe_verdict.h).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collective_checks.h"
#include "comm/nccl/nccl_scale.h"
#include "gpu_test_main.h"
#include "gpu_values.h"
#include "probe_verdict.h"
#include "signalling_nccl.h"
#include "slurmddp/error.h"
#include "slurmddp/grad_sync.h"
#include "slurmddp/nccl_communicator.h"
#include "slurmddp/store.h"
#include "slurmddp/tcp_store.h"
#include "subprocess.h"

namespace slurmddp::gpu_testing {
namespace {

using support::spawn_self;
using support::wait_for;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int g_device_count = 0;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---------------------------------------------------------------- processes

// Note [Sharing one GPU]: NCCL refuses two ranks on one device of one host
// ("Duplicate GPU detected", ncclInvalidUsage). Up to 2.28 ranks that claim
// different hosts (NCCL_HOSTID) pass that check and use the network
// transport, here TCP over loopback: slow, but every collective runs the same
// NCCL code paths. NCCL 2.30 adds NCCL_MULTI_RANK_GPU_ENABLE=1 to allow it
// outright; both are set. Where NCCL still refuses, the multi-rank tests skip
// (probe_verdict.h says exactly when).
std::map<std::string, std::string> rank_env(int rank, int size) {
  std::map<std::string, std::string> env;
  if (g_device_count >= size) {
    env["SLURMDDP_TEST_DEVICE"] = std::to_string(rank);
    return env;
  }
  env["SLURMDDP_TEST_DEVICE"] = "0";
  env["NCCL_HOSTID"] = "slurmddp-gpu-test-rank-" + std::to_string(rank);
  env["NCCL_SOCKET_IFNAME"] = "lo";
  env["NCCL_P2P_DISABLE"] = "1";
  env["NCCL_SHM_DISABLE"] = "1";
  env["NCCL_IB_DISABLE"] = "1";
  env["NCCL_NVLS_ENABLE"] = "0";
  env["NCCL_MULTI_RANK_GPU_ENABLE"] = "1";
  return env;
}

// Note [Fault test timeouts]
// A communicator's timeout bounds its creation (CUDA context, NCCL init over
// loopback: seconds on a loaded machine, more on a node with many GPUs) as
// well as every operation. Where a test's timeout also bounds a creation that
// must succeed, it is kCreationTimeout (30 s), never a few seconds; the bound
// a fault must be detected within is then stated next to each check (for the
// watchdog: that same timeout plus its period and the abort, at most 5 s).
// Only tests whose subject is a creation that cannot succeed use a short
// timeout (Errors.InitTimesOutWhenARankNeverArrives).
constexpr milliseconds kCreationTimeout{30000};
// Slack on top of a detection bound: the watchdog's period (<= 100 ms), the
// abort, a loaded machine.
constexpr double kDetectionSlackS = 5.0;

struct Launch {
  std::vector<std::optional<int>> exit_codes;  // nullopt: killed at the hard limit
};

// Runs `size` rank processes of `scenario` around a TCP store hosted here;
// `during` (optional) runs meanwhile with the store and the pids.
Launch run_ranks(const std::string& scenario, int size, milliseconds comm_timeout,
                 std::chrono::seconds hard_limit,
                 const std::function<void(Store&, const std::vector<pid_t>&)>& during = nullptr) {
  TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  so.timeout = std::chrono::seconds(30);
  auto store = make_tcp_store(so);
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    pids.push_back(spawn_self({"--worker", scenario, std::to_string(r), std::to_string(size),
                               std::to_string(store->port()), std::to_string(comm_timeout.count())},
                              rank_env(r, size)));
  }
  if (during) during(*store, pids);
  Launch l;
  const auto deadline = Clock::now() + hard_limit;
  for (pid_t p : pids) l.exit_codes.push_back(p > 0 ? wait_for(p, deadline) : -1);
  return l;
}

std::string describe(const Launch& l) {
  std::string s;
  for (size_t r = 0; r < l.exit_codes.size(); ++r) {
    s += "rank " + std::to_string(r) + ": " +
         (l.exit_codes[r] ? "exit " + std::to_string(*l.exit_codes[r]) : "killed at the limit") +
         "; ";
  }
  return s;
}

struct Probe {
  ProbeVerdict verdict = ProbeVerdict::kFailed;
  std::string text;
};

// Whether two rank processes can form a communicator here (see the note),
// run once per test program.
const Probe& multi_rank_probe() {
  static const Probe probe = [] {
    const Launch l = run_ranks("probe", 2, milliseconds(60000), std::chrono::seconds(120));
    Probe p;
    p.verdict = probe_verdict(l.exit_codes, /*ranks_share_a_gpu=*/g_device_count < 2);
    switch (p.verdict) {
      case ProbeVerdict::kWorks:
        break;
      case ProbeVerdict::kRefused:
        p.text = kSharedGpuRefusedText;
        break;
      case ProbeVerdict::kFailed:
        p.text = "the two-rank probe failed (" + describe(l) +
                 "see the rank logs above); only "
                 "NCCL's refusal of two ranks on one GPU (every rank exiting " +
                 std::to_string(kExitSharedGpuRefused) + ") would skip";
        break;
    }
    return p;
  }();
  return probe;
}

// Skips only for NCCL's refusal to share the one GPU; fails for any other
// failure of the probe.
#define REQUIRE_MULTI_RANK()                                                   \
  do {                                                                         \
    const Probe& probe_ = multi_rank_probe();                                  \
    if (probe_.verdict == ProbeVerdict::kRefused) GTEST_SKIP() << probe_.text; \
    if (probe_.verdict == ProbeVerdict::kFailed) FAIL() << probe_.text;        \
  } while (0)

// ---------------------------------------------------------------- rank processes

struct WorkerArgs {
  std::string scenario;
  int rank = 0;
  int size = 1;
  uint16_t port = 0;
  milliseconds timeout{60000};
};

#define WORKER_CHECK(cond, ...)                                           \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "rank %d: check failed: %s: ", a.rank, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                  \
      std::fprintf(stderr, "\n");                                         \
      std::fflush(stderr);                                                \
      std::_Exit(1);                                                      \
    }                                                                     \
  } while (0)

// The device SLURMDDP_TEST_DEVICE names (set by rank_env), if any.
std::optional<int> worker_device() {
  const char* dev = std::getenv("SLURMDDP_TEST_DEVICE");
  return dev != nullptr ? std::optional<int>(std::atoi(dev)) : std::nullopt;
}

std::unique_ptr<Communicator> worker_comm(const WorkerArgs& a, const std::shared_ptr<Store>& store,
                                          const std::string& prefix) {
  NcclOptions o;
  o.rank = a.rank;
  o.size = a.size;
  o.store = store;
  o.prefix = prefix;
  o.timeout = a.timeout;
  o.device = worker_device();
  return make_nccl_communicator(o);
}

void report(const WorkerArgs& a, const std::vector<std::string>& failures) {
  size_t shown = 0;
  for (const auto& f : failures) {
    if (++shown > 20) break;
    std::fprintf(stderr, "rank %d: %s\n", a.rank, f.c_str());
  }
  if (failures.size() > 20)
    std::fprintf(stderr, "rank %d: ... %zu failures in all\n", a.rank, failures.size());
  std::fflush(stderr);
}

int run_worker(const WorkerArgs& a) {
  // The rank's own GPU first, before any other CUDA call: its buffers must
  // live there, and no context may appear on a GPU this rank does not use
  // (cudaSetDevice creates one since CUDA 12).
  if (const std::optional<int> device = worker_device()) {
    const cudaError_t e = cudaSetDevice(*device);
    if (e != cudaSuccess) {
      std::fprintf(stderr, "rank %d: cudaSetDevice(%d): %s\n", a.rank, *device,
                   cudaGetErrorName(e));
      return 1;
    }
  }
  TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = a.port;
  so.timeout = std::chrono::seconds(30);
  std::shared_ptr<Store> store = make_tcp_store(so);
  const Bytes yes{'1'};

  if (a.scenario == "probe") {
    std::unique_ptr<Communicator> comm;
    try {
      comm = worker_comm(a, store, "probe");
    } catch (const NcclError& e) {
      std::fprintf(stderr, "rank %d: probe: %s\n", a.rank, e.what());
      return is_shared_gpu_refusal(e.what()) ? kExitSharedGpuRefused : 1;
    }
    DeviceBuffer buf(sizeof(float));
    const float one = static_cast<float>(a.rank + 1);
    cudaMemcpy(buf.get(), &one, sizeof one, cudaMemcpyHostToDevice);
    comm->allreduce(buf.get(), 1, DataType::kFloat32, ReduceOp::kSum)->wait(a.timeout);
    float got = 0;
    cudaMemcpy(&got, buf.get(), sizeof got, cudaMemcpyDeviceToHost);
    const float want = static_cast<float>(a.size * (a.size + 1) / 2);
    WORKER_CHECK(got == want, "got %g want %g", static_cast<double>(got),
                 static_cast<double>(want));
    return 0;
  }

  if (a.scenario == "collectives") {
    std::vector<std::string> failures;
    {
      auto comm = worker_comm(a, store, "collectives");
      failures = check_collectives(*comm, CheckOptions{});
    }  // destroyed normally: finalize + destroy
    // Note [Average] in nccl_communicator.cpp: the sum-divide path, on a
    // second communicator made on the same store and prefix (Note [Rendezvous
    // generations]: it must get the new unique id, never the first one's).
    setenv("SLURMDDP_NCCL_AVG", "sum-divide", 1);
    {
      auto comm = worker_comm(a, store, "collectives");
      CheckOptions o;
      o.only_average = true;
      for (auto& f : check_collectives(*comm, o)) failures.push_back("sum-divide: " + f);
    }
    report(a, failures);
    return failures.empty() ? 0 : 1;
  }

  if (a.scenario == "wait_timeout" || a.scenario == "watchdog") {
    auto comm = worker_comm(a, store, a.scenario);
    DeviceBuffer buf(1024 * sizeof(float));
    // The same operation once on both ranks first, so that NCCL's connections
    // (made on first use) exist and only the completion can stall.
    comm->allreduce(buf.get(), 1024, DataType::kFloat32, ReduceOp::kSum)->wait(a.timeout);
    if (a.rank == 1) {
      // Never joins the collective; leaves once rank 0 has seen its error.
      store->wait({"test/done"}, std::chrono::seconds(120));
      std::_Exit(0);
    }
    const bool by_wait = a.scenario == "wait_timeout";
    // Work::wait's own limit: 1 s for wait_timeout; for the watchdog longer
    // than the communicator's timeout, so that the watchdog acts first.
    const milliseconds wait_for_ms = by_wait ? milliseconds(1000) : 2 * a.timeout;
    const auto start = Clock::now();
    std::string message;
    try {
      comm->allreduce(buf.get(), 1024, DataType::kFloat32, ReduceOp::kSum)->wait(wait_for_ms);
    } catch (const TimeoutError& e) {
      message = e.what();
    }
    const double took = seconds_since(start);
    store->set("test/done", yes);
    std::fprintf(stderr, "rank 0: after %.2f s: %s\n", took, message.c_str());
    WORKER_CHECK(!message.empty(), "no TimeoutError");
    WORKER_CHECK(contains(message, "allreduce of 1024 float32 (sum)"), "names the operation");
    WORKER_CHECK(contains(message, "rank=0"), "names the rank");
    // The detection bound: Work::wait's limit, or the communicator's timeout
    // (Note [Fault test timeouts]).
    const double limit_s = by_wait ? 1.0 : static_cast<double>(a.timeout.count()) / 1000.0;
    WORKER_CHECK(took >= limit_s * 0.9 && took <= limit_s + kDetectionSlackS,
                 "took %.2f s, limit %.2f s", took, limit_s);
    WORKER_CHECK(contains(message, by_wait ? "Work::wait gave up" : "watchdog"),
                 "says who gave up");
    // Broken: the next operation fails at once with the same error.
    std::string again;
    try {
      comm->allreduce(buf.get(), 1024, DataType::kFloat32, ReduceOp::kSum)->wait(wait_for_ms);
    } catch (const TimeoutError& e) {
      again = e.what();
    }
    WORKER_CHECK(again == message, "later operations rethrow the first error: %s", again.c_str());
    std::_Exit(0);
  }

  if (a.scenario == "peer_killed") {
    auto comm = worker_comm(a, store, "peer_killed");
    const size_t n = size_t{1} << 20;
    DeviceBuffer buf(n * sizeof(float));
    comm->allreduce(buf.get(), n, DataType::kFloat32, ReduceOp::kSum)->wait(a.timeout);
    if (a.rank != 0) {
      store->set("test/ready/" + std::to_string(a.rank), yes);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // killed here
    }
    store->wait({"test/killed"}, std::chrono::seconds(90));
    const auto start = Clock::now();
    std::string message;
    try {
      for (int i = 0; i < 1000000; ++i) {
        comm->allreduce(buf.get(), n, DataType::kFloat32, ReduceOp::kSum)
            ->wait(std::chrono::seconds(120));
      }
    } catch (const TimeoutError& e) {
      message = std::string("TimeoutError: ") + e.what();
    } catch (const PeerError& e) {
      message = std::string("PeerError: ") + e.what();
    } catch (const std::exception& e) {
      message = std::string("other error: ") + e.what();
    }
    const double took = seconds_since(start);
    std::fprintf(stderr, "rank 0: after %.2f s: %s\n", took, message.c_str());
    WORKER_CHECK(message.rfind("TimeoutError", 0) == 0 || message.rfind("PeerError", 0) == 0,
                 "a timeout or peer error");
    WORKER_CHECK(contains(message, "rank=0"), "names the rank");
    // Detected within the communicator's timeout (the watchdog) at the latest.
    const double limit_s = static_cast<double>(a.timeout.count()) / 1000.0;
    WORKER_CHECK(took <= limit_s + kDetectionSlackS, "took %.2f s, limit %.2f s", took, limit_s);
    std::_Exit(0);
  }

  std::fprintf(stderr, "unknown scenario %s\n", a.scenario.c_str());
  return 2;
}

int worker_main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s --worker SCENARIO RANK SIZE PORT TIMEOUT_MS\n", argv[0]);
    return 2;
  }
  WorkerArgs a;
  a.scenario = argv[2];
  a.rank = std::atoi(argv[3]);
  a.size = std::atoi(argv[4]);
  a.port = static_cast<uint16_t>(std::atoi(argv[5]));
  a.timeout = milliseconds(std::atol(argv[6]));
  try {
    return run_worker(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s: %s\n", a.rank, a.scenario.c_str(), e.what());
    return 1;
  }
}

// ---------------------------------------------------------------- single process

NcclOptions single_rank(int device = 0) {
  NcclOptions o;
  o.rank = 0;
  o.size = 1;
  o.device = device;
  o.timeout = std::chrono::seconds(60);
  return o;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

TEST(Single, EveryCollectiveTypeOpAndCount) {
  auto comm = make_nccl_communicator(single_rank());
  EXPECT_EQ(comm->backend(), Backend::kNccl);
  EXPECT_EQ(comm->device(), DeviceKind::kCuda);
  const auto failures = check_collectives(*comm, CheckOptions{});
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

TEST(Single, LargeCounts) {
  auto comm = make_nccl_communicator(single_rank());
  CheckOptions o;
  o.counts = {(size_t{1} << 24) + 3};
  o.only_average = true;
  const auto failures = check_collectives(*comm, o);
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

// The kernel behind the average without ncclAvg (Note [Average]), on its own:
// with one rank the communicator never needs it.
TEST(Single, DivideKernelOfTheSumDivideAverage) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  for (DataType t : all_types()) {
    for (size_t count : {size_t{1}, size_t{1001}, size_t{1} << 20}) {
      const int n = 3;
      const auto in = encode(t, count, [&](size_t i) { return input_value(t, n - 1, i) * 2; });
      DeviceBuffer buf(in.size());
      ASSERT_TRUE(buf.ok()) << buf.error();
      ASSERT_EQ(cudaMemcpy(buf.get(), in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(comm::launch_divide(buf.get(), count, t, n, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint8_t> out(in.size());
      ASSERT_EQ(cudaMemcpy(out.data(), buf.get(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        const double x = decode(t, in.data() + i * element_size(t));
        const double want = is_integer(t) ? std::trunc(x / n) : x / n;
        const double got = decode(t, out.data() + i * element_size(t));
        const double tol =
            common::is_16bit_float(t) ? 1e-2 * std::fabs(want) : 1e-6 * std::fabs(want);
        if (std::fabs(got - want) > tol) ++wrong;
      }
      EXPECT_EQ(wrong, 0u) << to_string(t) << " count " << count;
    }
  }
}

// A launch reports only its own error: one the thread had pending before
// (the user's) is neither reported nor cleared (Note [Launch errors and
// pending errors] in common/cuda_launch.h).
TEST(Single, DivideKernelLeavesAnUnrelatedPendingErrorAlone) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const size_t count = 4096;
  const auto in = encode(DataType::kFloat32, count, [](size_t i) { return 2.0 * (i % 7 + 1); });
  DeviceBuffer buf(in.size());
  ASSERT_EQ(cudaMemcpy(buf.get(), in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int bogus = -1;
  ASSERT_NE(cudaDeviceGetAttribute(&bogus, cudaDevAttrMaxThreadsPerBlock, 1 << 20),
            cudaSuccess);  // the user's mistake, pending now
  ASSERT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(comm::launch_divide(buf.get(), count, DataType::kFloat32, 2, nullptr), cudaSuccess);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice) << "the pending error was cleared";
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);  // its owner collects it
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> out(in.size());
  ASSERT_EQ(cudaMemcpy(out.data(), buf.get(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    wrong += decode(DataType::kFloat32, out.data() + i * 4) != static_cast<double>(i % 7 + 1);
  }
  EXPECT_EQ(wrong, 0u);
}

void CUDART_CB sleep_200ms(void* /*unused*/) {
  std::this_thread::sleep_for(milliseconds(200));
}

// The collective must read what the compute stream wrote before it was
// issued, even when that work is still queued (Note [Stream order]).
TEST(Single, WaitsForTheComputeStream) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  NcclOptions o = single_rank();
  o.compute_stream = compute;
  auto comm = make_nccl_communicator(o);
  NcclCommunicator* nccl = comm.get();
  EXPECT_EQ(nccl->compute_stream(), compute);
  const size_t count = size_t{1} << 20;
  DeviceBuffer send(count * 4);
  DeviceBuffer recv(count * 4);
  ASSERT_EQ(cudaMemset(send.get(), 0, count * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(recv.get(), 0, count * 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Queued on the compute stream: 200 ms of nothing, then the data.
  ASSERT_EQ(cudaLaunchHostFunc(compute, sleep_200ms, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(send.get(), 0x01, count * 4, compute), cudaSuccess);
  comm->allgather(send.get(), recv.get(), count, DataType::kFloat32)->wait(milliseconds(30000));
  std::vector<uint8_t> host(count * 4);
  ASSERT_EQ(cudaMemcpy(host.data(), recv.get(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t stale = 0;
  for (uint8_t b : host) stale += b != 0x01;
  EXPECT_EQ(stale, 0u) << "the collective read the buffer before the compute stream wrote it";
  comm.reset();
  cudaStreamDestroy(compute);
}

void CUDART_CB sleep_3s(void* /*unused*/) {
  std::this_thread::sleep_for(milliseconds(3000));
}

// A per-operation order (NcclOrder) replaces the compute stream for that
// operation only: with its inputs ready behind an event, the collective runs
// while the compute stream is still busy, and the communicator's compute
// stream is not changed (Note [Stream order]).
TEST(Single, PerOperationEventOrderLeavesTheComputeStreamAlone) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t compute = nullptr;
  cudaStream_t producer = nullptr;
  cudaEvent_t ready = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), cudaSuccess);
  NcclOptions o = single_rank();
  o.compute_stream = compute;
  auto comm = make_nccl_communicator(o);
  NcclCommunicator* nccl = comm.get();
  const size_t count = size_t{1} << 20;
  DeviceBuffer send(count * 4);
  DeviceBuffer recv(count * 4);
  ASSERT_EQ(cudaMemset(recv.get(), 0, count * 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // The compute stream is busy for 3 s; the input is written on `producer`.
  ASSERT_EQ(cudaLaunchHostFunc(compute, sleep_3s, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(send.get(), 0x01, count * 4, producer), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ready, producer), cudaSuccess);
  const auto start = Clock::now();
  auto work = nccl->allgather(send.get(), recv.get(), count, DataType::kFloat32,
                              NcclOrder::after_event(ready));
  work->wait(milliseconds(30000));
  const double took = seconds_since(start);
  EXPECT_LT(took, 2.0) << "the operation waited for the compute stream despite its own order";
  EXPECT_EQ(nccl->compute_stream(), compute);
  std::vector<uint8_t> host(count * 4);
  ASSERT_EQ(cudaMemcpy(host.data(), recv.get(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t stale = 0;
  for (uint8_t b : host) stale += b != 0x01;
  EXPECT_EQ(stale, 0u) << "the collective read its input before the event's work wrote it";
  // The default order still follows the compute stream.
  auto defaulted = comm->barrier();
  defaulted->wait(milliseconds(30000));
  EXPECT_GE(seconds_since(start), 2.5)
      << "the default order no longer waits for the compute stream";
  // An event order needs an event; the communicator stays usable.
  NcclOrder no_event;
  no_event.kind = NcclOrder::Kind::kEvent;
  EXPECT_THROW(nccl->barrier(no_event), InvalidArgument);
  nccl->barrier(NcclOrder::unordered())->wait(milliseconds(30000));
  comm.reset();
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
  cudaStreamDestroy(compute);
}

// GradSync orders each bucket by the bucket's own event and leaves the
// communicator's compute stream alone, so a collective issued by other code
// during a step still waits for the caller's stream (Note [NCCL compute
// stream] in grad_sync/engine_step.cpp; the engine used to swap the compute stream for
// the length of a step).
TEST(Single, GradSyncStepLeavesOtherCollectivesOrderedAfterTheComputeStream) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  NcclOptions o = single_rank();
  o.compute_stream = compute;
  auto signalling = std::make_shared<SignallingNccl>(make_nccl_communicator(o));
  std::shared_ptr<Communicator> comm = signalling;
  NcclCommunicator* nccl = as_nccl_communicator(comm.get());
  ASSERT_EQ(nccl, signalling.get());
  const size_t n = 4096;
  DeviceBuffer data(n * 4);
  DeviceBuffer grad(n * 4);
  DeviceBuffer send(n * 4);
  DeviceBuffer recv(n * 4);
  for (const DeviceBuffer* b : {&data, &grad, &send, &recv}) {
    ASSERT_EQ(cudaMemset(b->get(), 0, n * 4), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  GradParameter p;
  p.data = data.get();
  p.grad = grad.get();
  p.count = n;
  p.device = DeviceKind::kCuda;
  GradSyncOptions go;
  go.cuda_stream = compute;
  GradSync sync(comm, {p}, go);
  ASSERT_EQ(cudaMemsetAsync(grad.get(), 0x02, n * 4, compute), cudaSuccess);
  sync.mark_ready(0);
  ASSERT_TRUE(signalling->await_allreduces(1, milliseconds(30000)))
      << "GradSync never issued the bucket's allreduce";
  EXPECT_EQ(nccl->compute_stream(), compute) << "a step changed the communicator's compute stream";
  // Other code's collective, on data the compute stream writes after a delay.
  ASSERT_EQ(cudaLaunchHostFunc(compute, sleep_200ms, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(send.get(), 0x01, n * 4, compute), cudaSuccess);
  auto other = comm->allgather(send.get(), recv.get(), n, DataType::kFloat32);
  sync.wait();
  other->wait(milliseconds(30000));
  std::vector<uint8_t> host(n * 4);
  ASSERT_EQ(cudaMemcpy(host.data(), recv.get(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t stale = 0;
  for (uint8_t b : host) stale += b != 0x01;
  EXPECT_EQ(stale, 0u) << "a collective issued during a step was not ordered after the compute "
                          "stream";
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(host.data(), grad.get(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t wrong = 0;
  for (uint8_t b : host) wrong += b != 0x02;
  EXPECT_EQ(wrong, 0u) << "one rank: the averaged gradient is the gradient";
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
}

// A per-operation stream order waits for that stream's queued work.
TEST(Single, PerOperationStreamOrderWaitsForThatStream) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t producer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  NcclOptions o = single_rank();
  o.order_after_compute_stream = false;  // only the operation's own order applies
  auto comm = make_nccl_communicator(o);
  NcclCommunicator* nccl = comm.get();
  const size_t count = size_t{1} << 20;
  DeviceBuffer send(count * 4);
  DeviceBuffer recv(count * 4);
  ASSERT_EQ(cudaMemset(send.get(), 0, count * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(recv.get(), 0, count * 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(producer, sleep_200ms, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(send.get(), 0x01, count * 4, producer), cudaSuccess);
  nccl->allgather(send.get(), recv.get(), count, DataType::kFloat32,
                  NcclOrder::after_stream(producer))
      ->wait(milliseconds(30000));
  std::vector<uint8_t> host(count * 4);
  ASSERT_EQ(cudaMemcpy(host.data(), recv.get(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t stale = 0;
  for (uint8_t b : host) stale += b != 0x01;
  EXPECT_EQ(stale, 0u) << "the collective read the buffer before the stream wrote it";
  comm.reset();
  cudaStreamDestroy(producer);
}

TEST(Single, WaitOnStreamOrdersAConsumer) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  auto comm = make_nccl_communicator(single_rank());
  NcclCommunicator* nccl = comm.get();
  EXPECT_EQ(nccl->cuda_device(), 0);
  EXPECT_NE(nccl->stream(), nullptr);
  EXPECT_GE(nccl->nccl_version(), 21400);
  cudaStream_t consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  const size_t count = 4096;
  const auto in = encode(DataType::kFloat32, count,
                         [](size_t i) { return input_value(DataType::kFloat32, 0, i); });
  DeviceBuffer send(count * 4);
  DeviceBuffer recv(count * 4);
  ASSERT_EQ(cudaMemcpy(send.get(), in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(recv.get(), 0, count * 4), cudaSuccess);
  auto work = comm->allgather(send.get(), recv.get(), count, DataType::kFloat32);
  nccl->wait_on_stream(work, consumer);
  std::vector<uint8_t> out(count * 4);
  ASSERT_EQ(cudaMemcpyAsync(out.data(), recv.get(), out.size(), cudaMemcpyDeviceToHost, consumer),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  EXPECT_EQ(out, in);
  work->wait(milliseconds(10000));
  EXPECT_TRUE(work->is_completed());
  cudaStreamDestroy(consumer);
}

TEST(Single, RejectsHostMemoryAndStaysUsable) {
  auto comm = make_nccl_communicator(single_rank());
  std::vector<float> host(16, 1.0f);
  try {
    comm->allreduce(host.data(), host.size(), DataType::kFloat32, ReduceOp::kSum);
    ADD_FAILURE() << "host memory accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "host memory")) << e.what();
    EXPECT_TRUE(contains(e.what(), "device 0")) << e.what();
  }
  EXPECT_THROW(comm->broadcast(nullptr, 4, DataType::kFloat32, 0), InvalidArgument);
  EXPECT_THROW(comm->broadcast(nullptr, 4, DataType::kFloat32, 1), InvalidArgument);
  // Zero elements: nothing to do, even with null buffers.
  EXPECT_TRUE(comm->allreduce(nullptr, 0, DataType::kFloat32, ReduceOp::kSum)->is_completed());
  comm->barrier()->wait(milliseconds(10000));
}

// ---------------------------------------------------------------- errors

TEST(Errors, InvalidDeviceOrdinalNamesTheVariables) {
  const int bad = g_device_count + 3;
  NcclOptions o = single_rank(bad);
  try {
    make_nccl_communicator(o);
    ADD_FAILURE() << "no error for device " << bad;
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "device ordinal " + std::to_string(bad))) << m;
    EXPECT_TRUE(contains(m, "CUDA_VISIBLE_DEVICES")) << m;
    EXPECT_TRUE(contains(m, "SLURMDDP_LOCAL_DEVICE")) << m;
    EXPECT_TRUE(contains(m, "rank=0")) << m;
  }
  // The same ordinal from the plugin's variable.
  setenv("SLURMDDP_LOCAL_DEVICE", std::to_string(bad).c_str(), 1);
  o.device.reset();
  try {
    make_nccl_communicator(o);
    ADD_FAILURE() << "no error for SLURMDDP_LOCAL_DEVICE=" << bad;
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "from SLURMDDP_LOCAL_DEVICE=" + std::to_string(bad)))
        << e.what();
  }
  unsetenv("SLURMDDP_LOCAL_DEVICE");
}

// A rank that never arrives: the others end in TimeoutError after the
// timeout, naming themselves and who joined, instead of hanging in NCCL.
// The creation is meant to fail, so the short timeout is the subject: even
// when CUDA's setup eats most of it, the rank still records itself and then
// times out with the same diagnosis.
TEST(Errors, InitTimesOutWhenARankNeverArrives) {
  for (int present : {0, 1}) {
    auto store = make_in_process_store();
    NcclOptions o;
    o.rank = present;
    o.size = 2;
    o.device = 0;
    o.store = store;
    o.timeout = milliseconds(3000);
    const auto start = Clock::now();
    try {
      make_nccl_communicator(o);
      ADD_FAILURE() << "rank " << present << " created a communicator alone";
    } catch (const TimeoutError& e) {
      const std::string m = e.what();
      const double took = seconds_since(start);
      EXPECT_GE(took, 2.9) << m;
      EXPECT_LE(took, 20.0) << m;
      EXPECT_TRUE(contains(m, "1/2 ranks joined; missing: [" + std::to_string(1 - present) + "]"))
          << m;
      EXPECT_TRUE(contains(m, "rank=" + std::to_string(present))) << m;
    }
  }
}

// Rank 1 fails at once on the mismatch; rank 0, whose peer never starts NCCL,
// gives up after its timeout (the detection bound here), naming rank 1's size.
// Both timeouts also bound a creation (CUDA context included) that has to get
// as far as the store: kCreationTimeout (Note [Fault test timeouts]).
TEST(Errors, WorldSizeMismatchIsNamed) {
  auto store = make_in_process_store();
  std::string root_message;
  std::thread root([&] {
    NcclOptions o;
    o.rank = 0;
    o.size = 2;
    o.device = 0;
    o.store = store;
    o.timeout = kCreationTimeout;
    try {
      make_nccl_communicator(o);
    } catch (const std::exception& e) {
      root_message = e.what();
    }
  });
  NcclOptions o;
  o.rank = 1;
  o.size = 3;
  o.device = 0;
  o.store = store;
  o.timeout = kCreationTimeout;
  try {
    make_nccl_communicator(o);
    ADD_FAILURE() << "sizes 2 and 3 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "size=3 (rank 1), size=2 (rank 0)")) << e.what();
  }
  root.join();
  EXPECT_TRUE(contains(root_message, "ranks with another world size: [1 (size=3)]"))
      << root_message;
}

// ---------------------------------------------------------------- multi process

class Multi : public ::testing::TestWithParam<int> {};

TEST_P(Multi, EveryCollectiveTypeOpAndCount) {
  REQUIRE_MULTI_RANK();
  const Launch l =
      run_ranks("collectives", GetParam(), milliseconds(60000), std::chrono::seconds(240));
  for (const auto& c : l.exit_codes) EXPECT_TRUE(c && *c == 0) << describe(l);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Multi, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "ranks" + std::to_string(i.param);
                         });

TEST(MultiFailures, WorkWaitTimeoutAbortsAndBreaks) {
  REQUIRE_MULTI_RANK();
  const Launch l = run_ranks("wait_timeout", 2, kCreationTimeout, std::chrono::seconds(120));
  ASSERT_TRUE(l.exit_codes[0] && *l.exit_codes[0] == 0) << describe(l);
}

TEST(MultiFailures, WatchdogAbortsAnOperationPastTheTimeout) {
  REQUIRE_MULTI_RANK();
  // The timeout bounds the creation too: kCreationTimeout, and the watchdog
  // must act within it (checked by rank 0; Note [Fault test timeouts]).
  const Launch l = run_ranks("watchdog", 2, kCreationTimeout, std::chrono::seconds(150));
  ASSERT_TRUE(l.exit_codes[0] && *l.exit_codes[0] == 0) << describe(l);
}

TEST(MultiFailures, KilledPeerEndsInAnErrorWithinTheTimeout) {
  REQUIRE_MULTI_RANK();
  const Launch l = run_ranks("peer_killed", 2, kCreationTimeout, std::chrono::seconds(150),
                             [](Store& store, const std::vector<pid_t>& pids) {
                               try {
                                 store.wait({"test/ready/1"},
                                            std::chrono::seconds(90));  // creation + one allreduce
                               } catch (const std::exception& e) {
                                 ADD_FAILURE() << "rank 1 never became ready: " << e.what();
                               }
                               kill(pids[1], SIGKILL);
                               store.set("test/killed", Bytes{'1'});
                             });
  ASSERT_TRUE(l.exit_codes[0] && *l.exit_codes[0] == 0) << describe(l);
}

}  // namespace
}  // namespace slurmddp::gpu_testing

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--worker") == 0) {
    return slurmddp::gpu_testing::worker_main(argc, argv);
  }
  if (argc > 1 && std::strcmp(argv[1], "--count-devices") == 0) {  // for scripts/gpu-check
    // The count (0: no device), or exit 1 when CUDA is broken (device_presence.h).
    const auto c = slurmddp::gpu_testing::check_gpus();
    if (c.presence == slurmddp::gpu_testing::GpuPresence::kBroken) {
      std::fprintf(stderr, "gpu_nccl: failed to initialize CUDA: %s\n", c.detail.c_str());
      return 1;
    }
    std::printf("%d\n", c.count);
    return 0;
  }
  return slurmddp::gpu_testing::run_gpu_tests("gpu_nccl", argc, argv,
                                              &slurmddp::gpu_testing::g_device_count);
}
