// Fuzz target: checkpoint rank files (Note [Checkpoint layout]), which anyone
// who can write the checkpoint directory controls, through resume::decode
// (the whole file) and the streaming reader's steps (read_checksum_line,
// check_sum, read_header on the file's first and last bytes).
//
// Input: the first byte picks how the rest becomes a file:
//   0  the rest as it is (damage, truncation, garbage);
//   1  the rest followed by a correct version-1 checksum line, so that headers
//      with any sizes (2^64 - k, ...) reach the size checks;
//   2  8 bytes of payload size P, then the body, followed by a correct
//      version-2 checksum line naming P.
//
// Invariants: decode either throws slurmddp::Error or returns parts that
// encode back to the same bytes; the streaming steps accept exactly what
// decode accepts, and then every offset lies inside the file and their parts
// are decode's.
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "resume/checkpoint_file.h"
#include "slurmddp/error.h"

namespace {

namespace resume = slurmddp::resume;

std::string hex16(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = digits[v & 0xf];
  return s;
}

std::string make_file(const uint8_t* data, size_t size) {
  if (size == 0) return {};
  const uint8_t mode = data[0] % 3;
  std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode == 0) return rest;
  if (mode == 1) {
    const uint64_t sum = resume::fnv1a64(rest.data(), rest.size(), resume::kFnvOffset);
    return rest + "\nfnv1a64=" + hex16(sum) + "\n";
  }
  uint64_t payload = 0;
  if (rest.size() >= 8) {
    std::memcpy(&payload, rest.data(), 8);
    rest.erase(0, 8);
  }
  std::string file = rest + resume::checksum_line_start(payload);
  const uint64_t sum = resume::fnv1a64(file.data(), file.size(), resume::kFnvOffset);
  return file + resume::checksum_digits(sum);
}

// The streaming reader's view: nullopt-like `ok` false when it refuses.
bool stream_read(const std::string& file, resume::Layout* layout) {
  const std::string head = file.substr(0, resume::kHeadBytes);
  const std::string tail =
      file.size() > resume::kTailBytes ? file.substr(file.size() - resume::kTailBytes) : file;
  try {
    *layout = resume::read_checksum_line("fuzz", head, tail, file.size());
    FUZZ_CHECK(layout->summed_bytes <= file.size(), "summed past the end");
    resume::check_sum("fuzz", *layout,
                      resume::fnv1a64(file.data(), layout->summed_bytes, resume::kFnvOffset));
    resume::read_header("fuzz", head, layout);
  } catch (const slurmddp::Error&) {
    return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file = make_file(data, size);
  resume::RankFile f;
  bool decoded = true;
  try {
    f = resume::decode("fuzz", file);
  } catch (const slurmddp::Error&) {
    decoded = false;
  }
  resume::Layout l;
  const bool streamed = stream_read(file, &l);
  FUZZ_CHECK(decoded == streamed, std::string("decode ") + (decoded ? "accepts" : "refuses") +
                                      ", the streaming reader " +
                                      (streamed ? "accepts" : "refuses"));
  if (!decoded) return 0;
  const std::string again =
      file.rfind("slurmddp-checkpoint v1\n", 0) == 0 ? resume::encode_v1(f) : resume::encode(f);
  FUZZ_CHECK(again == file, "an accepted file does not encode back to itself");
  FUZZ_CHECK(l.sampler_offset + l.sampler_bytes <= l.payload_offset &&
                 l.payload_offset + l.payload_bytes <= l.data_end && l.data_end <= file.size(),
             "offsets outside the file");
  FUZZ_CHECK(file.compare(l.sampler_offset, l.sampler_bytes, f.sampler) == 0,
             "the streaming reader's sampler is not decode's");
  FUZZ_CHECK(l.payload_bytes == f.payload.size() &&
                 (f.payload.empty() || std::memcmp(file.data() + l.payload_offset, f.payload.data(),
                                                   f.payload.size()) == 0),
             "the streaming reader's payload is not decode's");
  FUZZ_CHECK(l.step == f.step && l.rank == f.rank && l.world == f.world,
             "the streaming reader's header is not decode's");
  return 0;
}
