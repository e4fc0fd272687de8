#include "slurmddp/stop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <optional>
#include <vector>

#include "fake_group.h"
#include "slurmddp/error.h"

namespace slurmddp {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<Communicator> solo() {
  return std::make_shared<support::FakeGroup>(1)->communicator(0);
}

std::string error_of(StopOptions o) {
  try {
    StopSignal s(solo(), o);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(StopSignal, BadOptionsNameTheValue) {
  StopOptions o;
  o.signals = {SIGTERM, SIGKILL};
  EXPECT_THAT(error_of(o), HasSubstr("cannot catch SIGKILL"));
  o.signals = {0};
  EXPECT_THAT(error_of(o), HasSubstr("cannot catch signal 0"));
  o = StopOptions{};
  o.check_every = 0;
  EXPECT_THAT(error_of(o), HasSubstr("check_every=0; expected at least 1"));
}

TEST(StopSignal, HandlersFirstCommunicatorLater) {
  StopSignal stop;  // e.g. before init(): the rendezvous may take a while
  raise(SIGUSR2);
  EXPECT_EQ(stop.local_signal(), SIGUSR2);
  try {
    stop.should_stop(0);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("no communicator; pass one to the constructor or attach()"));
  }
  stop.attach(solo());
  EXPECT_TRUE(stop.should_stop(0));
  EXPECT_EQ(stop.agreed_signal(), SIGUSR2);
}

TEST(StopSignal, NullCommunicatorIsRefused) {
  try {
    StopSignal stop(std::shared_ptr<Communicator>{});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("the communicator is null"));
  }
  StopSignal fine(solo());  // nothing was left installed
}

TEST(StopSignal, OneAtATime) {
  {
    StopSignal first(solo());
    EXPECT_THROW(StopSignal second(solo()), InvalidArgument);
  }
  StopSignal again(solo());  // the first one is gone
  EXPECT_EQ(again.local_signal(), std::nullopt);
}

void marker(int) {}

TEST(StopSignal, CatchesTheSignalThenIgnoresOrRestores) {
  struct sigaction mine {};
  mine.sa_handler = marker;
  sigemptyset(&mine.sa_mask);
  struct sigaction saved {};
  ASSERT_EQ(sigaction(SIGUSR1, &mine, &saved), 0);
  {
    StopSignal stop(solo());
    EXPECT_EQ(stop.local_signal(), std::nullopt);
    raise(SIGUSR1);  // the default action would end this test program
    EXPECT_EQ(stop.local_signal(), SIGUSR1);
    raise(SIGTERM);  // the first signal is kept
    EXPECT_EQ(stop.local_signal(), SIGUSR1);
    EXPECT_TRUE(stop.should_stop(0));
    EXPECT_EQ(stop.agreed_signal(), SIGUSR1);
  }
  // A stop was agreed: on the way out, further signals are ignored.
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  // Without a stop, the previous handler comes back.
  ASSERT_EQ(sigaction(SIGUSR1, &mine, nullptr), 0);
  { StopSignal unused(solo()); }
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, marker);
  sigaction(SIGUSR1, &saved, nullptr);
}

// A stop agreed over the program's own collectives (the Python package's
// torch.distributed check): reported, and the signals are ignored afterwards.
TEST(StopSignal, AStopAgreedElsewhereIgnoresTheSignalsOnTheWayOut) {
  struct sigaction saved {};
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &saved), 0);
  {
    StopSignal stop;  // no communicator
    EXPECT_EQ(stop.agreed_signal(), std::nullopt);
    stop.agree(SIGUSR2);
    stop.agree(SIGTERM);  // the first agreement stands
    EXPECT_EQ(stop.agreed_signal(), SIGUSR2);
  }
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  sigaction(SIGUSR2, &saved, nullptr);
}

std::atomic<int> g_later_calls{0};
void later_handler(int) {
  g_later_calls.fetch_add(1);
}

// Note [Handlers installed after ours]: a handler installed after the
// StopSignal's (as Python's signal.signal does for Lightning) is found at the
// next check and called after ours; both see the signal.
TEST(StopSignal, AHandlerInstalledLaterIsCalledAfterOursFromTheNextCheck) {
  g_later_calls = 0;
  {
    StopOptions o;
    o.signals = {SIGUSR1};
    StopSignal stop(solo(), o);
    struct sigaction later {};
    later.sa_handler = later_handler;
    sigemptyset(&later.sa_mask);
    struct sigaction ours {};
    ASSERT_EQ(sigaction(SIGUSR1, &later, &ours), 0);
    EXPECT_EQ(stop.reinstall(), std::vector<int>{SIGUSR1});
    EXPECT_EQ(stop.reinstall(), std::vector<int>{});  // in front again: nothing to do
    struct sigaction now {};
    ASSERT_EQ(sigaction(SIGUSR1, nullptr, &now), 0);
    EXPECT_EQ(now.sa_sigaction, ours.sa_sigaction);
    raise(SIGUSR1);
    EXPECT_EQ(g_later_calls.load(), 1);
    EXPECT_EQ(stop.local_signal(), SIGUSR1);
    // and should_stop() does the same on its own
    ASSERT_EQ(sigaction(SIGUSR1, &later, nullptr), 0);
    EXPECT_TRUE(stop.should_stop(1));
    ASSERT_EQ(sigaction(SIGUSR1, nullptr, &now), 0);
    EXPECT_EQ(now.sa_sigaction, ours.sa_sigaction);
  }
  // closed after the agreed stop: the signal is ignored, nothing is called
  raise(SIGUSR1);
  EXPECT_EQ(g_later_calls.load(), 1);
  signal(SIGUSR1, SIG_DFL);
}

// Note [Restoring a handler]: closing without an agreed stop restores the
// handler found at install only while ours is installed; one installed later
// stays.
TEST(StopSignal, AHandlerInstalledLaterStaysWhenTheStopSignalCloses) {
  g_later_calls = 0;
  {
    StopOptions o;
    o.signals = {SIGUSR2};
    StopSignal stop(solo(), o);
    struct sigaction later {};
    later.sa_handler = later_handler;
    sigemptyset(&later.sa_mask);
    ASSERT_EQ(sigaction(SIGUSR2, &later, nullptr), 0);
  }
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, later_handler);
  raise(SIGUSR2);
  EXPECT_EQ(g_later_calls.load(), 1);
  signal(SIGUSR2, SIG_DFL);
}

TEST(StopSignal, ChecksOnlyAtMultiplesOfCheckEvery) {
  auto group = std::make_shared<support::FakeGroup>(1);
  StopOptions o;
  o.check_every = 3;
  StopSignal stop(group->communicator(0), o);
  for (int64_t step = 0; step < 7; ++step) EXPECT_FALSE(stop.should_stop(step));
  auto calls = group->calls(0);
  ASSERT_EQ(calls.size(), 3u);  // steps 0, 3, 6
  for (const auto& c : calls) {
    EXPECT_EQ(c.kind, "allreduce");
    EXPECT_EQ(c.count, 1u);
    EXPECT_EQ(c.type, DataType::kInt64);
    EXPECT_EQ(c.op, ReduceOp::kMax);
  }
  stop.request(SIGHUP);
  EXPECT_FALSE(stop.should_stop(7));
  EXPECT_TRUE(stop.should_stop(9));
  EXPECT_EQ(stop.agreed_signal(), SIGHUP);
  EXPECT_EQ(signal_name(SIGHUP), "SIGHUP");
}

}  // namespace
}  // namespace slurmddp
