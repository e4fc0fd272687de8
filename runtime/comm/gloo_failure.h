// Turning a Gloo failure into an error that names the operation and the rank
// at fault.
//
// Note [Failure notes]: Gloo reports a dead peer as "Connection closed by peer
// [ip]:port" and a stopped one as a timeout, from the point of view of one
// connection. Which *rank* is at fault takes the whole group's view, so the
// ranks compare notes through the store:
//   1. At setup every rank publishes its connections' local endpoints
//      ("<prefix>/endpoints/<rank>"), so an endpoint seen in an error maps
//      back to a rank (Gloo keeps the peer's address to itself). Each
//      connection is listed under two names: its socket's local address, and
//      the listening address the mesh exchanged for it. Gloo names a peer by
//      either: its accept path resets the peer's address from the socket, but
//      when the peer connects before this side's connect() runs, connect()
//      then overwrites it with the exchanged (by now closed) listening address.
//   2. On a failure a rank writes "<prefix>/failed/<rank>" (what it saw, and
//      the peer when known), THEN closes all its connections, so every peer
//      still blocked fails at once instead of waiting for its own timeout.
//   3. It then waits a short grace period for the notes of all other ranks.
//      Ranks without a note are the suspects: dead or stopped processes cannot
//      write one. A suspect that some rank saw close a connection was lost
//      (PeerError); otherwise the suspects stopped answering (TimeoutError).
//      With no suspect, a rank that aborted on purpose (a Work::wait timeout)
//      is named.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "slurmddp/store.h"

namespace slurmddp::comm {

// What one rank saw go wrong.
struct Observation {
  enum class Kind { kTimeout, kPeer, kAborted, kOther };
  Kind kind = Kind::kOther;
  int peer = -1;            // rank at the other end, when known
  std::string endpoint;     // "[ip]:port" of the other end from Gloo's message, if any
  std::string detail;       // the cause as text (Gloo's message without its source location)
};

const char* to_string(Observation::Kind kind);

// Classifies an exception thrown by Gloo (or by the store during an operation).
Observation classify(const std::exception_ptr& error);

// Gloo messages start with "[path/file.cc:123] "; drop that.
std::string strip_gloo_location(const std::string& message);
// The first "[host]:port" in a message, or "".
std::string find_endpoint(const std::string& message);

// Note encoding (kept in one place so writer and reader agree).
std::string encode_note(const Observation& o, const std::string& op);
std::optional<Observation> decode_note(const std::string& text, std::string* op = nullptr);

struct DiagnosisContext {
  std::shared_ptr<Store> store;
  std::string prefix;  // without trailing '/'
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds grace{0};
};

std::string endpoints_key(const std::string& prefix, int rank);
std::string failure_key(const std::string& prefix, int rank);

// One line per peer: "<peer> <endpoint> <endpoint>..." (all contexts).
std::string encode_endpoints(const std::vector<std::vector<std::string>>& per_peer);
// The endpoints listed for `peer` in a rank's published text.
std::vector<std::string> decode_endpoints(const std::string& text, int peer);

// The listening addresses (as Gloo prints them) that rank `rank` of `size`
// handed to Gloo's full-mesh exchange, per peer (index = peer rank; empty for
// `rank` itself). `record` is what the mesh stored under "<rank>": one TCP
// address per peer, in rank order. Empty when the record has another shape
// (another Gloo version): best effort, like the rest of the diagnosis.
std::vector<std::vector<std::string>> exchanged_endpoints(const std::vector<char>& record,
                                                          int rank, int size);

// Step 1 of the note protocol: the peer rank behind the observation's endpoint
// (reads the other ranks' endpoint keys; best effort, never throws).
void resolve_peer(const DiagnosisContext& ctx, Observation& o);
// Step 2: write this rank's note (best effort, never throws).
void write_note(const DiagnosisContext& ctx, const Observation& o, const std::string& op);
// Step 3: gather the other notes (up to ctx.grace) and build the error to
// report for operation `op` (e.g. "allreduce of 1024 float32 (sum), op #3").
std::exception_ptr conclude(const DiagnosisContext& ctx, const Observation& own,
                            const std::string& op);

// The decision of step 3 as a pure function of the notes (index = rank; empty
// optional = no note). Exposed for tests.
std::exception_ptr decide(const DiagnosisContext& ctx, const Observation& own,
                          const std::string& op,
                          const std::vector<std::optional<Observation>>& notes,
                          const std::string& store_problem);

}  // namespace slurmddp::comm
