#include "launch/address.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include "launch/error.h"

namespace slurmddp::launch {
namespace {

using ::testing::HasSubstr;

IpAddress ip(const char* s) {
  return *IpAddress::parse(s);
}

TEST(IpAddress, ParseAndPrint) {
  EXPECT_EQ(ip("10.77.0.11").str(), "10.77.0.11");
  EXPECT_EQ(ip("fd00::1").str(), "fd00::1");
  EXPECT_FALSE(IpAddress::parse("n1").has_value());
  EXPECT_TRUE(ip("127.0.1.1").is_loopback());
  EXPECT_TRUE(ip("::1").is_loopback());
  EXPECT_FALSE(ip("10.0.0.1").is_loopback());
  EXPECT_LT(ip("10.0.0.9"), ip("::2"));  // IPv4 first
  EXPECT_LT(ip("10.0.0.9"), ip("10.0.1.0"));
}

TEST(Cidr, Contains) {
  auto c = parse_cidr("network", "10.10.0.0/16");
  EXPECT_TRUE(c.contains(ip("10.10.255.1")));
  EXPECT_FALSE(c.contains(ip("10.11.0.1")));
  EXPECT_FALSE(c.contains(ip("fd00::1")));
  auto c6 = parse_cidr("network", "fd00::/64");
  EXPECT_TRUE(c6.contains(ip("fd00::5")));
  EXPECT_TRUE(parse_cidr("n", "10.1.2.3/29").contains(ip("10.1.2.7")));
  EXPECT_FALSE(parse_cidr("n", "10.1.2.3/29").contains(ip("10.1.2.8")));
  EXPECT_TRUE(parse_cidr("n", "0.0.0.0/0").contains(ip("1.2.3.4")));
  EXPECT_EQ(parse_cidr("n", "10.0.0.1").prefix, 32);
}

TEST(Cidr, RejectsBadValues) {
  for (const char* bad : {"10.0.0.0/33", "10.0.0/8", "abc", "10.0.0.0/x", "fd00::/129"}) {
    try {
      parse_cidr("plugstack argument network", bad);
      ADD_FAILURE() << bad;
    } catch (const LaunchError& e) {
      EXPECT_THAT(e.what(), HasSubstr("plugstack argument network")) << bad;
    }
  }
}

TEST(SelectAddress, PrefersNonLoopbackIpv4Smallest) {
  std::vector<IpAddress> c{ip("fd00::1"), ip("10.0.0.9"), ip("127.0.1.1"), ip("10.0.0.3")};
  EXPECT_EQ(select_address("n1", c, {}).str(), "10.0.0.3");
  // deterministic whatever the resolver's order
  std::vector<IpAddress> r(c.rbegin(), c.rend());
  EXPECT_EQ(select_address("n1", r, {}).str(), "10.0.0.3");
}

TEST(SelectAddress, NetworkFilter) {
  std::vector<IpAddress> c{ip("10.0.0.3"), ip("192.168.5.7")};
  AddressPolicy p;
  p.networks = {parse_cidr("n", "192.168.0.0/16")};
  EXPECT_EQ(select_address("n1", c, p).str(), "192.168.5.7");
  p.networks = {parse_cidr("n", "172.16.0.0/12")};
  try {
    select_address("n1", c, p);
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no address in network 172.16.0.0/12"));
    EXPECT_THAT(e.what(), HasSubstr("resolved=10.0.0.3,192.168.5.7"));
  }
}

TEST(SelectAddress, LoopbackOnlyAllowedOnSingleNode) {
  std::vector<IpAddress> c{ip("127.0.1.1")};
  AddressPolicy p;
  try {
    select_address("n1", c, p);
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("resolves only to loopback (127.0.1.1)"));
  }
  p.allow_loopback = true;
  EXPECT_EQ(select_address("n1", c, p).str(), "127.0.1.1");
}

TEST(Resolve, LiteralsAndLocalhost) {
  EXPECT_EQ(resolve_host("10.1.2.3").front().str(), "10.1.2.3");
  auto lo = resolve_host("localhost");
  ASSERT_FALSE(lo.empty());
  EXPECT_TRUE(lo.front().is_loopback());
  try {
    resolve_host("no-such-host.invalid");
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("failed to resolve host 'no-such-host.invalid'"));
  }
}

TEST(Interfaces, LoopbackIsListedAndNetworksFound) {
  auto table = local_interface_addresses();
  auto nets = interface_networks("lo", table);
  ASSERT_FALSE(nets.empty());
  EXPECT_TRUE(nets.front().contains(ip("127.0.0.1")) || nets.front().base.family != AF_INET);
  try {
    interface_networks("nosuch0", table);
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("interface 'nosuch0' has no IP address"));
    EXPECT_THAT(e.what(), HasSubstr("lo"));
  }
}

TEST(Syntax, HostAndIfname) {
  EXPECT_NO_THROW(check_host_syntax("--ddp-addr", "n1-ib.cluster"));
  EXPECT_NO_THROW(check_host_syntax("--ddp-addr", "fd00::1"));
  EXPECT_THROW(check_host_syntax("--ddp-addr", "n1;rm"), LaunchError);
  EXPECT_THROW(check_host_syntax("--ddp-addr", ""), LaunchError);
  EXPECT_NO_THROW(check_ifname_syntax("ifname", "ib0"));
  EXPECT_THROW(check_ifname_syntax("ifname", "a/b"), LaunchError);
  EXPECT_THROW(check_ifname_syntax("ifname", "abcdefghijklmnop"), LaunchError);
}

}  // namespace
}  // namespace slurmddp::launch
