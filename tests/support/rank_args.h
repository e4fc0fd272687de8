// The command line of a rank process that a test or a benchmark starts around
// a store it hosts: one convention for every suite (the multiproc comm and
// grad_sync ranks, the store helper, the gpu suite's workers, the benchmarks):
//
//   <program> [its own arguments...] --rank R --world N --store-port P
//
// The launcher (rank_launcher.h) hosts the TCP store on 127.0.0.1 and appends
// rank_argv(r, N, port) to each rank's arguments; the rank takes the three
// options back out (take() for a program that parses its own options,
// take_from() for one with positional arguments) and connects to the store.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace slurmddp::support {

struct RankArgs {
  int rank = -1;  // -1: not started as a rank (the launcher, or a run on its own)
  int world = 1;
  uint16_t store_port = 0;

  bool started_as_rank() const { return rank >= 0; }

  // Takes --rank, --world or --store-port with its value; false for any other
  // key. Throws std::invalid_argument naming the option, the value and what was
  // expected.
  bool take(const std::string& key, const std::string& value) {
    if (key == "--rank") {
      rank = static_cast<int>(number(key, value, 0, 1 << 20));
    } else if (key == "--world") {
      world = static_cast<int>(number(key, value, 1, 1 << 20));
    } else if (key == "--store-port") {
      store_port = static_cast<uint16_t>(number(key, value, 1, 65535));
    } else {
      return false;
    }
    return true;
  }

  // Removes the three options (and their values) from argv, shifting the rest
  // down and shrinking argc; then checks them (see check()) when --rank was given.
  static RankArgs take_from(int& argc, char** argv) {
    RankArgs a;
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
      if (i + 1 < argc && a.take(argv[i], argv[i + 1])) {
        ++i;
        continue;
      }
      argv[kept++] = argv[i];
    }
    argc = kept;
    argv[argc] = nullptr;
    if (a.started_as_rank()) a.check();
    return a;
  }

  // A rank needs rank < world and a store port; throws std::invalid_argument.
  void check() const {
    if (rank < 0 || rank >= world) {
      throw std::invalid_argument("--rank " + std::to_string(rank) + " with --world " +
                                  std::to_string(world) + ": expected 0 <= rank < world");
    }
    if (store_port == 0) {
      throw std::invalid_argument("--rank " + std::to_string(rank) +
                                  " without --store-port: a rank connects to its launcher's store");
    }
  }

 private:
  static long number(const std::string& key, const std::string& value, long lo, long hi) {
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < lo || v > hi) {
      throw std::invalid_argument(key + " " + value + ": expected an integer in [" +
                                  std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return v;
  }
};

// The arguments a launcher appends for rank `rank` of `world`.
inline std::vector<std::string> rank_argv(int rank, int world, uint16_t store_port) {
  return {"--rank",       std::to_string(rank),      "--world", std::to_string(world),
          "--store-port", std::to_string(store_port)};
}

// `argv` followed by rank_argv(rank, world, store_port).
inline std::vector<std::string> with_rank(std::vector<std::string> argv, int rank, int world,
                                          uint16_t store_port) {
  for (auto& a : rank_argv(rank, world, store_port)) argv.push_back(std::move(a));
  return argv;
}

}  // namespace slurmddp::support
