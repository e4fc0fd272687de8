// Note [Straggler windows]: the report names the rank whose own time is over
// the ratio times the median, the phase it spends it in, and where the
// others wait; nothing when no rank is.
#include "progress/straggler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace slurmddp::progress {
namespace {

// A window of 100 steps from step 100: `compute`, `wait` and `data` in ms a step.
Window window(int rank, const std::string& node, int64_t compute, int64_t wait, int64_t data = 0,
              const std::string& op = "allreduce") {
  Window w;
  w.rank = rank;
  w.node = node;
  w.first_step = 100;
  w.steps = 100;
  w.step_us = (compute + wait + data) * 100'000;
  w.wait_us = wait * 100'000;
  w.data_us = data * 100'000;
  w.op = wait > 0 ? op : "";
  return w;
}

TEST(StragglerWindow, ALineRoundTrips) {
  Window w = window(5, "n2", 180, 2, 1);
  auto back = decode_window(encode(w));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(encode(*back), encode(w));
  EXPECT_EQ(encode(w),
            "rank=5 first_step=100 steps=100 step_us=18300000 wait_us=200000 data_us=100000 "
            "op=allreduce node=n2");
  EXPECT_FALSE(decode_window("rank=5 steps=x").has_value());
  EXPECT_FALSE(decode_window("hello").has_value());
}

// The example: the others wait for rank 5 in the allreduce.
TEST(StragglerReport, NamesTheSlowRankItsPhaseAndWhereTheOthersWait) {
  std::vector<std::optional<Window>> ws(8);
  for (int r = 0; r < 8; ++r) ws[static_cast<size_t>(r)] = window(r, r < 4 ? "n1" : "n2", 100, 80);
  ws[5] = window(5, "n2", 180, 2);
  EXPECT_EQ(straggler_report(ws, 1.5),
            "straggler report, steps 100-199: rank 5 on n2: 1.8x the median (compute 180 vs 100 "
            "ms a step) for 100 steps; the others wait for it in allreduce (median 80 ms a step)");
}

TEST(StragglerReport, ASlowDataLoaderIsNamedAsData) {
  std::vector<std::optional<Window>> ws(4);
  for (int r = 0; r < 4; ++r) ws[static_cast<size_t>(r)] = window(r, "n1", 50, 40, 10);
  ws[2] = window(2, "n1", 50, 0, 50);
  EXPECT_EQ(straggler_report(ws, 1.5),
            "straggler report, steps 100-199: rank 2 on n1: 1.7x the median (data 50 vs 10 ms a "
            "step) for 100 steps; the others wait for it in allreduce (median 40 ms a step)");
}

// PyTorch without marked collectives: only the data time tells.
TEST(StragglerReport, WithoutMarkedCollectivesTheDataTimeTells) {
  std::vector<std::optional<Window>> ws(3);
  for (int r = 0; r < 3; ++r) ws[static_cast<size_t>(r)] = window(r, "n1", 80, 0, 5);
  ws[1] = window(1, "n2", 40, 0, 45);
  EXPECT_EQ(straggler_report(ws, 1.5),
            "straggler report, steps 100-199: rank 1 on n2: 9.0x the median (data 45 vs 5.0 ms a "
            "step) for 100 steps; the others wait for it");
}

TEST(StragglerReport, NothingWhenEveryRankIsWithinTheRatioOrTheDifferenceIsTiny) {
  std::vector<std::optional<Window>> ws(4);
  for (int r = 0; r < 4; ++r) ws[static_cast<size_t>(r)] = window(r, "n1", 100, 30);
  ws[3] = window(3, "n1", 140, 2);  // 1.4x: under 1.5
  EXPECT_EQ(straggler_report(ws, 1.5), "");
  // 3x the median, but 0.4 ms a step: noise, not a straggler.
  std::vector<std::optional<Window>> tiny(3);
  for (int r = 0; r < 3; ++r) {
    Window w = window(r, "n1", 0, 0);
    w.step_us = 20'000;  // 0.2 ms a step
    w.wait_us = 1;
    tiny[static_cast<size_t>(r)] = w;
  }
  tiny[0]->step_us = 60'000;
  EXPECT_EQ(straggler_report(tiny, 1.5), "");
  // One rank's line alone is no comparison.
  std::vector<std::optional<Window>> alone(3);
  alone[1] = window(1, "n1", 500, 0);
  EXPECT_EQ(straggler_report(alone, 1.5), "");
}

}  // namespace
}  // namespace slurmddp::progress
