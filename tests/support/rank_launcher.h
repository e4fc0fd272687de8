// Starts N rank processes of the calling benchmark around a TCP store that the
// parent hosts on loopback, and reaps them: the multi-process launcher of the
// GPU benchmarks (one process per rank, as NCCL wants).
//
//   if (ranks > 1 && my_rank < 0) return slurmddp::bench::launch_ranks("name", ranks, devices,
//   fwd);
//
// Rank r runs `<this program> --ranks N --rank r --port P <forwarded...>`.
// Where there are fewer devices than ranks, the ranks share devices the only
// ways NCCL allows it: each claims another host (NCCL_HOSTID; NCCL >= 2.30 also
// NCCL_MULTI_RANK_GPU_ENABLE) and they talk over loopback TCP; a check of the multi-process path,
// not a bandwidth figure. When one rank fails the others are killed (by pid) instead of being left
// to their timeouts. Returns the worst exit status.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "device_presence.h"  // the gpu suite's rule for skipping
#include "slurmddp/tcp_store.h"
#include "subprocess.h"  // tests/support

namespace slurmddp::bench {

// The launcher's own options, which every GPU benchmark accepts (derive the
// benchmark's options from it) and does not forward to its ranks.
struct RankOptions {
  int ranks = 1;
  int rank = -1;  // >= 0: a rank process started by launch_ranks
  uint16_t port = 0;
  // Every option the benchmark forwards to its ranks, as "--key", "value".
  std::vector<std::string> forwarded;

  // Takes --ranks, --rank or --port; false for any other option.
  bool take(const std::string& key, const std::string& value) {
    if (key == "--ranks") {
      ranks = std::atoi(value.c_str());
    } else if (key == "--rank") {
      rank = std::atoi(value.c_str());
    } else if (key == "--port") {
      port = static_cast<uint16_t>(std::atoi(value.c_str()));
    } else {
      return false;
    }
    return true;
  }
  // This rank's number (0 when the program runs alone).
  int my_rank() const { return rank < 0 ? 0 : rank; }
  // This rank's client of the store launch_ranks hosts; null for one rank.
  std::shared_ptr<Store> connect(std::chrono::milliseconds timeout) const {
    if (ranks <= 1) return nullptr;
    TcpStoreOptions so;
    so.host = "127.0.0.1";
    so.port = port;
    so.timeout = timeout;
    return make_tcp_store(so);
  }
};

inline int launch_ranks(const char* name, int ranks, int devices,
                        const std::vector<std::string>& forwarded) {
  TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  auto store = make_tcp_store(so);
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::string> args = {"--ranks", std::to_string(ranks),
                                     "--rank",  std::to_string(r),
                                     "--port",  std::to_string(store->port())};
    args.insert(args.end(), forwarded.begin(), forwarded.end());
    support::Env extra;
    if (devices < ranks) {  // see the header comment
      extra["NCCL_HOSTID"] = std::string(name) + "-rank-" + std::to_string(r);
      extra["NCCL_SOCKET_IFNAME"] = "lo";
      extra["NCCL_P2P_DISABLE"] = "1";
      extra["NCCL_SHM_DISABLE"] = "1";
      extra["NCCL_IB_DISABLE"] = "1";
      extra["NCCL_NVLS_ENABLE"] = "0";
      extra["NCCL_MULTI_RANK_GPU_ENABLE"] = "1";  // NCCL >= 2.30 allows sharing with it
    }
    const pid_t pid = support::spawn_self(args, extra);
    if (pid < 0) {
      std::fprintf(stderr, "%s: failed to start rank %d\n", name, r);
      support::kill_all(pids);
      return 1;
    }
    pids.push_back(pid);
  }
  return support::wait_all(pids, name);
}

// The main() of a GPU benchmark once its options are parsed: exits 77 only
// where there is no device (broken CUDA fails), starts the rank processes
// (ranks > 1 and no --rank given) or runs this rank, and turns an exception
// into a message naming the rank and exit status 1.
template <typename RunRank>
int gpu_bench_main(const char* name, const RankOptions& o, RunRank run_rank) {
  int devices = 0;
  if (const int status = gpu_testing::gpu_gate(name, &devices); status != 0) return status;
  try {
    if (o.ranks > 1 && o.rank < 0) return launch_ranks(name, o.ranks, devices, o.forwarded);
    return run_rank(devices);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "%s: rank %d: %s\n", name, o.my_rank(), ex.what());
    return 1;
  }
}

}  // namespace slurmddp::bench
