// Note [Mesh connection]
//   A Gloo context whose connections slurm-ddp makes itself, in place of
//   Gloo's connectFullMesh. Gloo's exchange stores under each rank one record
//   of every pair's full address (a sockaddr_storage and a sequence number,
//   136 bytes a peer), and every rank reads every record: O(N^2) bytes a rank
//   through rank 0's store, 281 MB a mesh at 128 ranks, and it then connects
//   its pairs one after the other, each waiting on the peer's turn (at 128
//   ranks on one machine: 20-28 s a mesh). Here:
//     - a rank's record is its pairs' addresses compactly: the one IP of its
//       device, then port (and sequence number, where Gloo uses one) for each
//       peer in rank order, a few bytes a peer (encode_mesh_record);
//     - each record is read with one request (a get that waits);
//     - the connections this rank dials are made first, those it accepts
//       after: accepting is done by Gloo's event loop, whoever's turn it is,
//       so no rank waits on another's progress through its own list.
//   The connections and the algorithms over them are Gloo's, unchanged.
//   A context connects every pair (MeshShape::kFull) or only each rank's two
//   ring neighbours (kRing): Note [Leaders' ring].
//
// Note [Leaders' ring]
//   The node leaders' context carries one thing: gloo::allreduce, whose
//   algorithm (ring, Gloo's default) uses only the pairs with rank - 1 and
//   rank + 1. A full mesh of the leaders costs each leader n - 1 connections
//   and n - 1 store reads of records n entries long: n^2 requests and n^3
//   bytes through rank 0's store (at 2,000 nodes: 4 million requests, 48 GB),
//   the wall of the design (docs/benchmarks.md). The ring costs each leader 2
//   connections and 2 reads of 2-entry records whatever n is. A collective
//   over the leaders that needs another pair fails with Gloo's "missing
//   connection" error rather than hanging.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/address.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "slurmddp/store.h"

namespace slurmddp::comm {

enum class MeshShape { kFull, kRing };

// The ranks that `rank` of `size` connects with, ascending: every other
// (kFull), or its ring neighbours (kRing: one at size 2, none at size 1).
// Symmetric: j is a peer of i exactly when i is a peer of j.
std::vector<int> mesh_peers(MeshShape shape, int rank, int size);

// A rank's record: "gloo-mesh 1 <ip> <entry>,<entry>,..." with one entry per
// peer (mesh_peers) in rank order, "<port>" or "<port>$<seq>". Every address
// must carry one IP (one device); throws InvalidArgument otherwise.
std::string encode_mesh_record(const std::vector<gloo::transport::tcp::Address>& per_peer);

// The address that rank `owner` of `size` published for its pair with rank
// `me` (a peer of owner's in `shape`). Throws ProtocolError naming the owner
// and the record when it is not one of ours for this size and shape.
gloo::transport::tcp::Address mesh_address_for(const std::string& record, int owner, int size,
                                               int me, MeshShape shape = MeshShape::kFull);

// Whether Gloo makes this side of a pair the one that dials (the larger
// address, as Gloo's Pair::connect decides): the order of connect() only.
bool mesh_dials(const gloo::transport::tcp::Address& self,
                const gloo::transport::tcp::Address& peer);

// An address as Gloo prints it in its errors, "[ip]:port" (Gloo prints the
// port in network byte order), for Note [Failure notes].
std::string mesh_endpoint(const gloo::transport::tcp::Address& a);

class MeshContext final : public gloo::Context {
 public:
  MeshContext(int rank, int size, std::chrono::milliseconds timeout,
              MeshShape shape = MeshShape::kFull);

  // Connects this rank with its peers (mesh_peers) through `store`, records
  // under `prefix` + "<rank>". Collective; throws the store's TimeoutError
  // (naming the record) when a rank never publishes one.
  void connect(Store& store, const std::string& prefix,
               const std::shared_ptr<gloo::transport::Device>& device);

  // The ranks this one is connected with, ascending.
  const std::vector<int>& peers() const { return peers_; }

  // Per rank: the address this rank listens on for it, and the one the peer
  // published for this rank (empty for this rank itself and non-peers).
  const std::vector<std::vector<std::string>>& endpoints() const { return endpoints_; }

 private:
  MeshShape shape_;
  std::vector<int> peers_;
  std::vector<std::vector<std::string>> endpoints_;
};

}  // namespace slurmddp::comm
