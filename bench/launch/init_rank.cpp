// init_rank: one rank of bench/launch/init-scale. Runs slurmddp::init() from
// the environment (the plugin's, or the torchrun-style variables the driver
// sets), a barrier and one small allreduce, and prints one row:
//   init impl=slurmddp rank=R ranks=N init_ms=I barrier_ms=B allreduce_ms=A end_ms=E
// init_ms: the call to init(); barrier_ms, allreduce_ms: the calls after it;
// end_ms: when the allreduce returned, in ms after INIT_BENCH_T0_MS (the
// driver's launch time, ms since the epoch; 0 when unset). Exit status 1 when
// the allreduce's result is wrong.
// Rank 0, which hosts the store, then prints what the store served and its
// own peak memory:
//   store rank=0 accepted=C requests=M keys=K peak_buffered_bytes=B max_rss_kb=R
// A failure prints one line: init_rank: rank R: failed after N ms: <error>.
// INIT_BENCH_ABSENT_RANK=R: that rank exits at once without calling init()
// (a rank that never starts; the others must name it).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "slurmddp/error.h"
#include "slurmddp/process_group.h"
#include "slurmddp/tcp_store.h"

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

int env_int(const char* name, int unset) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : unset;
}

void print_store(const slurmddp::ProcessGroup& pg) {
  auto tcp = std::dynamic_pointer_cast<slurmddp::TcpStore>(pg.store());
  if (!tcp || tcp->server() == nullptr) return;
  const slurmddp::TcpStoreServerStats s = tcp->server()->stats();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "store rank=0 accepted=%llu requests=%llu keys=%llu peak_buffered_bytes=%llu "
      "max_rss_kb=%ld\n",
      static_cast<unsigned long long>(s.accepted), static_cast<unsigned long long>(s.requests),
      static_cast<unsigned long long>(s.keys),
      static_cast<unsigned long long>(s.peak_buffered_bytes), ru.ru_maxrss);
}

}  // namespace

int main() {
  const char* t0 = std::getenv("INIT_BENCH_T0_MS");
  const long long launched = t0 != nullptr ? std::atoll(t0) : 0;
  const int env_rank = env_int("RANK", -1);
  if (env_rank >= 0 && env_rank == env_int("INIT_BENCH_ABSENT_RANK", -1)) return 0;
  const auto start = std::chrono::steady_clock::now();
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
    if (pg->identity().rank == 0) print_store(*pg);
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "init_rank: rank %d: failed after %.0f ms: %s\n", env_rank,
                 ms_between(start, std::chrono::steady_clock::now()), e.what());
    return 1;
  }
  return 0;
}
