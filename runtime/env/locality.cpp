#include "env/locality.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "launch/hostlist.h"
#include "launch/parse.h"

namespace slurmddp {

namespace {

std::optional<int> parse_rank(const std::string& s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoi(s);
}

std::vector<int> gtids_ranks(const std::string& gtids, const ProcessIdentity& id) {
  std::vector<int> ranks;
  for (const auto& part : launch::split(gtids, ',')) {
    const auto r = parse_rank(part);
    if (!r || *r >= id.world_size) return {};
    ranks.push_back(*r);
  }
  if (std::find(ranks.begin(), ranks.end(), id.rank) == ranks.end()) return {};
  return ranks;
}

}  // namespace

Locality locality_from_environment(const ProcessIdentity& id, const EnvReader& env) {
  Locality l;
  if (auto n = env("SLURMD_NODENAME"); n && !n->empty()) {
    l.node = *n;
  } else {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) == 0) l.node = buf;
  }
  if (l.node.empty()) return l;
  const auto gtids = env("SLURM_GTIDS");
  if (id.source != IdentitySource::kTorchrun && gtids) {
    l.node_ranks = gtids_ranks(*gtids, id);
  } else if (id.source == IdentitySource::kTorchrun && id.local_rank <= id.rank &&
             id.local_world_size >= 1) {
    const int first = id.rank - id.local_rank;
    for (int r = first; r < first + id.local_world_size && r < id.world_size; ++r) {
      l.node_ranks.push_back(r);
    }
  }
  const char* name = env("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_NODELIST";
  if (auto list = env(name)) {
    try {
      auto nodes = launch::expand_hostlist(name, *list);
      if (std::find(nodes.begin(), nodes.end(), l.node) != nodes.end()) l.nodes = std::move(nodes);
    } catch (const std::exception&) {
      // A list this rank cannot read only makes a timeout less specific.
    }
  }
  return l;
}

Locality locality_from_environment(const ProcessIdentity& id) {
  return locality_from_environment(id, [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
  });
}

}  // namespace slurmddp
