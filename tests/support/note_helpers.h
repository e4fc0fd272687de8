// Helpers of the failure-note tests (membership and Gloo): a context of four
// ranks, notes, and what an exception_ptr holds.
#pragma once

#include <chrono>
#include <exception>
#include <string>
#include <utility>

#include "membership/notes.h"

namespace slurmddp::support {

using membership::DiagnosisContext;
using membership::Observation;
using Kind = Observation::Kind;

inline DiagnosisContext ctx4(int rank) {
  DiagnosisContext c;
  c.rank = rank;
  c.size = 4;
  c.timeout = std::chrono::milliseconds(3000);
  c.prefix = "p";
  c.component = "gloo";
  return c;
}

inline Observation note(Kind kind, int peer = -1, std::string detail = "") {
  Observation o;
  o.kind = kind;
  o.peer = peer;
  o.detail = std::move(detail);
  return o;
}

inline std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  }
  return "";
}

template <typename E>
inline bool is(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

inline const std::string kOp = "allreduce 1024 float32 (sum), op #7";

}  // namespace slurmddp::support
