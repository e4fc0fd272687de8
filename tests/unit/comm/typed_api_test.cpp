// The everyday API over a real Gloo group (ranks as threads): typed
// collectives, Work::wait() with the communicator's timeout, Work::test(),
// and the Store's text forms.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "rank_threads.h"
#include "slurmddp/communicator.h"
#include "slurmddp/error.h"
#include "slurmddp/gloo_communicator.h"
#include "slurmddp/store.h"
#include "time_scale.h"

namespace slurmddp {
namespace {

using namespace std::chrono_literals;

static_assert(data_type_of<float> == DataType::kFloat32);
static_assert(data_type_of<const double> == DataType::kFloat64);
static_assert(data_type_of<Float16> == DataType::kFloat16);
static_assert(data_type_of<BFloat16> == DataType::kBFloat16);
static_assert(data_type_of<int32_t> == DataType::kInt32);
static_assert(data_type_of<int64_t> == DataType::kInt64);

// Runs body(comm) on `size` ranks; returns each rank's error text.
std::vector<std::string> on_ranks(int size, std::chrono::milliseconds timeout,
                                  const std::function<void(Communicator&)>& body) {
  auto store = make_in_process_store();
  static int group = 0;
  const std::string prefix = "typed/" + std::to_string(group++);
  return support::on_rank_threads(size, [&](int r) {
    GlooOptions o;
    o.rank = r;
    o.size = size;
    o.store = store;
    o.prefix = prefix;
    o.timeout = timeout;
    auto comm = make_gloo_communicator(o);
    body(*comm);
  });
}

TEST(TypedApi, TheTypeFollowsFromThePointer) {
  const auto errors = on_ranks(3, 10s, [](Communicator& c) {
    const int r = c.rank();
    std::vector<float> f = {1.0f, static_cast<float>(r)};
    c.allreduce(f)->wait();
    EXPECT_EQ(f, (std::vector<float>{3.0f, 3.0f}));
    double d[2] = {static_cast<double>(r), 1.5};
    c.allreduce(d, 2, ReduceOp::kMax)->wait();
    EXPECT_EQ(d[0], 2.0);
    EXPECT_EQ(d[1], 1.5);
    std::vector<int64_t> big = {int64_t{1} << 40, r};
    c.allreduce(big, ReduceOp::kSum)->wait();
    EXPECT_EQ(big, (std::vector<int64_t>{int64_t{3} << 40, 3}));
    // 1.0 in binary16 and bfloat16; three ranks sum to 3.0.
    Float16 h[1] = {{0x3C00}};
    BFloat16 b[1] = {{0x3F80}};
    c.allreduce(h, 1)->wait();
    c.allreduce(b, 1)->wait();
    EXPECT_EQ(h[0].bits, 0x4200);
    EXPECT_EQ(b[0].bits, 0x4040);
    std::vector<int32_t> root = {r * 10, r * 10 + 1};
    c.broadcast(root, 2)->wait();
    EXPECT_EQ(root, (std::vector<int32_t>{20, 21}));
    int32_t mine = 100 + r;
    std::vector<int32_t> all(3, -1);
    c.allgather(&mine, all.data(), 1)->wait();
    EXPECT_EQ(all, (std::vector<int32_t>{100, 101, 102}));
    std::vector<double> blocks = {1.0, 2.0, 3.0};
    double block = 0;
    c.reduce_scatter(blocks.data(), &block, 1)->wait();
    EXPECT_EQ(block, 3.0 * (r + 1));
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

// wait() without an argument gives up after the communicator's timeout.
TEST(TypedApi, WaitWithoutATimeoutUsesTheCommunicators) {
  std::promise<void> rank0_done;
  auto done = rank0_done.get_future().share();
  std::string seen;
  double took_s = 0;
  const auto errors = on_ranks(2, 700ms, [&](Communicator& c) {
    c.barrier()->wait();
    if (c.rank() == 1) {
      done.wait();  // never joins the allreduce below
      return;
    }
    float x = 1.0f;
    const auto start = std::chrono::steady_clock::now();
    try {
      c.allreduce(&x, 1)->wait();
    } catch (const TimeoutError& e) {
      seen = e.what();
    }
    took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rank0_done.set_value();
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(seen.find("not completed after 700 ms"), std::string::npos) << seen;
  EXPECT_GE(took_s, 0.6);
  EXPECT_LT(took_s, support::scaled(5.0));
}

// test() polls: false while a peer has not joined, true once done; the
// communicator stays usable (wait(0ms) would have broken it).
TEST(TypedApi, TestPollsWithoutBreakingTheCommunicator) {
  std::promise<void> polled;
  auto polled_once = polled.get_future().share();
  std::vector<int> polls_before_join(2, 0);
  const auto errors = on_ranks(2, 10s, [&](Communicator& c) {
    c.barrier()->wait();
    float x = static_cast<float>(c.rank() + 1);
    if (c.rank() == 1) {
      polled_once.wait();  // joins only after rank 0 saw its operation pending
      c.allreduce(&x, 1)->wait();
    } else {
      auto w = c.allreduce(&x, 1);
      EXPECT_FALSE(w->test()) << "rank 1 has not issued its allreduce yet";
      polled.set_value();
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      while (!w->test()) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "test() never turned true";
        std::this_thread::yield();
      }
    }
    EXPECT_EQ(x, 3.0f);
    float y = 1.0f;
    c.allreduce(&y, 1)->wait();  // still usable
    EXPECT_EQ(y, 2.0f);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(StoreText, SetAndGetStrings) {
  auto store = make_in_process_store();
  store->set("k", "v=1");
  store->set("s", std::string("two\nlines"));
  EXPECT_EQ(store->get_string("k", 0ms), "v=1");
  EXPECT_EQ(store->get_string("s", 0ms), "two\nlines");
  EXPECT_EQ(store->get("k"), (Bytes{'v', '=', '1'}));
  store->wait({"k", "s"});
  EXPECT_THROW(store->get_string("absent", 10ms), TimeoutError);
}

}  // namespace
}  // namespace slurmddp
