// Ranks as processes around a store that the launcher hosts on loopback, in
// the one convention of rank_args.h: host_store() for the launcher,
// connect_store() for a rank, self_with_rank() for a RankGroup (rank_group.h)
// of this program, and launch_ranks(), which starts N of them and reaps them.
// Used by the multiproc suites, the gpu suite's workers and the benchmarks
// (gpu_bench_main.h: the GPU benchmarks' main()).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rank_args.h"
#include "rank_group.h"
#include "slurmddp/tcp_store.h"
#include "subprocess.h"

namespace slurmddp::support {

// The launcher's store: a TCP store server on 127.0.0.1, on a free port.
inline std::shared_ptr<TcpStore> host_store(std::chrono::milliseconds timeout = kDefaultTimeout) {
  TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  so.server.bind_host = "127.0.0.1";
  so.timeout = timeout;
  return make_tcp_store(so);
}

// A rank's client of its launcher's store.
inline std::shared_ptr<TcpStore> connect_store(const RankArgs& a,
                                               std::chrono::milliseconds timeout) {
  a.check();
  TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = a.store_port;
  so.timeout = timeout;
  return make_tcp_store(so);
}

// Extra environment for rank r (nullptr: none).
using RankEnv = std::function<Env(int rank)>;

// The rank_args.h convention over RankGroup: rank r runs this program again
// with `args` followed by rank_argv(r, world, store_port), and env_of(r).
inline LaunchOf self_with_rank(const std::vector<std::string>& args, uint16_t store_port,
                               const RankEnv& env_of = nullptr) {
  return [=](int r, int world) {
    std::vector<std::string> argv{self_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RankLaunch{with_rank(argv, r, world, store_port), env_of ? env_of(r) : Env{}};
  };
}

// Starts `world` ranks (self_with_rank; this process's stdout and stderr)
// around a store hosted here for as long as they run, and waits for all of
// them (once one fails the others are SIGKILLed instead of being left to
// their timeouts). Returns the largest exit status, each failure reported as
// "<name>: rank <r> ended with status <code>".
inline int launch_ranks(const char* name, int world, const std::vector<std::string>& args,
                        const RankEnv& env_of = nullptr) {
  auto store = host_store();
  std::optional<RankGroup> ranks;
  try {
    ranks.emplace(world, self_with_rank(args, store->port(), env_of), Output::kInherited);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: failed to start %s\n", name, e.what());
    return 1;
  }
  int worst = 0;
  const auto codes = ranks->wait_all(Clock::time_point::max(), /*stop_on_failure=*/true);
  for (size_t r = 0; r < codes.size(); ++r) {
    const int code = codes[r].value_or(-1);
    if (code == 0) continue;
    std::fprintf(stderr, "%s: rank %zu ended with status %d\n", name, r, code);
    worst = std::max(worst, code);
  }
  return worst;
}

}  // namespace slurmddp::support
