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

// A rank's record: "gloo-mesh 1 <ip> <entry>,<entry>,..." with one entry per
// other rank in rank order, "<port>" or "<port>$<seq>". Every address must
// carry one IP (one device); throws InvalidArgument otherwise.
std::string encode_mesh_record(const std::vector<gloo::transport::tcp::Address>& per_peer);

// The address that rank `owner` of `size` published for its pair with rank
// `me`. Throws ProtocolError naming the owner and the record when it is not
// one of ours for this size.
gloo::transport::tcp::Address mesh_address_for(const std::string& record, int owner, int size,
                                               int me);

// Whether Gloo makes this side of a pair the one that dials (the larger
// address, as Gloo's Pair::connect decides): the order of connect() only.
bool mesh_dials(const gloo::transport::tcp::Address& self,
                const gloo::transport::tcp::Address& peer);

// An address as Gloo prints it in its errors, "[ip]:port" (Gloo prints the
// port in network byte order), for Note [Failure notes].
std::string mesh_endpoint(const gloo::transport::tcp::Address& a);

class MeshContext final : public gloo::Context {
 public:
  MeshContext(int rank, int size, std::chrono::milliseconds timeout);

  // Connects this rank with every other of the context through `store`,
  // records under `prefix` + "<rank>". Collective; throws the store's
  // TimeoutError (naming the record) when a rank never publishes one.
  void connect(Store& store, const std::string& prefix,
               const std::shared_ptr<gloo::transport::Device>& device);

  // Per peer rank: the address this rank listens on for it, and the one the
  // peer published for this rank (empty for this rank itself).
  const std::vector<std::vector<std::string>>& endpoints() const { return endpoints_; }

 private:
  std::vector<std::vector<std::string>> endpoints_;
};

}  // namespace slurmddp::comm
