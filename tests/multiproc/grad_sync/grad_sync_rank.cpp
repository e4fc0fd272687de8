// One rank of a multi-process grad_sync test: a client of the TCP store its
// launcher hosts, Gloo on loopback, then a scenario. The
// last line is "result ok" or "result error <message>"; the exit code is 0
// for ok, 1 for a failed check, 2 for an exception.
//
//   grad_sync_rank <scenario> <seed> --rank R --world N --store-port P  (rank_args.h)
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>

#include "rank_launcher.h"
#include "slurmddp/error.h"
#include "slurmddp/gloo_communicator.h"
#include "slurmddp/grad_sync.h"
#include "slurmddp/tcp_store.h"
#include "test_values.h"

namespace {

using namespace slurmddp;
using namespace slurmddp::support;
using namespace std::chrono_literals;

struct Args {
  std::string scenario;
  int rank = 0;
  int size = 1;
  uint64_t seed = 1;
  support::RankArgs self;
};

class CheckFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::vector<size_t> shuffled(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

void* grad_of(GradSync& sync, Model& m, size_t i, bool views) {
  return views ? sync.gradient(i) : m.grads[i].data();
}

// Small limits so that a few hundred KiB make many buckets; larger-than-cap
// parameters appear in every random layout.
GradSyncOptions small_limits() {
  GradSyncOptions o;
  o.first_bucket_bytes = 4096;
  o.bucket_cap_bytes = 65536;
  return o;
}

void check_exact(GradSync& sync, Model& m, const Args& a, int first_step, int steps, bool views) {
  for (size_t i = 0; i < m.shapes.size(); ++i) {
    const void* g = grad_of(sync, m, i, views);
    for (size_t k = 0; k < m.shapes[i].count; ++k) {
      double sum = 0;
      for (int r = 0; r < a.size; ++r) {
        for (int s = first_step; s < first_step + steps; ++s) sum += grad_value(r, i, k, s);
      }
      const double want = expected_average(m.shapes[i].dtype, sum, a.size);
      const double got = get_value(m.shapes[i].dtype, g, k);
      if (got != want) {
        throw CheckFailed("parameter " + std::to_string(i) + " element " + std::to_string(k) +
                          ": got " + std::to_string(got) + ", want " + std::to_string(want));
      }
    }
  }
}

void set_grads(GradSync& sync, Model& m, const Args& a, int step, bool views, bool accumulate) {
  for (size_t i = 0; i < m.shapes.size(); ++i) {
    void* g = grad_of(sync, m, i, views);
    for (size_t k = 0; k < m.shapes[i].count; ++k) {
      const double before = accumulate ? get_value(m.shapes[i].dtype, g, k) : 0.0;
      set_value(m.shapes[i].dtype, g, k, before + grad_value(a.rank, i, k, step));
    }
  }
}

void mark_all(GradSync& sync, size_t n, uint64_t seed) {
  for (size_t i : shuffled(n, seed)) sync.mark_ready(i);
}

void scenario_average(std::shared_ptr<Communicator> comm, const Args& a, bool views) {
  const auto shapes = random_layout(a.seed, 60, 65536, true);
  Model m(shapes, !views);
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (size_t k = 0; k < shapes[i].count; ++k) {
      set_value(shapes[i].dtype, m.data[i].data(), k, param_value(a.rank, i, k));
    }
  }
  auto o = small_limits();
  o.gradient_as_bucket_view = views;
  GradSync sync(comm, m.parameters(!views), o);
  // Rank 0's parameters everywhere.
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (size_t k = 0; k < shapes[i].count; ++k) {
      std::vector<uint8_t> one(8);
      set_value(shapes[i].dtype, one.data(), 0, param_value(0, i, k));
      if (get_value(shapes[i].dtype, m.data[i].data(), k) !=
          get_value(shapes[i].dtype, one.data(), 0)) {
        throw CheckFailed("parameter " + std::to_string(i) + " was not broadcast from rank 0");
      }
    }
  }
  for (int step = 0; step < 3; ++step) {
    set_grads(sync, m, a, step, views, false);
    mark_all(sync, shapes.size(), a.seed * 1000 + static_cast<uint64_t>(a.rank * 10 + step));
    sync.wait();
    check_exact(sync, m, a, step, 1, views);
  }
}

void scenario_accumulate(std::shared_ptr<Communicator> comm, const Args& a) {
  const int k = 3;
  const auto shapes = random_layout(a.seed + 1, 40, 65536, true);
  Model m(shapes, true);
  GradSync sync(comm, m.parameters(true), small_limits());
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      for (size_t e = 0; e < shapes[i].count; ++e)
        set_value(shapes[i].dtype, m.grads[i].data(), e, 0);
    }
    for (int s = 0; s < k; ++s) {
      sync.set_sync_enabled(s == k - 1);
      set_grads(sync, m, a, 10 * round + s, false, true);
      mark_all(sync, shapes.size(), static_cast<uint64_t>(a.rank * 100 + s));
      sync.wait();
    }
    check_exact(sync, m, a, 10 * round, k, false);
  }
}

void scenario_compress(std::shared_ptr<Communicator> comm, const Args& a, Compression c) {
  const double unit = c == Compression::kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  std::vector<Shape> shapes;
  std::mt19937_64 layout_rng(a.seed);
  for (int i = 0; i < 30; ++i) {
    const DataType t = layout_rng() % 3 == 0 ? DataType::kFloat64 : DataType::kFloat32;
    shapes.push_back(
        {layout_rng() % 3 == 0 ? 20000 + layout_rng() % 9 : 1 + layout_rng() % 3001, t});
  }
  const auto value = real_value;
  for (bool views : {false, true}) {
    Model m(shapes, !views);
    auto o = small_limits();
    o.compression = c;
    o.gradient_as_bucket_view = views;
    GradSync sync(comm, m.parameters(!views), o);
    for (size_t i = 0; i < shapes.size(); ++i) {
      void* g = grad_of(sync, m, i, views);
      for (size_t k = 0; k < shapes[i].count; ++k)
        set_value(shapes[i].dtype, g, k, value(a.rank, i, k));
    }
    mark_all(sync, shapes.size(), static_cast<uint64_t>(a.rank));
    sync.wait();
    double worst = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const void* g = grad_of(sync, m, i, views);
      for (size_t k = 0; k < shapes[i].count; ++k) {
        double sum = 0;
        double max_abs = 0;
        for (int r = 0; r < a.size; ++r) {
          const double v = shapes[i].dtype == DataType::kFloat32
                               ? static_cast<double>(static_cast<float>(value(r, i, k)))
                               : value(r, i, k);
          sum += v;
          max_abs = std::max(max_abs, std::fabs(v));
        }
        const double avg = sum / a.size;
        const double err = std::fabs(get_value(shapes[i].dtype, g, k) - avg);
        // Each input rounded to the wire type, the average rounded once more.
        const double bound = unit * max_abs + unit * std::fabs(avg) + 1e-9;
        if (err > bound) {
          throw CheckFailed("parameter " + std::to_string(i) + " element " + std::to_string(k) +
                            ": error " + std::to_string(err) + " above the bound " +
                            std::to_string(bound));
        }
        if (max_abs > 0) worst = std::max(worst, err / max_abs);
      }
    }
    std::cout << "worst_relative_error " << to_string(c) << (views ? " views " : " copies ")
              << worst << std::endl;
  }
}

// Rank size-1 registers parameter 3 with a different count: every rank must
// throw, naming it; printed as the result for the parent to check.
void scenario_mismatch(std::shared_ptr<Communicator> comm, const Args& a) {
  std::vector<Shape> shapes = {{5, DataType::kFloat32},
                               {6, DataType::kFloat16},
                               {7, DataType::kFloat32},
                               {10, DataType::kFloat32},
                               {9, DataType::kBFloat16}};
  if (a.rank == a.size - 1 && a.size > 1) shapes[3].count = 12;
  Model m(shapes, true);
  try {
    GradSync sync(comm, m.parameters(true), small_limits());
  } catch (const InvalidArgument& e) {
    std::cout << "layout_error " << e.what() << std::endl;
    return;
  }
  if (a.size > 1) throw CheckFailed("no error although layouts differ");
}

// Rank size-1 dies after construction; the others must fail within the
// communicator's timeout, not hang.
bool scenario_peer_lost(std::shared_ptr<Communicator> comm, const Args& a) {
  const auto shapes = random_layout(a.seed, 30, 65536, false);
  Model m(shapes, true);
  GradSync sync(comm, m.parameters(true), small_limits());
  if (a.rank == a.size - 1) {
    std::cout << "result dying" << std::endl;
    std::fflush(stdout);
    _exit(9);
  }
  set_grads(sync, m, a, 0, false, false);
  mark_all(sync, shapes.size(), static_cast<uint64_t>(a.rank));
  try {
    sync.wait();
  } catch (const Error& e) {
    std::cout << "peer_error " << e.what() << std::endl;
    return false;  // the communicator is broken: no closing barrier
  }
  throw CheckFailed("wait() succeeded although a rank died");
}

// Default limits (1 MiB, 25 MiB) over ~34 MB: Gloo's ring tier and the
// halving-doubling tiers both carry buckets.
void scenario_default_limits(std::shared_ptr<Communicator> comm, const Args& a) {
  std::vector<Shape> shapes;
  std::mt19937_64 rng(a.seed);
  for (int i = 0; i < 40; ++i) shapes.push_back({1 + rng() % 400000, DataType::kFloat32});
  shapes.push_back({7000001, DataType::kFloat32});  // 28 MB: over the 25 MiB cap
  shapes.push_back({3, DataType::kFloat32});
  Model m(shapes, false);
  GradSyncOptions o;
  o.gradient_as_bucket_view = true;
  GradSync sync(comm, m.parameters(false), o);
  for (int step = 0; step < 2; ++step) {
    set_grads(sync, m, a, step, true, false);
    mark_all(sync, shapes.size(), static_cast<uint64_t>(a.rank + step));
    sync.wait();
    check_exact(sync, m, a, step, 1, true);
  }
  std::cout << "buckets " << sync.buckets().size() << std::endl;
}

int run(const Args& a) {
  auto store = support::connect_store(a.self, 20s);
  GlooOptions go;
  go.rank = a.rank;
  go.size = a.size;
  go.store = store;
  go.hostname = "127.0.0.1";
  go.timeout = a.scenario == "peer_lost" ? 4s : 30s;
  std::shared_ptr<Communicator> comm = make_gloo_communicator(go);
  if (a.scenario == "average") {
    scenario_average(comm, a, false);
  } else if (a.scenario == "average_views") {
    scenario_average(comm, a, true);
  } else if (a.scenario == "accumulate") {
    scenario_accumulate(comm, a);
  } else if (a.scenario == "compress_fp16") {
    scenario_compress(comm, a, Compression::kFloat16);
  } else if (a.scenario == "compress_bf16") {
    scenario_compress(comm, a, Compression::kBFloat16);
  } else if (a.scenario == "mismatch") {
    scenario_mismatch(comm, a);
  } else if (a.scenario == "peer_lost") {
    if (!scenario_peer_lost(comm, a)) {
      std::cout << "result ok" << std::endl;
      return 0;
    }
  } else if (a.scenario == "default_limits") {
    scenario_default_limits(comm, a);
  } else {
    throw CheckFailed("unknown scenario " + a.scenario);
  }
  // Every rank is done before any tears its connections down.
  comm->barrier()->wait(30s);
  std::cout << "result ok" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    a.self = support::RankArgs::take_from(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "grad_sync_rank: " << e.what() << "\n";
    return 2;
  }
  if (argc != 3 || !a.self.started_as_rank()) {
    std::cerr << "usage: grad_sync_rank <scenario> <seed> --rank R --world N --store-port P\n";
    return 2;
  }
  a.scenario = argv[1];
  a.seed = std::strtoull(argv[2], nullptr, 10);
  a.rank = a.self.rank;
  a.size = a.self.world;
  try {
    return run(a);
  } catch (const CheckFailed& e) {
    std::cout << "result fail " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cout << "result error " << e.what() << std::endl;
    return 2;
  }
}
