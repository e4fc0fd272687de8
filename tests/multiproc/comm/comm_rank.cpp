// One rank of the multiproc communicator tests, run as its own process by
// comm_multiproc_test. Talks to the parent through stdout lines:
//   READY                      the loop scenario completed its first operation
//   RESULT ok                  the scenario passed
//   RESULT <kind> <ms> <text>  an operation failed: kind is PeerError,
//                              TimeoutError, InvalidArgument or Error; ms is
//                              CLOCK_MONOTONIC in milliseconds when it did
//   RESULT wrong <text>        a result differed from its closed form
//
// Usage: comm_rank <scenario> <rank> <size> <store port> <prefix> <timeout ms> [count]
//   scenario "collectives": every collective x type x reduction, checked
//   scenario "loop":        allreduce float32 sum of `count` elements until it fails
//   scenario "join":        create the communicator only
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "collective_checks.h"
#include "expected_values.h"
#include "slurmddp/error.h"
#include "slurmddp/gloo_communicator.h"
#include "slurmddp/tcp_store.h"

using namespace slurmddp;
using namespace slurmddp::testing;

namespace {

long long monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s scenario rank size port prefix timeout_ms [count]\n", argv[0]);
    return 2;
  }
  const std::string scenario = argv[1];
  const int rank = std::atoi(argv[2]);
  const int size = std::atoi(argv[3]);
  const auto port = static_cast<uint16_t>(std::atoi(argv[4]));
  const std::string prefix = argv[5];
  const std::chrono::milliseconds timeout(std::atol(argv[6]));
  const size_t count = argc > 7 ? std::strtoull(argv[7], nullptr, 10) : 1001;
  try {
    TcpStoreOptions so;
    so.host = "127.0.0.1";
    so.port = port;
    so.timeout = timeout;
    GlooOptions o;
    o.rank = rank;
    o.size = size;
    o.store = make_tcp_store(so);
    o.prefix = prefix;
    o.hostname = "127.0.0.1";
    o.timeout = timeout;
    auto comm = make_gloo_communicator(o);
    if (scenario == "collectives") return run_collectives(*comm);
    if (scenario == "loop") return run_loop(*comm, count);
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
