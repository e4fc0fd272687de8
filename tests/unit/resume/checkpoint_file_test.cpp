// The rank file's bytes (Note [Checkpoint layout]): versions 2 and 1, every
// damage named, and sizes in a header that would wrap around.
#include "resume/checkpoint_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <limits>
#include <string>

#include "slurmddp/error.h"

namespace slurmddp {
namespace {

using ::testing::HasSubstr;

resume::RankFile sample() {
  resume::RankFile f;
  f.step = 1234;
  f.rank = 2;
  f.world = 4;
  f.sampler = "slurmddp-sampler v1 epoch=3 position=120 fingerprint=00000000000000ab";
  f.payload = {0, 1, 2, 255, '\n', 'x'};
  return f;
}

std::string damage_of(const std::string& bytes) {
  try {
    resume::decode("/c/rank-2.ckpt", bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

// A version 1 file around `body` (magic, header and data) with a good checksum.
std::string v1_with_checksum(const std::string& body) {
  return body + "\nfnv1a64=" + hex16(resume::fnv1a64(body.data(), body.size())) + "\n";
}

// A version 2 file around `body` announcing `payload_bytes`, with a good checksum.
std::string v2_with_checksum(const std::string& body, const std::string& payload_bytes) {
  std::string out = body + "\npayload_bytes=" + payload_bytes + " fnv1a64=";
  return out + hex16(resume::fnv1a64(out.data(), out.size())) + "\n";
}

TEST(CheckpointFile, RoundTripsExactly) {
  std::string bytes = resume::encode(sample());
  auto f = resume::decode("x", bytes);
  EXPECT_EQ(f.step, 1234);
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.world, 4);
  EXPECT_EQ(f.sampler, sample().sampler);
  EXPECT_EQ(f.payload, sample().payload);
  EXPECT_EQ(bytes.rfind("slurmddp-checkpoint v2\nstep=1234 rank=2 world=4 sampler_bytes=69\n", 0),
            0u);
  EXPECT_EQ(bytes.substr(bytes.size() - 42, 25), "\npayload_bytes=6 fnv1a64=");
  EXPECT_EQ(resume::fnv1a64("", 0), 1469598103934665603ULL);
  // continuing a checksum over parts gives the checksum of the whole
  EXPECT_EQ(resume::fnv1a64("cd", 2, resume::fnv1a64("ab", 2)), resume::fnv1a64("abcd", 4));
}

TEST(CheckpointFile, VersionOneStillDecodes) {
  std::string bytes = resume::encode_v1(sample());
  EXPECT_EQ(bytes.rfind("slurmddp-checkpoint v1\nstep=1234 rank=2 world=4 sampler_bytes=69 "
                        "payload_bytes=6\n",
                        0),
            0u);
  auto f = resume::decode("x", bytes);
  EXPECT_EQ(f.step, 1234);
  EXPECT_EQ(f.sampler, sample().sampler);
  EXPECT_EQ(f.payload, sample().payload);
  resume::RankFile empty;
  empty.world = 1;
  EXPECT_TRUE(resume::decode("x", resume::encode_v1(empty)).payload.empty());
  EXPECT_TRUE(resume::decode("x", resume::encode(empty)).payload.empty());
}

TEST(CheckpointFile, EveryDamageIsNamed) {
  for (const std::string& good : {resume::encode(sample()), resume::encode_v1(sample())}) {
    // every single flipped byte is caught
    for (size_t i = 0; i < good.size(); ++i) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ 0x20);
      EXPECT_THAT(damage_of(bad), HasSubstr("checkpoint /c/rank-2.ckpt is damaged")) << i;
    }
    // and every truncation
    for (size_t n = 0; n < good.size(); ++n) {
      EXPECT_THAT(damage_of(good.substr(0, n)), HasSubstr("is damaged")) << n;
    }
    std::string flipped = good;
    flipped[60] = static_cast<char>(flipped[60] ^ 1);  // a digit of the header's sizes
    EXPECT_THAT(damage_of(flipped), HasSubstr("checksum mismatch: the file says fnv1a64="));
    EXPECT_THAT(damage_of(good.substr(0, good.size() - 3)), HasSubstr("truncated"));
    EXPECT_THAT(damage_of(good.substr(0, 40)), HasSubstr("truncated"));
    EXPECT_THAT(damage_of(""), HasSubstr("truncated at 0 bytes"));
  }
}

// A header whose sizes add up to the file's only modulo 2^64 (sampler_bytes
// = 2^64 - k, payload_bytes k more than the data) once made the decoder copy
// k bytes from before its buffer. With a good checksum, as anyone can write.
TEST(CheckpointFile, SizesThatWrapAroundAreDamageNotARead) {
  const std::string data(100, 'd');
  for (uint64_t k : {uint64_t{1}, uint64_t{7}, uint64_t{4096}}) {
    const std::string sampler = std::to_string(std::numeric_limits<uint64_t>::max() - k + 1);
    const std::string payload = std::to_string(data.size() + k);
    std::string v1 =
        v1_with_checksum("slurmddp-checkpoint v1\nstep=1 rank=0 world=1 sampler_bytes=" + sampler +
                         " payload_bytes=" + payload + "\n" + data);
    EXPECT_THAT(damage_of(v1), HasSubstr("is damaged: it announces sampler_bytes=" + sampler +
                                         " and payload_bytes=" + payload + ", and holds 100 bytes"))
        << k;
    std::string v2 = v2_with_checksum(
        "slurmddp-checkpoint v2\nstep=1 rank=0 world=1 sampler_bytes=" + sampler + "\n" + data,
        payload);
    EXPECT_THAT(damage_of(v2), HasSubstr("is damaged: it announces sampler_bytes=" + sampler)) << k;
  }
  // a payload larger than what follows the sampler, sizes that overflow a
  // 64-bit number, and signs are refused too
  EXPECT_THAT(damage_of(v2_with_checksum(
                  "slurmddp-checkpoint v2\nstep=1 rank=0 world=1 sampler_bytes=10\n" + data, "91")),
              HasSubstr("and holds 100 bytes of data"));
  EXPECT_THAT(damage_of(v2_with_checksum(
                  "slurmddp-checkpoint v2\nstep=1 rank=0 world=1 sampler_bytes=10\n" + data,
                  "18446744073709551616")),
              HasSubstr("missing its checksum line"));
  EXPECT_THAT(
      damage_of(v1_with_checksum("slurmddp-checkpoint v1\nstep=1 rank=0 world=1 sampler_bytes=-5 "
                                 "payload_bytes=105\n" +
                                 data)),
      HasSubstr("malformed header 'step=1 rank=0 world=1 sampler_bytes=-5 payload_bytes=105'"));
  EXPECT_THAT(
      damage_of(v2_with_checksum(
          "slurmddp-checkpoint v2\nstep=1 rank=-1 world=1 sampler_bytes=0\n" + data, "100")),
      HasSubstr("malformed header"));
  EXPECT_THAT(damage_of(v2_with_checksum(
                  "slurmddp-checkpoint v2\nstep=1 rank=0 world=0 sampler_bytes=0\n" + data, "100")),
              HasSubstr("malformed header"));
  // the well-formed neighbour decodes
  auto f = resume::decode(
      "x", v2_with_checksum(
               "slurmddp-checkpoint v2\nstep=1 rank=0 world=1 sampler_bytes=10\n" + data, "90"));
  EXPECT_EQ(f.sampler, std::string(10, 'd'));
  EXPECT_EQ(f.payload.size(), 90u);
}

// The checksum line is found from the end even when the payload holds its text.
TEST(CheckpointFile, APayloadHoldingTheChecksumLineTextDecodes) {
  resume::RankFile f = sample();
  const std::string text = "\npayload_bytes=3 fnv1a64=0123456789abcdef\n";
  f.payload.assign(text.begin(), text.end());
  EXPECT_EQ(resume::decode("x", resume::encode(f)).payload, f.payload);
}

}  // namespace
}  // namespace slurmddp
