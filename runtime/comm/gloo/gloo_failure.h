// Turning a Gloo failure into an Observation for the group's failure notes
// (membership/notes.h, Note [Failure notes]): what kind of failure, and which
// rank was at the other end of the connection.
//
// Note [Gloo endpoints]: Gloo keeps the peer's address to itself and names it
// only in its messages ("Connection closed by peer [ip]:port"). So at setup
// every rank publishes its connections' local endpoints
// ("<scope>/endpoints/<rank>"), and an endpoint seen in an error maps back to
// a rank. Each connection is listed under two names: its socket's local
// address, and the listening address the mesh exchanged for it. Gloo names a
// peer by either: its accept path resets the peer's address from the socket,
// but when the peer connects before this side's connect() runs, connect() then
// overwrites it with the exchanged (by now closed) listening address.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "membership/notes.h"
#include "slurmddp/store.h"

namespace slurmddp::comm {

using membership::DiagnosisContext;
using membership::Observation;

// Classifies an exception thrown by Gloo (or by the store during an operation).
Observation classify(const std::exception_ptr& error);

// Gloo messages start with "[path/file.cc:123] "; drop that.
std::string strip_gloo_location(const std::string& message);
// The first "[host]:port" in a message, or "".
std::string find_endpoint(const std::string& message);

std::string endpoints_key(const std::string& prefix, int rank);

// One line per peer: "<peer> <endpoint> <endpoint>..." (all contexts).
std::string encode_endpoints(const std::vector<std::vector<std::string>>& per_peer);
// The endpoints listed for `peer` in a rank's published text.
std::vector<std::string> decode_endpoints(const std::string& text, int peer);

// The peer rank behind the observation's endpoint (reads the other ranks'
// endpoint keys; best effort, never throws). Note [Failure notes], step 1.
void resolve_peer(const DiagnosisContext& ctx, Observation& o);

}  // namespace slurmddp::comm
