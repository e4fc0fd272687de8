// Ranks as processes around a store that the launcher hosts on loopback, in
// the one convention of rank_args.h: host_store() for the launcher,
// connect_store() for a rank, and launch_ranks(), which starts N processes of
// this program and reaps them. Used by the multiproc suites, the gpu suite's
// workers and the benchmarks (gpu_bench_main.h: the GPU benchmarks' main()).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rank_args.h"
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

// Starts `world` processes of this program, rank r with `args` followed by
// rank_argv(r, world, <the store's port>), around a store hosted here for as
// long as they run; waits for all of them (when one fails the others are
// SIGKILLed by pid instead of being left to their timeouts). Returns the
// largest exit status, each failure reported as "<name>: rank <r> ended with
// status <code>".
inline int launch_ranks(const char* name, int world, const std::vector<std::string>& args,
                        const RankEnv& env_of = nullptr) {
  auto store = host_store();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid =
        spawn_self(with_rank(args, r, world, store->port()), env_of ? env_of(r) : Env{});
    if (pid < 0) {
      std::fprintf(stderr, "%s: failed to start rank %d\n", name, r);
      kill_all(pids);
      return 1;
    }
    pids.push_back(pid);
  }
  return wait_all(pids, name);
}

}  // namespace slurmddp::support
