// The runtime's exception hierarchy. Every message follows one grammar:
//   "<component>: failed to <verb> <object>: <cause>; key=value, ..."
// naming the variable or option and its value, plus rank, host and pid where
// several processes are involved.
#pragma once

#include <stdexcept>
#include <string>

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

// Base of every error the runtime throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A value from the caller or the environment is missing, garbled or contradictory.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// An operation did not complete within its timeout; the message says how far it
// got and who is missing.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer rank died, closed its connection or reported a failure.
class PeerError : public Error {
 public:
  using Error::Error;
};

// A peer sent something that does not follow the protocol (including failed
// authentication).
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// A CUDA runtime call failed.
class CudaError : public Error {
 public:
  using Error::Error;
};

// An NCCL call failed or the communicator was aborted.
class NcclError : public Error {
 public:
  using Error::Error;
};

}  // namespace slurmddp

#pragma GCC visibility pop
