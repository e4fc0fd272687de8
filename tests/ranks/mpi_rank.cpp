// One rank of the MPI communicator's tests, started by mpirun (or srun
// --mpi=pmix): an MPI program that also uses slurm-ddp (Note [MPI communicator]).
//
// Usage: mpi_rank <scenario>
//   collectives  init_from_mpi(MPI_COMM_WORLD); MPI_Allreduce of its own; every
//                collective through the group's communicator (the conformance
//                suite, conformance.h); GradSync averaging a gradient; the sampler sharding by the
//                group's identity; prints "RESULT ok" or "RESULT wrong ..."
//   timeout      rank 1 never joins the allreduce: the others print
//                "RESULT <error type> <message>" after the 2 s timeout, then
//                leave without finalizing, which ends the job (with
//                SLURMDDP_TEST_RESULTS_DIR, each leaves only once every such
//                rank has printed: OpenMPI 5 kills the job at the first
//                non-zero exit, before a slower rank could say its result)
//   backend      slurmddp::init() with SLURMDDP_BACKEND=mpi (MPI initialized by
//                the runtime); prints "RESULT ok backend=<name> world=<n>"
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rank_results.h"
#include "slurmddp/error.h"
#include "slurmddp/grad_sync.h"
#include "slurmddp/mpi_communicator.h"
#include "slurmddp/sampler.h"

using namespace slurmddp;
using namespace slurmddp::support;

namespace {

int collectives() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  auto pg = init_from_mpi(MPI_COMM_WORLD);
  const int n = pg->size(), r = pg->rank();
  // The program's own MPI traffic, before and between ours.
  int one = 1, total = 0;
  MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (total != n) wrong("the program's MPI_Allreduce gave " + std::to_string(total));
  const ProcessIdentity& id = pg->identity();
  if (id.source != IdentitySource::kMpi || id.local_rank >= id.local_world_size ||
      id.node_rank >= id.num_nodes || pg->store() != nullptr) {
    wrong("identity: " + id.describe());
  }
  if (pg->comm()->backend() != Backend::kMpi)
    wrong(std::string("backend ") + to_string(pg->comm()->backend()));
  // GradSync: rank r's gradient is r + i; the average is (n - 1) / 2 + i.
  std::vector<float> w(1000, 0.0f), g(1000);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(r) + static_cast<float>(i);
  GradParameter p;
  p.name = "w";
  p.data = w.data();
  p.grad = g.data();
  p.count = g.size();
  {
    GradSync sync(pg->comm(), {p});
    sync.mark_ready(0);
    sync.wait();
  }
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] != static_cast<float>(n - 1) / 2.0f + static_cast<float>(i)) {
      wrong("GradSync average at " + std::to_string(i) + ": " + std::to_string(g[i]));
    }
  }
  // The sampler shards by the group's identity: all ranks together cover 0..999.
  DistributedSampler s(1000, n, r);
  std::vector<int64_t> mine(static_cast<size_t>(s.size()));
  s.get(0, s.size(), mine.data());
  std::vector<int> seen(1000, 0);
  for (int64_t i : mine) seen[static_cast<size_t>(i)] = 1;
  std::vector<int> all(1000, 0);
  MPI_Allreduce(seen.data(), all.data(), 1000, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  for (int v : all) {
    if (v != 1) wrong("the sampler's shards do not cover the dataset");
  }
  const int status = run_collectives(*pg->comm());  // prints RESULT ok
  pg.reset();
  MPI_Finalize();
  return status;
}

int timeout() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  MpiOptions o;
  o.timeout = std::chrono::milliseconds(2000);
  auto pg = init_from_mpi(MPI_COMM_WORLD, o);
  if (pg->rank() == 1) {
    // Never joins; reads until the job is torn down.
    char c;
    while (read(0, &c, 1) > 0) {
    }
    pause();
  }
  std::vector<float> x(100, 1.0f);
  try {
    pg->comm()->allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum)->wait();
    say("RESULT ok (unexpected)");
  } catch (const TimeoutError& e) {
    say(std::string("RESULT TimeoutError ") + e.what());
  } catch (const std::exception& e) {
    say(std::string("RESULT Error ") + e.what());
  }
  std::fflush(stdout);
  if (const char* dir = std::getenv("SLURMDDP_TEST_RESULTS_DIR")) {
    // Every rank but rank 1 reaches this line; leave when all of them have.
    const std::string mine = std::string(dir) + "/printed." + std::to_string(pg->rank());
    if (FILE* f = std::fopen(mine.c_str(), "w")) std::fclose(f);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      int printed = 0;
      for (int r = 0; r < pg->size(); ++r) {
        const std::string f = std::string(dir) + "/printed." + std::to_string(r);
        printed += access(f.c_str(), F_OK) == 0 ? 1 : 0;
      }
      if (printed >= pg->size() - 1 || std::chrono::steady_clock::now() > give_up) break;
      usleep(10000);
    }
  }
  _exit(3);  // a broken MPI job: no MPI_Finalize
}

int backend() {
  setenv("SLURMDDP_BACKEND", "mpi", 1);
  auto pg = init();
  std::vector<int64_t> x(10, pg->rank());
  pg->comm()->allreduce(x.data(), x.size(), DataType::kInt64, ReduceOp::kMax)->wait();
  if (x[0] != pg->size() - 1) wrong("allreduce max gave " + std::to_string(x[0]));
  say("RESULT ok backend=" + std::string(to_string(pg->comm()->backend())) +
      " world=" + std::to_string(pg->size()));
  pg->shutdown();
  return 0;  // the group finalizes MPI, which it initialized
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    if (scenario == "collectives") return collectives();
    if (scenario == "timeout") return timeout();
    if (scenario == "backend") return backend();
  } catch (const std::exception& e) {
    say(std::string("RESULT error ") + e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s collectives|timeout|backend\n", argv[0]);
  return 2;
}
