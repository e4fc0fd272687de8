// The Gloo communicator with ranks as threads of this process (each with its
// own Gloo device and connections on loopback) and the in-process store.
#include "slurmddp/gloo_communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "collective_values.h"
#include "rank_threads.h"
#include "slurmddp/error.h"
#include "time_scale.h"

namespace slurmddp {
namespace {

using namespace std::chrono_literals;
using support::all_ops;
using support::all_types;
using support::expected_reduction;
using support::fill;
using support::input_value;
using support::make_buffer;
using support::mismatches;
using ::testing::HasSubstr;

std::string unique_prefix() {
  static std::atomic<int> n{0};
  return "test" + std::to_string(n++);
}

GlooOptions options_for(int rank, int size, std::shared_ptr<Store> store, const std::string& prefix,
                        std::chrono::milliseconds timeout) {
  GlooOptions o;
  o.rank = rank;
  o.size = size;
  o.store = std::move(store);
  o.prefix = prefix;
  o.hostname = "127.0.0.1";
  o.timeout = timeout;
  return o;
}

// Runs body(comm) on `size` threads, one communicator each. Exceptions escaping
// a body fail the test with the rank's message.
void run_group(int size, const std::function<void(Communicator&)>& body,
               std::chrono::milliseconds timeout = 30s) {
  auto store = make_in_process_store();
  const std::string prefix = unique_prefix();
  support::expect_no_rank_errors(support::on_rank_threads(size, [&](int r) {
    auto comm = make_gloo_communicator(options_for(r, size, store, prefix, timeout));
    body(*comm);
  }));
}

const std::vector<size_t> kCounts = {0, 1, 1001, 100003, 1048579};

class WorldSize : public ::testing::TestWithParam<int> {};

TEST_P(WorldSize, AllreduceEveryTypeOpAndCount) {
  const int n = GetParam();
  run_group(n, [&](Communicator& c) {
    EXPECT_EQ(c.size(), n);
    EXPECT_EQ(c.backend(), Backend::kGloo);
    EXPECT_EQ(c.device(), DeviceKind::kHost);
    for (DataType t : all_types()) {
      for (ReduceOp op : all_ops()) {
        for (size_t count : kCounts) {
          auto buf = make_buffer(t, count);
          fill(t, buf.data(), count, c.rank());
          c.allreduce(buf.data(), count, t, op)->wait(c.timeout());
          EXPECT_EQ(mismatches(t, buf.data(), count,
                               [&](size_t i) { return expected_reduction(t, op, n, i); }),
                    "")
              << "rank " << c.rank() << ' ' << to_string(t) << ' ' << to_string(op)
              << " count=" << count;
        }
      }
    }
  });
}

TEST_P(WorldSize, BroadcastEveryTypeRootAndCount) {
  const int n = GetParam();
  run_group(n, [&](Communicator& c) {
    for (int root : {0, n - 1}) {
      for (DataType t : all_types()) {
        for (size_t count : kCounts) {
          auto buf = make_buffer(t, count);
          fill(t, buf.data(), count, c.rank());
          c.broadcast(buf.data(), count, t, root)->wait(c.timeout());
          EXPECT_EQ(
              mismatches(t, buf.data(), count, [&](size_t i) { return input_value(t, root, i); }),
              "")
              << "rank " << c.rank() << " root " << root << ' ' << to_string(t)
              << " count=" << count;
        }
      }
    }
  });
}

TEST_P(WorldSize, AllgatherEveryTypeAndCount) {
  const int n = GetParam();
  const auto un = static_cast<size_t>(n);
  run_group(n, [&](Communicator& c) {
    for (DataType t : all_types()) {
      // 70001 elements per rank: above the blocking-socket tier for every type.
      for (size_t count : {size_t{0}, size_t{1}, size_t{1001}, size_t{70001}}) {
        auto send = make_buffer(t, count);
        fill(t, send.data(), count, c.rank());
        auto recv = make_buffer(t, count * un);
        c.allgather(send.data(), recv.data(), count, t)->wait(c.timeout());
        EXPECT_EQ(mismatches(t, recv.data(), count * un,
                             [&](size_t i) {
                               return input_value(t, static_cast<int>(i / count), i % count);
                             }),
                  "")
            << "rank " << c.rank() << ' ' << to_string(t) << " count=" << count;
        // In place: our block already sits at rank * count.
        auto inplace = make_buffer(t, count * un);
        const size_t es = element_size(t);
        fill(t, inplace.data() + static_cast<size_t>(c.rank()) * count * es, count, c.rank());
        c.allgather(inplace.data() + static_cast<size_t>(c.rank()) * count * es, inplace.data(),
                    count, t)
            ->wait(c.timeout());
        EXPECT_EQ(inplace, recv) << "in place, rank " << c.rank() << " count=" << count;
      }
    }
  });
}

TEST_P(WorldSize, ReduceScatterEveryTypeOpAndCount) {
  const int n = GetParam();
  const auto un = static_cast<size_t>(n);
  run_group(n, [&](Communicator& c) {
    for (DataType t : all_types()) {
      for (ReduceOp op : all_ops()) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{1001}, size_t{262147}}) {
          auto send = make_buffer(t, count * un);
          fill(t, send.data(), count * un, c.rank());
          auto recv = make_buffer(t, count);
          c.reduce_scatter(send.data(), recv.data(), count, t, op)->wait(c.timeout());
          const size_t first = static_cast<size_t>(c.rank()) * count;
          EXPECT_EQ(mismatches(t, recv.data(), count,
                               [&](size_t i) { return expected_reduction(t, op, n, first + i); }),
                    "")
              << "rank " << c.rank() << ' ' << to_string(t) << ' ' << to_string(op)
              << " count=" << count;
        }
      }
    }
  });
}

TEST_P(WorldSize, BarrierWaitsForEveryRank) {
  const int n = GetParam();
  constexpr int kRounds = 20;
  std::vector<std::atomic<int>> arrived(kRounds);
  for (auto& a : arrived) a = 0;
  run_group(n, [&](Communicator& c) {
    for (int round = 0; round < kRounds; ++round) {
      arrived[static_cast<size_t>(round)]++;
      c.barrier()->wait(c.timeout());
      EXPECT_EQ(arrived[static_cast<size_t>(round)].load(), n) << "round " << round;
    }
  });
}

// Many operations in flight at once, across all tiers, completed in issue
// order and waited for in reverse.
TEST_P(WorldSize, OperationsRunInIssueOrder) {
  const int n = GetParam();
  run_group(n, [&](Communicator& c) {
    const std::vector<size_t> counts = {3, 70000, 1, 1500000, 257, 65536, 2000000, 5};
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<WorkHandle> works;
    for (size_t k = 0; k < counts.size(); ++k) {
      bufs.push_back(make_buffer(DataType::kFloat32, counts[k]));
      fill(DataType::kFloat32, bufs.back().data(), counts[k], c.rank());
      works.push_back(
          c.allreduce(bufs.back().data(), counts[k], DataType::kFloat32, ReduceOp::kSum));
      if (k == 3) works.push_back(c.barrier());
    }
    for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait(c.timeout());
    for (auto& w : works) EXPECT_TRUE(w->is_completed());
    for (size_t k = 0; k < counts.size(); ++k) {
      EXPECT_EQ(mismatches(DataType::kFloat32, bufs[k].data(), counts[k],
                           [&](size_t i) {
                             return expected_reduction(DataType::kFloat32, ReduceOp::kSum, n, i);
                           }),
                "")
          << "op " << k;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Gloo, WorldSize, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "ranks" + std::to_string(i.param);
                         });

// Results are bit-identical on every rank, also where rounding happens.
TEST(GlooCommunicator, EveryRankGetsIdenticalBits) {
  const int n = 3;
  std::mutex m;
  std::vector<std::vector<uint8_t>> results(n);
  run_group(n, [&](Communicator& c) {
    for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
      const size_t count = 300001;  // Gloo's ring as float32 (above 1 MiB)
      auto buf = make_buffer(t, count);
      for (size_t i = 0; i < count; ++i) {
        support::store_value(t, buf.data(), i, 1.0 / (1.0 + (i + c.rank()) % 97) * 0.7);
      }
      c.allreduce(buf.data(), count, t, ReduceOp::kAvg)->wait(c.timeout());
      std::lock_guard<std::mutex> lock(m);
      auto& r = results[static_cast<size_t>(c.rank())];
      r.insert(r.end(), buf.begin(), buf.end());
    }
  });
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

TEST(GlooCommunicator, RejectsBadArguments) {
  auto store = make_in_process_store();
  auto o = options_for(0, 1, store, "bad", 5s);
  o.rank = 1;
  EXPECT_THROW(make_gloo_communicator(o), InvalidArgument);
  o.rank = 0;
  o.size = 0;
  EXPECT_THROW(make_gloo_communicator(o), InvalidArgument);
  o.size = 2;
  o.store = nullptr;
  EXPECT_THROW(make_gloo_communicator(o), InvalidArgument);
  o.store = store;
  o.ifname = "lo";
  EXPECT_THROW(make_gloo_communicator(o), InvalidArgument);  // ifname and hostname both set
  o = options_for(0, 1, store, "bad", 0ms);
  EXPECT_THROW(make_gloo_communicator(o), InvalidArgument);
  o = options_for(0, 1, store, "bad", 5s);
  o.rank.reset();  // required, and unset is not rank 0
  try {
    make_gloo_communicator(o);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("GlooOptions::rank and GlooOptions::size are required; "
                                    "rank=unset, size=1"));
  }

  auto c = make_gloo_communicator(options_for(0, 1, store, "ok", 5s));
  EXPECT_THROW(c->allreduce(nullptr, 4, DataType::kFloat32, ReduceOp::kSum), InvalidArgument);
  EXPECT_THROW(c->allreduce(nullptr, 1, static_cast<DataType>(99), ReduceOp::kSum),
               InvalidArgument);
  float x = 1;
  EXPECT_THROW(c->allreduce(&x, 1, DataType::kFloat32, static_cast<ReduceOp>(9)), InvalidArgument);
  EXPECT_THROW(c->broadcast(&x, 1, DataType::kFloat32, 1), InvalidArgument);
  EXPECT_THROW(c->broadcast(&x, 1, DataType::kFloat32, -1), InvalidArgument);
  EXPECT_THROW(c->allgather(&x, nullptr, 1, DataType::kFloat32), InvalidArgument);
  EXPECT_THROW(c->reduce_scatter(&x, &x, SIZE_MAX / 2, DataType::kFloat32, ReduceOp::kSum),
               InvalidArgument);
  c->allreduce(nullptr, 0, DataType::kFloat32, ReduceOp::kSum)->wait(1s);  // count 0: fine
}

TEST(GlooCommunicator, BadInterfaceIsNamed) {
  auto store = make_in_process_store();
  auto o = options_for(0, 2, store, "iface", 5s);
  o.hostname = "";
  o.ifname = "no-such-if0";
  try {
    make_gloo_communicator(o);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("ifname=no-such-if0"), std::string::npos) << e.what();
  }
}

TEST(GlooCommunicator, MissingRankIsNamedAtSetup) {
  auto store = make_in_process_store();
  // rank 2 never starts
  const auto errors = support::on_rank_threads({0, 1, 3}, [&](int r) {
    make_gloo_communicator(options_for(r, 4, store, "missing", 1500ms));
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("3/4 ranks joined; missing: [2]"), std::string::npos) << e;
}

TEST(GlooCommunicator, WorldSizeMismatchNamesBothValues) {
  auto store = make_in_process_store();
  const auto errors = support::on_rank_threads(3, [&](int r) {
    make_gloo_communicator(options_for(r, r == 2 ? 4 : 3, store, "mismatch", 5s));
  });
  EXPECT_NE(errors[2].find("rank 2 has size=4, rank 0 has size=3"), std::string::npos) << errors[2];
  for (int r : {0, 1}) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find(
                  "world size mismatch: rank 2 has size=4, rank 0 has size=3"),
              std::string::npos)
        << errors[static_cast<size_t>(r)];
  }
}

// A latch for the failure tests: no sleeps as synchronization.
class Latch {
 public:
  void open() {
    {
      std::lock_guard<std::mutex> l(m_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [&] { return open_; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(GlooCommunicator, WaitTimeoutBreaksTheCommunicator) {
  Latch rank0_timed_out;
  std::string first, again, later, peer_saw;
  bool later_is_timeout = false, peer_is_peer_error = false;
  run_group(
      2,
      [&](Communicator& c) {
        float x = 1;
        if (c.rank() == 0) {
          auto w = c.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
          first = message_of([&] { w->wait(100ms); });
          again = message_of([&] { w->wait(100ms); });
          try {
            c.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum)->wait(c.timeout());
          } catch (const TimeoutError& e) {
            later_is_timeout = true;
            later = e.what();
          }
          rank0_timed_out.open();
          // Until the peer joins, the op stays in flight; then it is aborted.
          auto deadline = std::chrono::steady_clock::now() + c.timeout();
          while (!w->is_completed() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(1ms);  // polling a condition, with a deadline
          }
          EXPECT_TRUE(w->is_completed());
        } else {
          rank0_timed_out.wait();
          // Rank 0 aborts once its side of op #1 ends: this rank's op #1 may
          // still complete, but op #2 at the latest fails, naming rank 0.
          for (int op = 0; op < 2 && !peer_is_peer_error; ++op) {
            try {
              c.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum)->wait(c.timeout());
            } catch (const PeerError& e) {
              peer_is_peer_error = true;
              peer_saw = e.what();
            }
          }
        }
      },
      5s);
  // The wait's own timeout is diagnosed like any failure: it names the rank
  // that did not report (Note [Failure notes]) and keeps the wait's details.
  EXPECT_EQ(
      first.rfind("gloo: failed to allreduce 1 float32 (sum), op #1: no response from rank 1", 0),
      0u)
      << first;
  EXPECT_NE(first.find("not completed after 100 ms"), std::string::npos) << first;
  EXPECT_NE(first.find("rank=0, timeout_ms=100"), std::string::npos) << first;
  EXPECT_NE(first.find("missing=[1]"), std::string::npos) << first;
  EXPECT_EQ(again, first);
  EXPECT_TRUE(later_is_timeout);
  EXPECT_EQ(later, first);
  EXPECT_TRUE(peer_is_peer_error) << peer_saw;
  EXPECT_NE(peer_saw.find("rank 0 aborted the communicator: " + first), std::string::npos)
      << peer_saw;
}

// A peer that leaves between operations is named by the next one, at once:
// on blocking sockets (small) and in Gloo's ring (large). (The middle tier
// only notices within the timeout when its objects are new: see
// Note [Choosing Gloo's entry point].)
// Note [Lazy meshes]: the event-loop mesh is connected by the first operation
// above the blocking threshold, not by the constructor.
TEST(LazyMesh, TheEventLoopMeshWaitsForTheFirstLargeOperation) {
  auto store = make_in_process_store();
  const std::string prefix = unique_prefix();
  const std::string async_record = prefix + "/1/async/0";
  std::vector<int> before(3, -1), after(3, -1);
  std::atomic<int> arrived{0};
  const auto errors = support::on_rank_threads(3, [&](int r) {
    auto c = make_gloo_communicator(options_for(r, 3, store, prefix, 10s));
    std::vector<float> small(1001, 1.0f), large(1048579, 1.0f);
    c->allreduce(small.data(), small.size(), DataType::kFloat32, ReduceOp::kSum)
        ->wait(c->timeout());
    c->barrier()->wait(c->timeout());
    before[static_cast<size_t>(r)] = store->check({async_record}) ? 1 : 0;
    c->barrier()->wait(c->timeout());
    c->allreduce(large.data(), large.size(), DataType::kFloat32, ReduceOp::kSum)
        ->wait(c->timeout());
    after[static_cast<size_t>(r)] = store->check({async_record}) ? 1 : 0;
    EXPECT_EQ(large.front(), 3.0f);
    EXPECT_EQ(large.back(), 3.0f);
    ++arrived;
  });
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(before[r], 0) << "rank " << r << ": the event-loop mesh before a large operation";
    EXPECT_EQ(after[r], 1) << "rank " << r << ": the event-loop mesh after one";
  }
  EXPECT_EQ(arrived.load(), 3);
}

// A rank that is alive but never issues the operation that connects the
// event-loop mesh: the others fail within the timeout, naming it.
TEST(LazyMesh, ARankThatNeverGetsThereIsNamedWithinTheTimeout) {
  std::vector<std::string> errors(3);
  std::vector<double> seconds(3);
  std::mutex m;
  std::condition_variable cv;
  int done = 0;
  run_group(
      3,
      [&](Communicator& c) {
        c.barrier()->wait(c.timeout());
        if (c.rank() == 2) {
          // Alive, connections open, but elsewhere until the others gave up.
          std::unique_lock<std::mutex> lock(m);
          cv.wait(lock, [&] { return done == 2; });
          return;
        }
        std::vector<float> large(1048579, 1.0f);
        const auto t0 = std::chrono::steady_clock::now();
        try {
          c.allreduce(large.data(), large.size(), DataType::kFloat32, ReduceOp::kSum)
              ->wait(c.timeout() * 3);
        } catch (const Error& e) {
          errors[static_cast<size_t>(c.rank())] = e.what();
        }
        seconds[static_cast<size_t>(c.rank())] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::lock_guard<std::mutex> lock(m);
        ++done;
        cv.notify_all();
      },
      2s);
  for (int r : {0, 1}) {
    const auto& e = errors[static_cast<size_t>(r)];
    EXPECT_NE(e.find("gloo: failed to allreduce 1048579 float32 (sum), op #2: "), std::string::npos)
        << "rank " << r << ": " << e;
    EXPECT_NE(e.find("missing=[2]"), std::string::npos) << "rank " << r << ": " << e;
    EXPECT_LT(seconds[static_cast<size_t>(r)], support::scaled(2.0 * 2 + 1))
        << "within the timeout: " << e;
  }
}

class DestroyedPeer : public ::testing::TestWithParam<size_t> {};

TEST_P(DestroyedPeer, IsNamedAndBreaksLaterOps) {
  const size_t count = GetParam();
  std::vector<std::string> errors(3), later(3);
  std::vector<double> seconds(3);
  run_group(
      3,
      [&](Communicator& c) {
        // Everybody connected (op #1), then rank 2 destroys its communicator.
        c.barrier()->wait(c.timeout());
        if (c.rank() == 2) return;
        std::vector<float> x(count, 1.0f);
        const auto t0 = std::chrono::steady_clock::now();
        auto w = c.allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
        try {
          w->wait(c.timeout() * 2);
        } catch (const PeerError& e) {
          errors[static_cast<size_t>(c.rank())] = e.what();
        }
        seconds[static_cast<size_t>(c.rank())] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        later[static_cast<size_t>(c.rank())] = message_of([&] { c.barrier()->wait(c.timeout()); });
      },
      4s);
  for (int r : {0, 1}) {
    const auto& e = errors[static_cast<size_t>(r)];
    EXPECT_NE(e.find("gloo: failed to allreduce " + std::to_string(count) +
                     " float32 (sum), op #2: lost peer rank 2"),
              std::string::npos)
        << "rank " << r << ": " << e;
    EXPECT_NE(e.find("peer=2"), std::string::npos) << e;
    EXPECT_LT(seconds[static_cast<size_t>(r)], support::scaled(4.0)) << "within the timeout";
    EXPECT_EQ(later[static_cast<size_t>(r)], e) << "later operations rethrow the same error";
  }
}

INSTANTIATE_TEST_SUITE_P(Gloo, DestroyedPeer, ::testing::Values(size_t{1001}, size_t{2000000}),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                           return "count" + std::to_string(i.param);
                         });

}  // namespace
}  // namespace slurmddp
