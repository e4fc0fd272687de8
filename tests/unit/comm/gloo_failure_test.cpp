// Failure classification and the endpoint map of Note [Gloo endpoints], and
// the group diagnosis of Note [Failure notes] over them.
#include "comm/gloo/gloo_failure.h"

#include <gloo/common/error.h>
#include <gtest/gtest.h>

#include "comm/host/shm_node.h"
#include "note_helpers.h"
#include "slurmddp/error.h"
#include "slurmddp/store.h"

namespace slurmddp::comm {
namespace {

using membership::conclude;
using membership::write_note;
using support::ctx4;
using support::is;
using support::kOp;
using support::message_of;
using support::note;

using Kind = Observation::Kind;

TEST(GlooMessages, StripLocationAndFindEndpoint) {
  EXPECT_EQ(strip_gloo_location("[../gloo/transport/tcp/pair.cc:598] Connection closed by peer "
                                "[127.0.0.1]:5551"),
            "Connection closed by peer [127.0.0.1]:5551");
  EXPECT_EQ(strip_gloo_location("[not a location] x"), "[not a location] x");
  EXPECT_EQ(find_endpoint("Connection closed by peer [127.0.0.1]:5551"), "[127.0.0.1]:5551");
  EXPECT_EQ(find_endpoint("Read error [::1]:40000: Connection reset by peer"), "[::1]:40000");
  EXPECT_EQ(find_endpoint("Timed out waiting 100ms for recv operation to complete"), "");
  EXPECT_EQ(find_endpoint("[a b]:1 then [10.0.0.2]:77"), "[10.0.0.2]:77");
}

TEST(GlooMessages, Classify) {
  auto peer = classify(std::make_exception_ptr(gloo::IoException(
      "[../gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:5551")));
  EXPECT_EQ(peer.kind, Kind::kPeer);
  EXPECT_EQ(peer.endpoint, "[127.0.0.1]:5551");
  EXPECT_EQ(peer.detail, "Connection closed by peer [127.0.0.1]:5551");

  auto timeout = classify(std::make_exception_ptr(gloo::IoException(
      "[../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 3000ms for recv "
      "operation to complete")));
  EXPECT_EQ(timeout.kind, Kind::kTimeout);
  EXPECT_EQ(timeout.endpoint, "");

  auto read_timeout =
      classify(std::make_exception_ptr(gloo::IoException("Read timeout [127.0.0.1]:9")));
  EXPECT_EQ(read_timeout.kind, Kind::kTimeout);
  EXPECT_EQ(read_timeout.endpoint, "[127.0.0.1]:9");

  EXPECT_EQ(classify(std::make_exception_ptr(TimeoutError("store: x"))).kind, Kind::kTimeout);
  EXPECT_EQ(classify(std::make_exception_ptr(PeerError("store: y"))).kind, Kind::kPeer);
  EXPECT_EQ(classify(std::make_exception_ptr(PeerError("store: y"))).peer, -1);
  // The shared-memory tier names the node-mate that died: a lost peer for
  // the notes, as a closed connection is (not "no response within the timeout").
  auto died = classify(std::make_exception_ptr(
      ShmPeerDied("shm: reduce to the node's first rank failed: rank 5 (pid 77) on n2 died (lost "
                  "peer rank 5); rank=6, host=n2",
                  5)));
  EXPECT_EQ(died.kind, Kind::kPeer);
  EXPECT_EQ(died.peer, 5);
  EXPECT_EQ(classify(std::make_exception_ptr(std::runtime_error("enforce"))).kind, Kind::kOther);
  EXPECT_EQ(classify(std::make_exception_ptr(42)).detail, "unknown exception");
}

TEST(Notes, Endpoints) {
  std::vector<std::vector<std::string>> per_peer(3);
  per_peer[0] = {"[127.0.0.1]:1", "[127.0.0.1]:2"};
  per_peer[2] = {"[127.0.0.1]:5", "[127.0.0.1]:6"};
  const std::string text = encode_endpoints(per_peer);
  EXPECT_EQ(decode_endpoints(text, 2),
            (std::vector<std::string>{"[127.0.0.1]:5", "[127.0.0.1]:6"}));
  EXPECT_EQ(decode_endpoints(text, 0).size(), 2u);
  EXPECT_TRUE(decode_endpoints(text, 1).empty());
}

// The store-backed steps: notes written by "other ranks" are found, the
// endpoint maps to the rank that published it, silence counts within grace.
TEST(Conclude, ReadsNotesFromTheStore) {
  auto store = make_in_process_store();
  DiagnosisContext c = ctx4(0);
  c.store = store;
  c.grace = std::chrono::milliseconds(50);
  std::vector<std::vector<std::string>> eps(4);
  eps[0] = {"[127.0.0.1]:100", "[127.0.0.1]:101"};  // rank 2's connection to rank 0
  const std::string text = encode_endpoints(eps);
  store->set(endpoints_key("p", 2), Bytes(text.begin(), text.end()));

  Observation own = note(Kind::kPeer, -1, "Connection closed by peer [127.0.0.1]:101");
  own.endpoint = "[127.0.0.1]:101";
  resolve_peer(c, own);
  EXPECT_EQ(own.peer, 2);

  DiagnosisContext c1 = c;
  c1.rank = 1;
  write_note(c1, note(Kind::kPeer, 2), "x");
  DiagnosisContext c3 = c;
  c3.rank = 3;
  write_note(c3, note(Kind::kTimeout), "x");
  write_note(c, own, kOp);
  auto e = conclude(c, own, kOp);
  EXPECT_TRUE(is<PeerError>(e));
  EXPECT_NE(message_of(e).find("lost peer rank 2"), std::string::npos) << message_of(e);
}

}  // namespace
}  // namespace slurmddp::comm
