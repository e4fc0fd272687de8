// Note [Report signal]: which signal asks for a hang report, and its handler.
#include "progress/report_signal.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>

#include "slurmddp/error.h"

namespace slurmddp::progress {
namespace {

using ::testing::HasSubstr;

TEST(ReportSignal, NamesAndNumbersAreSignalsAndNoneIsNone) {
  EXPECT_EQ(parse_report_signal("V", "URG"), SIGURG);
  EXPECT_EQ(parse_report_signal("V", "sigwinch"), SIGWINCH);
  EXPECT_EQ(parse_report_signal("V", "SIGTTOU"), SIGTTOU);
  EXPECT_EQ(parse_report_signal("V", std::to_string(SIGURG)), SIGURG);
  EXPECT_EQ(parse_report_signal("V", "none"), std::nullopt);
  EXPECT_EQ(parse_report_signal("V", "0"), std::nullopt);
}

TEST(ReportSignal, ABadValueNamesTheVariableTheValueAndWhatIsExpected) {
  try {
    parse_report_signal("SLURMDDP_REPORT_SIGNAL", "URGENT");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "SLURMDDP_REPORT_SIGNAL=URGENT is not a signal; expected a signal name or number a "
              "program can catch (default URG: scancel --signal=URG <job>), or none");
  }
  try {
    parse_report_signal("SLURMDDP_REPORT_SIGNAL", "KILL");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("SLURMDDP_REPORT_SIGNAL=KILL (SIGKILL) cannot ask for a report"));
  }
  EXPECT_THROW(parse_report_signal("V", "999"), InvalidArgument);
  EXPECT_THROW(parse_report_signal("V", "-5"), InvalidArgument);
}

// Note [Report signal]: a signal that stops the job cannot also ask for a
// report (with StopSignal it would request a stop, or end the job by its
// default action once StopSignal restored it).
TEST(ReportSignal, TheStopSignalsCannotAskForAReport) {
  for (const char* v : {"TERM", "usr1", "SIGUSR2", "HUP", "INT"}) {
    try {
      parse_report_signal("SLURMDDP_REPORT_SIGNAL", v);
      ADD_FAILURE() << v << ": no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("SLURMDDP_REPORT_SIGNAL=") + v + " (SIG"));
      EXPECT_THAT(e.what(), HasSubstr("is a signal that stops the job"));
      EXPECT_THAT(e.what(), HasSubstr("default URG"));
    }
  }
  EXPECT_THROW(parse_report_signal("V", std::to_string(SIGTERM)), InvalidArgument);
}

int g_later_calls = 0;
void later_handler(int) {
  ++g_later_calls;
}

// Note [Restoring a handler]: a handler installed after the report signal's
// stays when the last ReportSignal goes.
TEST(ReportSignal, AHandlerInstalledLaterStaysWhenItIsRemoved) {
  struct sigaction saved {};
  ASSERT_EQ(sigaction(SIGWINCH, nullptr, &saved), 0);
  {
    ReportSignal r(SIGWINCH);
    struct sigaction later {};
    later.sa_handler = later_handler;
    sigemptyset(&later.sa_mask);
    ASSERT_EQ(sigaction(SIGWINCH, &later, nullptr), 0);
  }
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGWINCH, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, later_handler);
  g_later_calls = 0;
  raise(SIGWINCH);
  EXPECT_EQ(g_later_calls, 1);
  sigaction(SIGWINCH, &saved, nullptr);
}

int g_previous_calls = 0;
void previous_handler(int) {
  ++g_previous_calls;
}

TEST(ReportSignal, CountsEachSignalCallsThePreviousHandlerAndRestoresIt) {
  struct sigaction mine {};
  mine.sa_handler = previous_handler;
  sigemptyset(&mine.sa_mask);
  struct sigaction saved {};
  ASSERT_EQ(sigaction(SIGUSR2, &mine, &saved), 0);
  g_previous_calls = 0;
  {
    ReportSignal a(SIGUSR2);
    ReportSignal b(SIGUSR2);  // a second group of the process shares it
    EXPECT_THROW(ReportSignal(SIGWINCH), InvalidArgument);
    const uint64_t before = report_requests();
    raise(SIGUSR2);
    raise(SIGUSR2);
    EXPECT_EQ(report_requests(), before + 2);
    EXPECT_EQ(g_previous_calls, 2);
  }
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, previous_handler);
  const uint64_t after = report_requests();
  raise(SIGUSR2);
  EXPECT_EQ(report_requests(), after);
  EXPECT_EQ(g_previous_calls, 3);
  sigaction(SIGUSR2, &saved, nullptr);
}

}  // namespace
}  // namespace slurmddp::progress
