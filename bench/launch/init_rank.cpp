// init_rank: one rank of bench/launch/init-scale. Runs slurmddp::init() from
// the environment (the plugin's, or the torchrun-style variables the driver
// sets), a barrier and one small allreduce, and prints one row:
//   init impl=slurmddp rank=R ranks=N init_ms=I barrier_ms=B allreduce_ms=A end_ms=E
// init_ms: the call to init(); barrier_ms, allreduce_ms: the calls after it;
// end_ms: when the allreduce returned, in ms after INIT_BENCH_T0_MS (the
// driver's launch time, ms since the epoch; 0 when unset). Exit status 1 when
// the allreduce's result is wrong.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "slurmddp/error.h"
#include "slurmddp/process_group.h"

namespace {

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

long long unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main() {
  const char* t0 = std::getenv("INIT_BENCH_T0_MS");
  const long long launched = t0 != nullptr ? std::atoll(t0) : 0;
  try {
    const auto a = std::chrono::steady_clock::now();
    auto pg = slurmddp::init();
    const auto b = std::chrono::steady_clock::now();
    auto& comm = *pg->comm();
    comm.barrier()->wait(comm.timeout());
    const auto c = std::chrono::steady_clock::now();
    std::vector<float> x(1024, 1.0f);
    comm.allreduce(x.data(), x.size(), slurmddp::DataType::kFloat32, slurmddp::ReduceOp::kSum)
        ->wait(comm.timeout());
    const auto d = std::chrono::steady_clock::now();
    const int n = pg->identity().world_size;
    for (float v : x) {
      if (v != static_cast<float>(n)) {
        std::fprintf(stderr, "init_rank: rank %d: allreduce gave %g, expected %d\n",
                     pg->identity().rank, static_cast<double>(v), n);
        return 1;
      }
    }
    std::printf(
        "init impl=slurmddp rank=%d ranks=%d init_ms=%.1f barrier_ms=%.1f allreduce_ms=%.1f "
        "end_ms=%lld\n",
        pg->identity().rank, n, ms_between(a, b), ms_between(b, c), ms_between(c, d),
        launched > 0 ? unix_ms() - launched : 0);
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "init_rank: %s\n", e.what());
    return 1;
  }
  return 0;
}
