// A TCP port on loopback that nothing listens on right now (bound to port 0,
// read back, closed), for tests and benchmarks that start their own rendezvous.
// Another process may take it before the caller does; the callers' own
// timeouts and errors then say so. Throws std::runtime_error when no socket can
// be bound.
#pragma once

#include <cstdint>

namespace slurmddp::support {

uint16_t free_loopback_port();

}  // namespace slurmddp::support
