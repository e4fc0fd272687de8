// Failure notes: how the ranks of a group agree on who is at fault when an
// operation fails, whatever the backend.
//
// Note [Failure notes]: a backend reports a dead peer as a closed connection
// and a stopped one as a timeout, from the point of view of one connection.
// Which *rank* is at fault takes the whole group's view, so the ranks compare
// notes through the store, under the group's keys:
//   1. (The backend's part) The rank at the other end of a failed connection
//      is named when the backend can tell (Gloo: comm/gloo/gloo_failure.h maps the
//      endpoint in its message back to the rank that published it).
//   2. On a failure a rank writes "<scope>/failed/<rank>" (what it saw, and
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

namespace slurmddp::membership {

// What one rank saw go wrong.
struct Observation {
  enum class Kind { kTimeout, kPeer, kAborted, kOther };
  Kind kind = Kind::kOther;
  int peer = -1;         // rank at the other end, when known
  std::string endpoint;  // "[ip]:port" of the other end from the backend's message, if any
  std::string detail;    // the cause as text (one line)
};

const char* to_string(Observation::Kind kind);

// Note encoding (kept in one place so writer and reader agree).
std::string encode_note(const Observation& o, const std::string& op);
std::optional<Observation> decode_note(const std::string& text, std::string* op = nullptr);

struct DiagnosisContext {
  std::shared_ptr<Store> store;
  std::string prefix;  // the group's scope (Membership::scope()), without trailing '/'
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds grace{0};
  std::string component = "comm";  // message head: "<component>: failed to <op>: ..."
};

std::string failure_key(const std::string& prefix, int rank);

// Step 3's wait for the others' notes, for an operation timeout `timeout`: a
// quarter of it, between 100 ms and 1 s. A stopped peer never writes one, so
// every survivor waits it out: it is most of the margin by which a hung peer's
// group ends after the timeout (with Note [Lingering host], at most ~1.5 s).
std::chrono::milliseconds diagnosis_grace(std::chrono::milliseconds timeout);

// Step 2: write this rank's note (best effort, never throws).
void write_note(const DiagnosisContext& ctx, const Observation& o, const std::string& op);
// Step 3: gather the other notes (up to ctx.grace) and build the error to
// report for operation `op` (e.g. "allreduce of 1024 float32 (sum), op #3").
std::exception_ptr conclude(const DiagnosisContext& ctx, const Observation& own,
                            const std::string& op);

// Steps 2 and 3 for a failure this rank saw as `plain` (its what() becomes the
// note's detail): the error to report. Without a store or alone, `plain`.
std::exception_ptr note_and_conclude(const DiagnosisContext& ctx, Observation::Kind kind,
                                     const std::string& op, const std::exception_ptr& plain);

// The decision of step 3 as a pure function of the notes (index = rank; empty
// optional = no note). Exposed for tests.
std::exception_ptr decide(const DiagnosisContext& ctx, const Observation& own,
                          const std::string& op,
                          const std::vector<std::optional<Observation>>& notes,
                          const std::string& store_problem);

}  // namespace slurmddp::membership
