// Note [Locating missing ranks]
//   A rank that never joins cannot say where it is, so its node-mates say it
//   for it: when a rank announces itself it also records, for every other
//   rank expected on its node (Locality::node_ranks: SLURM_GTIDS, or
//   torchrun's block of LOCAL_WORLD_SIZE ranks), "<scope>/where/<r>" = its
//   node, and marks its node present ("<scope>/node/<node>"). A timeout then
//   costs one check per missing rank (up to kListed of them) to name its
//   host, and a probe in halves over the group's nodes (probe_missing) to
//   find the nodes from which no rank joined at all: the ranks nobody
//   vouched for are on one of those. This costs node_ranks.size() small
//   writes per rank while joining (a handful: one per task of the node) and
//   nothing at all unless something went wrong.
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
  for (int r : l.node_ranks) {
    if (r != o_.rank && r >= 0 && r < o_.size) {
      o_.store->set(key("where/" + std::to_string(r)), bytes(l.node));
    }
  }
  if (!l.nodes.empty()) o_.store->set(key("node/" + l.node), bytes("1"));
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
