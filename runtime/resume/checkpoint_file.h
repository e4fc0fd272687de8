// The bytes of one rank's checkpoint file (Note [Checkpoint layout]). Version 2,
// written since the payload is streamed into the file (its size is known only
// at the end, so it sits in the checksum line):
//   "slurmddp-checkpoint v2\n"
//   "step=<N> rank=<r> world=<W> sampler_bytes=<S>\n"
//   <sampler state, S bytes><payload, P bytes>
//   "\npayload_bytes=<P> fnv1a64=<16 hex digits>\n"
//                     the checksum covers every byte before its digits
// Version 1, still read:
//   "slurmddp-checkpoint v1\n"
//   "step=<N> rank=<r> world=<W> sampler_bytes=<S> payload_bytes=<P>\n"
//   <sampler state, S bytes><payload, P bytes>
//   "\nfnv1a64=<16 hex digits>\n"   over every byte before this line
// Pure: encode and decode, no I/O. A reader that streams (checkpoint_reader.h)
// uses the same steps on a file's first and last bytes.
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

// Version 2. The header (first line pair) and the checksum line are also what
// the streaming writer puts around the data.
std::string encode(const RankFile& f);
std::string encode_header(int64_t step, int rank, int world, uint64_t sampler_bytes);
// "\npayload_bytes=<P> fnv1a64=": the checksum line up to its digits.
std::string checksum_line_start(uint64_t payload_bytes);
std::string checksum_digits(uint64_t sum);  // "<16 hex digits>\n"

// Version 1, as written before version 2 existed (for tests and tools).
std::string encode_v1(const RankFile& f);

// Throws Error "checkpoint <name> is damaged: <what>" (truncated, checksum
// mismatch with both values, malformed header, sizes that do not add up).
RankFile decode(const std::string& name, const std::string& bytes);

// Where the parts of a rank file lie, from its first kHeadBytes and last
// kTailBytes and its size (offsets from the start of the file).
struct Layout {
  int version = 0;
  int64_t step = 0;
  int rank = 0;
  int world = 0;
  uint64_t file_bytes = 0;
  uint64_t sampler_offset = 0;
  uint64_t sampler_bytes = 0;
  uint64_t payload_offset = 0;
  uint64_t payload_bytes = 0;
  uint64_t data_end = 0;      // where the checksum line starts
  uint64_t summed_bytes = 0;  // the checksum covers [0, summed_bytes)
  uint64_t checksum = 0;      // what the file says
};

constexpr size_t kHeadBytes = 256;  // longer than any header (magic and line)
constexpr size_t kTailBytes = 80;   // longer than any checksum line

// Step 1: the magic and the checksum line (Layout::version, summed_bytes,
// checksum and, in version 2, payload_bytes). `head` and `tail` are the file's
// first and last bytes, up to kHeadBytes and kTailBytes.
Layout read_checksum_line(const std::string& name, const std::string& head, const std::string& tail,
                          uint64_t file_bytes);
// Step 2, after the checksum when it is verified (so that a flipped byte is
// named a checksum mismatch wherever it is): the header line, and its sizes
// against the file's, without overflow.
void read_header(const std::string& name, const std::string& head, Layout* layout);
// Throws the "checksum mismatch" Error when `actual` is not what the file says.
void check_sum(const std::string& name, const Layout& layout, uint64_t actual);

constexpr uint64_t kFnvOffset = 1469598103934665603ULL;
// FNV-1a 64; pass the previous result as `h` to continue over more bytes.
uint64_t fnv1a64(const char* data, size_t n, uint64_t h = kFnvOffset);

}  // namespace slurmddp::resume
