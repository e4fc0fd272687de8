// Fuzz target: reserved-port lists (SLURM_STEP_RESV_PORTS, e.g.
// "29500,29510-29519") through launch::parse_port_list and the MASTER_PORT
// choice that uses them, and port ranges (port_range=LO-HI) through
// launch::parse_port_range.
//
// Input: the first byte picks the parser, the rest is the value.
//
// Invariants: every port of an accepted list is in [1, 65535]; the list printed
// back as ranges parses to the same ports; MASTER_PORT is the list's first port.
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

std::string print(const std::vector<uint16_t>& ports) {
  std::string out;
  for (size_t i = 0; i < ports.size();) {
    size_t j = i + 1;
    while (j < ports.size() && ports[j] == ports[j - 1] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ports[i]);
    if (j - i > 1) out += "-" + std::to_string(ports[j - 1]);
    i = j;
  }
  return out;
}

void check_list(std::string_view value) {
  std::vector<uint16_t> ports;
  try {
    ports = launch::parse_port_list("SLURM_STEP_RESV_PORTS", value);
  } catch (const launch::LaunchError&) {
    return;
  }
  FUZZ_CHECK(!ports.empty(), std::string(value));
  for (uint16_t p : ports) FUZZ_CHECK(p >= 1, std::string(value));
  const std::string printed = print(ports);
  FUZZ_CHECK(launch::parse_port_list("SLURM_STEP_RESV_PORTS", printed) == ports, printed);

  launch::StepFacts f;
  f.job_id = 7;
  f.resv_ports = std::string(value);
  launch::PortChoice choice = launch::choose_port(launch::Settings{}, f);
  FUZZ_CHECK(choice.port == ports.front(), std::to_string(choice.port));
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
