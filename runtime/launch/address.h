// IP addresses, networks and the rule that picks MASTER_ADDR among the
// addresses a host name resolves to. Selection is pure; resolution and the
// interface table are thin wrappers over getaddrinfo/getifaddrs.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace slurmddp::launch {

struct IpAddress {
  int family = 0;  // AF_INET or AF_INET6
  std::array<uint8_t, 16> bytes{};

  static std::optional<IpAddress> parse(std::string_view text);
  std::string str() const;
  bool is_loopback() const;
  bool is_v4() const;
  bool operator==(const IpAddress& o) const { return family == o.family && bytes == o.bytes; }
  bool operator!=(const IpAddress& o) const { return !(*this == o); }
  bool operator<(const IpAddress& o) const;
};

struct Cidr {
  IpAddress base;
  int prefix = 0;
  bool contains(const IpAddress& a) const;
  std::string str() const;
};

// "10.0.0.0/16" or "fd00::/64"; a bare address means a single host.
Cidr parse_cidr(std::string_view name, std::string_view value);
// A comma-separated list of networks.
std::vector<Cidr> parse_cidr_list(std::string_view name, std::string_view value);

// Validates a host name or IP literal given by a user (--ddp-addr).
void check_host_syntax(std::string_view name, std::string_view value);
// Validates an interface name (IFNAMSIZ, no '/', no spaces).
void check_ifname_syntax(std::string_view name, std::string_view value);

struct AddressPolicy {
  std::vector<Cidr> networks;   // keep only addresses inside one of these (empty: all)
  bool allow_loopback = false;  // true only when every rank runs on one node
};

// Picks one address among `candidates` (the resolution of `host`)
// deterministically: inside `networks` if given, loopback only when allowed,
// IPv4 before IPv6, then the numerically smallest. Throws LaunchError saying
// what was found and what would fix it when nothing qualifies.
IpAddress select_address(std::string_view host, const std::vector<IpAddress>& candidates,
                         const AddressPolicy& policy);

// All addresses `host` resolves to (an IP literal resolves to itself). Throws
// LaunchError naming the host and the resolver's reason.
std::vector<IpAddress> resolve_host(const std::string& host);

struct InterfaceAddress {
  std::string ifname;
  IpAddress addr;
  int prefix = 0;
};
// This machine's interface addresses (getifaddrs).
std::vector<InterfaceAddress> local_interface_addresses();

// The local address the kernel would use as source to reach `dest` (a UDP
// connect, nothing is sent); nullopt when there is no route.
std::optional<IpAddress> route_source_address(const IpAddress& dest);

// The interface in `table` that holds `addr`; empty when none does.
std::string interface_of(const IpAddress& addr, const std::vector<InterfaceAddress>& table);

// The networks of interface `ifname` in `table`; throws LaunchError listing the
// interfaces that exist when it has none.
std::vector<Cidr> interface_networks(std::string_view ifname,
                                     const std::vector<InterfaceAddress>& table);

}  // namespace slurmddp::launch
