// runtime_probe: slurmddp::init() from the environment the step provides, then
// collectives with closed-form results. Prints one line per rank:
//   runtime rank=R world=W local=L/LW node=N source=S bootstrap=B backend=K ok=1 host=H gpu=G
// (G: the entry of the task's GPU list that init() settled on, or "none")
// and exits 1 (with the reason on stderr) when a result is wrong.
//   runtime_probe [--expect-world N] [--steps N]
//                 [--fault kill|stop|sleep|report|slow|kill-in-store --fault-rank R
//                  --fault-step S] [--sleep-seconds N] [--step-ms N] [--slow-ms N]
// --steps runs N more allreduces after the checks (a training loop; each rank
// prints "runtime rank=R training" when it starts it). --fault makes rank R
// SIGKILL or SIGSTOP itself before step S, for fault injection; with
// kill-in-store every rank enters a store barrier at step S and rank R dies
// just before it (the others then wait on the store it hosted, if R is 0).
// --fault sleep makes rank R sleep --sleep-seconds in its "user code" before
// step S (the others wait in the allreduce: a hang report's case); --fault
// report makes rank R raise the report signal (SIGURG, Note [Report signal])
// and go on; --fault slow makes rank R compute --slow-ms more in every step
// (a straggler). --step-ms: each step also computes (sleeps) that long.
// The fault line carries at_ms, and a rank that fails prints, after its
// process group is gone (rank 0: its store's server too), "runtime rank=R
// exit_ms=M": both CLOCK_MONOTONIC, one clock for every node of the test
// cluster.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "slurmddp/error.h"
#include "slurmddp/process_group.h"
#include "subprocess.h"

using slurmddp::support::monotonic_ms;

int main(int argc, char** argv) {
  int expect_world = -1, steps = 0, fault_rank = -1, fault_step = -1, sleep_seconds = 0,
      step_ms = 0, slow_ms = 0;
  std::string fault;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--expect-world") {
      expect_world = std::atoi(v.c_str());
    } else if (k == "--steps") {
      steps = std::atoi(v.c_str());
    } else if (k == "--fault") {
      fault = v;
    } else if (k == "--fault-rank") {
      fault_rank = std::atoi(v.c_str());
    } else if (k == "--fault-step") {
      fault_step = std::atoi(v.c_str());
    } else if (k == "--sleep-seconds") {
      sleep_seconds = std::atoi(v.c_str());
    } else if (k == "--step-ms") {
      step_ms = std::atoi(v.c_str());
    } else if (k == "--slow-ms") {
      slow_ms = std::atoi(v.c_str());
    } else {
      std::fprintf(stderr, "runtime_probe: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::string rank = std::getenv("SLURM_PROCID") != nullptr ? std::getenv("SLURM_PROCID") : "?";
  try {
    auto pg = slurmddp::init();
    const auto& id = pg->identity();
    rank = std::to_string(id.rank);
    if (expect_world > 0 && id.world_size != expect_world) {
      std::fprintf(stderr,
                   "runtime_probe: failed to start: this program needs WORLD_SIZE=%d but the step "
                   "has WORLD_SIZE=%d (rank %d)\n",
                   expect_world, id.world_size, id.rank);
      return 2;
    }
    auto& comm = *pg->comm();
    const int n = 1000, w = id.world_size;
    std::vector<float> f(n);
    std::vector<int64_t> m(n);
    for (int i = 0; i < n; ++i) {
      f[i] = static_cast<float>((id.rank + 1) * (i % 7 + 1));
      m[i] = static_cast<int64_t>(id.rank) * 1000 + i;
    }
    comm.allreduce(f.data(), n, slurmddp::DataType::kFloat32, slurmddp::ReduceOp::kSum)
        ->wait(pg->timeout());
    comm.allreduce(m.data(), n, slurmddp::DataType::kInt64, slurmddp::ReduceOp::kMax)
        ->wait(pg->timeout());
    int bad = 0;
    for (int i = 0; i < n; ++i) {
      bad += f[i] != static_cast<float>(w * (w + 1) / 2 * (i % 7 + 1));
      bad += m[i] != static_cast<int64_t>(w - 1) * 1000 + i;
    }
    // Several pieces of the shared-memory tier (Note [Shared-memory tier]):
    // 5,000,011 float64, exact in closed form.
    std::vector<double> big(5000011);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>((id.rank + 1) * (i % 13));
    comm.allreduce(big.data(), big.size(), slurmddp::DataType::kFloat64, slurmddp::ReduceOp::kSum)
        ->wait(pg->timeout());
    for (size_t i = 0; i < big.size(); ++i) {
      bad += big[i] != static_cast<double>(w * (w + 1) / 2) * static_cast<double>(i % 13);
    }
    if (bad != 0) {
      std::fprintf(stderr, "runtime_probe: rank %d: %d wrong elements\n", id.rank, bad);
      return 1;
    }
    std::vector<float> grads(1 << 16);
    if (steps > 0) {
      std::printf("runtime rank=%d training\n", id.rank);
      std::fflush(stdout);
    }
    for (int step = 0; step < steps; ++step) {
      if (id.rank == fault_rank && step == fault_step) {
        std::printf("runtime rank=%d fault=%s step=%d at_ms=%lld\n", id.rank, fault.c_str(), step,
                    monotonic_ms());
        std::fflush(stdout);
        if (fault == "sleep") {
          sleep(static_cast<unsigned>(sleep_seconds));  // a slow data loader, say
        } else if (fault == "report") {
          raise(SIGURG);  // as `scancel --signal=URG` does
        } else {
          raise(fault == "stop" ? SIGSTOP : SIGKILL);
        }
      }
      if (fault == "kill-in-store" && step == fault_step) {
        slurmddp::store_barrier(*pg->store(), "probe/step", id.rank, w, pg->timeout());
      }
      const int compute_ms = step_ms + (fault == "slow" && id.rank == fault_rank ? slow_ms : 0);
      if (compute_ms > 0) usleep(static_cast<useconds_t>(compute_ms) * 1000);  // the step's compute
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(id.rank + step);
      comm.allreduce(grads.data(), grads.size(), slurmddp::DataType::kFloat32,
                     slurmddp::ReduceOp::kAvg)
          ->wait(pg->timeout());
      const float want = static_cast<float>(w - 1) / 2.0f + static_cast<float>(step);
      if (grads[0] != want || grads.back() != want) {
        std::fprintf(stderr, "runtime_probe: rank %d step %d: got %g, want %g\n", id.rank, step,
                     static_cast<double>(grads[0]), static_cast<double>(want));
        return 1;
      }
      pg->step_done(step);  // for the hang report (Note [Progress records])
    }
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const std::string gpu =
        id.local_device && static_cast<size_t>(*id.local_device) < id.gpus.size()
            ? id.gpus[static_cast<size_t>(*id.local_device)]
            : "none";
    std::printf(
        "runtime rank=%d world=%d local=%d/%d node=%d source=%s bootstrap=%s backend=%s ok=1 "
        "host=%s gpu=%s\n",
        id.rank, w, id.local_rank, id.local_world_size, id.node_rank,
        slurmddp::to_string(id.source),
        pg->bootstrap() == slurmddp::Bootstrap::kPmix ? "pmix" : "tcp",
        slurmddp::to_string(comm.backend()), host, gpu.c_str());
    std::fflush(stdout);
    pg->shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "runtime_probe: %s\n", e.what());
    std::printf("runtime rank=%s exit_ms=%lld\n", rank.c_str(), monotonic_ms());
    return 1;
  }
  return 0;
}
