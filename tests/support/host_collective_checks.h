// The checks every communicator's rank process runs (comm_rank for Gloo,
// mpi_rank for MPI): every collective, type and reduction on sizes 0, 1,
// 1001, 100003 and one large allreduce per type, against closed forms
// (expected_values.h). Prints "RESULT ok", or "RESULT wrong <what>" and exits 1.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "expected_values.h"
#include "slurmddp/communicator.h"

namespace slurmddp::testing {

inline void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

[[noreturn]] inline void wrong(const std::string& what) {
  say("RESULT wrong " + what);
  std::exit(1);
}

inline int run_collectives(Communicator& c) {
  const int n = c.size();
  const auto un = static_cast<size_t>(n);
  const int r = c.rank();
  for (DataType t : all_types()) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1001}, size_t{100003}}) {
      for (ReduceOp op : all_ops()) {
        auto buf = make_buffer(t, count);
        fill(t, buf.data(), count, r);
        c.allreduce(buf.data(), count, t, op)->wait(c.timeout());
        auto m = mismatches(t, buf.data(), count,
                            [&](size_t i) { return expected_reduction(t, op, n, i); });
        if (!m.empty()) {
          wrong(std::string("allreduce ") + to_string(t) + " " + to_string(op) + " count " +
                std::to_string(count) + ":" + m);
        }
        auto send = make_buffer(t, count * un);
        fill(t, send.data(), count * un, r);
        auto part = make_buffer(t, count);
        c.reduce_scatter(send.data(), part.data(), count, t, op)->wait(c.timeout());
        m = mismatches(t, part.data(), count, [&](size_t i) {
          return expected_reduction(t, op, n, static_cast<size_t>(r) * count + i);
        });
        if (!m.empty()) {
          wrong(std::string("reduce-scatter ") + to_string(t) + " " + to_string(op) + " count " +
                std::to_string(count) + ":" + m);
        }
      }
      const int root = n - 1;
      auto buf = make_buffer(t, count);
      fill(t, buf.data(), count, r);
      c.broadcast(buf.data(), count, t, root)->wait(c.timeout());
      auto m = mismatches(t, buf.data(), count, [&](size_t i) { return input_value(t, root, i); });
      if (!m.empty()) wrong(std::string("broadcast ") + to_string(t) + ":" + m);
      fill(t, buf.data(), count, r);
      auto all = make_buffer(t, count * un);
      c.allgather(buf.data(), all.data(), count, t)->wait(c.timeout());
      m = mismatches(t, all.data(), count * un, [&](size_t i) {
        return input_value(t, static_cast<int>(i / count), i % count);
      });
      if (!m.empty()) wrong(std::string("allgather ") + to_string(t) + ":" + m);
    }
  }
  // One large allreduce per type (Gloo's ring, and the float32 path of 16-bit types).
  for (DataType t : all_types()) {
    const size_t count = 1048579;
    auto buf = make_buffer(t, count);
    fill(t, buf.data(), count, r);
    c.allreduce(buf.data(), count, t, ReduceOp::kSum)->wait(c.timeout());
    auto m = mismatches(t, buf.data(), count,
                        [&](size_t i) { return expected_reduction(t, ReduceOp::kSum, n, i); });
    if (!m.empty()) wrong(std::string("large allreduce ") + to_string(t) + ":" + m);
  }
  c.barrier()->wait(c.timeout());
  say("RESULT ok");
  return 0;
}

}  // namespace slurmddp::testing
