#include "launch/address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "common/quote.h"
#include "launch/error.h"
#include "launch/parse.h"

namespace slurmddp::launch {

using common::quote;

std::optional<IpAddress> IpAddress::parse(std::string_view text) {
  std::string s(text);
  IpAddress a;
  if (inet_pton(AF_INET, s.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET;
    return a;
  }
  if (inet_pton(AF_INET6, s.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET6;
    return a;
  }
  return std::nullopt;
}

std::string IpAddress::str() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family, bytes.data(), buf, sizeof buf);
  return buf;
}

bool IpAddress::is_v4() const {
  return family == AF_INET;
}

bool IpAddress::is_loopback() const {
  if (family == AF_INET) return bytes[0] == 127;
  static const std::array<uint8_t, 16> v6_loop{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return bytes == v6_loop;
}

bool IpAddress::operator<(const IpAddress& o) const {
  // IPv4 sorts before IPv6.
  if (family != o.family) return family == AF_INET;
  return bytes < o.bytes;
}

bool Cidr::contains(const IpAddress& a) const {
  if (a.family != base.family) return false;
  int bits = prefix;
  for (size_t i = 0; bits > 0; ++i, bits -= 8) {
    uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((a.bytes[i] & mask) != (base.bytes[i] & mask)) return false;
  }
  return true;
}

std::string Cidr::str() const {
  return base.str() + "/" + std::to_string(prefix);
}

Cidr parse_cidr(std::string_view name, std::string_view value) {
  auto expected = "a network such as 10.10.0.0/16 or fd00::/64";
  auto slash = value.find('/');
  auto addr = IpAddress::parse(value.substr(0, slash));
  if (!addr) {
    throw LaunchError("invalid " + std::string(name) + "=" + quote(value) + ": expected " +
                      expected);
  }
  int max = addr->is_v4() ? 32 : 128;
  int prefix = max;
  if (slash != std::string_view::npos) {
    prefix = static_cast<int>(
        parse_uint(std::string(name) + " prefix length", value.substr(slash + 1), 0, max));
  }
  return Cidr{*addr, prefix};
}

std::vector<Cidr> parse_cidr_list(std::string_view name, std::string_view value) {
  std::vector<Cidr> out;
  for (const auto& item : split(value, ',')) out.push_back(parse_cidr(name, item));
  return out;
}

void check_host_syntax(std::string_view name, std::string_view value) {
  bool ok = !value.empty() && value.size() <= 253;
  for (char c : value) {
    bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '.' || c == '_' || c == ':';
    ok = ok && allowed;
  }
  if (!ok) {
    throw LaunchError("invalid " + std::string(name) + "=" + quote(value) +
                      ": expected a host name or an IP address");
  }
}

void check_ifname_syntax(std::string_view name, std::string_view value) {
  bool ok = !value.empty() && value.size() < 16;
  for (char c : value) ok = ok && c > ' ' && c != '/' && c != ':' && c != 0x7f;
  if (!ok) {
    throw LaunchError("invalid " + std::string(name) + "=" + quote(value) +
                      ": expected a network interface name such as ib0 (at most 15 characters)");
  }
}

namespace {

std::string join(const std::vector<IpAddress>& v) {
  std::string s;
  for (const auto& a : v) s += (s.empty() ? "" : ",") + a.str();
  return s.empty() ? "none" : s;
}

}  // namespace

IpAddress select_address(std::string_view host, const std::vector<IpAddress>& candidates,
                         const AddressPolicy& policy) {
  std::vector<IpAddress> kept;
  for (const auto& a : candidates) {
    bool in_net =
        policy.networks.empty() || std::any_of(policy.networks.begin(), policy.networks.end(),
                                               [&](const Cidr& c) { return c.contains(a); });
    if (in_net) kept.push_back(a);
  }
  if (kept.empty()) {
    std::string nets;
    for (const auto& c : policy.networks) nets += (nets.empty() ? "" : ",") + c.str();
    throw LaunchError("failed to choose MASTER_ADDR: host '" + std::string(host) +
                      "' has no address in network " + nets + "; resolved=" + join(candidates) +
                      " (fix the network= setting or use --ddp-addr)");
  }
  std::vector<IpAddress> routable;
  for (const auto& a : kept) {
    if (!a.is_loopback()) routable.push_back(a);
  }
  if (routable.empty()) {
    if (!policy.allow_loopback) {
      throw LaunchError("failed to choose MASTER_ADDR: host '" + std::string(host) +
                        "' resolves only to loopback (" + join(kept) +
                        "), which other nodes cannot reach; fix name resolution for it, or set "
                        "hostname_suffix=, network= or --ddp-addr");
    }
    routable = kept;
  }
  return *std::min_element(routable.begin(), routable.end());
}

std::vector<IpAddress> resolve_host(const std::string& host) {
  if (auto literal = IpAddress::parse(host)) return {*literal};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    throw LaunchError("failed to resolve host '" + host + "': " + gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(res, freeaddrinfo);
  std::vector<IpAddress> out;
  for (addrinfo* p = res; p != nullptr; p = p->ai_next) {
    IpAddress a;
    if (p->ai_family == AF_INET) {
      a.family = AF_INET;
      std::memcpy(a.bytes.data(), &reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr, 4);
    } else if (p->ai_family == AF_INET6) {
      a.family = AF_INET6;
      std::memcpy(a.bytes.data(), &reinterpret_cast<sockaddr_in6*>(p->ai_addr)->sin6_addr, 16);
    } else {
      continue;
    }
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  }
  if (out.empty()) throw LaunchError("failed to resolve host '" + host + "': no IP address");
  return out;
}

namespace {
int prefix_of(const sockaddr* mask, int family) {
  if (mask == nullptr) return family == AF_INET ? 32 : 128;
  const uint8_t* b =
      family == AF_INET
          ? reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(mask)->sin_addr)
          : reinterpret_cast<const uint8_t*>(
                &reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
  int n = family == AF_INET ? 4 : 16;
  int bits = 0;
  for (int i = 0; i < n; ++i) bits += __builtin_popcount(b[i]);
  return bits;
}
}  // namespace

std::vector<InterfaceAddress> local_interface_addresses() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    throw LaunchError(std::string("failed to list network interfaces: ") + std::strerror(errno));
  }
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owner(list, freeifaddrs);
  std::vector<InterfaceAddress> out;
  for (ifaddrs* p = list; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr) continue;
    int fam = p->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    InterfaceAddress ia;
    ia.ifname = p->ifa_name;
    ia.addr.family = fam;
    if (fam == AF_INET) {
      std::memcpy(ia.addr.bytes.data(), &reinterpret_cast<sockaddr_in*>(p->ifa_addr)->sin_addr, 4);
    } else {
      std::memcpy(ia.addr.bytes.data(), &reinterpret_cast<sockaddr_in6*>(p->ifa_addr)->sin6_addr,
                  16);
    }
    ia.prefix = prefix_of(p->ifa_netmask, fam);
    out.push_back(ia);
  }
  return out;
}

std::optional<IpAddress> route_source_address(const IpAddress& dest) {
  int fd = socket(dest.family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (dest.family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(9);
    std::memcpy(&sin->sin_addr, dest.bytes.data(), 4);
    len = sizeof(sockaddr_in);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(9);
    std::memcpy(&sin6->sin6_addr, dest.bytes.data(), 16);
    len = sizeof(sockaddr_in6);
  }
  std::optional<IpAddress> out;
  sockaddr_storage local{};
  socklen_t local_len = sizeof local;
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0) {
    IpAddress a;
    a.family = dest.family;
    if (dest.family == AF_INET) {
      std::memcpy(a.bytes.data(), &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, 4);
    } else {
      std::memcpy(a.bytes.data(), &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, 16);
    }
    out = a;
  }
  close(fd);
  return out;
}

std::string interface_of(const IpAddress& addr, const std::vector<InterfaceAddress>& table) {
  for (const auto& ia : table) {
    if (ia.addr == addr) return ia.ifname;
  }
  return {};
}

std::vector<Cidr> interface_networks(std::string_view ifname,
                                     const std::vector<InterfaceAddress>& table) {
  std::vector<Cidr> nets;
  std::string names;
  for (const auto& ia : table) {
    if (ia.ifname == ifname) {
      nets.push_back(Cidr{ia.addr, ia.prefix});
    } else if (names.find(ia.ifname) == std::string::npos) {
      names += (names.empty() ? "" : ",") + ia.ifname;
    }
  }
  if (nets.empty()) {
    throw LaunchError("interface '" + std::string(ifname) +
                      "' has no IP address on this node; interfaces with addresses: " +
                      (names.empty() ? "none" : names));
  }
  return nets;
}

}  // namespace slurmddp::launch
