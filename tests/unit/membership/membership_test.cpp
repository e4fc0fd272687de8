// The join every communicator stands on (membership/membership.h): ranks as
// threads on the in-process store.
#include "membership/membership.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "forwarding_store.h"
#include "rank_threads.h"

namespace slurmddp::membership {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

JoinOptions options(const std::shared_ptr<Store>& store, int rank, int size,
                    std::chrono::milliseconds budget = 10s, const std::string& prefix = "g") {
  JoinOptions o;
  o.store = store;
  o.prefix = prefix;
  o.rank = rank;
  o.size = size;
  o.deadline = Clock::now() + budget;
  o.head = "test: failed to join: ";
  o.where = "rank=" + std::to_string(rank) + ", size=" + std::to_string(size);
  return o;
}

using support::on_rank_threads;

TEST(Membership, EveryRankJoinsAndTheGroupAgreesOnTheMinimum) {
  auto store = make_in_process_store();
  std::vector<int64_t> agreed(4, -1);
  std::vector<std::string> peer_field(4);
  const auto errors = on_rank_threads({0, 1, 2, 3}, [&](int r) {
    JoinOptions o = options(store, r, 4);
    o.fields = {{"wmem_max", std::to_string(1000 + 10 * (3 - r))}, {"device", std::to_string(r)}};
    auto m = Membership::join(o, {"wmem_max"});
    EXPECT_TRUE(m->completed());
    EXPECT_EQ(m->generation(), 1);
    EXPECT_EQ(m->key("x"), "g/1/x");
    agreed[static_cast<size_t>(r)] = m->agreed("wmem_max").value_or(-2);
    EXPECT_FALSE(m->agreed("device")) << "only fields named in agree_min";
    // Records carry each rank's fields for the backends.
    peer_field[static_cast<size_t>(r)] =
        parse_record(store->get(m->key("join/" + std::to_string((r + 1) % 4)), 1s)).field("device");
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(agreed, (std::vector<int64_t>{1000, 1000, 1000, 1000}));
  EXPECT_EQ(peer_field, (std::vector<std::string>{"1", "2", "3", "0"}));
}

TEST(Membership, AMissingRankIsNamedByEveryoneWithinTheDeadline) {
  auto store = make_in_process_store();
  const auto start = Clock::now();
  const auto errors =
      on_rank_threads({0, 1, 3}, [&](int r) { Membership::join(options(store, r, 4, 300ms)); });
  for (size_t i = 0; i < errors.size(); ++i) {
    EXPECT_THAT(errors[i], HasSubstr("test: failed to join: 3/4 ranks joined; missing: [2]"));
  }
  EXPECT_THAT(errors[0], HasSubstr("; rank=0, size=4"));
  EXPECT_LT(Clock::now() - start, 5s);
}

// Note [One verdict on a timeout]: rank 0 gives up first, publishes who is
// missing, and the others report that verdict (with their own rank) instead
// of each probing the store; the text is the same everywhere. The others'
// timeout is longer here, so that the verdict reaches them before their own
// deadline however slow the machine (with equal timeouts rank 0 leads by a
// tenth: 100 ms, which a loaded 2-core machine can eat).
TEST(Membership, OnATimeoutRankZeroTellsTheOthersWhoIsMissing) {
  auto store = make_in_process_store();
  const auto errors = on_rank_threads(
      {0, 1, 3}, [&](int r) { Membership::join(options(store, r, 4, r == 0 ? 1s : 10s)); });
  const std::string why = "3/4 ranks joined; missing: [2]";
  const Bytes verdict = store->get("g/1/verdict", 0ms);
  EXPECT_EQ(std::string(verdict.begin(), verdict.end()), "timeout\n" + why);
  EXPECT_EQ(errors[0], "test: failed to join: " + why + "; rank=0, size=4");
  EXPECT_EQ(errors[1], "test: failed to join: " + why + "; rank=1, size=4");
  EXPECT_EQ(errors[2], "test: failed to join: " + why + "; rank=3, size=4");
}

// Every request made through it, counted (thread-safe).
class CountingStore : public slurmddp::support::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  int requests() const { return count_; }

 private:
  void before(const char*, const std::vector<std::string>&) override { ++count_; }
  std::atomic<int> count_{0};
};

// Note [Join requests]: the join costs each rank a few requests whatever the
// size of its node; vouching for the node's ranks (Note [Locating missing
// ranks]) is done once a node, not by every rank (P - 1 writes each: O(P^2) a
// node).
TEST(Membership, EachRankJoinsWithAFewRequestsWhateverTheSizeOfItsNode) {
  const auto requests_per_rank = [](int per_node) {
    auto store = std::make_shared<CountingStore>(make_in_process_store());
    const int size = 2 * per_node;
    std::vector<int> ranks(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) ranks[static_cast<size_t>(r)] = r;
    const auto errors = on_rank_threads(ranks, [&](int r) {
      JoinOptions o = options(store, r, size);
      o.locality.node = r < per_node ? "n1" : "n2";
      for (int j = 0; j < per_node; ++j) {
        o.locality.node_ranks.push_back((r < per_node ? 0 : per_node) + j);
      }
      o.locality.nodes = {"n1", "n2"};
      Membership::join(o);
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
    return static_cast<double>(store->requests()) / size;
  };
  const double small = requests_per_rank(2);
  const double large = requests_per_rank(32);
  EXPECT_LE(small, 9.0);
  EXPECT_LE(large, small + 1.0) << "a rank's join requests grow with its node's size";
}

// Note [Locating missing ranks]: node-mates vouch for a missing rank's host;
// ranks of a node from which nobody joined are named with that node.
TEST(Membership, MissingRanksAreNamedWithTheirHosts) {
  auto store = make_in_process_store();
  // 8 ranks, block layout over n1..n3: n1 [0-2], n2 [3-5], n3 [6-7].
  const std::vector<std::vector<int>> blocks = {{0, 1, 2}, {3, 4, 5}, {6, 7}};
  auto locality = [&](int r) {
    Locality l;
    const size_t b = r < 3 ? 0 : r < 6 ? 1 : 2;
    l.node = "n" + std::to_string(b + 1);
    l.node_ranks = blocks[b];
    l.nodes = {"n1", "n2", "n3"};
    return l;
  };
  // Rank 4 (on n2) and all of n3 never come.
  const auto errors = on_rank_threads({0, 1, 2, 3, 5}, [&](int r) {
    JoinOptions o = options(store, r, 8, 300ms);
    o.locality = locality(r);
    Membership::join(o);
  });
  for (const auto& e : errors) {
    EXPECT_THAT(e, HasSubstr("5/8 ranks joined; missing: [4, 6, 7] (hosts: n2 [4]; n3 [6, 7], "
                             "where no rank joined)"));
  }
}

TEST(Membership, MissingRanksWithoutLocalityAreNamedByRankOnly) {
  auto store = make_in_process_store();
  Membership m0(options(store, 0, 2));
  m0.announce();
  EXPECT_EQ(m0.diagnosis(), "1/2 ranks joined; missing: [1]");
  // Node-mates known, but no node list: the ranks nobody vouched for stay unplaced.
  auto store2 = make_in_process_store();
  JoinOptions o = options(store2, 0, 4);
  o.locality.node = "a";
  o.locality.node_ranks = {0, 1};
  Membership m(o);
  m.announce();
  EXPECT_EQ(m.diagnosis(), "1/4 ranks joined; missing: [1-3] (hosts: a [1])");
}

TEST(Membership, WorldSizeMismatchNamesBothValuesOnEveryRank) {
  auto store = make_in_process_store();
  std::vector<int> mismatch_other_size(3, 0);
  const auto errors = on_rank_threads({0, 1, 2}, [&](int r) {
    try {
      Membership::join(options(store, r, r == 2 ? 4 : 3, 5s));
    } catch (const SizeMismatch& e) {
      mismatch_other_size[static_cast<size_t>(r)] = e.other_size;
      throw;
    }
  });
  EXPECT_THAT(errors[2], HasSubstr("world size mismatch: rank 2 has size=4, rank 0 has size=3"));
  EXPECT_EQ(mismatch_other_size[2], 3);
  for (int r : {0, 1}) {
    EXPECT_THAT(errors[static_cast<size_t>(r)],
                HasSubstr("test: failed to join: world size mismatch: rank 2 has size=4, rank 0 "
                          "has size=3; rank=" +
                          std::to_string(r)));
  }
}

// Note [Equal fields]: a rank whose value differs fails the join at once on
// every rank (long before the deadline), both values and their reasons named.
TEST(Membership, AFieldThatMustBeEqualFailsTheJoinAtOnceNamingBothValues) {
  auto store = make_in_process_store();
  const auto start = Clock::now();
  const auto errors = on_rank_threads({0, 1, 2, 3}, [&](int r) {
    JoinOptions o = options(store, r, 4, 30s);
    const bool odd = r == 2;
    o.fields = {{"backend", odd ? "nccl" : "gloo"},
                {"backend_why", odd ? "auto: GPU 0 usable" : "auto: no GPU"}};
    o.agree_equal = {"backend"};
    Membership::join(std::move(o));
  });
  EXPECT_LT(Clock::now() - start, 5s) << "waited instead of failing at once";
  for (int r = 0; r < 4; ++r) {
    EXPECT_THAT(errors[static_cast<size_t>(r)],
                HasSubstr("test: failed to join: ranks disagree on backend: rank 0 on "));
    EXPECT_THAT(errors[static_cast<size_t>(r)],
                HasSubstr("has backend=gloo (auto: no GPU), rank 2 on "));
    EXPECT_THAT(errors[static_cast<size_t>(r)],
                HasSubstr("has backend=nccl (auto: GPU 0 usable); 1 of 4 ranks differ from rank 0; "
                          "rank=" +
                          std::to_string(r)));
  }
}

TEST(Membership, EqualFieldsThatAgreeJoinAndOddValuesAreKeysSafely) {
  auto store = make_in_process_store();
  const auto errors = on_rank_threads({0, 1, 2}, [&](int r) {
    JoinOptions o = options(store, r, 3);
    o.fields = {{"mode", "a b/c=%"}};
    o.agree_equal = {"mode"};
    Membership::join(std::move(o));
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_TRUE(store->check({"g/1/equal/mode/a%20b%2Fc%3D%25"}));
}

TEST(Membership, DiagnosisNamesMissingRanksAndOtherSizes) {
  auto store = make_in_process_store();
  Membership m0(options(store, 0, 4));
  m0.announce();
  Membership(options(store, 1, 3)).announce();  // another world size
  Membership(options(store, 3, 4)).announce();
  EXPECT_EQ(m0.diagnosis(),
            "3/4 ranks joined; missing: [2]; ranks with another world size: [1 (size=3)]");
  Membership(options(store, 2, 4)).announce();
  EXPECT_EQ(m0.diagnosis(),
            "4/4 ranks joined; missing: []; ranks with another world size: [1 (size=3)]");
}

// A second group on the same prefix must not see the first one's records or
// verdict, and the first one's records go.
TEST(Membership, ASecondGroupOnThePrefixIsANewGeneration) {
  auto store = make_in_process_store();
  auto first = on_rank_threads({0, 1}, [&](int r) { Membership::join(options(store, r, 2)); });
  for (const auto& e : first) EXPECT_EQ(e, "");
  EXPECT_TRUE(store->check({"g/1/join/0", "g/1/join/1", "g/1/verdict"}));
  Membership again(options(store, 0, 2, 300ms));
  again.announce();
  EXPECT_EQ(again.generation(), 2);
  EXPECT_FALSE(store->check({"g/1/join/0"})) << "the previous record is erased";
  EXPECT_EQ(again.diagnosis(),
            "1/2 ranks joined; missing: [1]; ranks at another generation of prefix 'g': "
            "[1 (generation 1)], this rank is at generation 2 (Note [Rendezvous generations])");
  try {
    again.complete();
    FAIL() << "rank 1 never joined generation 2";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("1/2 ranks joined; missing: [1]"));
  }
}

TEST(Membership, OneRankNeedsNoStoreAndBadRanksAreRefused) {
  JoinOptions o;
  o.prefix = "solo";
  auto m = Membership::join(o, {"wmem_max"});
  EXPECT_TRUE(m->completed());
  EXPECT_EQ(m->generation(), 0);
  EXPECT_EQ(m->diagnosis(), "no store to tell which ranks joined");
  JoinOptions bad = options(nullptr, 4, 4);
  EXPECT_THROW(Membership{bad}, InvalidArgument);
}

}  // namespace
}  // namespace slurmddp::membership
