// Note [Locating missing ranks]
//   A rank that never joins cannot say where it is, so its node-mates say it
//   for it: the first rank of a node to announce itself (the one whose add to
//   "<scope>/node/<node>" returns 1) records, for every other rank expected on
//   its node (Locality::node_ranks: SLURM_GTIDS, or torchrun's block of
//   LOCAL_WORLD_SIZE ranks), "<scope>/where/<r>" = its node; every rank's add
//   marks the node present. A timeout then costs one check per missing rank
//   (up to kListed of them) to name its host, and a probe in halves over the
//   group's nodes (probe_missing) to find the nodes from which no rank joined
//   at all: the ranks nobody vouched for are on one of those. Joining costs
//   one request a rank and node_ranks.size() - 1 small writes a node (not a
//   rank: at 16 ranks a node, every rank writing them was a third of what rank
//   0's store served, Note [Join requests]), and nothing else unless something
//   went wrong. A rank whose node-mate is still writing them when the timeout
//   is diagnosed is named without its host.
#include <algorithm>
#include <map>

#include "membership/membership.h"
#include "membership/ranks.h"

namespace slurmddp::membership {

namespace {

constexpr size_t kListed = 32;  // missing ranks whose host is looked up

Bytes bytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

}  // namespace

void Membership::announce_locality() const {
  const Locality& l = o_.locality;
  if (l.node.empty()) return;
  const bool mates =
      std::any_of(l.node_ranks.begin(), l.node_ranks.end(), [this](int r) { return r != o_.rank; });
  if (!mates && l.nodes.empty()) return;  // nothing to vouch for, no node list to probe
  if (o_.store->add(key("node/" + l.node), 1) != 1) return;  // a node-mate vouched already
  for (int r : l.node_ranks) {
    if (r != o_.rank && r >= 0 && r < o_.size) {
      o_.store->set(key("where/" + std::to_string(r)), bytes(l.node));
    }
  }
}

std::string Membership::where_missing(const std::vector<int>& missing) const {
  const Locality& l = o_.locality;
  if (missing.empty() || l.node.empty()) return "";
  std::map<std::string, std::vector<int>> by_host;  // sorted by host name
  std::vector<int> unplaced;
  for (size_t i = 0; i < missing.size(); ++i) {
    const int r = missing[i];
    const std::string k = key("where/" + std::to_string(r));
    if (i < kListed && o_.store->check({k})) {
      const Bytes host = o_.store->get(k, std::chrono::milliseconds(0));
      by_host[std::string(host.begin(), host.end())].push_back(r);
    } else {
      unplaced.push_back(r);
    }
  }
  std::string out;
  for (const auto& [host, ranks] : by_host) {
    out += (out.empty() ? "" : "; ") + host + " " + rank_list(ranks);
  }
  if (!unplaced.empty() && !l.nodes.empty()) {
    const int count = static_cast<int>(l.nodes.size());
    const auto silent = probe_missing(*o_.store, count, [this, &l](int i) {
      return key("node/" + l.nodes[static_cast<size_t>(i)]);
    });
    if (!silent.empty()) {
      std::string names;
      for (size_t i = 0; i < silent.size() && i < kListed; ++i) {
        names += (i == 0 ? "" : ", ") + l.nodes[static_cast<size_t>(silent[i])];
      }
      if (silent.size() > kListed) {
        names += " and " + std::to_string(silent.size() - kListed) + " more";
      }
      out += (out.empty() ? "" : "; ") + names + " " + rank_list(unplaced) + ", where no rank " +
             "joined";
    }
  }
  return out.empty() ? "" : " (hosts: " + out + ")";
}

}  // namespace slurmddp::membership
