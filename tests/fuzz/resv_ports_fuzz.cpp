// Fuzz target: reserved-port lists (SLURM_STEP_RESV_PORTS, e.g.
// "29500,29510-29519") through launch::parse_port_list and the MASTER_PORT
// choice that uses them, and port ranges (port_range=LO-HI) through
// launch::parse_port_range.
//
// Input: the first byte picks the parser, the rest is the value.
//
// Invariants: every range of an accepted list is in [1, 65535], LO <= HI; the
// list printed back parses to the same ranges; MASTER_PORT is the list's first
// port.
// An accepted range has 1 <= LO <= HI and prints back to itself.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "launch/error.h"
#include "launch/parse.h"
#include "launch/rendezvous.h"

namespace {

namespace launch = slurmddp::launch;

std::string print(const std::vector<launch::PortRange>& ranges) {
  std::string out;
  for (const auto& r : ranges) {
    out += (out.empty() ? "" : ",") + std::to_string(r.lo);
    if (r.hi != r.lo) out += "-" + std::to_string(r.hi);
  }
  return out;
}

void check_list(std::string_view value) {
  std::vector<launch::PortRange> ranges;
  try {
    ranges = launch::parse_port_list("SLURM_STEP_RESV_PORTS", value);
  } catch (const launch::LaunchError&) {
    return;
  }
  FUZZ_CHECK(!ranges.empty(), std::string(value));
  for (const auto& r : ranges) FUZZ_CHECK(r.lo >= 1 && r.lo <= r.hi, std::string(value));
  const std::string printed = print(ranges);
  FUZZ_CHECK(launch::parse_port_list("SLURM_STEP_RESV_PORTS", printed) == ranges, printed);

  launch::StepFacts f;
  f.job_id = 7;
  f.resv_ports = std::string(value);
  launch::PortChoice choice = launch::choose_port(launch::Settings{}, f);
  FUZZ_CHECK(choice.port == ranges.front().lo, std::to_string(choice.port));
}

void check_range(std::string_view value) {
  launch::PortRange r;
  try {
    r = launch::parse_port_range("port_range", value);
  } catch (const launch::LaunchError&) {
    return;
  }
  FUZZ_CHECK(r.lo >= 1 && r.lo <= r.hi && r.size() >= 1, std::string(value));
  const std::string printed = std::to_string(r.lo) + "-" + std::to_string(r.hi);
  FUZZ_CHECK(launch::parse_port_range("port_range", printed) == r, printed);

  // A hashed MASTER_PORT stays inside the range.
  launch::Settings s;
  s.port_range = r;
  launch::StepFacts f;
  f.job_id = static_cast<uint32_t>(value.size() * 2654435761u);
  f.step_id = static_cast<uint32_t>(value.size());
  launch::PortChoice choice = launch::choose_port(s, f);
  FUZZ_CHECK(choice.port >= r.lo && choice.port <= r.hi, std::to_string(choice.port));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  slurmddp::fuzz::Input in(data, size);
  if (in.flag()) {
    check_range(in.rest());
  } else {
    check_list(in.rest());
  }
  return 0;
}
