// The GPU benchmarks' launcher options and main(): one process per rank (as
// NCCL wants), started by launch_ranks (rank_launcher.h), skipping only where
// the gpu suite does (device_presence.h).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "device_presence.h"  // the gpu suite's rule for skipping
#include "rank_launcher.h"

namespace slurmddp::support {

// The GPU benchmarks' launcher options (derive the benchmark's options from
// it): --ranks N, how many ranks to start, and a rank's own arguments
// (rank_args.h), none of which is forwarded.
struct RankOptions {
  int ranks = 1;
  support::RankArgs self;  // given to a rank process by launch_ranks
  // Every option the benchmark forwards to its ranks, as "--key", "value".
  std::vector<std::string> forwarded;

  // Takes --ranks or a rank's option; false for any other option.
  bool take(const std::string& key, const std::string& value) {
    if (key == "--ranks") {
      ranks = std::atoi(value.c_str());
      return true;
    }
    return self.take(key, value);
  }
  // This rank's number (0 when the program runs alone).
  int my_rank() const { return self.started_as_rank() ? self.rank : 0; }
  // This rank's client of the store launch_ranks hosts; null when the program
  // runs alone.
  std::shared_ptr<Store> connect(std::chrono::milliseconds timeout) const {
    if (!self.started_as_rank()) return nullptr;
    return support::connect_store(self, timeout);
  }
};

// Where there are fewer devices than ranks, the ranks share devices the only
// ways NCCL allows it: each claims another host (NCCL_HOSTID; NCCL >= 2.30 also
// NCCL_MULTI_RANK_GPU_ENABLE) and they talk over loopback TCP; a check of the
// multi-process path, not a bandwidth figure.
inline support::RankEnv shared_device_env(const char* name, int ranks, int devices) {
  if (devices >= ranks) return nullptr;
  const std::string prefix = name;
  return [prefix](int r) {
    support::Env extra;
    extra["NCCL_HOSTID"] = prefix + "-rank-" + std::to_string(r);
    extra["NCCL_SOCKET_IFNAME"] = "lo";
    extra["NCCL_P2P_DISABLE"] = "1";
    extra["NCCL_SHM_DISABLE"] = "1";
    extra["NCCL_IB_DISABLE"] = "1";
    extra["NCCL_NVLS_ENABLE"] = "0";
    extra["NCCL_MULTI_RANK_GPU_ENABLE"] = "1";  // NCCL >= 2.30 allows sharing with it
    return extra;
  };
}

// The main() of a GPU benchmark once its options are parsed: exits 77 only
// where there is no device (broken CUDA fails), starts the rank processes
// (ranks > 1 and not itself a rank; each gets --ranks N and the forwarded
// options) or runs this rank, and turns an exception into a message naming
// the rank and exit status 1.
template <typename RunRank>
int gpu_bench_main(const char* name, const RankOptions& o, RunRank run_rank) {
  int devices = 0;
  if (const int status = support::gpu_gate(name, &devices); status != 0) return status;
  try {
    if (o.ranks > 1 && !o.self.started_as_rank()) {
      std::vector<std::string> args = {"--ranks", std::to_string(o.ranks)};
      args.insert(args.end(), o.forwarded.begin(), o.forwarded.end());
      return support::launch_ranks(name, o.ranks, args, shared_device_env(name, o.ranks, devices));
    }
    return run_rank(devices);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "%s: rank %d: %s\n", name, o.my_rank(), ex.what());
    return 1;
  }
}

}  // namespace slurmddp::support
