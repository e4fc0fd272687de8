// Fuzz target: the sampler's configuration and saved state, as an application
// takes them from its command line or a checkpoint: the DistributedSampler and
// BatchSampler constructors (their validation is the parser of n,
// num_replicas, rank and the options) and SamplerState::parse.
//
// Input: byte 0 picks the part. For SamplerState::parse, the rest is the text.
// Otherwise: n, num_replicas, rank, seed, epoch (8 bytes each), option bits,
// batch size (1 byte), then reads and a saved state to load.
//
// Bounds keep a run cheap: the PyTorch-parity shuffle allocates 4n bytes, so n
// is reduced below 2^16 when that mode would shuffle; everything else is O(1)
// in n. Invariants: indices lie in [0, n) and agree between at(), get(),
// next() and the batches; shard sizes match the documented formulas; a state
// prints and parses back to itself and loads into an equal sampler; for small
// datasets the shards of all ranks cover [0, n) as documented (exactly once in
// evaluation mode).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "slurmddp/error.h"
#include "slurmddp/sampler.h"

namespace {

using slurmddp::BatchSampler;
using slurmddp::DistributedSampler;
using slurmddp::InvalidArgument;
using slurmddp::SamplerMode;
using slurmddp::SamplerOptions;
using slurmddp::SamplerState;

constexpr int64_t kMaxTorchShuffle = 1 << 16;

void check_state_text(std::string_view text) {
  SamplerState s;
  try {
    s = SamplerState::parse(std::string(text));
  } catch (const InvalidArgument&) {
    return;
  }
  FUZZ_CHECK(SamplerState::parse(s.to_string()) == s, s.to_string());
}

// Small configurations: every index of [0, n) is visited as documented.
void check_cover(int64_t n, int64_t replicas, const SamplerOptions& o) {
  std::vector<int> seen(static_cast<size_t>(n), 0);
  int64_t total = 0;
  for (int64_t r = 0; r < replicas; ++r) {
    DistributedSampler s(n, replicas, r, o);
    for (int64_t v : s) {
      FUZZ_CHECK(v >= 0 && v < n, std::to_string(v));
      ++seen[static_cast<size_t>(v)];
    }
    total += s.size();
  }
  FUZZ_CHECK(total == DistributedSampler(n, replicas, 0, o).total_size(), std::to_string(total));
  for (int64_t i = 0; i < n; ++i) {
    const int c = seen[static_cast<size_t>(i)];
    if (o.evaluation) {
      FUZZ_CHECK(c == 1, "index " + std::to_string(i) + " seen " + std::to_string(c) + " times");
    } else if (o.drop_last) {
      FUZZ_CHECK(c <= 1, "index " + std::to_string(i) + " seen " + std::to_string(c) + " times");
    } else {
      FUZZ_CHECK(c >= 1, "index " + std::to_string(i) + " not seen");
    }
  }
}

void check_sampler(slurmddp::fuzz::Input& in) {
  int64_t n = in.i64();
  const int64_t replicas = in.i64();
  const int64_t rank = in.i64();
  SamplerOptions o;
  o.seed = in.i64();
  o.epoch = in.i64();
  const uint8_t bits = in.u8();
  o.shuffle = (bits & 1) != 0;
  o.drop_last = (bits & 2) != 0;
  o.evaluation = (bits & 4) != 0;
  o.mode = static_cast<SamplerMode>((bits >> 3) % 3);
  const bool batch_drop_last = (bits & 0x40) != 0;
  const int64_t batch_size = static_cast<int64_t>(in.u8()) - 1;  // 0 is refused
  const int64_t read_at = in.i64();
  SamplerState saved;
  saved.epoch = in.i64();
  saved.position = in.i64();
  const bool same_fingerprint = in.flag();

  const bool torch = o.mode == SamplerMode::kTorch ||
                     (o.mode == SamplerMode::kAuto && n <= slurmddp::kSamplerAutoTorchMaxSize);
  if (torch && o.shuffle && n > kMaxTorchShuffle && n <= slurmddp::kSamplerTorchMaxSize) {
    n %= kMaxTorchShuffle;
  }

  int64_t expected_size = 0;
  try {
    expected_size = DistributedSampler::shard_size(n, replicas, rank, o);
  } catch (const InvalidArgument&) {
    try {
      DistributedSampler s(n, replicas, rank, o);
    } catch (const InvalidArgument&) {
      return;
    }
    FUZZ_CHECK(false, "shard_size refused a configuration the constructor accepts");
  }
  DistributedSampler s(n, replicas, rank, o);
  FUZZ_CHECK(s.size() == expected_size, std::to_string(s.size()));
  FUZZ_CHECK(s.size() >= 0 && s.total_size() >= s.size(), std::to_string(s.total_size()));
  FUZZ_CHECK(s.mode() != SamplerMode::kAuto, "the mode in effect is never auto");
  FUZZ_CHECK(s.epoch() == o.epoch, std::to_string(s.epoch()));
  const int64_t floor = n / replicas;
  const int64_t ceil = floor + (n % replicas != 0 ? 1 : 0);
  if (o.evaluation) {
    FUZZ_CHECK(s.size() == floor || s.size() == floor + 1, std::to_string(s.size()));
    FUZZ_CHECK(s.total_size() == n, std::to_string(s.total_size()));
  } else {
    FUZZ_CHECK(s.size() == (o.drop_last ? floor : ceil), std::to_string(s.size()));
  }

  // A few reads, through every path, agree.
  if (s.size() > 0) {
    const int64_t i =
        static_cast<int64_t>(static_cast<uint64_t>(read_at) % static_cast<uint64_t>(s.size()));
    const int64_t v = s.at(i);
    FUZZ_CHECK(v >= 0 && v < n, std::to_string(v));
    const int64_t count = std::min<int64_t>(s.size() - i, 64);
    std::vector<int64_t> got(static_cast<size_t>(count));
    s.get(i, count, got.data());
    for (int64_t k = 0; k < count; ++k) {
      FUZZ_CHECK(got[static_cast<size_t>(k)] == s.at(i + k), std::to_string(i + k));
    }
    s.seek(i);
    int64_t next = -1;
    FUZZ_CHECK(s.next(&next) && next == v, std::to_string(next));
    FUZZ_CHECK(s.position() == i + 1, std::to_string(s.position()));
  }
  try {
    s.at(s.size());
    FUZZ_CHECK(false, "at(size()) did not throw");
  } catch (const InvalidArgument&) {
  }

  // States: print, parse, load.
  const SamplerState st = s.state();
  FUZZ_CHECK(SamplerState::parse(st.to_string()) == st, st.to_string());
  DistributedSampler copy(n, replicas, rank, o);
  copy.load_state(st);
  FUZZ_CHECK(copy.state() == st, copy.state().to_string());
  if (same_fingerprint) saved.fingerprint = s.fingerprint();
  const bool torch_shuffle = s.mode() == SamplerMode::kTorch && o.shuffle && n > 1;
  if (!torch_shuffle || saved.epoch == s.epoch() || n <= 4096) {  // a reshuffle costs O(n)
    try {
      copy.load_state(saved);
      FUZZ_CHECK(
          saved.fingerprint == s.fingerprint() && saved.position >= 0 && saved.position <= s.size(),
          saved.to_string());
      FUZZ_CHECK(copy.state() == saved, copy.state().to_string());
    } catch (const InvalidArgument&) {
      FUZZ_CHECK(copy.state() == st, "a refused state changed the sampler");
    }
  }

  // Batches over the shard.
  try {
    BatchSampler b(s, batch_size, batch_drop_last);
    FUZZ_CHECK(batch_size >= 1, std::to_string(batch_size));
    const int64_t batches = b.size();
    FUZZ_CHECK(
        batches == s.size() / batch_size + (!batch_drop_last && s.size() % batch_size != 0 ? 1 : 0),
        std::to_string(batches));
    if (batches > 0) {
      const int64_t last = batches - 1;
      std::vector<int64_t> batch = b.batch(last);
      FUZZ_CHECK(!batch.empty() && static_cast<int64_t>(batch.size()) <= batch_size,
                 std::to_string(batch.size()));
      FUZZ_CHECK(batch.front() == s.at(last * batch_size), std::to_string(batch.front()));
    }
  } catch (const InvalidArgument&) {
    FUZZ_CHECK(batch_size < 1, std::to_string(batch_size));
  }

  if (n <= 64 && replicas <= 8 && (!torch || n <= kMaxTorchShuffle)) check_cover(n, replicas, o);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  slurmddp::fuzz::Input in(data, size);
  if ((in.u8() & 1) != 0) {
    check_state_text(in.rest());
  } else {
    check_sampler(in);
  }
  return 0;
}
