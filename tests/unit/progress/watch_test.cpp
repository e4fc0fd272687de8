// make_watch (group/watch.h): the hang report's settings from the
// environment, with errors that name the variable, its value and what is
// expected.
#include "group/watch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>

#include "slurmddp/error.h"

namespace slurmddp {
namespace {

using ::testing::HasSubstr;

class Env {
 public:
  Env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    setenv(name, value, 1);
  }
  ~Env() {
    if (saved_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, saved_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string saved_;
};

WatchRequest request(int size = 4) {
  WatchRequest r;
  r.store = make_in_process_store();
  r.scope = "g/1";
  r.rank = 0;
  r.size = size;
  r.node = "n1";
  r.timeout = std::chrono::seconds(30);
  return r;
}

TEST(Watch, ByDefaultAWatchdogAndTheUrgHandler) {
  auto tracker = std::make_shared<progress::Tracker>();
  Watch w = make_watch(request(), tracker);
  ASSERT_TRUE(w.watchdog);
  ASSERT_TRUE(w.signal);
  EXPECT_EQ(w.signal->signal(), SIGURG);
}

TEST(Watch, NothingForOneRankOrWhenEveryReportIsOff) {
  auto tracker = std::make_shared<progress::Tracker>();
  EXPECT_FALSE(make_watch(request(1), tracker).watchdog);
  Env a("SLURMDDP_HANG_AFTER", "0");
  Env b("SLURMDDP_REPORT_SIGNAL", "none");
  Watch w = make_watch(request(), tracker);
  EXPECT_FALSE(w.watchdog);
  EXPECT_FALSE(w.signal);
  Env c("SLURMDDP_STRAGGLER_EVERY", "100");  // the straggler report alone
  EXPECT_TRUE(make_watch(request(), tracker).watchdog);
}

TEST(Watch, BadValuesNameTheVariableAndWhatIsExpected) {
  auto tracker = std::make_shared<progress::Tracker>();
  {
    Env e("SLURMDDP_STRAGGLER_EVERY", "often");
    try {
      make_watch(request(), tracker);
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()),
                "SLURMDDP_STRAGGLER_EVERY=often; expected a number of steps (e.g. 100), or 0 for "
                "no straggler report");
    }
  }
  {
    Env e("SLURMDDP_STRAGGLER_RATIO", "0.9");
    try {
      make_watch(request(), tracker);
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("SLURMDDP_STRAGGLER_RATIO=0.9; expected a ratio over 1"));
    }
  }
  {
    Env e("SLURMDDP_HANG_AFTER", "soon");
    EXPECT_THROW(make_watch(request(), tracker), InvalidArgument);
  }
  {
    Env e("SLURMDDP_REPORT_SIGNAL", "BOGUS");
    try {
      make_watch(request(), tracker);
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("SLURMDDP_REPORT_SIGNAL=BOGUS is not a signal"));
    }
  }
}

}  // namespace
}  // namespace slurmddp
