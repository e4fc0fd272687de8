#include "plugin/options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "launch/error.h"
#include "plugin/token.h"

namespace slurmddp::plugin {
namespace {

TEST(Options, TableIsCompleteAndPrefixed) {
  std::set<std::string> names;
  for (const auto& o : option_table()) {
    names.insert(o.name);
    EXPECT_EQ(std::string(o.usage).rfind("[ddp] ", 0), 0u) << o.name;
    EXPECT_EQ(o.has_arg != 0, o.arginfo != nullptr) << o.name;
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"ddp", "no-ddp", "ddp-port", "ddp-addr", "ddp-ifname",
                                   "ddp-bind-gpu", "ddp-verbose", "ddp-launcher", "ddp-threads"}));
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

TEST(Options, ThreadsTakesYesOrNo) {
  const OptionDoc* doc = nullptr;
  for (const auto& o : option_table()) {
    if (std::string(o.name) == "ddp-threads") doc = &o;
  }
  ASSERT_NE(doc, nullptr);
  EXPECT_EQ(doc->id, kOptThreads);
  EXPECT_EQ(doc->has_arg, 1);
  EXPECT_STREQ(doc->arginfo, "yes|no");
  EXPECT_STREQ(doc->usage,
               "[ddp] Export OMP_NUM_THREADS and BLAS thread counts from the task's CPUs "
               "(default yes)");

  // The raw value is recorded (twice: idempotent); resolve_settings validates it.
  launch::UserOptions o;
  EXPECT_TRUE(record_option(o, kOptThreads, "no"));
  EXPECT_TRUE(record_option(o, kOptThreads, "no"));
  EXPECT_EQ(o.threads, "no");
  auto no_env = [](const char*) -> std::optional<std::string> { return std::nullopt; };
  EXPECT_FALSE(launch::resolve_settings(o, no_env, {}).threads);
  EXPECT_TRUE(record_option(o, kOptThreads, "perhaps"));
  EXPECT_EQ(o.threads, "perhaps");
  try {
    launch::resolve_settings(o, no_env, {});
    FAIL();
  } catch (const launch::LaunchError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--ddp-threads='perhaps': expected yes or no"));
  }
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
