// Why the store server closed a connection it did not want: the handshake
// (server_handshake.h) and the event loop (tcp_server.h) decide, the loop
// logs and counts (Note [Store server logging] in tcp_server.cpp), and each
// reason has its counter in TcpStoreServerStats.
#pragma once

namespace slurmddp::store {

enum class Refusal : int {
  kMalformed,
  kOversized,
  kNoToken,
  kWrongToken,
  kHandshakeTimeout,
  kStalled,
  kOverCapacity,
  kCount,
};

// The reason's name in logs ("reason=wrong-token").
inline const char* refusal_name(Refusal r) {
  switch (r) {
    case Refusal::kMalformed:
      return "malformed";
    case Refusal::kOversized:
      return "oversized";
    case Refusal::kNoToken:
      return "no-token";
    case Refusal::kWrongToken:
      return "wrong-token";
    case Refusal::kHandshakeTimeout:
      return "handshake-timeout";
    case Refusal::kStalled:
      return "stalled";
    case Refusal::kOverCapacity:
      return "over-capacity";
    case Refusal::kCount:
      break;
  }
  return "?";
}

}  // namespace slurmddp::store
