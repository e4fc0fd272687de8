// The server's connections still in the handshake, by source address, and the
// one to close when there are too many (Note [Pending connections]). Pure: no
// sockets, unit-tested on ids and address strings.
//
// Note [Pending connections]
// Anyone who can reach the store's port can open connections and hold them
// without ever authenticating; each costs the server a descriptor. The server
// bounds them (Note [Store server bounds]) and, past a bound, closes one of
// them to make room. Which one matters: closing the newest would turn away a
// rank that is joining right now while a flood holds the older ones. So the
// server closes the oldest connection of the source address that holds the
// most pending ones: a single flooding host pays for its own flood, and ranks
// from other hosts are not touched while it does; with every source equally
// crowded (or one source only, as on loopback) it is the oldest overall. A
// legitimate handshake takes one round trip, so to close a joining rank a
// flood must open more connections than the bound during that round trip;
// and a rank that is closed anyway retries (the client's backoff).
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

namespace slurmddp::store {

class PendingConnections {
 public:
  // Adds connection `id` from `source` (the peer's address without its port).
  // Ids must ascend with age: a later connection has a larger id.
  void add(uint64_t id, const std::string& source);
  // Forgets `id` (authenticated or closed); nothing if it is not pending.
  void remove(uint64_t id);
  bool contains(uint64_t id) const { return source_of_.count(id) != 0; }
  size_t size() const { return source_of_.size(); }
  // Pending connections from `source`.
  size_t from(const std::string& source) const;
  // The connection to close to make room: the oldest of the source with the
  // most pending connections (ties: the source whose oldest is older).
  // nullopt when none is pending.
  std::optional<uint64_t> victim() const;

 private:
  // A source's place in ranking_: its count, then its oldest id inverted, so
  // that the last element is the most crowded source with the oldest entry.
  using Rank = std::pair<size_t, uint64_t>;
  static Rank rank_of(const std::set<uint64_t>& ids) { return {ids.size(), ~*ids.begin()}; }

  std::unordered_map<uint64_t, std::string> source_of_;
  std::map<std::string, std::set<uint64_t>> by_source_;
  std::set<Rank> ranking_;
};

// The part of a socket address that names the host ("10.0.0.7", "fd00::1"),
// without the port; an IPv4 peer of an IPv6 socket keeps its mapped form.
std::string source_address(const sockaddr* addr, socklen_t len);

}  // namespace slurmddp::store
