// Progress records and the hang report: the text users read when a job stops
// making progress (Note [Progress records]).
#include "progress/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace slurmddp::progress {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNow = 1'800'000'000'000;

Record in_collective(int rank, const std::string& node, int64_t done, int64_t seq,
                     const std::string& where, int64_t for_ms = 40'000) {
  Record r;
  r.rank = rank;
  r.node = node;
  r.step = done;
  r.phase = Phase::kCollective;
  r.op = "all_reduce";
  r.seq = seq;
  r.since_ms = kNow - for_ms;
  r.where = where;
  return r;
}

Record in_user_code(int rank, const std::string& node, int64_t done, const std::string& where,
                    int64_t for_ms) {
  Record r;
  r.rank = rank;
  r.node = node;
  r.step = done;
  r.since_ms = kNow - for_ms;
  r.where = where;
  return r;
}

TEST(ProgressRecord, RoundTripsEveryFieldAndTheStack) {
  Record r = in_collective(5, "n2", 1233, 5123, "train.py:88");
  r.stack = "Thread 0x7f (most recent call first):\n  File \"train.py\", line 88 in step\n";
  const auto back = decode(encode(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->rank, 5);
  EXPECT_EQ(back->node, "n2");
  EXPECT_EQ(back->step, 1233);
  EXPECT_EQ(back->phase, Phase::kCollective);
  EXPECT_EQ(back->op, "all_reduce");
  EXPECT_EQ(back->seq, 5123);
  EXPECT_EQ(back->since_ms, r.since_ms);
  EXPECT_EQ(back->where, "train.py:88");
  EXPECT_EQ(back->stack, r.stack);
}

TEST(ProgressRecord, NewlinesInAFieldCannotForgeAnother) {
  Record r = in_user_code(1, "n1", 3, "x.py:1\nrank=7", 0);
  const auto back = decode(encode(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->rank, 1);
  EXPECT_EQ(back->where, "x.py:1 rank=7");
}

TEST(ProgressRecord, TextThatIsNotARecordIsRefusedSayingWhy) {
  std::string why;
  EXPECT_FALSE(decode("hello", &why).has_value());
  EXPECT_EQ(why, "no rank or phase: not a progress record");
  EXPECT_FALSE(decode("rank=x\nphase=user\n", &why).has_value());
  EXPECT_EQ(why, "field rank='x' is not an integer");
  EXPECT_FALSE(decode("rank=1\nphase=sleeping\n", &why).has_value());
  EXPECT_EQ(why, "field phase='sleeping': expected user or collective");
}

// The example, word for word.
TEST(HangReport, SummarizesTheWaitingRanksAndNamesTheOneInUserCode) {
  std::vector<std::optional<Record>> ranks(8);
  for (int r = 0; r < 8; ++r) {
    ranks[static_cast<size_t>(r)] =
        in_collective(r, r < 4 ? "n1" : "n2", 1233, 5123, "train.py:88");
  }
  ranks[5] = in_user_code(5, "n2", 1232, "train.py:61 (next(loader))", 312'000);
  EXPECT_EQ(hang_report(ranks, kNow),
            "step 1234: 7/8 ranks waiting in all_reduce #5123 (train.py:88); rank 5 on n2 at "
            "step 1233 for 312 s in train.py:61 (next(loader))");
}

TEST(HangReport, ARankThatDidNotAnswerComesFirstWithItsLastRecord) {
  std::vector<std::optional<Record>> ranks(4);
  for (int r = 0; r < 4; ++r) ranks[static_cast<size_t>(r)] = in_collective(r, "n1", 9, 40, "");
  ranks[1] = in_collective(1, "n1", 9, 39, "train.py:90");  // in an older collective
  Record stopped = in_user_code(3, "n2", 8, "train.py:61 (next(loader))", 95'000);
  stopped.fresh = false;
  ranks[3] = stopped;
  EXPECT_EQ(hang_report(ranks, kNow),
            "step 10: 2/4 ranks waiting in all_reduce #40; rank 3 on n2 did not answer; last "
            "seen at step 9 in train.py:61 (next(loader)), 95 s ago; rank 1 on n1 at step 10 "
            "for 40 s in all_reduce #39 (train.py:90)");
}

TEST(HangReport, RanksWithoutARecordAreNamedAndLongListsAreCounted) {
  std::vector<std::optional<Record>> ranks(20);
  ranks[0] = in_collective(0, "n1", 0, 1, "");
  ranks[1] = in_collective(1, "n1", 0, 1, "");
  const std::string report = hang_report(ranks, kNow);
  EXPECT_THAT(report, HasSubstr("step 1: 2/20 ranks waiting in all_reduce #1; rank 2: no record "
                                "(it never reported); rank 3: no record"));
  EXPECT_THAT(report, HasSubstr("; and 10 more ranks"));
}

// PyTorch's ranks: no sequence numbers, and the place is the line of code.
TEST(HangReport, WithoutCollectivesTheRanksAtOneLineAreTheSummary) {
  std::vector<std::optional<Record>> ranks(4);
  for (int r = 0; r < 4; ++r) {
    ranks[static_cast<size_t>(r)] =
        in_user_code(r, r < 2 ? "n1" : "n2", 41, "train.py:88 (loss.backward())", 30'000);
  }
  ranks[3] = in_user_code(3, "n2", 40, "train.py:61 (batch = next(loader))", 95'000);
  std::vector<int> listed;
  EXPECT_EQ(hang_report(ranks, kNow, &listed),
            "step 42: 3/4 ranks at train.py:88 (loss.backward()); rank 3 on n2 at step 41 for "
            "95 s in train.py:61 (batch = next(loader))");
  EXPECT_EQ(listed, std::vector<int>{3});
}

TEST(HangReport, ACollectiveWithoutASequenceNumberIsNamedAlone) {
  std::vector<std::optional<Record>> ranks(3);
  for (int r = 0; r < 3; ++r) {
    ranks[static_cast<size_t>(r)] = in_collective(r, "n1", 6, -1, "train.py:90 (dist.barrier())");
  }
  ranks[2]->op = "broadcast";
  ranks[2]->where = "train.py:95 (dist.broadcast(t, 0))";
  EXPECT_EQ(hang_report(ranks, kNow),
            "step 7: 2/3 ranks waiting in all_reduce (train.py:90 (dist.barrier())); rank 2 on n1 "
            "at step 7 for 40 s in broadcast (train.py:95 (dist.broadcast(t, 0)))");
}

TEST(HangReport, OnATieACollectiveIsTheSummaryAndNoAnswerSaysSo) {
  std::vector<std::optional<Record>> ranks = {in_user_code(0, "n1", 4, "a.py:1", 2'000),
                                              in_collective(1, "n1", 4, 3, "")};
  EXPECT_EQ(hang_report(ranks, kNow),
            "step 5: 1/2 ranks waiting in all_reduce #3; rank 0 on n1 at step 5 for 2 s in a.py:1");
  std::vector<std::optional<Record>> silent(2);
  EXPECT_EQ(hang_report(silent, kNow),
            "no rank of 2 answered; rank 0: no record (it never reported); rank 1: no record (it "
            "never reported)");
}

}  // namespace
}  // namespace slurmddp::progress
