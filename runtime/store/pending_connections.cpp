// Note [Pending connections] in pending_connections.h.
#include "store/pending_connections.h"

#include <arpa/inet.h>
#include <netinet/in.h>

namespace slurmddp::store {

void PendingConnections::add(uint64_t id, const std::string& source) {
  auto [it, fresh] = source_of_.emplace(id, source);
  if (!fresh) return;
  std::set<uint64_t>& ids = by_source_[source];
  if (!ids.empty()) ranking_.erase(rank_of(ids));
  ids.insert(id);
  ranking_.insert(rank_of(ids));
}

void PendingConnections::remove(uint64_t id) {
  auto it = source_of_.find(id);
  if (it == source_of_.end()) return;
  auto from = by_source_.find(it->second);
  source_of_.erase(it);
  std::set<uint64_t>& ids = from->second;
  ranking_.erase(rank_of(ids));
  ids.erase(id);
  if (ids.empty()) {
    by_source_.erase(from);
  } else {
    ranking_.insert(rank_of(ids));
  }
}

size_t PendingConnections::from(const std::string& source) const {
  auto it = by_source_.find(source);
  return it == by_source_.end() ? 0 : it->second.size();
}

std::optional<uint64_t> PendingConnections::victim() const {
  if (ranking_.empty()) return std::nullopt;
  return ~ranking_.rbegin()->second;
}

std::string source_address(const sockaddr* addr, socklen_t len) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, text, sizeof text);
  } else if (addr->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, text, sizeof text);
  } else {
    return "?";
  }
  return text;
}

}  // namespace slurmddp::store
