// Where one rank is: the unit of the hang and straggler reports (issue: "which
// rank, on which node, stuck where?").
//
// Note [Progress records]
//   Each rank knows its own progress for free: the training step it last
//   completed, whether it is in user code or inside a collective (which one,
//   its sequence number), since when, and where (a Python file:line, or the
//   C++ caller's label). It keeps that in memory and writes it to the store
//   only when asked (a hang report) or rarely (a time-based heartbeat), so a
//   step costs no store traffic. A rank that cannot answer (stopped, or stuck
//   in the kernel) is reported from its last written record, marked stale.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace slurmddp::progress {

enum class Phase { kUser, kCollective };

struct Record {
  int rank = -1;
  std::string node;
  int64_t step = -1;  // the last completed training step; -1: none yet
  Phase phase = Phase::kUser;
  std::string op;        // in a collective: its name ("all_reduce")
  int64_t seq = -1;      // in a collective: its sequence number in the group
  int64_t since_ms = 0;  // wall clock (ms since the epoch) it entered the phase
  std::string where;     // "train.py:61 (next(loader))", or a C++ label
  std::string stack;     // optional: every thread's stack, one frame a line
  bool fresh = true;     // false: its last heartbeat, the rank did not answer
};

// One record as text: "name=value" lines, then "stack:" and the stack's lines.
std::string encode(const Record& r);
// std::nullopt when the text is not a record (names the problem in *why).
std::optional<Record> decode(const std::string& text, std::string* why = nullptr);

}  // namespace slurmddp::progress
