// The rank processes of the NCCL gpu tests: one scenario each, started by
// run_ranks (nccl_ranks.h) as "--worker SCENARIO RANK SIZE PORT TIMEOUT_MS".
#include <cuda_runtime.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpu_values.h"
#include "nccl_ranks.h"
#include "rank_launcher.h"
#include "slurmddp/error.h"
#include "slurmddp/nccl_communicator.h"
#include "slurmddp/tcp_store.h"

namespace slurmddp::support {
namespace {

struct WorkerArgs {
  std::string scenario;
  int rank = 0;
  int size = 1;
  support::RankArgs self;
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

const Bytes kYes{'1'};

using Scenario = int (*)(const WorkerArgs& a, const std::shared_ptr<Store>& store);

int scenario_probe(const WorkerArgs& a, const std::shared_ptr<Store>& store) {
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
  WORKER_CHECK(got == want, "got %g want %g", static_cast<double>(got), static_cast<double>(want));
  return 0;
}

int scenario_collectives(const WorkerArgs& a, const std::shared_ptr<Store>& store) {
  std::vector<std::string> failures;
  {
    auto comm = worker_comm(a, store, "collectives");
    failures = check_collectives(*comm, device_memory, ConformanceOptions::nccl());
  }  // destroyed normally: finalize + destroy
  // Note [Average] in nccl_communicator.cpp: the sum-divide path, on a
  // second communicator made on the same store and prefix (Note [Rendezvous
  // generations]: it must get the new unique id, never the first one's).
  setenv("SLURMDDP_NCCL_AVG", "sum-divide", 1);
  {
    auto comm = worker_comm(a, store, "collectives");
    auto o = ConformanceOptions::nccl();
    o.only_average = true;
    for (auto& f : check_collectives(*comm, device_memory, o)) {
      failures.push_back("sum-divide: " + f);
    }
  }
  report(a, failures);
  return failures.empty() ? 0 : 1;
}

int scenario_stalled_peer(const WorkerArgs& a, const std::shared_ptr<Store>& store) {
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
  store->set("test/done", kYes);
  std::fprintf(stderr, "rank 0: after %.2f s: %s\n", took, message.c_str());
  WORKER_CHECK(!message.empty(), "no TimeoutError");
  WORKER_CHECK(contains(message, "allreduce of 1024 float32 (sum)"), "names the operation");
  WORKER_CHECK(contains(message, "rank=0"), "names the rank");
  // The detection bound: Work::wait's limit, or the communicator's timeout
  // (Note [Fault test timeouts]).
  const double limit_s = by_wait ? 1.0 : static_cast<double>(a.timeout.count()) / 1000.0;
  WORKER_CHECK(took >= limit_s * 0.9 && took <= limit_s + kDetectionSlackS,
               "took %.2f s, limit %.2f s", took, limit_s);
  WORKER_CHECK(contains(message, by_wait ? "Work::wait gave up" : "watchdog"), "says who gave up");
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

int scenario_peer_killed(const WorkerArgs& a, const std::shared_ptr<Store>& store) {
  auto comm = worker_comm(a, store, "peer_killed");
  const size_t n = size_t{1} << 20;
  DeviceBuffer buf(n * sizeof(float));
  comm->allreduce(buf.get(), n, DataType::kFloat32, ReduceOp::kSum)->wait(a.timeout);
  if (a.rank != 0) {
    store->set("test/ready/" + std::to_string(a.rank), kYes);
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

int run_worker(const WorkerArgs& a) {
  static const std::map<std::string, Scenario> kScenarios = {
      {"probe", scenario_probe},
      {"collectives", scenario_collectives},
      {"wait_timeout", scenario_stalled_peer},
      {"watchdog", scenario_stalled_peer},
      {"peer_killed", scenario_peer_killed},
  };
  const auto it = kScenarios.find(a.scenario);
  if (it == kScenarios.end()) {
    std::fprintf(stderr, "unknown scenario %s\n", a.scenario.c_str());
    return 2;
  }
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
  std::shared_ptr<Store> store = support::connect_store(a.self, std::chrono::seconds(30));
  return it->second(a, store);
}

}  // namespace

int worker_main(int argc, char** argv) {
  WorkerArgs a;
  try {
    a.self = support::RankArgs::take_from(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s --worker: %s\n", argv[0], e.what());
    return 2;
  }
  if (argc != 4 || !a.self.started_as_rank()) {
    std::fprintf(stderr,
                 "usage: %s --worker SCENARIO TIMEOUT_MS --rank R --world N --store-port P\n",
                 argv[0]);
    return 2;
  }
  a.scenario = argv[2];
  a.rank = a.self.rank;
  a.size = a.self.world;
  a.timeout = milliseconds(std::atol(argv[3]));
  try {
    return run_worker(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s: %s\n", a.rank, a.scenario.c_str(), e.what());
    return 1;
  }
}

}  // namespace slurmddp::support
