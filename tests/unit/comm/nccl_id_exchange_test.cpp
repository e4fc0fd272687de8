// The NCCL communicator's rendezvous through the Store (nccl_id_exchange.h),
// without CUDA or NCCL: ranks as threads on the in-process store, ids as
// made-up bytes. Note [Rendezvous generations] is the reason for most cases.
#include "comm/nccl/nccl_id_exchange.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "forwarding_store.h"
#include "slurmddp/error.h"
#include "slurmddp/store.h"

namespace slurmddp::comm {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = NcclIdExchange::Clock;

NcclUniqueId id_of(uint8_t fill) {
  NcclUniqueId id{};
  id.fill(fill);
  id[0] = 0x5a;
  return id;
}

NcclOptions options(const std::shared_ptr<Store>& store, int rank, int size,
                    const std::string& prefix = "t/nccl") {
  NcclOptions o;
  o.rank = rank;
  o.size = size;
  o.store = store;
  o.prefix = prefix;
  return o;
}

std::string where(int rank) {
  return "rank=" + std::to_string(rank) + ", host=h, pid=1";
}

// A store that tells the test when someone starts reading a key: the read of
// a key nobody has written blocks, so "rank 1 waits" is an event, not a sleep.
class ReadSignallingStore : public slurmddp::support::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;

  // Blocks until some thread has called get(key); false after `limit`.
  bool await_read_of(const std::string& key, Millis limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] {
      for (const auto& k : reads_) {
        if (k == key) return true;
      }
      return false;
    });
  }
  std::vector<std::string> reads() {
    std::lock_guard<std::mutex> lock(mu_);
    return reads_;
  }

 private:
  void before(const char* op, const std::vector<std::string>& keys) override {
    if (std::string(op) != "get") return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reads_.push_back(keys.front());
    }
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> reads_;
};

// One rank's whole rendezvous (announce, exchange); rank 0 publishes `root_id`.
NcclUniqueId join(const NcclOptions& o, NcclUniqueId root_id,
                  std::chrono::milliseconds budget = 10s) {
  NcclIdExchange x(o, 0, where(*o.rank), Clock::now() + budget);
  x.announce();
  return x.exchange([&] { return root_id; });
}

TEST(NcclIdExchange, EveryRankGetsRankZerosId) {
  auto store = make_in_process_store();
  const NcclUniqueId a = id_of(1);
  auto r1 = std::async(std::launch::async, [&] { return join(options(store, 1, 3), {}); });
  auto r2 = std::async(std::launch::async, [&] { return join(options(store, 2, 3), {}); });
  EXPECT_EQ(join(options(store, 0, 3), a), a);
  EXPECT_EQ(r1.get(), a);
  EXPECT_EQ(r2.get(), a);
}

// The bug this file exists for: a second communicator on the same store and
// prefix. A rank that arrives before rank 0 must wait for the new id instead
// of reading the first communicator's.
TEST(NcclIdExchange, ReusedPrefixNeverGivesThePreviousId) {
  auto store = std::make_shared<ReadSignallingStore>(make_in_process_store());
  const NcclUniqueId first = id_of(1);
  const NcclUniqueId second = id_of(2);
  {
    auto r1 = std::async(std::launch::async, [&] { return join(options(store, 1, 2), {}); });
    EXPECT_EQ(join(options(store, 0, 2), first), first);
    EXPECT_EQ(r1.get(), first);
  }
  auto r1 = std::async(std::launch::async, [&] { return join(options(store, 1, 2), {}); });
  // Rank 1 reads the second generation's id (not yet written, so it waits);
  // only then does rank 0 arrive. A rank 1 that read the first id would have
  // returned it without asking for this key.
  ASSERT_TRUE(store->await_read_of("t/nccl/2/unique_id", 10s))
      << "rank 1 never asked for the second generation's id; it read: "
      << ::testing::PrintToString(store->reads());
  EXPECT_EQ(r1.wait_for(0s), std::future_status::timeout)
      << "rank 1 did not wait for rank 0's second id";
  EXPECT_EQ(join(options(store, 0, 2), second), second);
  EXPECT_EQ(r1.get(), second);
}

TEST(NcclIdExchange, GenerationsCountEachRanksCreationsPerPrefix) {
  auto store = make_in_process_store();
  for (int64_t g = 1; g <= 3; ++g) {
    NcclIdExchange x(options(store, 0, 1), 0, where(0), Clock::now() + 1s);
    x.announce();
    EXPECT_EQ(x.generation(), g);
    EXPECT_EQ(x.key("unique_id"), "t/nccl/" + std::to_string(g) + "/unique_id");
    EXPECT_EQ(x.exchange([] { return id_of(9); }), id_of(9));
  }
  NcclIdExchange other(options(store, 0, 1, "t/other"), 0, where(0), Clock::now() + 1s);
  other.announce();
  EXPECT_EQ(other.generation(), 1) << "prefixes count separately";
}

// The first creation's join records must not make the second look complete.
TEST(NcclIdExchange, DiagnosisSeesOnlyThisCreationsJoins) {
  auto store = make_in_process_store();
  auto r1 = std::async(std::launch::async, [&] { return join(options(store, 1, 2), {}); });
  join(options(store, 0, 2), id_of(1));
  r1.get();
  NcclIdExchange again(options(store, 0, 2), 0, where(0), Clock::now() + 1s);
  again.announce();
  again.exchange([] { return id_of(2); });  // rank 0 publishes without waiting
  EXPECT_THAT(again.diagnosis(), HasSubstr("1/2 ranks joined; missing: [1]"));
}

TEST(NcclIdExchange, AMissingRootTimesOutNamingWhoJoinedAndTheKey) {
  auto store = make_in_process_store();
  const auto start = Clock::now();
  try {
    join(options(store, 1, 2), {}, 200ms);
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    const std::string m = e.what();
    EXPECT_THAT(m, HasSubstr("failed to get NCCL's unique id from rank 0"));
    EXPECT_THAT(m, HasSubstr("1/2 ranks joined; missing: [0]"));
    EXPECT_THAT(m, HasSubstr("key=t/nccl/1/unique_id"));
    EXPECT_THAT(m, HasSubstr("rank=1"));
  }
  EXPECT_LT(Clock::now() - start, 5s);
}

// A retry after rank 1 failed before reaching the store: rank 0 is one
// creation ahead, and the diagnosis says so.
TEST(NcclIdExchange, RanksAtAnotherGenerationAreNamed) {
  auto store = make_in_process_store();
  NcclIdExchange early(options(store, 0, 2), 0, where(0), Clock::now() + 1s);
  early.announce();  // rank 0's first attempt; rank 1 never got this far
  NcclIdExchange retry(options(store, 1, 2), 0, where(1), Clock::now() + 1s);
  retry.announce();
  EXPECT_EQ(retry.generation(), 1);
  NcclIdExchange root_retry(options(store, 0, 2), 0, where(0), Clock::now() + 1s);
  root_retry.announce();
  EXPECT_EQ(root_retry.generation(), 2);
  EXPECT_THAT(retry.diagnosis(),
              HasSubstr("1/2 ranks joined; missing: [0]; ranks at another generation of prefix "
                        "'t/nccl': [0 (generation 2)], this rank is at generation 1"));
}

TEST(NcclIdExchange, WorldSizeMismatchNamesBoth) {
  auto store = make_in_process_store();
  join(options(store, 0, 2), id_of(1));
  try {
    join(options(store, 1, 3), {});
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("size=3 (rank 1), size=2 (rank 0)"));
  }
}

TEST(NcclIdExchange, AValueOfTheWrongSizeIsAProtocolError) {
  auto store = make_in_process_store();
  store->set("t/nccl/1/unique_id", Bytes{1, 2, 3});
  try {
    join(options(store, 1, 2), {});
    FAIL() << "no error";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the store holds 3 bytes, expected 128"));
  }
}

TEST(NcclIdExchange, OneRankNeedsNoStore) {
  NcclOptions o;
  o.rank = 0;
  o.size = 1;
  NcclIdExchange x(o, 0, where(0), Clock::now() + 1s);
  x.announce();
  EXPECT_EQ(x.generation(), 0);
  EXPECT_EQ(x.exchange([] { return id_of(3); }), id_of(3));
  EXPECT_EQ(x.diagnosis(), "no store to tell which ranks joined");
}

}  // namespace
}  // namespace slurmddp::comm
