// The per-step secret the runtime uses to authenticate rendezvous connections.
#pragma once

#include <string>

namespace slurmddp::plugin {

inline constexpr const char* kEnvToken = "SLURMDDP_TOKEN";
inline constexpr size_t kTokenBytes = 16;  // 128 random bits

// kTokenBytes from the kernel's CSPRNG (getrandom), hex-encoded. Throws
// std::runtime_error if the kernel cannot supply them.
std::string generate_token();

}  // namespace slurmddp::plugin
