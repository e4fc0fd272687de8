// Signal names without sigabbrev_np: the same names glibc gives, for every
// signal number, and back.
#include "common/signals.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <string>

#include "slurmddp/stop.h"

namespace slurmddp::common {
namespace {

TEST(Signals, NamesTheSignalsUsersSet) {
  EXPECT_STREQ(signal_abbrev(SIGUSR1), "USR1");
  EXPECT_STREQ(signal_abbrev(SIGTERM), "TERM");
  EXPECT_STREQ(signal_abbrev(SIGURG), "URG");
  EXPECT_STREQ(signal_abbrev(SIGIO), "POLL") << "glibc's name for both";
  EXPECT_EQ(signal_abbrev(0), nullptr);
  EXPECT_EQ(signal_abbrev(-1), nullptr);
  EXPECT_EQ(signal_abbrev(SIGRTMIN), nullptr);
  EXPECT_EQ(signal_abbrev(NSIG), nullptr);
  EXPECT_EQ(signal_name(SIGHUP), "SIGHUP");
  EXPECT_EQ(signal_name(SIGRTMIN + 1), "signal " + std::to_string(SIGRTMIN + 1));
}

TEST(Signals, NumbersComeBackFromNames) {
  for (int s = 1; s < NSIG; ++s) {
    const char* abbrev = signal_abbrev(s);
    if (abbrev != nullptr) {
      EXPECT_EQ(signal_number(abbrev), s) << abbrev;
    }
  }
  EXPECT_EQ(signal_number("IO"), SIGIO);
  EXPECT_EQ(signal_number("usr1"), 0) << "exact case: callers upper-case";
  EXPECT_EQ(signal_number("SIGUSR1"), 0) << "without SIG: callers strip it";
  EXPECT_EQ(signal_number(""), 0);
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
TEST(Signals, AgreeWithGlibcsSigabbrevNp) {
  for (int s = -1; s <= NSIG; ++s) {
    const char* ours = signal_abbrev(s);
    const char* glibc = sigabbrev_np(s);
    if (glibc == nullptr) {
      EXPECT_EQ(ours, nullptr) << "signal " << s;
    } else {
      ASSERT_NE(ours, nullptr) << "signal " << s << " (" << glibc << ")";
      EXPECT_STREQ(ours, glibc) << "signal " << s;
    }
  }
}
#endif

}  // namespace
}  // namespace slurmddp::common
