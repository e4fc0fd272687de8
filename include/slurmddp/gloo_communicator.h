// The CPU communicator: collectives on host memory over Gloo's TCP transport
// (Debian's libgloo, the library PyTorch's "gloo" backend uses), with Gloo's
// rendezvous running through a slurmddp::Store.
//
// Example, given int rank, int world_size, std::shared_ptr<slurmddp::Store> store,
// float* grads, size_t n:
//   slurmddp::GlooOptions o;
//   o.rank = rank; o.size = world_size; o.store = store;
//   o.timeout = std::chrono::seconds(30);
//   auto comm = slurmddp::make_gloo_communicator(o);
//   comm->allreduce(grads, n, slurmddp::DataType::kFloat32, slurmddp::ReduceOp::kAvg)
//       ->wait(comm->timeout());
//
// Semantics beyond communicator.h:
//  - Operations run on one background thread per communicator, in issue order.
//    Calls return at once; buffers must stay valid and untouched until the
//    Work completed. After Work::wait throws TimeoutError the operation may
//    still touch its buffers until Gloo's own timeout (`timeout`) ends it: keep
//    them alive until the communicator is destroyed or `timeout` has passed.
//  - Failures: a lost peer gives PeerError naming the operation and the lost
//    rank (when it can be determined); a peer that stops answering gives
//    TimeoutError naming the ranks that did not report the failure. Either
//    breaks the communicator: that Work and every later one rethrow the same
//    error. Nothing blocks longer than `timeout` plus a short diagnosis window
//    (a quarter of the timeout, at most 2 s) in which the ranks compare notes
//    through the store.
//  - float16/bfloat16 are reduced in float32 and rounded once (see
//    runtime/comm/host/reduce.h, Note [16-bit reductions]); avg is sum then divide
//    (integers truncate toward zero); integer sums wrap around.
//  - allgather: send and recv must not overlap, except send == recv + rank * count
//    (in place). reduce_scatter: recv must not overlap send.
//  - The destructor waits for the operation in flight (at most `timeout`),
//    fails the queued ones and closes the connections.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "slurmddp/communicator.h"
#include "slurmddp/store.h"
#include "slurmddp/timeout.h"

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

struct GlooOptions {
  // Required: this process's rank in [0, size) and the number of ranks.
  std::optional<int> rank;
  std::optional<int> size;
  // Rendezvous: every rank of the group must use the same store and prefix.
  std::shared_ptr<Store> store;
  // Keys live under "<prefix>/..."; use one prefix per communicator created on
  // a store (two groups on one store need two prefixes).
  std::string prefix = "slurmddp/gloo";

  // The local address Gloo binds and advertises to its peers: at most one of
  // `ifname` (a network interface, e.g. "ib0") and `hostname` (a name or
  // address of this host). Both empty: SLURMDDP_IFNAME, else GLOO_SOCKET_IFNAME
  // (first entry of a comma-separated list), else this host's name, else
  // 127.0.0.1 when the host name does not resolve.
  std::string ifname;
  std::string hostname;

  // Bounds the rendezvous, every transfer inside Gloo and the blocking helpers.
  std::chrono::milliseconds timeout{kDefaultTimeout};

  // Allreduce algorithm by message size (bytes; for float16 and bfloat16 the
  // float32 size):
  //   bytes <= small_max_bytes: halving-doubling (two ranks: one exchange) on
  //                             blocking sockets, through staging buffers
  //   larger:                   Gloo's segmented ring, in place (torch's path)
  // Blocking exchanges must fit the sockets' send buffers, so the threshold in
  // force is the smallest of this value, net.core.wmem_max of every rank, and
  // 16 MiB / (size - 1) (setup sends that much to each peer once, to size the
  // send buffers); every rank computes the same. Broadcast and allgather use
  // the same threshold for their blocking-socket variants.
  size_t small_max_bytes = size_t{1} << 20;

  // A group with one rank a node (or without the shared-memory tier) of up to
  // this many ranks connects a full mesh (every pair: log-step algorithms for
  // small messages, Gloo's ring for large ones); a larger one connects a ring
  // of all its ranks, as node leaders do (2 connections a rank, a few store
  // requests: a full mesh costs N - 1 connections a rank and N^2 requests on
  // the store's host), at the price of 2(N - 1) steps for a small message.
  int flat_mesh_max = 512;
};

// Connects to every other rank through `options.store` and returns the
// communicator. Blocks until all ranks joined. Throws InvalidArgument for bad
// options or a world size that differs between ranks (naming both values),
// TimeoutError "k/n ranks joined; missing: [...]" when ranks do not arrive
// within the timeout, PeerError when connecting to a peer fails.
std::unique_ptr<Communicator> make_gloo_communicator(const GlooOptions& options);

}  // namespace slurmddp

#pragma GCC visibility pop
