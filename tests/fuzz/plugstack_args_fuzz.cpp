// Fuzz target: the arguments of the plugin's plugstack.conf line
// (launch::parse_plugstack_args). The input is the text after the plugin path,
// split on blanks as Slurm splits it.
//
// Invariants of an accepted configuration: the port range is valid, every
// network contains its own base address and prints to a form that parses back
// to itself, and printing the whole configuration as arguments parses back to
// the same configuration.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "launch/error.h"
#include "launch/settings.h"

namespace {

using slurmddp::launch::Cidr;
using slurmddp::launch::LaunchError;
using slurmddp::launch::PlugstackConfig;

std::vector<std::string> blank_split(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::vector<std::string> print(const PlugstackConfig& c) {
  std::vector<std::string> args = {
      std::string("default=") + (c.enabled_by_default ? "on" : "off"),
      "port_range=" + std::to_string(c.port_range.lo) + "-" + std::to_string(c.port_range.hi),
      std::string("bind_gpu=") + (c.bind_gpu ? "yes" : "no"),
      std::string("verbose=") + (c.verbose ? "yes" : "no"),
  };
  if (!c.networks.empty()) {
    std::string nets;
    for (const Cidr& n : c.networks) nets += (nets.empty() ? "" : ",") + n.str();
    args.push_back("network=" + nets);
  }
  if (!c.hostname_suffix.empty()) args.push_back("hostname_suffix=" + c.hostname_suffix);
  if (!c.ifname.empty()) args.push_back("ifname=" + c.ifname);
  return args;
}

bool same(const PlugstackConfig& a, const PlugstackConfig& b) {
  if (a.networks.size() != b.networks.size()) return false;
  for (size_t i = 0; i < a.networks.size(); ++i) {
    if (a.networks[i].base != b.networks[i].base || a.networks[i].prefix != b.networks[i].prefix) {
      return false;
    }
  }
  return a.enabled_by_default == b.enabled_by_default && a.port_range == b.port_range &&
         a.hostname_suffix == b.hostname_suffix && a.ifname == b.ifname &&
         a.bind_gpu == b.bind_gpu && a.verbose == b.verbose;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> args = blank_split(slurmddp::fuzz::text(data, size));
  PlugstackConfig c;
  try {
    c = slurmddp::launch::parse_plugstack_args(args);
  } catch (const LaunchError&) {
    return 0;
  }
  FUZZ_CHECK(c.port_range.lo >= 1 && c.port_range.lo <= c.port_range.hi,
             std::to_string(c.port_range.lo) + "-" + std::to_string(c.port_range.hi));
  FUZZ_CHECK(c.ifname.size() < 16, c.ifname);
  for (const Cidr& n : c.networks) {
    FUZZ_CHECK(n.prefix >= 0 && n.prefix <= (n.base.is_v4() ? 32 : 128), n.str());
    FUZZ_CHECK(n.contains(n.base), n.str());
    Cidr again = slurmddp::launch::parse_cidr("network", n.str());
    FUZZ_CHECK(again.base == n.base && again.prefix == n.prefix, n.str() + " vs " + again.str());
  }
  std::vector<std::string> printed = print(c);
  PlugstackConfig again;
  try {
    again = slurmddp::launch::parse_plugstack_args(printed);
  } catch (const LaunchError& e) {
    FUZZ_CHECK(false, std::string("its own printed form is refused: ") + e.what());
  }
  FUZZ_CHECK(same(c, again), "printed form parses to another configuration");
  return 0;
}
