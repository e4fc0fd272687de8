// One rank of the multiproc communicator tests, run as its own process by
// comm_multiproc_test. Talks to the parent through stdout lines:
//   START <ms>                 main() began (CLOCK_MONOTONIC in milliseconds)
//   READY                      the loop scenario completed its first operation
//   RESULT ok                  the scenario passed
//   RESULT <kind> <ms> <text>  an operation failed: kind is PeerError,
//                              TimeoutError, InvalidArgument or Error; ms is
//                              CLOCK_MONOTONIC in milliseconds when it did
//   RESULT wrong <text>        a result differed from its closed form
//
// Usage: comm_rank <scenario> <prefix> <timeout ms> [count] --rank R --world N --store-port P
//   (rank_args.h)
//   scenario "collectives": every collective x type x reduction, checked
//   scenario "loop":        allreduce float32 sum of `count` elements until it fails
//   scenario "join":        create the communicator only
//   scenario "scale":       a barrier, then one small allreduce, broadcast and
//                           allgather with closed-form results (many ranks)
// COMM_RANK_FLAT_MESH_MAX, when set, is GlooOptions::flat_mesh_max.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "collective_values.h"
#include "rank_launcher.h"
#include "rank_results.h"
#include "slurmddp/error.h"
#include "slurmddp/gloo_communicator.h"
#include "slurmddp/tcp_store.h"
#include "subprocess.h"

using namespace slurmddp;
using namespace slurmddp::support;

namespace {

using slurmddp::support::monotonic_ms;

int run_loop(Communicator& c, size_t count) {
  std::vector<float> x(count);
  for (long iteration = 0;; ++iteration) {
    for (size_t i = 0; i < count; ++i) {
      x[i] = static_cast<float>(input_value(DataType::kFloat32, c.rank(), i));
    }
    c.allreduce(x.data(), count, DataType::kFloat32, ReduceOp::kSum)->wait(c.timeout() * 3);
    if (iteration == 0) {
      auto m = mismatches(DataType::kFloat32, x.data(), count, [&](size_t i) {
        return expected_reduction(DataType::kFloat32, ReduceOp::kSum, c.size(), i);
      });
      if (!m.empty()) wrong("loop allreduce:" + m);
      say("READY");
    }
  }
}

// What a rank does first at scale: cheap per rank, and every collective once.
int run_scale(Communicator& c) {
  const int n = c.size(), r = c.rank();
  c.barrier()->wait(c.timeout());
  std::vector<int64_t> sum(257, r);
  c.allreduce(sum.data(), sum.size(), DataType::kInt64, ReduceOp::kSum)->wait(c.timeout());
  const int64_t expected = static_cast<int64_t>(n) * (n - 1) / 2;
  for (int64_t v : sum) {
    if (v != expected) {
      wrong("scale allreduce: " + std::to_string(v) + " != " + std::to_string(expected));
    }
  }
  std::vector<float> b(1001, r == n - 1 ? -0.0f : 1.0f);
  if (r == n - 1) b[7] = 3.5f;
  c.broadcast(b.data(), b.size(), DataType::kFloat32, n - 1)->wait(c.timeout());
  if (!std::signbit(b[0]) || b[7] != 3.5f) wrong("scale broadcast: not the root's bits");
  std::vector<int32_t> mine{r, -r}, all(2 * static_cast<size_t>(n));
  c.allgather(mine.data(), all.data(), 2, DataType::kInt32)->wait(c.timeout());
  for (int j = 0; j < n; ++j) {
    if (all[2 * static_cast<size_t>(j)] != j || all[2 * static_cast<size_t>(j) + 1] != -j) {
      wrong("scale allgather: rank " + std::to_string(j) + "'s block");
    }
  }
  say("RESULT ok");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  slurmddp::support::RankArgs self;
  try {
    self = slurmddp::support::RankArgs::take_from(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 2;
  }
  if (argc < 4 || !self.started_as_rank()) {
    std::fprintf(stderr,
                 "usage: %s scenario prefix timeout_ms [count] --rank R --world N --store-port P\n",
                 argv[0]);
    return 2;
  }
  say("START " + std::to_string(monotonic_ms()));
  const std::string scenario = argv[1];
  const std::string prefix = argv[2];
  const std::chrono::milliseconds timeout(std::atol(argv[3]));
  const size_t count = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 1001;
  try {
    GlooOptions o;
    o.rank = self.rank;
    o.size = self.world;
    o.store = slurmddp::support::connect_store(self, timeout);
    o.prefix = prefix;
    o.hostname = "127.0.0.1";
    o.timeout = timeout;
    if (const char* v = std::getenv("COMM_RANK_FLAT_MESH_MAX")) o.flat_mesh_max = std::atoi(v);
    auto comm = make_gloo_communicator(o);
    if (scenario == "collectives") return run_collectives(*comm);
    if (scenario == "loop") return run_loop(*comm, count);
    if (scenario == "scale") return run_scale(*comm);
    if (scenario == "join") {
      say("RESULT ok");
      return 0;
    }
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  } catch (const PeerError& e) {
    say("RESULT PeerError " + std::to_string(monotonic_ms()) + " " + e.what());
  } catch (const TimeoutError& e) {
    say("RESULT TimeoutError " + std::to_string(monotonic_ms()) + " " + e.what());
  } catch (const InvalidArgument& e) {
    say("RESULT InvalidArgument " + std::to_string(monotonic_ms()) + " " + e.what());
  } catch (const std::exception& e) {
    say("RESULT Error " + std::to_string(monotonic_ms()) + " " + e.what());
  }
  return 0;
}
