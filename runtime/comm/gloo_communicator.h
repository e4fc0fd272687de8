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
// The classic algorithm objects (AllreduceHalvingDoubling & co.) bind buffers
// once and exchange far fewer control messages; on connections switched to
// Gloo's "sync" mode (blocking socket reads in the calling thread, no event
// loop at all) they are faster still. Blocking writes can deadlock when two
// ranks both write more than the socket buffers hold, so sync mode is used only
// up to 256 KiB. For large messages the newer ring (segmented, pipelined,
// in place on the caller's buffer, no staging copies) is the fastest and is
// exactly what torch runs. Hence three tiers for allreduce:
//   bytes <= small_max_bytes  (256 KiB): AllreduceHalvingDoubling on sync-mode
//                                        connections (two ranks: AllreduceRing,
//                                        a single exchange of the buffer)
//   bytes <= medium_max_bytes (4 MiB):   AllreduceHalvingDoubling, event loop
//   larger:                              gloo::allreduce (ring), in place
// The classic objects need staging buffers (one copy in, one out), cheap at
// these sizes; see Note [Deterministic cache] for how they are kept and
// Note [Priming send buffers] for what sync mode needs. The two kinds of
// connection are two Gloo contexts (two full meshes) on one device.
// Broadcast and allgather use the sync-mode objects up to small_max_bytes and
// Gloo's newer API above; barrier is a one-element allreduce; reduce-scatter is
// an allreduce of the whole buffer keeping this rank's block (twice the bytes
// of a dedicated algorithm, which Gloo's newer API lacks).
//
// Known limit of the middle tier: a classic object created after a peer died
// while this rank was idle waits out the timeout before Gloo reports the
// error (Gloo only tells buffers that existed when the connection broke). The
// other tiers fail at once, and so do middle-tier sizes already in use
// (cached objects), which is the steady state of a training loop.
#pragma once

#include <cstddef>

namespace slurmddp::comm {

enum class AllreduceTier { kSmallSync, kMediumEventLoop, kLargeRing };

AllreduceTier choose_allreduce_tier(size_t bytes, size_t small_max_bytes,
                                    size_t medium_max_bytes);

const char* to_string(AllreduceTier tier);

}  // namespace slurmddp::comm
