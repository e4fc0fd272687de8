#include "options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "token.h"

namespace slurmddp::plugin {
namespace {

TEST(Options, TableIsCompleteAndPrefixed) {
  std::set<std::string> names;
  for (const auto& o : option_table()) {
    names.insert(o.name);
    EXPECT_EQ(std::string(o.usage).rfind("[ddp] ", 0), 0u) << o.name;
    EXPECT_EQ(o.has_arg != 0, o.arginfo != nullptr) << o.name;
  }
  EXPECT_EQ(names, (std::set<std::string>{"ddp", "no-ddp", "ddp-port", "ddp-addr", "ddp-ifname",
                                          "ddp-bind-gpu", "ddp-verbose", "ddp-launcher"}));
}

TEST(Options, RecordIsIdempotent) {
  launch::UserOptions o;
  EXPECT_TRUE(record_option(o, kOptPort, "29999"));
  EXPECT_TRUE(record_option(o, kOptPort, "29999"));
  EXPECT_TRUE(record_option(o, kOptNoDdp, nullptr));
  EXPECT_TRUE(record_option(o, kOptBindGpu, nullptr));
  EXPECT_EQ(o.port, "29999");
  EXPECT_EQ(o.enable, false);
  EXPECT_EQ(o.bind_gpu, true);
  EXPECT_TRUE(record_option(o, kOptLauncher, "torchrun"));
  EXPECT_EQ(o.launcher, "torchrun");
  EXPECT_FALSE(record_option(o, 999, nullptr));
}

TEST(Token, Is128RandomBitsInHex) {
  std::string a = generate_token();
  std::string b = generate_token();
  EXPECT_EQ(a.size(), 2 * kTokenBytes);
  EXPECT_GE(kTokenBytes * 8, 128u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
}

}  // namespace
}  // namespace slurmddp::plugin
