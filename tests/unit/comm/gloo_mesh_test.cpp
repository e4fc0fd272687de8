// Note [Mesh connection]: the records ranks exchange to connect a mesh, and a
// mesh connected over them (ranks as threads, loopback).
#include "comm/gloo/gloo_mesh.h"

#include <arpa/inet.h>
#include <gloo/allreduce.h>
#include <gloo/transport/tcp/device.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>
#include <thread>

#include "rank_threads.h"
#include "slurmddp/error.h"
#include "slurmddp/store.h"

namespace slurmddp::comm {
namespace {

using gloo::transport::tcp::Address;

Address v4(const char* ip, uint16_t port, gloo::transport::tcp::sequence_number_t seq = -1) {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  inet_pton(AF_INET, ip, &sin.sin_addr);
  sockaddr_storage ss{};
  std::memcpy(&ss, &sin, sizeof sin);
  return Address(ss, seq);
}

Address v6(const char* ip, uint16_t port) {
  sockaddr_in6 sin{};
  sin.sin6_family = AF_INET6;
  sin.sin6_port = htons(port);
  inet_pton(AF_INET6, ip, &sin.sin6_addr);
  sockaddr_storage ss{};
  std::memcpy(&ss, &sin, sizeof sin);
  return Address(ss);
}

std::shared_ptr<gloo::transport::Device> loopback_device() {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  return gloo::transport::tcp::CreateDevice(attr);
}

using support::expect_no_rank_errors;
using support::on_rank_threads;

// Rank 1 of 4 lists ranks 0, 2 and 3: each reads its own entry back, as the
// same address (bytes and all) that rank 1 listens on for it.
TEST(MeshRecord, EachPeerReadsItsOwnAddress) {
  const std::vector<Address> listed = {v4("10.1.2.3", 40001), v4("10.1.2.3", 40002),
                                       v4("10.1.2.3", 65535)};
  const std::string record = encode_mesh_record(listed);
  EXPECT_EQ(record, "gloo-mesh 1 10.1.2.3 40001,40002,65535");
  EXPECT_EQ(mesh_address_for(record, 1, 4, 0).bytes(), listed[0].bytes());
  EXPECT_EQ(mesh_address_for(record, 1, 4, 2).bytes(), listed[1].bytes());
  EXPECT_EQ(mesh_address_for(record, 1, 4, 3).bytes(), listed[2].bytes());
}

// A few bytes a peer, where Gloo's own exchange stores 136.
TEST(MeshRecord, GrowsByAFewBytesAPeer) {
  std::vector<Address> listed;
  for (int j = 0; j < 1023; ++j)
    listed.push_back(v4("10.200.30.40", static_cast<uint16_t>(30000 + j)));
  EXPECT_LT(encode_mesh_record(listed).size(), 1023u * 6 + 40);
  EXPECT_EQ(listed.front().bytes().size(), 136u);
}

TEST(MeshRecord, SequenceNumbersAndIpv6RoundTrip) {
  const std::vector<Address> seqs = {v4("127.0.0.1", 5000, 17), v4("127.0.0.1", 5000, 18)};
  const std::string r = encode_mesh_record(seqs);
  EXPECT_EQ(r, "gloo-mesh 1 127.0.0.1 5000$17,5000$18");
  EXPECT_EQ(mesh_address_for(r, 0, 3, 2).bytes(), seqs[1].bytes());
  EXPECT_EQ(mesh_address_for(r, 0, 3, 2).getSeq(), 18);

  const std::vector<Address> six = {v6("fd00::7", 4242)};
  const std::string r6 = encode_mesh_record(six);
  EXPECT_EQ(r6, "gloo-mesh 1 fd00::7 4242");
  EXPECT_EQ(mesh_address_for(r6, 1, 2, 0).bytes(), six[0].bytes());
}

TEST(MeshRecord, AForeignOrDamagedRecordNamesItsOwner) {
  const std::string good = encode_mesh_record({v4("10.0.0.1", 1000), v4("10.0.0.1", 1001)});
  for (const std::string& bad :
       {std::string("garbage"), std::string("gloo-mesh 1 10.0.0.1"),
        std::string("gloo-mesh 1 10.0.0.1 1000,x"), std::string("gloo-mesh 1 10.0.0.1 1000,70000"),
        std::string("gloo-mesh 1 not-an-ip 1000,1001"),
        std::string("gloo-mesh 1 10.0.0.1 1000,1001$")}) {
    try {
      mesh_address_for(bad, 5, 3, 1);  // rank 1 reads the second entry
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find("the mesh record of rank 5"), std::string::npos)
          << e.what();
    }
  }
  // A record of another group size: two addresses where four are expected.
  EXPECT_THROW(mesh_address_for(good, 0, 5, 1), ProtocolError);
  EXPECT_NO_THROW(mesh_address_for(good, 0, 3, 1));
}

TEST(MeshRecord, OneRankHasOneAddress) {
  EXPECT_THROW(encode_mesh_record({v4("10.0.0.1", 1000), v4("10.0.0.2", 1001)}), InvalidArgument);
}

// Exactly one side of every pair dials, as Gloo decides it.
TEST(MeshRecord, OneSideOfAPairDials) {
  const Address a = v4("10.0.0.1", 1000), b = v4("10.0.0.1", 2000), c = v4("10.0.0.2", 1000);
  for (const auto& [x, y] : {std::pair{a, b}, std::pair{a, c}, std::pair{b, c}}) {
    EXPECT_NE(mesh_dials(x, y), mesh_dials(y, x)) << x.str() << " " << y.str();
  }
}

TEST(MeshRecord, EndpointsReadAsGlooPrintsThem) {
  const Address a = v4("127.0.0.1", 40119, 3);
  EXPECT_EQ(mesh_endpoint(a), a.str().substr(0, a.str().find('$')));
  EXPECT_EQ(mesh_endpoint(a).rfind("[127.0.0.1]:", 0), 0u);
}

// Five ranks connect over the store and pass a message around the ring.
TEST(MeshContext, ConnectsEveryPairOverTheStore) {
  const int n = 5;
  auto store = make_in_process_store();
  std::vector<std::shared_ptr<MeshContext>> ctx(n);  // alive until every rank is done
  const auto errors = on_rank_threads(n, [&](int r) {
    auto& c = ctx[static_cast<size_t>(r)];
    c = std::make_shared<MeshContext>(r, n, std::chrono::seconds(10));
    c->connect(*store, "mesh/", loopback_device());
    int out = r, in = -1;
    auto send = c->getPair((r + 1) % n)->createSendBuffer(0, &out, sizeof out);
    auto recv = c->getPair((r + n - 1) % n)->createRecvBuffer(0, &in, sizeof in);
    send->send();
    recv->waitRecv();
    send->waitSend();
    EXPECT_EQ(in, (r + n - 1) % n);
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      EXPECT_EQ(c->endpoints()[static_cast<size_t>(j)].size(), 2u);
    }
  });
  expect_no_rank_errors(errors);
}

// A rank that never publishes its record: the others fail within the timeout,
// naming the record they waited for.
TEST(MeshContext, AMissingRankFailsTheOthersNamingItsRecord) {
  auto store = make_in_process_store();
  const auto errors = on_rank_threads(2, [&](int r) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    MeshContext c(r, 3, std::chrono::milliseconds(500));
    c.connect(*store, "mesh/", device);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("mesh/2"), std::string::npos) << e;
}

// Note [Leaders' ring]: each rank's peers are its two ring neighbours, and the
// relation is symmetric, at every size (one neighbour at 2, none at 1).
TEST(MeshShape, RingPeersAreTheNeighboursBothWays) {
  EXPECT_EQ(mesh_peers(MeshShape::kRing, 0, 1), std::vector<int>{});
  EXPECT_EQ(mesh_peers(MeshShape::kRing, 0, 2), std::vector<int>{1});
  EXPECT_EQ(mesh_peers(MeshShape::kRing, 0, 5), (std::vector<int>{1, 4}));
  EXPECT_EQ(mesh_peers(MeshShape::kRing, 3, 5), (std::vector<int>{2, 4}));
  EXPECT_EQ(mesh_peers(MeshShape::kFull, 2, 4), (std::vector<int>{0, 1, 3}));
  for (int n = 1; n <= 9; ++n) {
    for (int r = 0; r < n; ++r) {
      for (int j : mesh_peers(MeshShape::kRing, r, n)) {
        const auto back = mesh_peers(MeshShape::kRing, j, n);
        EXPECT_NE(std::find(back.begin(), back.end(), r), back.end())
            << r << " " << j << " of " << n;
      }
    }
  }
}

// A ring record has one entry per neighbour; each neighbour reads its own, and
// a rank that is not a neighbour is told so, naming the owner.
TEST(MeshShape, RingRecordsHoldTheNeighboursOnly) {
  // Rank 3 of 6: neighbours 2 and 4.
  const std::vector<Address> listed = {v4("10.1.2.3", 40002), v4("10.1.2.3", 40004)};
  const std::string record = encode_mesh_record(listed);
  EXPECT_EQ(mesh_address_for(record, 3, 6, 2, MeshShape::kRing).bytes(), listed[0].bytes());
  EXPECT_EQ(mesh_address_for(record, 3, 6, 4, MeshShape::kRing).bytes(), listed[1].bytes());
  try {
    mesh_address_for(record, 3, 6, 0, MeshShape::kRing);
    ADD_FAILURE() << "rank 0 read an entry of rank 3's ring record";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("the mesh record of rank 3"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("rank 0 is not its peer"), std::string::npos);
  }
  // A full mesh's record read as a ring's: the count gives it away.
  EXPECT_THROW(mesh_address_for(encode_mesh_record({listed[0], listed[1], listed[1]}), 3, 4, 2,
                                MeshShape::kRing),
               ProtocolError);
}

// Six ranks connect as a ring over the store (each reads 2 records) and run
// Gloo's allreduce, which needs only the neighbours; no other pair exists.
TEST(MeshContext, ARingRunsGloosAllreduce) {
  const int n = 6;
  auto store = make_in_process_store();
  const auto errors = on_rank_threads(n, [&](int r) {
    auto c = std::make_shared<MeshContext>(r, n, std::chrono::seconds(10), MeshShape::kRing);
    c->connect(*store, "ring/", loopback_device());
    const std::set<int> peers(c->peers().begin(), c->peers().end());
    for (int j = 0; j < n; ++j) {
      EXPECT_EQ(c->getPair(j) != nullptr, peers.count(j) == 1) << "rank " << r << " pair " << j;
    }
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r * 1000 + i);
    gloo::AllreduceOptions opts(c);
    opts.setOutput(x.data(), x.size());
    opts.setReduceFunction([](void* out, const void* a, const void* b, size_t k) {
      auto* o = static_cast<float*>(out);
      for (size_t i = 0; i < k; ++i) {
        o[i] = static_cast<const float*>(a)[i] + static_cast<const float*>(b)[i];
      }
    });
    gloo::allreduce(opts);
    for (size_t i = 0; i < x.size(); ++i) {
      // sum over r of (r * 1000 + i) = 1000 * n(n-1)/2 + n * i
      const float want = static_cast<float>(1000 * n * (n - 1) / 2 + n * static_cast<int>(i));
      if (x[i] != want) {
        ADD_FAILURE() << "rank " << r << ": element " << i << " is " << x[i] << ", expected "
                      << want;
        break;
      }
    }
  });
  expect_no_rank_errors(errors);
}

}  // namespace
}  // namespace slurmddp::comm
