// The Store contract of include/slurmddp/store.h, checked against every
// backend: in-process, TCP without a token, TCP with a token.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <optional>
#include <thread>

#include "raw_client.h"
#include "slurmddp/error.h"
#include "slurmddp/store.h"
#include "slurmddp/tcp_store.h"
#include "slurmddp/tcp_store_server.h"
#include "time_scale.h"

namespace slurmddp {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using support::eventually;
using ::testing::HasSubstr;

Bytes B(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

// One store "world": every client() sees the same keys.
class World {
 public:
  virtual ~World() = default;
  virtual std::shared_ptr<Store> client() = 0;
  // What the backend appends to timeout messages ("" or "server=host:port").
  virtual std::string where() const = 0;
  // Requests parked in the server, where the backend can tell.
  virtual std::optional<uint64_t> parked() const = 0;
};

class InProcessWorld : public World {
 public:
  std::shared_ptr<Store> client() override { return store_; }
  std::string where() const override { return ""; }
  std::optional<uint64_t> parked() const override { return std::nullopt; }

 private:
  std::shared_ptr<Store> store_ = make_in_process_store();
};

class TcpWorld : public World {
 public:
  explicit TcpWorld(std::string token) : token_(std::move(token)) {
    TcpStoreServerOptions o;
    o.bind_host = "127.0.0.1";
    o.token = token_;
    server_ = TcpStoreServer::start(o);
  }
  std::shared_ptr<Store> client() override {
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = server_->port();
    o.token = token_;
    o.timeout = std::chrono::seconds(10);
    return make_tcp_store(o);
  }
  std::string where() const override {
    return "server=127.0.0.1:" + std::to_string(server_->port());
  }
  std::optional<uint64_t> parked() const override { return server_->stats().parked; }

 private:
  std::string token_;
  std::unique_ptr<TcpStoreServer> server_;
};

struct Backend {
  std::string name;
  std::function<std::unique_ptr<World>()> make;
};

std::ostream& operator<<(std::ostream& os, const Backend& b) {
  return os << b.name;
}

class StoreContract : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    world_ = GetParam().make();
    store_ = world_->client();
    other_ = world_->client();
  }

  // Waits until `n` requests are parked where the backend can tell; otherwise
  // the test still passes but may not have exercised the blocked path.
  void await_parked(uint64_t n) {
    if (!world_->parked()) return;
    ASSERT_TRUE(eventually([&] { return *world_->parked() == n; }))
        << "parked=" << *world_->parked() << ", expected " << n;
  }

  std::string suffix() const {
    std::string w = world_->where();
    return w.empty() ? "" : "; " + w;
  }

  std::unique_ptr<World> world_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Store> other_;
};

TEST_P(StoreContract, SetThenGetReturnsTheExactBytes) {
  Bytes v = {0, 1, 2, 0xff, 0, 'x'};
  store_->set("k", v);
  EXPECT_EQ(store_->get("k", milliseconds(0)), v);
  EXPECT_EQ(other_->get("k", milliseconds(0)), v);
}

TEST_P(StoreContract, SetOverwrites) {
  store_->set("k", B("one"));
  other_->set("k", B("two"));
  EXPECT_EQ(store_->get("k", milliseconds(0)), B("two"));
}

TEST_P(StoreContract, EmptyValueIsAValue) {
  store_->set("k", Bytes{});
  EXPECT_EQ(store_->get("k", milliseconds(0)), Bytes{});
  EXPECT_TRUE(store_->check({"k"}));
}

TEST_P(StoreContract, GetBlocksUntilAnotherClientSets) {
  auto f =
      std::async(std::launch::async, [&] { return store_->get("late", std::chrono::seconds(10)); });
  await_parked(1);
  other_->set("late", B("here"));
  EXPECT_EQ(f.get(), B("here"));
}

TEST_P(StoreContract, GetTimesOutNamingTheKey) {
  auto start = steady_clock::now();
  try {
    store_->get("missing/key", milliseconds(200));
    FAIL() << "get returned";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "store: failed to get key 'missing/key': timed out after 200 ms; missing=['missing/key']" +
            suffix());
  }
  auto took = steady_clock::now() - start;
  EXPECT_GE(took, milliseconds(200));
  EXPECT_LT(took, support::scaled(milliseconds(2200)));
}

TEST_P(StoreContract, ZeroTimeoutChecksOnce) {
  auto start = steady_clock::now();
  EXPECT_THROW(store_->get("absent", milliseconds(0)), TimeoutError);
  EXPECT_THROW(store_->wait({"absent"}, milliseconds(0)), TimeoutError);
  EXPECT_LT(steady_clock::now() - start, support::scaled(milliseconds(1000)));
  store_->set("present", B("v"));
  EXPECT_EQ(store_->get("present", milliseconds(0)), B("v"));
  store_->wait({"present"}, milliseconds(0));
}

TEST_P(StoreContract, AddCountsFromZeroAndStoresDecimalText) {
  EXPECT_EQ(store_->add("c", 1), 1);
  EXPECT_EQ(other_->add("c", 5), 6);
  EXPECT_EQ(store_->add("c", -10), -4);
  EXPECT_EQ(store_->get("c", milliseconds(0)), B("-4"));
  EXPECT_EQ(store_->add("c", 0), -4);
  store_->set("d", B("41"));
  EXPECT_EQ(store_->add("d", 1), 42);
}

TEST_P(StoreContract, AddToANonIntegerThrowsAndKeepsTheValue) {
  for (const char* bad : {"abc", "", " 1", "1 ", "1x", "+1", "0x10", "--1"}) {
    store_->set("x", B(bad));
    try {
      store_->add("x", 1);
      FAIL() << "add accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(),
                  HasSubstr("store: failed to add to key 'x': its value is not a decimal integer"));
    }
    EXPECT_EQ(store_->get("x", milliseconds(0)), B(bad));
  }
}

TEST_P(StoreContract, AddRefusesToOverflow) {
  store_->set("big", B("9223372036854775807"));
  EXPECT_THROW(store_->add("big", 1), InvalidArgument);
  EXPECT_EQ(store_->get("big", milliseconds(0)), B("9223372036854775807"));
  EXPECT_EQ(store_->add("big", -1), 9223372036854775806);
  store_->set("small", B("-9223372036854775808"));
  EXPECT_THROW(store_->add("small", -1), InvalidArgument);
  store_->set("huge", B("99999999999999999999"));
  EXPECT_THROW(store_->add("huge", 1), InvalidArgument);
}

TEST_P(StoreContract, CompareSetFollowsTheContract) {
  // A missing key matches an empty `expected`.
  EXPECT_EQ(store_->compare_set("k", Bytes{}, B("first")), B("first"));
  // A mismatch returns the current value and changes nothing.
  EXPECT_EQ(other_->compare_set("k", B("nope"), B("second")), B("first"));
  EXPECT_EQ(store_->get("k", milliseconds(0)), B("first"));
  // A match sets.
  EXPECT_EQ(other_->compare_set("k", B("first"), B("second")), B("second"));
  EXPECT_EQ(store_->get("k", milliseconds(0)), B("second"));
  // A missing key does not match a non-empty `expected`, and stays missing.
  EXPECT_EQ(store_->compare_set("absent", B("x"), B("y")), Bytes{});
  EXPECT_FALSE(store_->check({"absent"}));
}

TEST_P(StoreContract, CompareSetWakesWaiters) {
  auto f = std::async(std::launch::async, [&] { store_->wait({"cas"}, std::chrono::seconds(10)); });
  await_parked(1);
  EXPECT_EQ(other_->compare_set("cas", Bytes{}, B("v")), B("v"));
  f.get();
}

TEST_P(StoreContract, WaitReturnsOnceEveryKeyExists) {
  store_->set("a", B("1"));
  auto f = std::async(std::launch::async, [&] {
    store_->wait({"a", "b", "c"}, std::chrono::seconds(10));
  });
  await_parked(1);
  other_->set("b", B("2"));
  other_->set("c", B("3"));
  f.get();
}

TEST_P(StoreContract, WaitTimesOutListingTheMissingKeys) {
  store_->set("a", B("1"));
  auto start = steady_clock::now();
  try {
    store_->wait({"a", "b", "c"}, milliseconds(150));
    FAIL() << "wait returned";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "store: failed to wait for 3 keys: timed out after 150 ms; missing=['b', 'c']" + suffix());
  }
  EXPECT_GE(steady_clock::now() - start, milliseconds(150));
}

TEST_P(StoreContract, CheckIsTrueIffEveryKeyExists) {
  EXPECT_TRUE(store_->check({}));
  EXPECT_FALSE(store_->check({"a"}));
  store_->set("a", B("1"));
  EXPECT_TRUE(other_->check({"a"}));
  EXPECT_FALSE(other_->check({"a", "b"}));
}

TEST_P(StoreContract, EraseRemovesAndReportsWhetherTheKeyExisted) {
  store_->set("k", B("v"));
  EXPECT_TRUE(other_->erase("k"));
  EXPECT_FALSE(other_->erase("k"));
  EXPECT_FALSE(store_->check({"k"}));
  EXPECT_THROW(store_->get("k", milliseconds(0)), TimeoutError);
  EXPECT_EQ(store_->add("k", 2), 2);  // an erased counter starts again from 0
}

TEST_P(StoreContract, AGetBlockedOnAnErasedKeyWaitsForTheNextSet) {
  auto f = std::async(std::launch::async, [&] {
    return store_->wait({"k", "j"}, std::chrono::seconds(10));
  });
  await_parked(1);
  other_->set("k", B("1"));
  other_->erase("k");
  other_->set("j", B("2"));  // "k" is gone again: the wait must go on
  if (world_->parked()) {
    ASSERT_TRUE(eventually([&] { return *world_->parked() == 1; }));
  }
  EXPECT_EQ(f.wait_for(milliseconds(0)), std::future_status::timeout);
  other_->set("k", B("3"));
  f.get();
}

TEST_P(StoreContract, KeyAndValueLimits) {
  const std::string longest(kMaxKeySize, 'k');
  store_->set(longest, B("v"));
  EXPECT_EQ(other_->get(longest, milliseconds(0)), B("v"));
  const std::string too_long(kMaxKeySize + 1, 'k');
  EXPECT_THROW(store_->set(too_long, B("v")), InvalidArgument);
  EXPECT_THROW(store_->get(too_long, milliseconds(0)), InvalidArgument);
  EXPECT_THROW(store_->add(too_long, 1), InvalidArgument);
  EXPECT_THROW(store_->compare_set(too_long, {}, B("v")), InvalidArgument);
  EXPECT_THROW(store_->wait({"ok", too_long}, milliseconds(0)), InvalidArgument);
  EXPECT_THROW(store_->check({too_long}), InvalidArgument);
  EXPECT_THROW(store_->erase(too_long), InvalidArgument);
  EXPECT_THROW(store_->set("", B("v")), InvalidArgument);
  EXPECT_THROW(store_->get("", milliseconds(0)), InvalidArgument);
  EXPECT_THROW(store_->wait({""}, milliseconds(0)), InvalidArgument);

  Bytes largest(kMaxValueSize);
  for (size_t i = 0; i < largest.size(); i += 4093) largest[i] = static_cast<uint8_t>(i / 4093);
  store_->set("large", largest);
  EXPECT_EQ(other_->get("large", milliseconds(0)), largest);
  largest.push_back(0);
  try {
    store_->set("large", largest);
    FAIL() << "set accepted a value over the limit";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "store: failed to set key 'large': the value is too large; size=67108865, "
              "limit=67108864");
  }
  EXPECT_THROW(store_->compare_set("large", {}, largest), InvalidArgument);
}

TEST_P(StoreContract, ManyThreadsShareOneStore) {
  constexpr int kThreads = 16;
  constexpr int kIters = 100;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
        std::string value = std::to_string(t * 1000003 + i * 7);
        store_->set(key, B(value));
        store_->add("counter", 1);
        if (store_->get(key, milliseconds(0)) != B(value)) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(other_->add("counter", 0), kThreads * kIters);
  EXPECT_EQ(other_->get("t15/99", milliseconds(0)), B(std::to_string(15 * 1000003 + 99 * 7)));
}

TEST_P(StoreContract, ABlockedGetDoesNotHoldUpOtherThreadsOfTheSameStore) {
  auto blocked =
      std::async(std::launch::async, [&] { return store_->get("late", std::chrono::seconds(20)); });
  await_parked(1);
  auto start = steady_clock::now();
  for (int i = 0; i < 50; ++i) {
    store_->set("busy", B(std::to_string(i)));
    EXPECT_EQ(store_->get("busy", milliseconds(0)), B(std::to_string(i)));
  }
  EXPECT_LT(steady_clock::now() - start, support::scaled(std::chrono::seconds(5)));
  store_->set("late", B("done"));
  EXPECT_EQ(blocked.get(), B("done"));
}

TEST_P(StoreContract, OneSetWakesManyWaiters) {
  constexpr int kWaiters = 32;
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < kWaiters; ++i) clients.push_back(world_->client());
  std::vector<std::future<Bytes>> got;
  for (int i = 0; i < kWaiters; ++i) {
    got.push_back(std::async(std::launch::async,
                             [&, i] { return clients[i]->get("go", std::chrono::seconds(10)); }));
  }
  await_parked(kWaiters);
  store_->set("go", B("now"));
  for (auto& f : got) EXPECT_EQ(f.get(), B("now"));
}

TEST_P(StoreContract, BarrierCompletesForEveryWorldSize) {
  for (int world : {1, 2, 3, 4, 8}) {
    std::vector<std::shared_ptr<Store>> clients;
    for (int r = 0; r < world; ++r) clients.push_back(world_->client());
    for (const char* name : {"first", "second"}) {
      std::string full = std::string(name) + "-" + std::to_string(world);
      std::vector<std::future<void>> ranks;
      for (int r = 0; r < world; ++r) {
        ranks.push_back(std::async(std::launch::async, [&, r] {
          store_barrier(*clients[r], full, r, world, std::chrono::seconds(10));
        }));
      }
      for (auto& f : ranks) f.get();
    }
  }
}

// Runs `ranks` of a barrier of `world` ranks with a short timeout and returns
// each rank's error message.
std::vector<std::string> barrier_errors(World& w, const std::vector<int>& ranks, int world) {
  std::vector<std::future<std::string>> out;
  for (int r : ranks) {
    out.push_back(std::async(std::launch::async, [&w, r, world] {
      auto store = w.client();
      try {
        store_barrier(*store, "init", r, world, milliseconds(300));
      } catch (const TimeoutError& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    }));
  }
  std::vector<std::string> msgs;
  for (auto& f : out) msgs.push_back(f.get());
  return msgs;
}

TEST_P(StoreContract, BarrierTimeoutNamesTheMissingRank) {
  auto start = steady_clock::now();
  for (const auto& m : barrier_errors(*world_, {0, 1, 3}, 4)) {
    EXPECT_EQ(m, "store barrier 'init': 3/4 ranks joined; missing: [2]");
  }
  EXPECT_LT(steady_clock::now() - start, support::scaled(std::chrono::seconds(5)));
}

TEST_P(StoreContract, BarrierTimeoutListsManyMissingRanksAsRanges) {
  for (const auto& m : barrier_errors(*world_, {0, 5}, 10)) {
    EXPECT_EQ(m, "store barrier 'init': 2/10 ranks joined; missing: [1-4, 6-9]");
  }
}

TEST_P(StoreContract, BarrierTimeoutListsTwoNeighboursSeparately) {
  for (const auto& m : barrier_errors(*world_, {0}, 3)) {
    EXPECT_EQ(m, "store barrier 'init': 1/3 ranks joined; missing: [1, 2]");
  }
}

TEST_P(StoreContract, BarrierRejectsABadRankAndTooManyRanks) {
  EXPECT_THROW(store_barrier(*store_, "b", 4, 4, milliseconds(10)), InvalidArgument);
  EXPECT_THROW(store_barrier(*store_, "b", -1, 4, milliseconds(10)), InvalidArgument);
  store_barrier(*store_, "one", 0, 1, milliseconds(1000));
  try {
    store_barrier(*other_, "one", 0, 1, milliseconds(1000));
    FAIL() << "a second rank 0 entered a barrier of one";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("2 ranks joined but world_size=1"));
  }
}

TEST_P(StoreContract, BarrierOnACorruptedCounterThrowsInvalidArgument) {
  store_->set("barrier/bad/count", B("not a number"));
  try {
    store_barrier(*store_, "bad", 0, 2, milliseconds(1000));
    FAIL() << "the barrier counted on a non-integer";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("store: failed to add to key 'barrier/bad/count': its value "
                                    "is not a decimal integer"));
  }
  // The rank key was set before the add failed, as with plain calls.
  EXPECT_TRUE(other_->check({"barrier/bad/rank/0"}));
}

INSTANTIATE_TEST_SUITE_P(
    Backends, StoreContract,
    ::testing::Values(Backend{"InProcess", [] { return std::make_unique<InProcessWorld>(); }},
                      Backend{"TcpOpen", [] { return std::make_unique<TcpWorld>(""); }},
                      Backend{"TcpToken",
                              [] { return std::make_unique<TcpWorld>("contract-test-token"); }}),
    [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

}  // namespace
}  // namespace slurmddp
