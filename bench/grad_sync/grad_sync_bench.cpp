// Gradient synchronization benchmark: slurm-ddp's GradSync against one flat
// allreduce of the same bytes and against torch DDP (CPU, gloo), side by side
// in one run, on the parameter-size distributions of ResNet-50 and BERT-base.
//
//   grad_sync_bench [--ranks N] [--models resnet50,bert] [--reps-resnet50 R]
//                   [--reps-bert R] [--compute-resnet50 S] [--compute-bert S]
//                   [--modes busy,work,idle] [--torch auto|off] [--python PATH]
//
// The launcher starts N ranks of this program (--worker) and, when a Python
// with torch is found (--python, else SLURMDDP_TORCH_PYTHON, else
// /usr/bin/python3, Debian's python3-torch), N ranks of torch_ddp_worker.py.
// Both groups stay alive; the launcher sends one command at a time and
// alternates experiments and engines within every repetition, so that the
// figures compared were measured under the same load (this machine is shared
// and noisy). Every repetition starts after a barrier; times are rank 0's;
// the table shows medians with [min-max] and rank 0's median CPU time.
//
// Experiments:
//   flat allreduce        one allreduce (avg) of a buffer as large as all gradients
//   sync (views|copies)   all gradients ready, then mark_ready in reverse order
//                         and wait(): gradients in bucket memory, or copied in
//                         and out of buckets
//   <mode> backward alone the simulated backward (Note [Simulated backward])
//   <mode> backward+sync  the same with mark_ready after each gradient and wait()
// torch: flat all_reduce, backward of the plain module, backward of DDP
// (default: gradients copied into buckets) and DDP with gradient_as_bucket_view.
//
// Derived: overhead = backward+sync - backward alone; hidden = 1 - overhead /
// communication, communication being our sync (views) time, and for torch its
// flat all_reduce time (DDP's sync cannot be timed alone).
//
// The cpu(ms) column is the CPU time rank 0's process used during the
// experiment (all threads, user + system): with as many cores as ranks,
// communication can hide behind a CPU-bound backward only as far as it
// leaves the CPU idle.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "grad_sync_worker.h"
#include "loopback_port.h"
#include "models.h"
#include "rank_launcher.h"  // tests/support
#include "simulated_backward.h"
#include "slurmddp/error.h"
#include "slurmddp/gloo_communicator.h"
#include "slurmddp/grad_sync.h"
#include "slurmddp/tcp_store.h"
#include "slurmddp_config.h"
#include "stats.h"
#include "subprocess.h"

namespace slurmddp::bench {
namespace {

using namespace std::chrono_literals;

// ---- the launcher -------------------------------------------------------------------

struct Options {
  int ranks = 2;
  std::vector<std::string> models = {"resnet50", "bert"};
  std::map<std::string, int> reps = {{"resnet50", 15}, {"bert", 7}};
  std::map<std::string, double> compute = {{"resnet50", 1.0}, {"bert", 2.0}};
  bool torch = true;
  std::string python;
  std::vector<std::string> modes;  // empty: per model (bert: busy only)
};

// A worker process driven line by line: stdin and stdout on pipes, stderr
// inherited; once its stdin is closed it has 10 s to leave before SIGKILL.
class Child : public support::Child {
 public:
  explicit Child(const std::vector<std::string>& argv) : support::Child(argv, options()) {}

  void send(const std::string& line) {
    if (!write_line(line)) throw std::runtime_error("bench: a worker closed its stdin");
  }

 private:
  static support::SpawnOptions options() {
    support::SpawnOptions o;
    o.in = support::Stdio::kPipe;
    o.out = support::Stdio::kPipe;
    o.grace = std::chrono::seconds(10);
    return o;
  }
};

// A group of worker processes that answer one line per command.
class Group {
 public:
  Group(std::string name, std::vector<std::unique_ptr<Child>> ranks)
      : name_(std::move(name)), ranks_(std::move(ranks)) {}

  // Sends `cmd` to every rank; returns rank 0's reply (after "ok ").
  std::string command(const std::string& cmd, std::chrono::milliseconds within) {
    for (auto& r : ranks_) r->send(cmd);
    std::string first;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const auto line = ranks_[r]->read_line(within);
      if (!line)
        throw std::runtime_error(name_ + " rank " + std::to_string(r) + ": no reply to '" + cmd +
                                 "'");
      if (line->rfind("ok", 0) != 0) {
        throw std::runtime_error(name_ + " rank " + std::to_string(r) + ": '" + cmd +
                                 "': " + *line);
      }
      if (r == 0) first = line->size() > 3 ? line->substr(3) : "";
    }
    return first;
  }

  void quit() {
    for (auto& r : ranks_) {
      try {
        r->send("quit");
      } catch (const std::exception&) {
      }
    }
    ranks_.clear();
  }

 private:
  std::string name_;
  std::vector<std::unique_ptr<Child>> ranks_;
};

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("bench: cannot find my own executable");
  return std::string(buf, static_cast<size_t>(n));
}

bool python_has_torch(const std::string& python) {
  const std::string cmd = python + " -c 'import torch' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct Sample {
  double wall = 0;
  double cpu = 0;
};

struct Stat {
  double median = 0, min = 0, max = 0;
  double cpu = 0;  // median CPU time
};

Stat stat_of(const std::vector<Sample>& samples) {
  Stat s;
  if (samples.empty()) return s;
  std::vector<double> wall;
  std::vector<double> cpu;
  for (const auto& x : samples) {
    wall.push_back(x.wall);
    cpu.push_back(x.cpu);
  }
  s.median = median_of(wall);
  s.cpu = median_of(cpu);
  s.min = *std::min_element(wall.begin(), wall.end());
  s.max = *std::max_element(wall.begin(), wall.end());
  return s;
}

Sample parse_sample(const std::string& reply) {
  std::istringstream is(reply);
  Sample x;
  is >> x.wall >> x.cpu;
  return x;
}

int launch(const Options& o) {
  const std::string self = self_path();
  std::printf("# slurm-ddp %s grad_sync_bench: %d ranks (processes) on loopback, CPU, Gloo\n",
              SLURMDDP_VERSION, o.ranks);
  std::printf("# host cores: %u, load average at start: %s\n", std::thread::hardware_concurrency(),
              load_average().c_str());

  // Our ranks, around a store hosted here (it outlives them: declared first).
  const auto store = support::host_store(120s);
  std::vector<std::unique_ptr<Child>> ours;
  for (int r = 0; r < o.ranks; ++r) {
    ours.push_back(
        std::make_unique<Child>(support::with_rank({self, "--worker"}, r, o.ranks, store->port())));
  }
  Group slurm("slurm-ddp", std::move(ours));

  // torch's ranks.
  std::unique_ptr<Group> torch;
  std::string python = o.python;
  if (python.empty()) {
    const char* env = std::getenv("SLURMDDP_TORCH_PYTHON");
    python = env != nullptr && *env != '\0' ? env : "/usr/bin/python3";
  }
  if (o.torch && python_has_torch(python)) {
    const std::string tport = std::to_string(slurmddp::support::free_loopback_port());
    std::vector<std::unique_ptr<Child>> ranks;
    for (int r = 0; r < o.ranks; ++r) {
      ranks.push_back(std::make_unique<Child>(std::vector<std::string>{
          python, TORCH_WORKER, std::to_string(r), std::to_string(o.ranks), tport}));
    }
    // Each rank prints "ok 0 torch=<version>" once connected.
    std::string version;
    for (size_t r = 0; r < ranks.size(); ++r) {
      const auto line = ranks[r]->read_line(300s);
      if (!line || line->rfind("ok", 0) != 0)
        throw std::runtime_error("bench: torch rank did not start");
      if (r == 0) version = line->substr(line->find("torch=") + 6);
    }
    std::printf("# torch %s (%s), DistributedDataParallel on gloo, 1 intra-op thread\n",
                version.c_str(), python.c_str());
    torch = std::make_unique<Group>("torch", std::move(ranks));
  } else {
    std::printf("# torch: not run (%s)\n",
                o.torch ? ("no torch for " + python).c_str() : "--torch off");
  }

  bool all_pass = true;
  for (const auto& model : o.models) {
    const auto specs = model_by_name(model);
    if (specs.empty()) throw std::runtime_error("bench: unknown model " + model);
    const size_t total = total_count(specs);
    const double compute = o.compute.at(model);
    const int reps = o.reps.at(model);
    const std::vector<std::string> modes =
        o.modes.empty() ? (model == "bert" ? std::vector<std::string>{"busy"}
                                           : std::vector<std::string>{"busy", "work", "idle"})
                        : o.modes;
    const std::string setup = slurm.command("setup " + model + " " + std::to_string(compute), 600s);
    std::istringstream ss(setup);
    size_t wrong = 0;
    size_t buckets = 0;
    ss >> wrong >> buckets;
    std::string bucket_sizes;
    for (size_t b = 0; b < buckets; ++b) {
      size_t bytes = 0;
      ss >> bytes;
      bucket_sizes += (b ? ", " : "") + std::to_string(bytes);
    }
    std::string layout_file;
    if (torch) {
      const char* tmp = std::getenv("TMPDIR");
      layout_file = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                    "/grad_sync_bench_" + std::to_string(getpid()) + "_" + model + ".txt";
      std::ofstream f(layout_file);
      for (const auto& sp : specs) f << sp.count << "\n";
      f.close();
      torch->command("setup " + layout_file + " " + std::to_string(compute) + " 1", 900s);
    }
    std::vector<std::string> our_exps = {"flat", "views", "copies"};
    std::vector<std::string> torch_exps = {"flat"};
    for (const auto& m : modes) {
      our_exps.insert(our_exps.end(), {m, m + "_views"});
      if (m == "busy") our_exps.push_back(m + "_copies");
      torch_exps.insert(torch_exps.end(), {m, "ddp_" + m, "ddpv_" + m});
    }
    std::map<std::string, std::vector<Sample>> t_ours;
    std::map<std::string, std::vector<Sample>> t_torch;
    // An untimed warm-up round, then `reps` rounds alternating engines.
    for (int rep = -1; rep < reps; ++rep) {
      const size_t n = std::max(our_exps.size(), torch_exps.size());
      for (size_t e = 0; e < n; ++e) {
        if (e < our_exps.size()) {
          const Sample t = parse_sample(slurm.command("run " + our_exps[e], 600s));
          if (rep >= 0) t_ours[our_exps[e]].push_back(t);
        }
        if (torch && e < torch_exps.size()) {
          const Sample t = parse_sample(torch->command("run " + torch_exps[e], 600s));
          if (rep >= 0) t_torch[torch_exps[e]].push_back(t);
        }
      }
    }
    if (!layout_file.empty()) unlink(layout_file.c_str());

    const double bytes = static_cast<double>(total) * 4;
    const double busbw_factor = bus_factor(Collective::kAllreduce, o.ranks);
    std::printf(
        "#\n# %s: %zu tensors, %zu parameters, %.0f bytes of float32 gradients; %d ranks; "
        "simulated backward %.2f s; %d repetitions; %zu buckets (1 MiB first, 25 MiB cap); "
        "busbw in GB/s\n",
        model.c_str(), specs.size(), total, bytes, o.ranks, compute, reps, buckets);
    std::printf("# %s bucket bytes in launch order: %s\n", model.c_str(), bucket_sizes.c_str());
    std::printf("# %-10s %-30s %11s %9s %9s %8s %7s %7s %12s %7s %6s\n", "engine", "experiment",
                "median(ms)", "min(ms)", "max(ms)", "cpu(ms)", "busbw", "vs_flat", "overhead(ms)",
                "hidden", "#wrong");
    const double nan = std::nan("");
    const Stat flat = stat_of(t_ours["flat"]);
    auto row = [&](const char* engine, const std::string& what, const Stat& st, bool comm_row,
                   double overhead, double comm, long wrong_count) {
      char busbw[32] = "";
      char vs[32] = "";
      char ov[32] = "";
      char hid[32] = "";
      char wr[32] = "";
      if (comm_row) {
        std::snprintf(busbw, sizeof busbw, "%.3f", bytes * busbw_factor / st.median / 1e9);
        std::snprintf(vs, sizeof vs, "%.3f", st.median / flat.median);
      }
      if (!std::isnan(overhead)) {
        std::snprintf(ov, sizeof ov, "%.1f", overhead * 1e3);
        std::snprintf(hid, sizeof hid, "%.0f%%", (1 - overhead / comm) * 100);
      }
      if (wrong_count >= 0) std::snprintf(wr, sizeof wr, "%ld", wrong_count);
      std::printf("  %-10s %-30s %11.1f %9.1f %9.1f %8.1f %7s %7s %12s %7s %6s\n", engine,
                  what.c_str(), st.median * 1e3, st.min * 1e3, st.max * 1e3, st.cpu * 1e3, busbw,
                  vs, ov, hid, wr);
    };
    const long w = static_cast<long>(wrong);
    const Stat sync_v = stat_of(t_ours["views"]);
    const Stat sync_c = stat_of(t_ours["copies"]);
    row("slurm-ddp", "flat allreduce", flat, true, nan, 0, w);
    row("slurm-ddp", "sync (views)", sync_v, true, nan, 0, w);
    row("slurm-ddp", "sync (copies)", sync_c, true, nan, 0, w);
    std::map<std::string, double> our_overhead;
    for (const auto& m : modes) {
      const Stat alone = stat_of(t_ours[m]);
      const Stat v = stat_of(t_ours[m + "_views"]);
      our_overhead[m] = v.median - alone.median;
      row("slurm-ddp", m + " backward alone", alone, false, nan, 0, -1);
      row("slurm-ddp", m + " backward+sync (views)", v, false, v.median - alone.median,
          sync_v.median, -1);
      if (t_ours.count(m + "_copies") != 0) {
        const Stat c = stat_of(t_ours[m + "_copies"]);
        row("slurm-ddp", m + " backward+sync (copies)", c, false, c.median - alone.median,
            sync_c.median, -1);
      }
    }
    std::map<std::string, double> torch_overhead;
    if (torch) {
      const Stat tf = stat_of(t_torch["flat"]);
      row("torch", "flat all_reduce", tf, true, nan, 0, -1);
      for (const auto& m : modes) {
        const Stat alone = stat_of(t_torch[m]);
        const Stat d = stat_of(t_torch["ddp_" + m]);
        const Stat dv = stat_of(t_torch["ddpv_" + m]);
        torch_overhead[m] = d.median - alone.median;
        row("torch", m + " backward alone", alone, false, nan, 0, -1);
        row("torch", m + " ddp backward", d, false, d.median - alone.median, tf.median, -1);
        row("torch", m + " ddp backward (views)", dv, false, dv.median - alone.median, tf.median,
            -1);
      }
    }
    // The targets, stated for this run.
    const double ratio = sync_v.median / flat.median;
    std::printf("# %s targets: sync (views)/flat %.3f (<= 1.25: %s)", model.c_str(), ratio,
                ratio <= 1.25 ? "met" : "missed");
    for (const auto& m : modes) {
      const double hidden = 1 - our_overhead[m] / sync_v.median;
      std::printf("; %s hidden %.0f%% (>= 70%%: %s)", m.c_str(), hidden * 100,
                  hidden >= 0.70 ? "met" : "missed");
      if (torch) {
        std::printf(", overhead %.1f ms vs torch DDP %.1f ms (%s)", our_overhead[m] * 1e3,
                    torch_overhead[m] * 1e3,
                    our_overhead[m] < torch_overhead[m] ? "beaten" : "not beaten");
      }
    }
    std::printf("\n");
    if (wrong != 0) all_pass = false;
    std::fflush(stdout);
  }
  std::printf("# load average at end: %s\n", load_average().c_str());
  slurm.quit();
  if (torch) torch->quit();
  return all_pass ? 0 : 1;
}

}  // namespace
}  // namespace slurmddp::bench

int main(int argc, char** argv) {
  using namespace slurmddp::bench;
  try {
    if (argc > 1 && std::strcmp(argv[1], "--worker") == 0) {
      const auto self = slurmddp::support::RankArgs::take_from(argc, argv);
      if (argc != 2 || !self.started_as_rank()) {
        throw std::invalid_argument("--worker takes --rank R --world N --store-port P only");
      }
      serve_worker(self);
      return 0;
    }
    Options o;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error("bench: " + a + " needs a value");
        return argv[++i];
      };
      if (a == "--ranks") {
        o.ranks = std::stoi(value());
      } else if (a == "--models") {
        o.models.clear();
        std::stringstream ss(value());
        std::string m;
        while (std::getline(ss, m, ',')) o.models.push_back(m);
      } else if (a.rfind("--reps-", 0) == 0) {
        o.reps[a.substr(7)] = std::stoi(value());
      } else if (a.rfind("--compute-", 0) == 0) {
        o.compute[a.substr(10)] = std::stod(value());
      } else if (a == "--torch") {
        o.torch = value() != "off";
      } else if (a == "--python") {
        o.python = value();
      } else if (a == "--modes") {
        o.modes.clear();
        std::stringstream ss(value());
        std::string m;
        while (std::getline(ss, m, ',')) {
          if (m != "busy" && m != "work" && m != "idle") {
            throw std::runtime_error("bench: unknown mode " + m + " (busy, work, idle)");
          }
          o.modes.push_back(m);
        }
      } else {
        std::fprintf(stderr,
                     "grad_sync_bench: unknown option %s (see the header of "
                     "bench/grad_sync/grad_sync_bench.cpp)\n",
                     a.c_str());
        return 2;
      }
    }
    for (const auto& m : o.models) {
      if (o.reps.count(m) == 0 || o.compute.count(m) == 0) {
        std::fprintf(stderr, "grad_sync_bench: unknown model %s (resnet50, bert)\n", m.c_str());
        return 2;
      }
    }
    return launch(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "grad_sync_bench: %s\n", e.what());
    return 1;
  }
}
