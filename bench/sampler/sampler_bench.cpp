// sampler_bench: how fast one rank of a DistributedSampler gets through a full
// epoch, and how much memory it needs, beside torch's DistributedSampler.
//
// Every measurement runs in a fresh process (this program re-executed with
// --child, or the torch child script under Python), which reports its own wall
// and CPU time and its peak RSS (getrusage) before and after the timed region.
// Implementations are interleaved within each repetition so that load changes
// on a shared machine hit all of them alike; rows quote medians.
//
// Rows (one per implementation and size, after '#' preamble lines):
//   impl n replicas rank indices reps wall_s wall_min wall_max cpu_s Mindex/s
//   peak_MiB added_MiB x_torch #wrong
// x_torch is torch's median wall time over this row's. #wrong counts
// repetitions whose checksum (sum of (2i+1) * index_i mod 2^64) disagrees with
// torch's (parity mode) or with the first repetition (others); "-" when there
// is nothing to compare with. Exits 1 when any #wrong is nonzero.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "slurmddp/sampler.h"
#include "stats.h"
#include "subprocess.h"  // tests/support

#ifndef SAMPLER_BENCH_TORCH_SCRIPT
#define SAMPLER_BENCH_TORCH_SCRIPT ""
#endif
#ifndef SAMPLER_BENCH_PYTHON
#define SAMPLER_BENCH_PYTHON "python3"
#endif

namespace {

using slurmddp::bench::median_of;

// torch needs about 49 bytes per sample for randperm, the list and its copies
// (measured: 4.6 GiB at 10^8); skip sizes that would not fit.
constexpr double kTorchBytesPerSample = 50.0;

struct Config {
  std::vector<int64_t> sizes = {1000000, 10000000, 100000000, 1000000000};
  std::vector<int64_t> scalable_only = {10000000000};  // 10^10: constant memory
  int64_t replicas = 8;
  int64_t rank = 0;
  int64_t epoch = 1;
  int reps = 5;
  int64_t parity_max = 1000000000;
  bool torch = true;
  std::string python = SAMPLER_BENCH_PYTHON;
  std::string torch_script = SAMPLER_BENCH_TORCH_SCRIPT;
};

struct Result {
  bool ok = false;
  std::string error;
  double wall_s = 0, cpu_s = 0;
  int64_t count = 0;
  long base_kib = 0, peak_kib = 0;
  uint64_t checksum = 0;
  std::string version;
};

Result failure(const std::string& error) {
  Result r;
  r.error = error;
  return r;
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// --child MODE N REPLICAS RANK EPOCH: one measurement, one line on stdout.
int child_main(const std::string& mode, int64_t n, int64_t replicas, int64_t rank, int64_t epoch) {
  slurmddp::SamplerOptions options;
  options.mode =
      mode == "parity" ? slurmddp::SamplerMode::kTorch : slurmddp::SamplerMode::kScalable;
  options.seed = 0;
  options.epoch = epoch;
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int64_t> chunk(kChunk, 0);  // allocated and touched before the baseline
  const long base = peak_rss_kib();
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_seconds();

  slurmddp::DistributedSampler sampler(n, replicas, rank, options);
  uint64_t checksum = 0;
  uint64_t position = 0;
  int64_t got;
  while ((got = sampler.next(chunk.data(), kChunk)) > 0) {
    for (int64_t k = 0; k < got; ++k, ++position) {
      checksum += (2 * position + 1) * static_cast<uint64_t>(chunk[static_cast<size_t>(k)]);
    }
  }

  const double cpu1 = cpu_seconds();
  const auto wall1 = std::chrono::steady_clock::now();
  const long peak = peak_rss_kib();
  std::printf("wall_s=%.9f cpu_s=%.9f count=%" PRIu64 " base_kib=%ld peak_kib=%ld checksum=%" PRIu64
              " version=slurmddp\n",
              std::chrono::duration<double>(wall1 - wall0).count(), cpu1 - cpu0, position, base,
              peak, checksum);
  return 0;
}

Result parse_child_line(const std::string& text) {
  Result r;
  std::istringstream in(text);
  std::string kv;
  std::map<std::string, std::string> fields;
  while (in >> kv) {
    const auto eq = kv.find('=');
    if (eq != std::string::npos) {
      fields[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  for (const char* key : {"wall_s", "cpu_s", "count", "base_kib", "peak_kib", "checksum"}) {
    if (fields.count(key) == 0) {
      r.error = std::string("child output lacks ") + key + ": " + text;
      return r;
    }
  }
  r.wall_s = std::stod(fields["wall_s"]);
  r.cpu_s = std::stod(fields["cpu_s"]);
  r.count = std::stoll(fields["count"]);
  r.base_kib = std::stol(fields["base_kib"]);
  r.peak_kib = std::stol(fields["peak_kib"]);
  r.checksum = std::stoull(fields["checksum"]);
  r.version = fields["version"];
  r.ok = true;
  return r;
}

// Runs argv in a fresh process and parses its one-line report.
Result run_child(const std::vector<std::string>& argv) {
  slurmddp::support::SpawnOptions o;
  o.out = slurmddp::support::Stdio::kPipe;
  o.search_path = true;
  std::string text;
  std::optional<int> code;
  try {
    slurmddp::support::Child child(argv, o);
    child.read_all(slurmddp::support::Clock::time_point::max(), &text);
    code = child.wait(slurmddp::support::Clock::time_point::max());
  } catch (const std::exception& e) {
    return failure(e.what());
  }
  if (!code || *code != 0) {
    std::string command;
    for (const std::string& a : argv) {
      command += a + " ";
    }
    return failure("`" + command + "` failed (exit status " + std::to_string(code.value_or(-1)) +
                   ")");
  }
  return parse_child_line(text);
}

int64_t parse_count(const std::string& s) {
  // Accepts 1000000, 1e6 or 10^6.
  const auto caret = s.find('^');
  if (caret != std::string::npos) {
    int64_t v = 1;
    const int64_t base = std::stoll(s.substr(0, caret));
    for (int64_t e = std::stoll(s.substr(caret + 1)); e > 0; --e) {
      v *= base;
    }
    return v;
  }
  return static_cast<int64_t>(std::stod(s));
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) {
      out.push_back(parse_count(item));
    }
  }
  return out;
}

double mem_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      return kib * 1024.0;
    }
  }
  return 0;
}

std::string first_line(const char* path, const char* prefix) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(prefix, 0) == 0) {
      return line.substr(line.find(':') + 1);
    }
  }
  return "?";
}

void usage() {
  std::fprintf(stderr,
               "usage: sampler_bench [--sizes=1e6,1e7,1e8,1e9] [--scalable-only=1e10] "
               "[--replicas=8] [--rank=0] [--epoch=1] [--reps=5] [--parity-max=1e9] [--no-torch] "
               "[--python=PATH] [--torch-script=PATH]\n");
}

struct Row {
  std::string impl;
  int64_t n;
  std::vector<Result> results;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "--child") {
    return child_main(argv[2], parse_count(argv[3]), parse_count(argv[4]), parse_count(argv[5]),
                      parse_count(argv[6]));
  }
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&a](const char* key) -> const char* {
      const std::string k = std::string(key) + "=";
      return a.rfind(k, 0) == 0 ? a.c_str() + k.size() : nullptr;
    };
    if (const char* v = value("--sizes")) {
      cfg.sizes = parse_list(v);
    } else if (const char* v = value("--scalable-only")) {
      cfg.scalable_only = parse_list(v);
    } else if (const char* v = value("--replicas")) {
      cfg.replicas = parse_count(v);
    } else if (const char* v = value("--rank")) {
      cfg.rank = parse_count(v);
    } else if (const char* v = value("--epoch")) {
      cfg.epoch = parse_count(v);
    } else if (const char* v = value("--reps")) {
      cfg.reps = static_cast<int>(parse_count(v));
    } else if (const char* v = value("--parity-max")) {
      cfg.parity_max = parse_count(v);
    } else if (const char* v = value("--python")) {
      cfg.python = v;
    } else if (const char* v = value("--torch-script")) {
      cfg.torch_script = v;
    } else if (a == "--no-torch") {
      cfg.torch = false;
    } else {
      usage();
      return 2;
    }
  }
  if (cfg.reps < 1 || cfg.replicas < 1 || cfg.rank < 0 || cfg.rank >= cfg.replicas) {
    usage();
    return 2;
  }
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    std::perror("sampler_bench: readlink /proc/self/exe");
    return 1;
  }
  self[len] = '\0';

  const double available = mem_available_bytes();
  std::printf("# sampler_bench: one rank's full epoch (construct, set_epoch, read every index)\n");
  std::printf("# cpu:%s, %ld online cpus, MemAvailable %.1f GiB\n",
              first_line("/proc/cpuinfo", "model name").c_str(), sysconf(_SC_NPROCESSORS_ONLN),
              available / (1 << 30));
  std::printf("# replicas=%" PRId64 " rank=%" PRId64 " epoch=%" PRId64
              " seed=0 shuffle=1 drop_last=0 reps=%d (medians; min/max of wall time)\n",
              cfg.replicas, cfg.rank, cfg.epoch, cfg.reps);
  std::printf(
      "# each measurement in a fresh process; peak = getrusage ru_maxrss after the epoch, "
      "added = peak - ru_maxrss before it\n");
  std::printf("# %-8s %12s %4s %4s %11s %4s %9s %9s %9s %9s %9s %9s %9s %8s %6s\n", "impl", "n",
              "R", "rank", "indices", "reps", "wall_s", "wall_min", "wall_max", "cpu_s", "Mindex/s",
              "peak_MiB", "added_MiB", "x_torch", "#wrong");
  std::fflush(stdout);

  std::vector<int64_t> all_sizes = cfg.sizes;
  all_sizes.insert(all_sizes.end(), cfg.scalable_only.begin(), cfg.scalable_only.end());
  std::string torch_version;
  int wrong_total = 0;
  std::vector<std::string> notes;
  std::map<std::string, std::map<int64_t, double>> medians;  // impl -> n -> wall median
  std::map<int64_t, double> peaks_scalable;
  for (size_t si = 0; si < all_sizes.size(); ++si) {
    const int64_t n = all_sizes[si];
    const bool extra = si >= cfg.sizes.size();
    std::vector<Row> rows;
    rows.push_back(Row{"scalable", n, {}});
    if (!extra && n <= cfg.parity_max && n <= slurmddp::kSamplerTorchMaxSize) {
      if (4.0 * static_cast<double>(n) < 0.8 * available) {
        rows.push_back(Row{"parity", n, {}});
      } else {
        notes.push_back("parity n=" + std::to_string(n) + " not run: needs ~" +
                        std::to_string(static_cast<int>(4.0 * n / (1 << 30))) + " GiB");
      }
    }
    if (!extra && cfg.torch) {
      const double need = kTorchBytesPerSample * static_cast<double>(n);
      if (need < 0.8 * available) {
        rows.push_back(Row{"torch", n, {}});
      } else {
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "torch n=%" PRId64
                      " not run: needs ~%.0f GiB (%.0f bytes/sample), %.1f GiB available",
                      n, need / (1 << 30), kTorchBytesPerSample, available / (1 << 30));
        notes.push_back(buf);
        std::printf("# %s\n", buf);
      }
    }
    for (int rep = 0; rep < cfg.reps; ++rep) {
      for (Row& row : rows) {
        std::vector<std::string> args;
        const std::string ns = std::to_string(n), rs = std::to_string(cfg.replicas),
                          ks = std::to_string(cfg.rank), es = std::to_string(cfg.epoch);
        if (row.impl == "torch") {
          args = {cfg.python, cfg.torch_script, ns, rs, ks, es};
        } else {
          args = {self, "--child", row.impl, ns, rs, ks, es};
        }
        Result r = run_child(args);
        if (!r.ok) {
          std::fprintf(stderr, "sampler_bench: %s\n", r.error.c_str());
          return 1;
        }
        if (row.impl == "torch") {
          torch_version = r.version;
        }
        row.results.push_back(r);
      }
    }
    const Row* torch_row = nullptr;
    for (const Row& row : rows) {
      if (row.impl == "torch") {
        torch_row = &row;
      }
    }
    double torch_wall = 0;
    if (torch_row != nullptr) {
      std::vector<double> w;
      for (const Result& r : torch_row->results) {
        w.push_back(r.wall_s);
      }
      torch_wall = median_of(w);
    }
    for (const Row& row : rows) {
      std::vector<double> wall, cpu, peak, added;
      for (const Result& r : row.results) {
        wall.push_back(r.wall_s);
        cpu.push_back(r.cpu_s);
        peak.push_back(r.peak_kib / 1024.0);
        added.push_back((r.peak_kib - r.base_kib) / 1024.0);
      }
      const double wall_med = median_of(wall);
      std::string wrong = "-";
      if (row.impl == "parity" && torch_row != nullptr) {
        int bad = 0;
        for (const Result& r : row.results) {
          bad += (r.checksum != torch_row->results[0].checksum ||
                  r.count != torch_row->results[0].count)
                     ? 1
                     : 0;
        }
        wrong = std::to_string(bad);
        wrong_total += bad;
      } else if (row.results.size() > 1) {
        int bad = 0;
        for (const Result& r : row.results) {
          bad += r.checksum != row.results[0].checksum ? 1 : 0;
        }
        wrong = std::to_string(bad);
        wrong_total += bad;
      }
      char x_torch[32] = "-";
      if (torch_row != nullptr) {
        std::snprintf(x_torch, sizeof x_torch, "%.1f", torch_wall / wall_med);
      }
      const int64_t count = row.results[0].count;
      std::printf("  %-8s %12" PRId64 " %4" PRId64 " %4" PRId64 " %11" PRId64
                  " %4zu %9.4f %9.4f %9.4f %9.4f %9.2f %9.1f %9.1f %8s %6s\n",
                  row.impl.c_str(), n, cfg.replicas, cfg.rank, count, row.results.size(), wall_med,
                  *std::min_element(wall.begin(), wall.end()),
                  *std::max_element(wall.begin(), wall.end()), median_of(cpu),
                  static_cast<double>(count) / wall_med / 1e6, median_of(peak), median_of(added),
                  x_torch, wrong.c_str());
      std::fflush(stdout);
      medians[row.impl][n] = wall_med;
      if (row.impl == "scalable") {
        peaks_scalable[n] = median_of(peak);
      }
    }
  }
  for (const std::string& note : notes) {
    std::printf("# %s\n", note.c_str());
  }
  if (!torch_version.empty()) {
    std::printf("# torch %s\n", torch_version.c_str());
  }

  // The issue's targets, where this run measured what they need.
  const int64_t e7 = 10000000, e8 = 100000000;
  if (medians["torch"].count(e8) && medians["scalable"].count(e8)) {
    const double x = medians["torch"][e8] / medians["scalable"][e8];
    std::printf("# target: scalable at 1e8 >= 20x torch: %.0fx -> %s\n", x,
                x >= 20 ? "met" : "MISSED");
  }
  if (peaks_scalable.count(e8)) {
    std::printf("# target: scalable at 1e8 <= 16 MB peak RSS: %.1f MiB -> %s\n", peaks_scalable[e8],
                peaks_scalable[e8] * 1048576.0 <= 16e6 ? "met" : "MISSED");
  }
  if (medians["torch"].count(e7) && medians["parity"].count(e7)) {
    const double x = medians["torch"][e7] / medians["parity"][e7];
    std::printf("# target: parity at 1e7 no slower than torch: %.1fx -> %s\n", x,
                x >= 1 ? "met" : "MISSED");
  }
  if (wrong_total != 0) {
    std::printf("# %d repetitions disagreed (see #wrong)\n", wrong_total);
    return 1;
  }
  return 0;
}
