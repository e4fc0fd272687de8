#include "launch/parse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/quote.h"
#include "launch/error.h"

namespace slurmddp::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const LaunchError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ParseUint, AcceptsRangeBounds) {
  EXPECT_EQ(parse_uint("X", "0", 0, 10), 0u);
  EXPECT_EQ(parse_uint("X", "10", 0, 10), 10u);
  EXPECT_EQ(parse_uint("X", "18446744073709551", 0, UINT64_MAX), 18446744073709551ull);
}

TEST(ParseUint, RejectsGarbageNamingVariableValueAndForm) {
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "1x", "0x10", "11", "99999999999999999999"}) {
    auto msg = error_of([&] { parse_uint("SLURM_PROCID", bad, 0, 10); });
    EXPECT_THAT(msg, HasSubstr("SLURM_PROCID=")) << bad;
    EXPECT_THAT(msg, HasSubstr("expected an integer in [0, 10]")) << bad;
  }
}

TEST(ParsePort, Bounds) {
  EXPECT_EQ(parse_port("P", "1"), 1);
  EXPECT_EQ(parse_port("P", "65535"), 65535);
  EXPECT_THAT(error_of([] { parse_port("--ddp-port", "70000"); }),
              HasSubstr("invalid --ddp-port='70000': expected a TCP port number in [1, 65535]"));
  EXPECT_THAT(error_of([] { parse_port("--ddp-port", "abc"); }), HasSubstr("'abc'"));
  EXPECT_THAT(error_of([] { parse_port("--ddp-port", "0"); }), HasSubstr("'0'"));
}

TEST(ParseBool, Words) {
  EXPECT_TRUE(parse_bool("B", "Yes"));
  EXPECT_TRUE(parse_bool("B", "on"));
  EXPECT_FALSE(parse_bool("B", "OFF"));
  EXPECT_FALSE(parse_bool("B", "0"));
  EXPECT_THAT(error_of([] { parse_bool("default", "maybe"); }), HasSubstr("default='maybe'"));
}

TEST(PortRange, Parses) {
  auto r = parse_port_range("port_range", "61000-65535");
  EXPECT_EQ(r.lo, 61000);
  EXPECT_EQ(r.hi, 65535);
  EXPECT_EQ(r.size(), 4536u);
  EXPECT_EQ(parse_port_range("p", "5000").size(), 1u);
  for (const char* bad : {"5-4", "0-10", "1-65536", "-", "a-b", "1-", ""}) {
    EXPECT_THAT(error_of([&] { parse_port_range("port_range", bad); }),
                HasSubstr("expected a port range LO-HI"))
        << bad;
  }
}

TEST(PortList, SlurmForms) {
  EXPECT_THAT(parse_port_list("R", "20006-20010"), ElementsAre(PortRange{20006, 20010}));
  EXPECT_THAT(parse_port_list("R", "12000,12003-12004"),
              ElementsAre(PortRange{12000, 12000}, PortRange{12003, 12004}));
  EXPECT_THAT(parse_port_list("R", "7"), ElementsAre(PortRange{7, 7}));
  for (const char* bad : {"", ",", "1-", "9-8", "70000", "1,,2"}) {
    EXPECT_THAT(error_of([&] { parse_port_list("SLURM_STEP_RESV_PORTS", bad); }),
                HasSubstr("SLURM_STEP_RESV_PORTS="))
        << bad;
  }
}

// Note [Bounded parsing]: a list is kept as it is written, its ranges not
// expanded (8,192 ranges of 65,535 ports here: a gigabyte once expanded), and a
// list over the cap is refused unread, the error naming its length.
TEST(PortList, StaysRangesAndRefusesAnOversizedValue) {
  std::string full;
  while (full.size() + 8 < kMaxPortListBytes) full += "1-65535,";
  full += "2";
  const auto ranges = parse_port_list("SLURM_STEP_RESV_PORTS", full);
  ASSERT_EQ(ranges.size(), kMaxPortListBytes / 8);
  EXPECT_EQ(ranges.front(), (PortRange{1, 65535}));
  EXPECT_EQ(ranges.back(), (PortRange{2, 2}));

  std::string huge;
  while (huge.size() < 128 * 1024) huge += "1-65535,";
  huge.back() = '9';
  EXPECT_EQ(error_of([&] { parse_port_list("SLURM_STEP_RESV_PORTS", huge); }),
            "invalid SLURM_STEP_RESV_PORTS: 131072 bytes long, over the limit of 65536 bytes; "
            "expected a port list such as 20000-20004 or 12000,12003-12004");
}

TEST(TasksPerNode, SlurmForms) {
  EXPECT_THAT(parse_tasks_per_node("T", "4(x2),3"), ElementsAre(4, 4, 3));
  EXPECT_THAT(parse_tasks_per_node("T", "1"), ElementsAre(1));
  EXPECT_THAT(parse_tasks_per_node("T", "2,1(x3)"), ElementsAre(2, 1, 1, 1));
  for (const char* bad : {"", "0", "4(x0)", "4(2)", "4(x2", "(x2)", "4x2", "4(x2),", "a"}) {
    EXPECT_THAT(error_of([&] { parse_tasks_per_node("SLURM_STEP_TASKS_PER_NODE", bad); }),
                HasSubstr("expected a tasks-per-node list such as 4(x2),3"))
        << bad;
  }
}

TEST(Quote, EscapesControlCharactersAndShortens) {
  EXPECT_EQ(common::quote("a\nb"), "'a\\x0ab'");
  EXPECT_EQ(common::quote(std::string(100, 'x')).size(), 80u + 2 + 3);
}

}  // namespace
}  // namespace slurmddp::launch
