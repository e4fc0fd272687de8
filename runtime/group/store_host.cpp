// Note [Store host bounds] and Note [Store listen address] in store_host.h.
#include "group/store_host.h"

#include <sys/resource.h>

#include <algorithm>

namespace slurmddp {

namespace {

uint64_t ranks(int world_size) {
  return static_cast<uint64_t>(std::max(world_size, 1));
}

bool held_here(const launch::IpAddress& a, const std::vector<launch::InterfaceAddress>& local) {
  return std::any_of(local.begin(), local.end(),
                     [&](const launch::InterfaceAddress& i) { return i.addr == a; });
}

}  // namespace

uint64_t pending_wanted(int world_size) {
  return std::clamp(2 * ranks(world_size), kMinPending, kMaxPending);
}

uint64_t reserve_wanted(int world_size) {
  return 2 * ranks(world_size) + kOwnFilesMargin;
}

uint64_t soft_nofile() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
  return rl.rlim_cur;
}

TcpStoreServerOptions store_bounds(int world_size, uint64_t nofile) {
  TcpStoreServerOptions o;
  const uint64_t reserve = reserve_wanted(world_size);
  uint64_t pending = pending_wanted(world_size);
  if (nofile != 0) {
    const uint64_t taken = ranks(world_size) + reserve;  // the ranks' connections, the reserve
    const uint64_t room = nofile > taken ? nofile - taken : 0;
    pending = std::max(std::min(pending, room), kFloorPending);
  }
  o.max_unauthenticated = pending;
  o.reserve_fds = reserve;
  return o;
}

ListenChoice store_listen_address(const std::string& master_addr,
                                  const std::vector<launch::IpAddress>& resolved,
                                  const std::vector<launch::InterfaceAddress>& local) {
  const std::string all = "listening on every interface: MASTER_ADDR=" + master_addr;
  if (auto literal = launch::IpAddress::parse(master_addr)) {
    if (literal->is_loopback() || held_here(*literal, local)) {
      return {master_addr, "listening on MASTER_ADDR=" + master_addr + " only"};
    }
    return {"", all +
                    " is not an address of this host's interfaces (NAT, or another network "
                    "namespace?)"};
  }
  if (resolved.empty()) return {"", all + " does not resolve here"};
  std::string list;
  for (const auto& a : resolved) list += (list.empty() ? "" : ", ") + a.str();
  const auto loopback = [](const launch::IpAddress& a) { return a.is_loopback(); };
  const auto foreign = [&local](const launch::IpAddress& a) { return !held_here(a, local); };
  if (std::any_of(resolved.begin(), resolved.end(), loopback)) {
    return {"",
            all + " resolves to loopback here (" + list + "), which the other nodes cannot reach"};
  }
  if (std::any_of(resolved.begin(), resolved.end(), foreign)) {
    return {"", all + " resolves to " + list + ", not all of them this host's"};
  }
  if (resolved.size() > 1) return {"", all + " resolves to several addresses (" + list + ")"};
  return {resolved.front().str(),
          "listening on " + resolved.front().str() + " (MASTER_ADDR=" + master_addr + ") only"};
}

}  // namespace slurmddp
