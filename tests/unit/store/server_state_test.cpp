// The TCP server's store state without sockets: requests in, replies recorded,
// the clock chosen by the test.
#include "store/server_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <string>
#include <vector>

namespace slurmddp::store {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using wire::Type;

std::string text(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

// Each reply as "conn/request kind[=what]".
class Recorder : public Replies {
 public:
  void ok(uint64_t conn, uint32_t request) override { add(conn, request, "ok"); }
  void value(uint64_t conn, uint32_t request, const Value& v) override {
    last_value = v;
    add(conn, request, "value=" + text(*v));
  }
  void integer(uint64_t conn, uint32_t request, int64_t n) override {
    add(conn, request, "int=" + std::to_string(n));
  }
  void boolean(uint64_t conn, uint32_t request, bool b) override {
    add(conn, request, b ? "bool=1" : "bool=0");
  }
  void timeout(uint64_t conn, uint32_t request, const std::vector<uint32_t>& missing) override {
    std::string s = "timeout missing=[";
    for (size_t i = 0; i < missing.size(); ++i) s += (i ? "," : "") + std::to_string(missing[i]);
    add(conn, request, s + "]");
  }
  void error(uint64_t conn, uint32_t request, wire::ErrorCode code,
             const std::string& message) override {
    add(conn, request, "error=" + std::to_string(static_cast<int>(code)) + " " + message);
  }

  // The replies since the last take().
  std::vector<std::string> take() {
    std::vector<std::string> out;
    out.swap(replies_);
    return out;
  }
  Value last_value;

 private:
  void add(uint64_t conn, uint32_t request, const std::string& what) {
    replies_.push_back(std::to_string(conn) + "/" + std::to_string(request) + " " + what);
  }
  std::vector<std::string> replies_;
};

class ServerStateTest : public ::testing::Test {
 protected:
  static constexpr size_t kMaxParked = 3;

  void send(uint64_t conn, wire::Request r) { state_.handle(conn, std::move(r), t0_); }
  static wire::Request request(Type type, uint32_t id, std::vector<std::string> keys) {
    wire::Request r;
    r.type = type;
    r.id = id;
    r.keys = std::move(keys);
    return r;
  }
  void set(uint64_t conn, uint32_t id, const std::string& key, const std::string& value) {
    wire::Request r = request(Type::kSet, id, {key});
    r.value = Bytes(value.begin(), value.end());
    send(conn, std::move(r));
  }
  void get(uint64_t conn, uint32_t id, const std::string& key, int64_t timeout_ms) {
    wire::Request r = request(Type::kGet, id, {key});
    r.number = timeout_ms;
    send(conn, std::move(r));
  }
  void wait(uint64_t conn, uint32_t id, std::vector<std::string> keys, int64_t timeout_ms) {
    wire::Request r = request(Type::kWait, id, std::move(keys));
    r.number = timeout_ms;
    send(conn, std::move(r));
  }
  void add(uint64_t conn, uint32_t id, const std::string& key, int64_t delta) {
    wire::Request r = request(Type::kAdd, id, {key});
    r.number = delta;
    send(conn, std::move(r));
  }
  void compare_set(uint64_t conn, uint32_t id, const std::string& key, const std::string& expected,
                   const std::string& desired) {
    wire::Request r = request(Type::kCompareSet, id, {key});
    r.expected = Bytes(expected.begin(), expected.end());
    r.value = Bytes(desired.begin(), desired.end());
    send(conn, std::move(r));
  }
  void join(uint64_t conn, uint32_t id, int rank, int64_t world, int64_t timeout_ms = 1000) {
    wire::Request r = request(Type::kJoin, id, {"b/" + std::to_string(rank), "b/count", "b/done"});
    r.world = world;
    r.number = timeout_ms;
    send(conn, std::move(r));
  }
  std::string stored(const std::string& key) const {
    Value v = state_.table().find(key);
    return v ? text(*v) : "<absent>";
  }

  Recorder replies_;
  ServerState state_{kMaxParked, &replies_};
  const Clock::time_point t0_ = Clock::now();
};

TEST_F(ServerStateTest, SetAnswersOkAndGetOfAPresentKeyAnswersAtOnce) {
  set(1, 7, "a", "x");
  get(1, 8, "a", 1000);
  EXPECT_THAT(replies_.take(), ElementsAre("1/7 ok", "1/8 value=x"));
  EXPECT_EQ(state_.parked(), 0u);
  EXPECT_EQ(state_.keys(), 1u);
  EXPECT_EQ(state_.next_deadline(), Clock::time_point::max());
  // The reply shares the stored value instead of copying it.
  EXPECT_EQ(replies_.last_value, state_.table().find("a"));
}

TEST_F(ServerStateTest, GetParksUntilASetWakesIt) {
  get(1, 1, "a", 1000);
  EXPECT_THAT(replies_.take(), IsEmpty());
  EXPECT_EQ(state_.parked(), 1u);
  EXPECT_EQ(state_.next_deadline(), t0_ + milliseconds(1000));

  set(2, 5, "b", "other");
  EXPECT_THAT(replies_.take(), ElementsAre("2/5 ok"));
  EXPECT_EQ(state_.parked(), 1u);

  set(2, 6, "a", "v");
  EXPECT_THAT(replies_.take(), ElementsAre("2/6 ok", "1/1 value=v"));
  EXPECT_EQ(state_.parked(), 0u);
  EXPECT_EQ(state_.next_deadline(), Clock::time_point::max());
}

TEST_F(ServerStateTest, WaitOnSeveralKeysAnswersOnceAllExist) {
  set(2, 1, "b", "1");
  wait(1, 9, {"a", "b", "c"}, 1000);
  set(2, 2, "c", "1");
  EXPECT_THAT(replies_.take(), ElementsAre("2/1 ok", "2/2 ok"));
  EXPECT_EQ(state_.parked(), 1u);
  set(2, 3, "a", "1");
  EXPECT_THAT(replies_.take(), ElementsAre("2/3 ok", "1/9 ok"));
  EXPECT_EQ(state_.parked(), 0u);

  wait(1, 10, {"a", "b", "c"}, 1000);  // all present: at once
  EXPECT_THAT(replies_.take(), ElementsAre("1/10 ok"));
}

TEST_F(ServerStateTest, DeadlineAnswersWithTheKeysStillMissing) {
  wait(1, 4, {"a", "b", "c"}, 250);
  get(1, 3, "z", 100);
  set(2, 1, "b", "1");
  EXPECT_THAT(replies_.take(), ElementsAre("2/1 ok"));
  EXPECT_EQ(state_.next_deadline(), t0_ + milliseconds(100));

  state_.expire_next();  // the earliest deadline first
  EXPECT_THAT(replies_.take(), ElementsAre("1/3 timeout missing=[0]"));
  EXPECT_EQ(state_.next_deadline(), t0_ + milliseconds(250));

  state_.expire_next();
  EXPECT_THAT(replies_.take(), ElementsAre("1/4 timeout missing=[0,2]"));
  EXPECT_EQ(state_.parked(), 0u);
  EXPECT_EQ(state_.next_deadline(), Clock::time_point::max());

  state_.expire_next();  // nothing parked: nothing happens
  EXPECT_THAT(replies_.take(), IsEmpty());
  set(2, 2, "z", "1");  // the expired get is not answered again
  EXPECT_THAT(replies_.take(), ElementsAre("2/2 ok"));
}

TEST_F(ServerStateTest, ZeroTimeoutChecksOnceAndHugeTimeoutsAreClamped) {
  set(2, 1, "b", "1");
  get(1, 1, "a", 0);
  wait(1, 2, {"a", "b"}, 0);
  EXPECT_THAT(replies_.take(),
              ElementsAre("2/1 ok", "1/1 timeout missing=[0]", "1/2 timeout missing=[0]"));
  EXPECT_EQ(state_.parked(), 0u);

  get(1, 3, "a", std::numeric_limits<int64_t>::max());
  EXPECT_EQ(state_.next_deadline(), t0_ + kMaxWait);
}

TEST_F(ServerStateTest, AnErasedKeyKeepsItsWaiterWaiting) {
  wait(1, 1, {"a", "b"}, 1000);
  set(2, 1, "a", "1");
  wire::Request erase = request(Type::kErase, 2, {"a"});
  send(2, std::move(erase));
  set(2, 3, "b", "1");
  EXPECT_THAT(replies_.take(), ElementsAre("2/1 ok", "2/2 bool=1", "2/3 ok"));
  EXPECT_EQ(state_.parked(), 1u);
  set(2, 4, "a", "again");
  EXPECT_THAT(replies_.take(), ElementsAre("2/4 ok", "1/1 ok"));
}

TEST_F(ServerStateTest, EraseSaysWhetherTheKeyExisted) {
  set(1, 1, "a", "1");
  send(1, request(Type::kErase, 2, {"a"}));
  send(1, request(Type::kErase, 3, {"a"}));
  EXPECT_THAT(replies_.take(), ElementsAre("1/1 ok", "1/2 bool=1", "1/3 bool=0"));
  EXPECT_EQ(state_.keys(), 0u);
  EXPECT_EQ(stored("a"), "<absent>");
}

TEST_F(ServerStateTest, CheckSaysWhetherEveryKeyExistsWithoutParking) {
  set(1, 1, "a", "1");
  send(1, request(Type::kCheck, 2, {"a", "b"}));
  set(1, 3, "b", "1");
  send(1, request(Type::kCheck, 4, {"a", "b"}));
  EXPECT_THAT(replies_.take(), ElementsAre("1/1 ok", "1/2 bool=0", "1/3 ok", "1/4 bool=1"));
  EXPECT_EQ(state_.parked(), 0u);
}

TEST_F(ServerStateTest, AddCountsFromZeroAndWakesWaiters) {
  get(2, 1, "n", 1000);
  add(1, 1, "n", 5);
  add(1, 2, "n", -7);
  EXPECT_THAT(replies_.take(), ElementsAre("1/1 int=5", "2/1 value=5", "1/2 int=-2"));
  EXPECT_EQ(stored("n"), "-2");
}

TEST_F(ServerStateTest, AddRefusesANonIntegerAndAnOverflowLeavingTheValue) {
  set(1, 1, "k", "x");
  add(1, 2, "k", 1);
  set(1, 3, "m", std::to_string(std::numeric_limits<int64_t>::max()));
  add(1, 4, "m", 1);
  EXPECT_THAT(replies_.take(),
              ElementsAre("1/1 ok",
                          "1/2 error=1 store: failed to add to key 'k': its value is not a "
                          "decimal integer; value='x'",
                          "1/3 ok",
                          "1/4 error=1 store: failed to add to key 'm': the counter would "
                          "overflow; value=9223372036854775807, delta=1"));
  EXPECT_EQ(stored("k"), "x");
  EXPECT_EQ(stored("m"), "9223372036854775807");
}

TEST_F(ServerStateTest, CompareSetAnswersTheValueItLeavesAndWakesOnlyOnChange) {
  get(2, 1, "k", 1000);
  compare_set(1, 1, "k", "old", "new");  // absent, expected non-empty: no change
  EXPECT_THAT(replies_.take(), ElementsAre("1/1 value="));
  EXPECT_EQ(state_.parked(), 1u);
  EXPECT_EQ(stored("k"), "<absent>");

  compare_set(1, 2, "k", "", "first");  // absent, expected empty: stores
  EXPECT_THAT(replies_.take(), ElementsAre("1/2 value=first", "2/1 value=first"));
  compare_set(1, 3, "k", "wrong", "second");
  compare_set(1, 4, "k", "first", "second");
  EXPECT_THAT(replies_.take(), ElementsAre("1/3 value=first", "1/4 value=second"));
  EXPECT_EQ(stored("k"), "second");
}

// Note [Barrier join]: the same keys as store_barrier's steps, one request each.
TEST_F(ServerStateTest, BarrierJoinAnswersEveryRankWhenTheLastJoins) {
  join(1, 1, 0, 3);
  join(2, 1, 1, 3);
  EXPECT_THAT(replies_.take(), IsEmpty());
  EXPECT_EQ(state_.parked(), 2u);
  EXPECT_EQ(stored("b/0"), "1");
  EXPECT_EQ(stored("b/1"), "1");
  EXPECT_EQ(stored("b/count"), "2");
  EXPECT_EQ(stored("b/done"), "<absent>");

  join(3, 1, 2, 3);
  std::vector<std::string> got = replies_.take();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_THAT(got, UnorderedElementsAre("3/1 int=3", "1/1 int=1", "2/1 int=2"));
  EXPECT_EQ(stored("b/count"), "3");
  EXPECT_EQ(stored("b/done"), "1");
  EXPECT_EQ(state_.parked(), 0u);

  join(4, 1, 3, 3);  // a late joiner: answered at once with its count
  EXPECT_THAT(replies_.take(), ElementsAre("4/1 int=4"));
}

TEST_F(ServerStateTest, BarrierJoinTimesOutNamingTheDoneKey) {
  join(1, 1, 0, 2, 50);
  state_.expire_next();
  EXPECT_THAT(replies_.take(), ElementsAre("1/1 timeout missing=[0]"));
  EXPECT_EQ(stored("b/count"), "1");

  join(2, 1, 1, 2, 0);  // completes the barrier: answered, never parked
  EXPECT_THAT(replies_.take(), ElementsAre("2/1 int=2"));
}

TEST_F(ServerStateTest, BarrierJoinOnANonIntegerCounterIsAnError) {
  set(1, 1, "b/count", "x");
  join(1, 2, 0, 2);
  EXPECT_THAT(replies_.take(),
              ElementsAre("1/1 ok",
                          "1/2 error=1 store: failed to add to key 'b/count': its value is not a "
                          "decimal integer; value='x'"));
  EXPECT_EQ(stored("b/0"), "1");  // the rank key was set before the add
  EXPECT_EQ(state_.parked(), 0u);
}

TEST_F(ServerStateTest, ParkingIsBoundedPerConnection) {
  for (uint32_t id = 1; id <= kMaxParked + 1; ++id) get(1, id, "a", 1000);
  get(2, 1, "a", 1000);  // another connection has its own bound
  EXPECT_THAT(replies_.take(),
              ElementsAre("1/4 error=3 store: failed to park the request: too many blocked "
                          "requests on one connection; limit=3"));
  EXPECT_EQ(state_.parked(), kMaxParked + 1);

  set(3, 1, "a", "v");  // answering frees the connection's slots
  EXPECT_EQ(replies_.take().size(), 1 + kMaxParked + 1);
  get(1, 5, "b", 1000);
  EXPECT_THAT(replies_.take(), IsEmpty());
  EXPECT_EQ(state_.parked(), 1u);
}

TEST_F(ServerStateTest, DroppingAConnectionForgetsItsParkedRequests) {
  get(1, 1, "a", 100);
  wait(1, 2, {"a", "b"}, 200);
  get(2, 1, "a", 300);
  state_.drop_connection(1);
  EXPECT_EQ(state_.parked(), 1u);
  EXPECT_EQ(state_.next_deadline(), t0_ + milliseconds(300));
  set(3, 1, "a", "v");
  EXPECT_THAT(replies_.take(), ElementsAre("3/1 ok", "2/1 value=v"));
  state_.drop_connection(1);  // twice, or a connection that parked nothing: no-op
  state_.drop_connection(9);
  EXPECT_EQ(state_.parked(), 0u);
}

}  // namespace
}  // namespace slurmddp::store
