// Private parts of the Gloo communicator that tests look at directly.
//
// Note [Choosing Gloo's entry point]: Debian's libgloo offers two APIs. The
// newer one (gloo::allreduce(AllreduceOptions), also broadcast/allgather)
// works on "unbound" buffers: every transfer is negotiated (the receiver
// announces a posted receive, the sender's event-loop thread then writes), and
// the application thread writes those small control messages while holding the
// connection's mutex. Gloo's event-loop thread, woken by incoming data, only
// try-locks that mutex and, failing, returns to a level-triggered epoll that
// wakes it again at once: it spins, burning a core, for as long as the lock is
// held. Measured here (2 ranks, 64 KiB, perf probes on libgloo): ~200,000
// failed handleEvents calls for 300 allreduces with the new API vs ~11,000 with
// the classic AllreduceRing, with CPU time per op 1.7 ms vs 0.25 ms. On a
// two-core machine the spinning thread starves the peer's threads, so latency
// becomes scheduler-bound (0.3 to 8 ms per 64 KiB allreduce, median ~3 ms; the
// anchor note saw 24 ms on a busier machine). torch pays the same price.
//
// The classic algorithm objects (AllreduceHalvingDoubling & co.) bind buffers
// once and exchange far fewer control messages; on connections switched to
// Gloo's "sync" mode (blocking socket reads and writes in the calling thread,
// no event loop at all) they avoid the spinning entirely. Blocking writes need
// the whole message to fit the socket's send buffer (else two ranks writing to
// each other both block, and on loopback a message's tail waits for a 40 ms
// delayed ACK): Note [Priming send buffers]. For large messages the newer ring
// (segmented, pipelined, in place on the caller's buffer, no staging copies)
// is what torch runs, and it stays: on the event loop, classic objects hit the
// same send-buffer trap without a way to prime it (the ring's sockets are left
// to the kernel's autotuning), and a peer lost while idle would only be noticed
// by their fresh buffers after the timeout. Hence two tiers for allreduce:
//   bytes <= small_max (1 MiB, see GlooOptions): AllreduceHalvingDoubling on
//       sync-mode connections (two ranks: AllreduceRing, a single exchange)
//   larger: gloo::allreduce (ring), in place
// The classic objects need staging buffers (one copy in, one out), cheap at
// these sizes; see Note [Deterministic cache] for how they are kept. The two
// kinds of connection are two Gloo contexts (two full meshes) on one device,
// the second connected only when first needed (Note [Lazy meshes]).
// Broadcast and allgather use the sync-mode objects up to the same threshold
// and Gloo's newer API above; barrier is a one-element allreduce;
// reduce-scatter is an allreduce of the whole buffer keeping this rank's block
// (twice the bytes of a dedicated algorithm, which Gloo's newer API lacks).
//
// Note [Shared-memory tier]
//   Ranks on one node do not need TCP to reduce: when a node holds several
//   ranks of the communicator, they map one shared segment (comm/host/shm_node.h) and
//   an allreduce runs in tiers: the node's ranks reduce through shared memory
//   (every rank ends with the result when the whole group is one node);
//   across nodes, the node's first rank (its leader) allreduces with the
//   other nodes' leaders over Gloo (the same tiers as above, on a mesh of the
//   leaders only), then broadcasts the result through shared memory. Uneven
//   layouts (4, 4, 3 ranks) and nodes with one rank work alike. Set up once,
//   collectively: each rank enters itself in its node's roster in the store
//   (node = SLURMD_NODENAME, else the host name), and the tier is used only
//   if every node could set it up and SLURMDDP_SHM is not "0" on any rank
//   (agreed through the store, so that every rank takes the same path). A
//   group with one rank per node has nothing to gain and stays flat.
//   Barrier and reduce-scatter, being allreduces, take the tiers.
//
// Note [Flat mesh only when flat]
//   A tiered group has no flat mesh at all: its ranks' only connections are
//   the node leaders' ring (2 a leader, none for the others: Note [Leaders'
//   ring] in gloo_mesh.h), which is what lets 1,024 ranks on 64 nodes start (a flat mesh there is
//   523,776 connections; with Debian 12's Gloo, one listening port per pair: 16 ranks a node take
//   ~24,500 of the node's 28,232 default local ports). Broadcast and allgather then run as an
//   integer sum over the tiers: each rank places its bytes (the root's buffer; a rank's block at
//   its offset) in a zeroed buffer, the others contribute zeros, and a sum of one value with zeros
//   is that value, bit for bit, whatever the data type. It moves twice a broadcast's bytes and N
//   times an allgather's input (the size of its output), in 16 MiB pieces; the tiers make up for it
//   within a node. Groups with one rank per node, or with SLURMDDP_SHM=0, keep the flat meshes
//   (Note [Lazy meshes]) up to GlooOptions::flat_mesh_max ranks (512): there a mesh is N^2
//   requests on the store's host (262,144; 4 M at 2,000 ranks) and N - 1 connections and ports a
//   rank, so a larger flat group takes the tiered path with every rank a node of its own: a ring
//   of all ranks, 2 connections and O(1) requests a rank, every collective an allreduce over it
//   (2(N - 1) steps for a small one, against log N on the mesh).
#pragma once

#include <cstddef>

namespace slurmddp::comm {

enum class AllreduceTier { kSmallSync, kLargeRing };

AllreduceTier choose_allreduce_tier(size_t bytes, size_t small_max_bytes);

const char* to_string(AllreduceTier tier);

}  // namespace slurmddp::comm
