// The decision of Note [Failure notes] as a pure function of the notes, and
// the notes' encoding.
#include "membership/notes.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "note_helpers.h"
#include "slurmddp/error.h"

namespace slurmddp::membership {
namespace {

using namespace support;

TEST(Notes, EncodeDecode) {
  Observation o;
  o.kind = Kind::kPeer;
  o.peer = 3;
  o.detail = "Connection closed\nby peer";
  std::string op;
  auto back = decode_note(encode_note(o, "allreduce 4 float32 (sum), op #2"), &op);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->kind, Kind::kPeer);
  EXPECT_EQ(back->peer, 3);
  EXPECT_EQ(back->detail, "Connection closed by peer");
  EXPECT_EQ(op, "allreduce 4 float32 (sum), op #2");
  EXPECT_FALSE(decode_note("garbage"));
  for (Kind k : {Kind::kTimeout, Kind::kAborted, Kind::kOther}) {
    o.kind = k;
    EXPECT_EQ(decode_note(encode_note(o, "x"))->kind, k);
  }
}

// Rank 2 was killed: its neighbours saw it close connections, nobody heard from it.
TEST(Decide, KilledRankIsALostPeer) {
  const auto own = note(Kind::kPeer, 1, "Connection closed by peer [127.0.0.1]:1");
  std::vector<std::optional<Observation>> notes = {own, note(Kind::kPeer, 2), std::nullopt,
                                                   note(Kind::kPeer, 2)};
  auto e = decide(ctx4(0), own, kOp, notes, "");
  EXPECT_TRUE(is<PeerError>(e));
  const std::string m = message_of(e);
  EXPECT_EQ(m.rfind("gloo: failed to " + kOp + ": lost peer rank 2", 0), 0u) << m;
  EXPECT_NE(m.find("rank=0, size=4, timeout_ms=3000, peer=2"), std::string::npos) << m;
}

// Rank 2 was stopped: everybody timed out or saw a *live* rank close, nobody
// saw rank 2 close anything.
TEST(Decide, StoppedRankIsATimeoutNamingIt) {
  const auto own = note(Kind::kTimeout, -1, "Timed out waiting 3000ms for recv");
  std::vector<std::optional<Observation>> notes = {note(Kind::kPeer, 3), own, std::nullopt,
                                                   note(Kind::kTimeout)};
  auto e = decide(ctx4(1), own, kOp, notes, "");
  EXPECT_TRUE(is<TimeoutError>(e));
  const std::string m = message_of(e);
  EXPECT_NE(m.find("no response from rank 2 within the timeout"), std::string::npos) << m;
  EXPECT_NE(m.find("missing=[2]"), std::string::npos) << m;
}

TEST(Decide, SeveralSuspects) {
  const auto own = note(Kind::kTimeout);
  std::vector<std::optional<Observation>> notes = {own, std::nullopt, std::nullopt,
                                                   note(Kind::kPeer, 1)};
  auto e = decide(ctx4(0), own, kOp, notes, "");
  EXPECT_TRUE(is<PeerError>(e));  // rank 1 was seen closing: lost; rank 2 merely silent
  EXPECT_NE(message_of(e).find("lost peer rank 1"), std::string::npos);
  notes[3] = note(Kind::kTimeout);
  e = decide(ctx4(0), own, kOp, notes, "");
  EXPECT_TRUE(is<TimeoutError>(e));
  EXPECT_NE(message_of(e).find("no response from ranks [1, 2]"), std::string::npos);
  EXPECT_NE(message_of(e).find("missing=[1, 2]"), std::string::npos);
}

TEST(Decide, AbortedRankIsNamed) {
  const auto own = note(Kind::kPeer, 3, "Connection closed by peer [127.0.0.1]:9");
  std::vector<std::optional<Observation>> notes = {
      own, note(Kind::kPeer, 3), note(Kind::kPeer, 3),
      note(Kind::kAborted, -1, "gloo: failed to wait for allreduce ...")};
  auto e = decide(ctx4(0), own, kOp, notes, "");
  EXPECT_TRUE(is<PeerError>(e));
  EXPECT_NE(message_of(e).find("rank 3 aborted the communicator: gloo: failed to wait for"),
            std::string::npos)
      << message_of(e);
}

TEST(Decide, FallsBackToOwnObservation) {
  std::vector<std::optional<Observation>> all(4, note(Kind::kOther));
  auto own = note(Kind::kTimeout, 2, "Read timeout [127.0.0.1]:4");
  auto e = decide(ctx4(0), own, kOp, all, "");
  EXPECT_TRUE(is<TimeoutError>(e));
  EXPECT_NE(message_of(e).find("peer=2"), std::string::npos);
  own = note(Kind::kOther, -1, "Enforce failed");
  e = decide(ctx4(0), own, kOp, all, "");
  EXPECT_FALSE(is<TimeoutError>(e));
  EXPECT_FALSE(is<PeerError>(e));
  EXPECT_TRUE(is<Error>(e));
  // Without the store, no group view: say so.
  own = note(Kind::kPeer, 1, "Connection reset");
  e = decide(ctx4(0), own, kOp, {own, std::nullopt, std::nullopt, std::nullopt}, "store down");
  EXPECT_TRUE(is<PeerError>(e));
  EXPECT_NE(message_of(e).find("connection to rank 1 failed"), std::string::npos);
  EXPECT_NE(message_of(e).find("no group diagnosis: the store failed: store down"),
            std::string::npos);
}

// What every backend calls on a failure that may be a peer's doing (the NCCL
// communicator's watchdog and Work::wait timeouts, Gloo's Work::wait
// timeout): write this rank's note, gather the others', name the culprit.
TEST(NoteAndConclude, NamesTheRankThatWroteNoNote) {
  auto store = make_in_process_store();
  DiagnosisContext c = ctx4(0);
  c.store = store;
  c.size = 3;
  c.grace = std::chrono::milliseconds(50);
  c.component = "nccl";
  DiagnosisContext c1 = c;
  c1.rank = 1;
  write_note(c1, note(Kind::kTimeout), "complete allreduce of 1024 float32 (sum), op #3");
  const auto plain = std::make_exception_ptr(TimeoutError(
      "nccl: failed to complete allreduce of 1024 float32 (sum), op #3: not finished; the "
      "watchdog aborted the communicator"));
  auto e = note_and_conclude(c, Kind::kTimeout, "complete allreduce of 1024 float32 (sum), op #3",
                             plain);
  EXPECT_TRUE(is<TimeoutError>(e));
  const std::string m = message_of(e);
  EXPECT_EQ(m.rfind("nccl: failed to complete allreduce of 1024 float32 (sum), op #3: no response "
                    "from rank 2 within the timeout (nccl: failed to complete",
                    0),
            0u)
      << m;
  EXPECT_NE(m.find("the watchdog aborted the communicator); rank=0, size=3, timeout_ms=3000, "
                   "missing=[2]"),
            std::string::npos)
      << m;
  // This rank's note is in the store for the others.
  std::string op;
  const auto mine = decode_note(
      [&] {
        const Bytes b = store->get(failure_key("p", 0), std::chrono::milliseconds(0));
        return std::string(b.begin(), b.end());
      }(),
      &op);
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->kind, Kind::kTimeout);
  EXPECT_EQ(op, "complete allreduce of 1024 float32 (sum), op #3");

  // A rank that saw rank 2 close its connection makes it a lost peer.
  auto store2 = make_in_process_store();
  c.store = store2;
  c1.store = store2;
  write_note(c1, note(Kind::kPeer, 2), "x");
  e = note_and_conclude(c, Kind::kPeer, "complete x", plain);
  EXPECT_TRUE(is<PeerError>(e));
  EXPECT_NE(message_of(e).find("lost peer rank 2"), std::string::npos) << message_of(e);

  // Alone, or without a store: the error as it was.
  c.store = nullptr;
  EXPECT_EQ(note_and_conclude(c, Kind::kTimeout, "x", plain), plain);
}

// A quarter of the timeout, within [100 ms, 1 s]: a stopped peer costs its
// group at most that past the timeout (Note [Lingering host] adds 0.5 s).
TEST(Notes, TheDiagnosisGraceIsAQuarterOfTheTimeoutUpToOneSecond) {
  using std::chrono::milliseconds;
  EXPECT_EQ(diagnosis_grace(milliseconds(200)), milliseconds(100));
  EXPECT_EQ(diagnosis_grace(milliseconds(2000)), milliseconds(500));
  EXPECT_EQ(diagnosis_grace(milliseconds(10000)), milliseconds(1000));
  EXPECT_EQ(diagnosis_grace(milliseconds(300000)), milliseconds(1000));
}

}  // namespace
}  // namespace slurmddp::membership
