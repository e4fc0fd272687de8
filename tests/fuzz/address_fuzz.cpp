// Fuzz target: addresses and networks from configuration and the environment
// (network=CIDR[,CIDR], MASTER_ADDR, SLURMDDP_ADDR, --ddp-addr, ifname=,
// SLURMDDP_IFNAME) through launch::parse_cidr_list, IpAddress::parse,
// check_host_syntax, check_ifname_syntax, and the MASTER_ADDR choice among
// resolved addresses (launch::select_address).
//
// Input: the first byte picks the parser; for select_address, the first line is
// the network list and every further line a candidate address.
//
// Invariants: accepted networks contain their base and print to a form that
// parses back to themselves; addresses round-trip through str(); the chosen
// MASTER_ADDR is a candidate, inside the networks, and loopback only when
// allowed.
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "launch/address.h"
#include "launch/error.h"

namespace {

namespace launch = slurmddp::launch;

void check_networks(std::string_view value) {
  std::vector<launch::Cidr> nets;
  try {
    nets = launch::parse_cidr_list("network", value);
  } catch (const launch::LaunchError&) {
    return;
  }
  FUZZ_CHECK(!nets.empty(), std::string(value));
  for (const auto& n : nets) {
    FUZZ_CHECK(n.base.family == AF_INET || n.base.family == AF_INET6,
               std::to_string(n.base.family));
    FUZZ_CHECK(n.prefix >= 0 && n.prefix <= (n.base.is_v4() ? 32 : 128), n.str());
    FUZZ_CHECK(n.contains(n.base), n.str());
    launch::Cidr again = launch::parse_cidr("network", n.str());
    FUZZ_CHECK(again.base == n.base && again.prefix == n.prefix, n.str() + " vs " + again.str());
  }
}

void check_address(std::string_view value) {
  auto a = launch::IpAddress::parse(value);
  if (!a) return;
  auto again = launch::IpAddress::parse(a->str());
  FUZZ_CHECK(again && *again == *a, a->str());
  // An address literal is a valid MASTER_ADDR.
  launch::check_host_syntax("MASTER_ADDR", a->str());
  FUZZ_CHECK(launch::resolve_host(a->str()) == std::vector<launch::IpAddress>{*a}, a->str());
}

void check_host(std::string_view value) {
  try {
    launch::check_host_syntax("--ddp-addr", value);
  } catch (const launch::LaunchError&) {
    return;
  }
  FUZZ_CHECK(!value.empty() && value.size() <= 253, std::string(value));
}

void check_ifname(std::string_view value) {
  try {
    launch::check_ifname_syntax("--ddp-ifname", value);
  } catch (const launch::LaunchError&) {
    return;
  }
  FUZZ_CHECK(!value.empty() && value.size() < 16, std::string(value));
  FUZZ_CHECK(value.find_first_of("/: \t\n") == std::string_view::npos, std::string(value));
}

void check_select(bool allow_loopback, std::string_view value) {
  auto lines = slurmddp::fuzz::split(value, '\n');
  launch::AddressPolicy policy;
  policy.allow_loopback = allow_loopback;
  if (!lines[0].empty()) {
    try {
      policy.networks = launch::parse_cidr_list("network", lines[0]);
    } catch (const launch::LaunchError&) {
      return;
    }
  }
  std::vector<launch::IpAddress> candidates;
  for (size_t i = 1; i < lines.size(); ++i) {
    if (auto a = launch::IpAddress::parse(lines[i])) candidates.push_back(*a);
  }
  launch::IpAddress chosen;
  try {
    chosen = launch::select_address("n1", candidates, policy);
  } catch (const launch::LaunchError&) {
    return;
  }
  bool listed = false;
  for (const auto& c : candidates) listed |= c == chosen;
  FUZZ_CHECK(listed, chosen.str());
  bool inside = policy.networks.empty();
  for (const auto& n : policy.networks) inside |= n.contains(chosen);
  FUZZ_CHECK(inside, chosen.str());
  FUZZ_CHECK(allow_loopback || !chosen.is_loopback(), chosen.str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  slurmddp::fuzz::Input in(data, size);
  const uint8_t which = in.u8();
  switch (which % 5) {
    case 0:
      check_networks(in.rest());
      break;
    case 1:
      check_address(in.rest());
      break;
    case 2:
      check_host(in.rest());
      break;
    case 3:
      check_ifname(in.rest());
      break;
    default:
      check_select((which & 8) != 0, in.rest());
      break;
  }
  return 0;
}
