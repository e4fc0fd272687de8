// Note [Mesh connection]: the records ranks exchange to connect a mesh, and a
// mesh connected over them (ranks as threads, loopback).
#include "comm/gloo_mesh.h"

#include <arpa/inet.h>
#include <gloo/transport/tcp/device.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>
#include <thread>

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
  std::vector<std::shared_ptr<MeshContext>> ctx(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto device = gloo::transport::tcp::CreateDevice(attr);
        ctx[static_cast<size_t>(r)] = std::make_shared<MeshContext>(r, n, std::chrono::seconds(10));
        ctx[static_cast<size_t>(r)]->connect(*store, "mesh/", device);
        int out = r, in = -1;
        auto& c = *ctx[static_cast<size_t>(r)];
        auto send = c.getPair((r + 1) % n)->createSendBuffer(0, &out, sizeof out);
        auto recv = c.getPair((r + n - 1) % n)->createRecvBuffer(0, &in, sizeof in);
        send->send();
        recv->waitRecv();
        send->waitSend();
        EXPECT_EQ(in, (r + n - 1) % n);
        for (int j = 0; j < n; ++j) {
          if (j == r) continue;
          EXPECT_EQ(c.endpoints()[static_cast<size_t>(j)].size(), 2u);
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

// A rank that never publishes its record: the others fail within the timeout,
// naming the record they waited for.
TEST(MeshContext, AMissingRankFailsTheOthersNamingItsRecord) {
  auto store = make_in_process_store();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto device = gloo::transport::tcp::CreateDevice(attr);
        MeshContext c(r, 3, std::chrono::milliseconds(500));
        c.connect(*store, "mesh/", device);
      } catch (const TimeoutError& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_NE(e.find("mesh/2"), std::string::npos) << e;
}

}  // namespace
}  // namespace slurmddp::comm
