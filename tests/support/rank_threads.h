// Ranks as threads of this process: the one runner of the suites whose ranks
// meet through an in-process store or a FakeGroup (unit tests, the GPU
// engine's threads). Ranks as processes: rank_group.h.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace slurmddp::support {

// Runs body(rank) for each of `ranks` on a thread of its own and joins them
// all; returns what each one threw (its what(), "" for none), in the order of
// `ranks`. A body that never returns hangs the test: give its waits a timeout.
inline std::vector<std::string> on_rank_threads(const std::vector<int>& ranks,
                                                const std::function<void(int)>& body) {
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  threads.reserve(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        body(ranks[i]);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      } catch (...) {
        errors[i] = "an exception that is not a std::exception";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Ranks 0 .. n-1.
inline std::vector<std::string> on_rank_threads(int n, const std::function<void(int)>& body) {
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(r);
  return on_rank_threads(ranks, body);
}

// Expects every rank of on_rank_threads(n, ...) to have ended without an error.
inline void expect_no_rank_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace slurmddp::support
