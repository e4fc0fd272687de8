// Fuzz target: the identity of a process read from its environment
// (slurmddp::identity_from_environment): the plugin's and torchrun's variables,
// and the bare Slurm variables decided by the launch rules. The environment is
// built from the input's NAME=VALUE lines; the process's own environ is never
// read, and name resolution is replaced by a fixed table, so no input reaches
// the network.
//
// Errors are InvalidArgument (the documented outcome); anything else escaping
// is a bug. Invariants of an accepted identity: 0 <= RANK < WORLD_SIZE,
// LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE, NODE_RANK < the node count, a
// master address and port (PMIx, which has none, is not reachable here), a
// describe() line that does not depend on the token's text; from bare Slurm,
// WORLD_SIZE is the sum of the tasks per node.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "env/identity.h"
#include "fuzz_util.h"
#include "launch/address.h"
#include "launch/error.h"
#include "launch/parse.h"
#include "launch/rendezvous.h"
#include "slurmddp/error.h"
#include "slurmddp/identity.h"

namespace {

namespace launch = slurmddp::launch;
using slurmddp::IdentitySource;
using slurmddp::ProcessIdentity;

// The warning about inherited plugin variables would flood the fuzzer's
// output; an explicit SLURMDDP_LOG_LEVEL still wins.
const int kQuiet = setenv("SLURMDDP_LOG_LEVEL", "error", 0);

launch::IpAddress ip(const char* text) {
  return *launch::IpAddress::parse(text);
}

// Names resolve by a fixed rule: literals to themselves, "*-fail" nowhere,
// "localhost*" to loopback, anything else to 10.0.0.1 and fd00::1.
launch::NetworkView fake_network() {
  launch::NetworkView net;
  net.resolve = [](const std::string& host) -> std::vector<launch::IpAddress> {
    if (auto literal = launch::IpAddress::parse(host)) return {*literal};
    if (host.size() >= 5 && host.compare(host.size() - 5, 5, "-fail") == 0) {
      throw launch::LaunchError("failed to resolve host '" + host + "': Name or service not known");
    }
    if (host.rfind("localhost", 0) == 0) return {ip("127.0.0.1"), ip("::1")};
    return {ip("10.0.0.1"), ip("fd00::1")};
  };
  net.interfaces = [] {
    return std::vector<launch::InterfaceAddress>{
        {"lo", ip("127.0.0.1"), 8}, {"eth0", ip("10.0.0.1"), 24}, {"ib0", ip("fd00::1"), 64}};
  };
  net.route_source = [](const launch::IpAddress& dest) -> std::optional<launch::IpAddress> {
    if (dest.is_loopback()) return dest;
    return dest.is_v4() ? ip("10.0.0.1") : ip("fd00::1");
  };
  return net;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const slurmddp::fuzz::EnvMap env(slurmddp::fuzz::text(data, size));
  slurmddp::EnvReader reader = [&env](const char* name) { return env.get(name); };
  static const launch::NetworkView net = fake_network();
  ProcessIdentity id;
  try {
    id = slurmddp::identity_from_environment(reader, net);
  } catch (const slurmddp::InvalidArgument&) {
    return 0;
  }
  const std::string line = id.describe();
  FUZZ_CHECK(id.rank >= 0 && id.rank < id.world_size, line);
  FUZZ_CHECK(id.local_rank >= 0 && id.local_rank < id.local_world_size, line);
  FUZZ_CHECK(id.local_world_size <= id.world_size, line);
  FUZZ_CHECK(id.node_rank >= 0 && id.node_rank < id.num_nodes, line);
  FUZZ_CHECK(id.num_nodes <= id.world_size || id.source != IdentitySource::kSlurm, line);
  FUZZ_CHECK(!id.master_addr.empty() && id.master_port >= 1, line);
  FUZZ_CHECK(!id.local_device || *id.local_device >= 0, line);
  if (!id.token.empty()) {  // the line depends on whether a token is set, never on its text
    ProcessIdentity other = id;
    other.token = "another token";
    FUZZ_CHECK(other.describe() == line, line);
  }
  if (id.source == IdentitySource::kSlurm) {
    const char* tpn_name =
        env.get("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    uint64_t sum = 0;
    for (uint32_t c : launch::parse_tasks_per_node(tpn_name, *env.get(tpn_name))) sum += c;
    FUZZ_CHECK(sum == static_cast<uint64_t>(id.world_size),
               "sum of " + std::string(tpn_name) + " = " + std::to_string(sum) + "; " + line);
  }
  return 0;
}
