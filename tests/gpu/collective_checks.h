// Every collective of a communicator against the closed forms of
// gpu_values.h, over data types x reduce ops x element counts. Shared by the
// single-process tests and the rank processes of the multi-process ones.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "slurmddp/communicator.h"

namespace slurmddp::gpu_testing {

struct CheckOptions {
  std::vector<size_t> counts = {0, 1, 7, 1001, 262147};
  // Only the average (allreduce and reduce_scatter), e.g. for the sum-divide path.
  bool only_average = false;
  std::chrono::milliseconds wait{std::chrono::seconds(60)};
};

// Runs the collectives (every rank of `comm` must call this with the same
// options) and returns one line per failed case (empty: all passed). A failed
// CUDA call or a communicator error ends it early with a line saying so.
std::vector<std::string> check_collectives(Communicator& comm, const CheckOptions& options);

}  // namespace slurmddp::gpu_testing
