// Allreduce (float32, sum) through slurm-ddp's Gloo communicator, ranks as
// processes on loopback, printed in nccl-tests' columns:
//   size(B) count type redop time(us) algbw(GB/s) busbw(GB/s) #wrong
// GB = 1e9; busbw = algbw * 2(n-1)/n. Per size: untimed warm-up, then
// repetitions that each start from a barrier; a repetition's time is that of
// the slowest rank, and the row shows the median over repetitions. #wrong counts
// elements (all ranks) that differ from the closed form of the last repetition;
// any wrong element makes the exit status 1.
//
// Usage: gloo_allreduce_bench [--ranks N] [--min-bytes B] [--max-bytes B]
//                             [--factor F] [--iters R] [--warmup W]
//                             [--ifname IF | --hostname H] [--timeout-ms T]
//                             [--small-max-bytes B]
//        srun ... gloo_allreduce_bench --from-environment [--min-bytes B] ...
// (--small-max-bytes overrides GlooOptions::small_max_bytes, for experiments)
// The launcher hosts the TCP store and starts N copies of itself as workers.
// With --from-environment every task is a rank of slurmddp::init(): identity,
// rendezvous and communicator as a training program gets them under srun
// (the plugin's variables; SLURMDDP_BACKEND picks gloo or mpi, SLURMDDP_SHM=0
// turns the shared-memory tier off), which is how the benchmark runs across
// the nodes of a cluster.
#include <gloo/config.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rank_launcher.h"  // tests/support
#include "slurmddp/error.h"
#include "slurmddp/gloo_communicator.h"
#include "slurmddp/process_group.h"
#include "slurmddp/tcp_store.h"
#include "stats.h"

namespace {

using namespace slurmddp;

struct Config {
  int ranks = 2;
  size_t min_bytes = 4096;
  size_t max_bytes = size_t{256} << 20;
  size_t factor = 2;
  int iters = 0;    // 0: by size
  int warmup = -1;  // -1: by size
  std::string ifname;
  std::string hostname = "127.0.0.1";
  long timeout_ms = 300000;
  long long small_max = -1;  // -1: GlooOptions default
  bool from_environment = false;
  // a worker: --rank R --world N --store-port P (rank_args.h)
  slurmddp::support::RankArgs self;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--ranks N] [--min-bytes B] [--max-bytes B] [--factor F] [--iters R]\n"
               "          [--warmup W] [--ifname IF | --hostname H] [--timeout-ms T]\n"
               "          [--small-max-bytes B]\n"
               "       srun ... %s --from-environment [--min-bytes B] [--max-bytes B] ...\n",
               argv0, argv0);
  std::exit(2);
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(argv[0]);
      return argv[++i];
    };
    if (a == "--ranks") {
      c.ranks = std::stoi(next());
    } else if (a == "--min-bytes") {
      c.min_bytes = std::stoull(next());
    } else if (a == "--max-bytes") {
      c.max_bytes = std::stoull(next());
    } else if (a == "--factor") {
      c.factor = std::stoull(next());
    } else if (a == "--iters") {
      c.iters = std::stoi(next());
    } else if (a == "--warmup") {
      c.warmup = std::stoi(next());
    } else if (a == "--ifname") {
      c.ifname = next();
      c.hostname.clear();
    } else if (a == "--hostname") {
      c.hostname = next();
      c.ifname.clear();
    } else if (a == "--timeout-ms") {
      c.timeout_ms = std::stol(next());
    } else if (a == "--small-max-bytes") {
      c.small_max = std::stoll(next());
    } else if (a == "--from-environment") {
      c.from_environment = true;
    } else if (c.self.take(a, i + 1 < argc ? argv[i + 1] : "")) {
      ++i;
    } else {
      usage(argv[0]);
    }
  }
  if (c.ranks < 1 || c.min_bytes < 4 || c.max_bytes < c.min_bytes || c.factor < 2) usage(argv[0]);
  return c;
}

// Repetitions and warm-up by message size (about 1 GiB of payload per size,
// within [5, 200] repetitions).
int iterations_for(const Config& c, size_t bytes) {
  if (c.iters > 0) return c.iters;
  const size_t r = (size_t{1} << 30) / bytes;
  return static_cast<int>(std::clamp<size_t>(r, 5, 200));
}

int warmup_for(const Config& c, size_t bytes) {
  if (c.warmup >= 0) return c.warmup;
  return bytes >= (size_t{64} << 20) ? 1 : 3;
}

float input(int rank, size_t i) {
  const float k = static_cast<float>(i % 7 + 1);
  return ((i % 2) ? -1.0f : 1.0f) * static_cast<float>(rank + 1) * k;
}

float expected(int n, size_t i) {
  const float k = static_cast<float>(i % 7 + 1);
  return ((i % 2) ? -1.0f : 1.0f) * k * static_cast<float>(n * (n + 1) / 2);
}

// "rank:host/pid" of every rank, gathered through the communicator.
std::string rank_map(Communicator& comm) {
  constexpr size_t kEntry = 64;  // bytes per rank, as 16 int32 for allgather
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string me = std::string(host) + "/" + std::to_string(getpid());
  me.resize(kEntry - 1);
  std::vector<char> mine(kEntry, '\0');
  std::memcpy(mine.data(), me.data(), me.size());
  std::vector<char> all(kEntry * static_cast<size_t>(comm.size()));
  comm.allgather(mine.data(), all.data(), kEntry / 4, DataType::kInt32)->wait(comm.timeout());
  std::string map;
  for (int r = 0; r < comm.size(); ++r) {
    map +=
        " " + std::to_string(r) + ":" + std::string(all.data() + kEntry * static_cast<size_t>(r));
  }
  return map;
}

// The measurement on a ready communicator; rank 0 prints the preamble lines
// it is given, then the table.
int measure(const Config& c, Communicator& comm, const std::vector<std::string>& preamble) {
  const int n = comm.size();
  const int rank = comm.rank();
  const auto timeout = comm.timeout();
  const std::string map = rank_map(comm);
  slurmddp::bench::TableOptions columns;
  columns.ranks = n;
  columns.time_decimals = 1;
  columns.bw_decimals = 3;
  slurmddp::bench::Table table(columns);
  if (rank == 0) {
    for (const auto& line : preamble) std::printf("# %s\n", line.c_str());
    std::printf(
        "# per size: untimed warm-up, repetitions from a barrier, time = median over "
        "repetitions of the slowest rank; GB = 1e9, busbw = algbw * 2(n-1)/n\n");
    std::printf("# rank:host/pid%s\n", map.c_str());
    table.print_header();
  }

  int64_t total_wrong = 0;
  for (size_t bytes = c.min_bytes; bytes <= c.max_bytes; bytes *= c.factor) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> src(count), buf(count);
    for (size_t i = 0; i < count; ++i) src[i] = input(rank, i);
    const int reps = iterations_for(c, bytes);
    const int warm = warmup_for(c, bytes);
    for (int w = 0; w < warm; ++w) {
      std::memcpy(buf.data(), src.data(), bytes);
      comm.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum)->wait(timeout);
    }
    std::vector<double> us(static_cast<size_t>(reps));
    for (int r = 0; r < reps; ++r) {
      std::memcpy(buf.data(), src.data(), bytes);  // untimed: every repetition starts fresh
      comm.barrier()->wait(timeout);
      const auto t0 = std::chrono::steady_clock::now();
      comm.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum)->wait(timeout);
      const auto t1 = std::chrono::steady_clock::now();
      us[static_cast<size_t>(r)] = std::chrono::duration<double, std::micro>(t1 - t0).count();
    }
    int64_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      if (buf[i] != expected(n, i)) ++wrong;
    }
    // The slowest rank per repetition, and the wrong elements of all ranks.
    comm.allreduce(us.data(), us.size(), DataType::kFloat64, ReduceOp::kMax)->wait(timeout);
    comm.allreduce(&wrong, 1, DataType::kInt64, ReduceOp::kSum)->wait(timeout);
    total_wrong += wrong;
    if (rank == 0) {
      slurmddp::bench::TableRow row;
      row.bytes = bytes;
      row.count = count;
      row.type = "float";  // as torch_gloo_allreduce.py names it
      row.redop = "sum";
      row.time_us = slurmddp::bench::median_of(us);
      row.wrong = wrong;
      table.print_row(row);
    }
  }
  comm.barrier()->wait(timeout);
  return total_wrong == 0 ? 0 : 1;
}

std::string algorithms_line(size_t small_max_bytes) {
  size_t wmem = 0;
  if (FILE* f = std::fopen("/proc/sys/net/core/wmem_max", "r")) {
    if (std::fscanf(f, "%zu", &wmem) != 1) wmem = 0;
    std::fclose(f);
  }
  return "algorithms: ranks of a node reduce through shared memory, node leaders over TCP "
         "(SLURMDDP_SHM=0: all over TCP); on TCP up to min(small_max_bytes " +
         std::to_string(small_max_bytes) + ", net.core.wmem_max " + std::to_string(wmem) +
         ", 16 MiB/(n-1)) halving-doubling on blocking sockets (2 ranks: one exchange), above "
         "that gloo::allreduce ring in place";
}

int worker(const Config& c) {
  auto store = slurmddp::support::connect_store(c.self, std::chrono::milliseconds(c.timeout_ms));

  GlooOptions o;
  o.rank = c.self.rank;
  o.size = c.self.world;
  o.store = store;
  o.prefix = "bench/gloo";
  o.ifname = c.ifname;
  o.hostname = c.hostname;
  o.timeout = std::chrono::milliseconds(c.timeout_ms);
  if (c.small_max >= 0) o.small_max_bytes = static_cast<size_t>(c.small_max);
  auto comm = make_gloo_communicator(o);
  const char* shm = std::getenv("SLURMDDP_SHM");
  return measure(
      c, *comm,
      {"slurm-ddp allreduce benchmark: Gloo communicator (bench/comm/gloo_allreduce_bench)",
       "libgloo " + std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) +
           "." + std::to_string(GLOO_VERSION_PATCH) + " (TCP transport), " +
           std::to_string(comm->size()) + " ranks as processes, " +
           (c.ifname.empty() ? "hostname " + c.hostname : "interface " + c.ifname) + ", timeout " +
           std::to_string(c.timeout_ms) + " ms, SLURMDDP_SHM=" + (shm != nullptr ? shm : "<unset>"),
       algorithms_line(o.small_max_bytes)});
}

// Every task a rank of init(), as a training program under srun.
int environment_worker(const Config& c) {
  InitOptions options;
  options.timeout = std::chrono::milliseconds(c.timeout_ms);
  auto pg = init(options);
  const auto& id = pg->identity();
  const char* shm = std::getenv("SLURMDDP_SHM");
  std::vector<std::string> preamble = {
      "slurm-ddp allreduce benchmark: init() under the launcher "
      "(bench/comm/gloo_allreduce_bench --from-environment)",
      "backend " + std::string(to_string(pg->comm()->backend())) + ", " +
          std::to_string(id.world_size) + " ranks on " + std::to_string(id.num_nodes) +
          " node(s), " + std::to_string(id.local_world_size) + " on rank 0's node, timeout " +
          std::to_string(c.timeout_ms) + " ms, SLURMDDP_SHM=" + (shm != nullptr ? shm : "<unset>"),
  };
  if (pg->comm()->backend() == Backend::kGloo) {
    preamble.push_back(algorithms_line(GlooOptions{}.small_max_bytes));
  }
  const int rc = measure(c, *pg->comm(), preamble);
  pg->shutdown();
  return rc;
}

int launcher(const Config& c) {
  std::vector<std::string> args = {"--ranks",           std::to_string(c.ranks),
                                   "--min-bytes",       std::to_string(c.min_bytes),
                                   "--max-bytes",       std::to_string(c.max_bytes),
                                   "--factor",          std::to_string(c.factor),
                                   "--iters",           std::to_string(c.iters),
                                   "--warmup",          std::to_string(c.warmup),
                                   "--timeout-ms",      std::to_string(c.timeout_ms),
                                   "--small-max-bytes", std::to_string(c.small_max)};
  if (!c.ifname.empty()) {
    args.insert(args.end(), {"--ifname", c.ifname});
  } else {
    args.insert(args.end(), {"--hostname", c.hostname});
  }
  // A worker that fails leaves the others blocked until their timeout:
  // launch_ranks ends them.
  return slurmddp::support::launch_ranks("gloo_allreduce_bench", c.ranks, args) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Config c = parse(argc, argv);
  try {
    if (c.from_environment) return environment_worker(c);
    return c.self.started_as_rank() ? worker(c) : launcher(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce_bench: %s\n", e.what());
    return 1;
  }
}
