// The bytes of one rank's checkpoint file (Note [Checkpoint layout]):
//   "slurmddp-checkpoint v1\n"
//   "step=<N> rank=<r> world=<W> sampler_bytes=<S> payload_bytes=<P>\n"
//   <sampler state, S bytes><payload, P bytes>
//   "\nfnv1a64=<16 hex digits>\n"   over every byte before this line
// Pure: encode and decode, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace slurmddp::resume {

struct RankFile {
  int64_t step = 0;
  int rank = 0;
  int world = 0;
  std::string sampler;
  std::vector<uint8_t> payload;
};

std::string encode(const RankFile& f);

// Throws Error "checkpoint <name> is damaged: <what>" (truncated, checksum
// mismatch with both values, malformed header).
RankFile decode(const std::string& name, const std::string& bytes);

uint64_t fnv1a64(const char* data, size_t n);

}  // namespace slurmddp::resume
