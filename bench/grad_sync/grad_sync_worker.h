// One rank of the GradSync benchmark (grad_sync_bench.cpp starts them as
// "--worker RANK SIZE PORT"): GradSync and a flat allreduce over Gloo on the
// models' parameter sizes, driven by the launcher one command at a time.
#pragma once

#include <cstdint>

namespace slurmddp::bench {

// Joins the store (rank 0 hosts it and prints "port P"), then serves the
// launcher's commands on stdin until "quit".
void serve_worker(int rank, int size, uint16_t port);

}  // namespace slurmddp::bench
