#include "slurmddp/sampler.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

#include "sampler/big_buffer.h"
#include "sampler/feistel.h"
#include "sampler/torch_randperm.h"
#include "slurmddp/error.h"

namespace slurmddp {

using sampler::BigBuffer;
using sampler::FeistelPermutation;
using sampler::mix64;

// The permutation of one epoch, immutable once built and shared by copies.
struct DistributedSampler::Epoch {
  enum class Kind { kIdentity, kTable, kFeistel };
  Kind kind = Kind::kIdentity;
  BigBuffer<uint32_t> table;  // kTable: this rank's shard, in order
  std::optional<FeistelPermutation> feistel;
};

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// Gives kScalable keys their own stream, unrelated to any other use of mix64.
constexpr uint64_t kScalableKeyTag = 0x736c75726d646470ull;  // "slurmddp"
constexpr uint64_t kFingerprintVersion = 1;
static_assert(sampler::kTorchRandpermSplit == kTorchRandpermSplit, "one split size");
constexpr const char* kStateMagic = "slurmddp-sampler";
constexpr const char* kStateVersion = "v1";

[[noreturn]] void bad_config(const std::string& cause, const std::string& keys) {
  throw InvalidArgument("sampler: failed to create DistributedSampler: " + cause + "; " + keys);
}

struct Shape {
  int64_t size;   // this rank's shard
  int64_t total;  // all ranks together
};

// Validates a configuration and computes its shard sizes (no allocation).
Shape validate_and_shape(int64_t n, int64_t num_replicas, int64_t rank,
                         const SamplerOptions& options) {
  if (n < 0) {
    bad_config("dataset size must be >= 0", "n=" + std::to_string(n));
  }
  if (num_replicas <= 0) {
    bad_config("num_replicas must be >= 1", "num_replicas=" + std::to_string(num_replicas));
  }
  if (rank < 0 || rank >= num_replicas) {
    bad_config("rank must be in [0, num_replicas)",
               "rank=" + std::to_string(rank) + ", num_replicas=" + std::to_string(num_replicas));
  }
  if (options.drop_last && options.evaluation) {
    bad_config("drop_last and evaluation exclude each other (evaluation visits every sample)",
               "drop_last=true, evaluation=true");
  }
  if (options.mode == SamplerMode::kTorch && options.shuffle && n > kSamplerTorchMaxSize) {
    bad_config("mode torch holds 32-bit indices; use mode scalable for larger datasets",
               "n=" + std::to_string(n) + ", max=" + std::to_string(kSamplerTorchMaxSize));
  }
  const int64_t floor_per_rank = n / num_replicas;
  const int64_t rest = n % num_replicas;
  if (options.evaluation) {
    return {floor_per_rank + (rank < rest ? 1 : 0), n};
  }
  if (options.drop_last) {
    return {floor_per_rank, floor_per_rank * num_replicas};
  }
  const int64_t per_rank = floor_per_rank + (rest != 0 ? 1 : 0);
  if (per_rank > kInt64Max / num_replicas) {
    bad_config("the padded total ceil(n/num_replicas)*num_replicas exceeds 2^63-1",
               "n=" + std::to_string(n) + ", num_replicas=" + std::to_string(num_replicas));
  }
  return {per_rank, per_rank * num_replicas};
}

SamplerMode effective_mode(SamplerMode requested, int64_t n) {
  if (requested != SamplerMode::kAuto) {
    return requested;
  }
  return n <= kSamplerAutoTorchMaxSize ? SamplerMode::kTorch : SamplerMode::kScalable;
}

uint64_t compute_fingerprint(int64_t n, int64_t num_replicas, int64_t rank, const SamplerOptions& o,
                             SamplerMode mode) {
  const uint64_t fields[] = {
      kFingerprintVersion,
      static_cast<uint64_t>(n),
      static_cast<uint64_t>(num_replicas),
      static_cast<uint64_t>(rank),
      static_cast<uint64_t>(o.shuffle),
      static_cast<uint64_t>(o.seed),
      static_cast<uint64_t>(o.drop_last),
      static_cast<uint64_t>(o.evaluation),
      static_cast<uint64_t>(mode),
  };
  uint64_t h = 0;
  for (uint64_t f : fields) {
    h = mix64(h ^ mix64(f + 0x9e3779b97f4a7c15ull));
  }
  // The PyTorch release counts only where it changes the order, so that states
  // saved before it was an option still load wherever the order is the same.
  if (mode == SamplerMode::kTorch && o.shuffle && n >= kTorchRandpermSplit) {
    h = mix64(h ^ mix64(static_cast<uint64_t>(o.torch_release) + 1 + 0x9e3779b97f4a7c15ull));
  }
  return h;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

}  // namespace

const char* to_string(SamplerMode mode) {
  switch (mode) {
    case SamplerMode::kAuto:
      return "auto";
    case SamplerMode::kTorch:
      return "torch";
    case SamplerMode::kScalable:
      return "scalable";
  }
  return "unknown";
}

const char* to_string(TorchRelease release) {
  return release == TorchRelease::kBefore2_6 ? "<2.6" : "2.6+";
}

TorchRelease torch_release_of(const std::string& version) {
  unsigned major = 0;
  unsigned minor = 0;
  int used = 0;
  if (std::sscanf(version.c_str(), "%u.%u%n", &major, &minor, &used) != 2 || used == 0 ||
      !std::isdigit(static_cast<unsigned char>(version[0]))) {
    throw InvalidArgument(
        "sampler: failed to read a PyTorch version: expected <major>.<minor>...; "
        "version='" +
        version + "'");
  }
  return (major > 2 || (major == 2 && minor >= 6)) ? TorchRelease::k2_6AndLater
                                                   : TorchRelease::kBefore2_6;
}

// ---- SamplerState ----

std::string SamplerState::to_string() const {
  return std::string(kStateMagic) + " " + kStateVersion + " epoch=" + std::to_string(epoch) +
         " position=" + std::to_string(position) + " fingerprint=" + hex16(fingerprint);
}

SamplerState SamplerState::parse(const std::string& text) {
  auto fail = [&text]() -> SamplerState {
    throw InvalidArgument("sampler: failed to parse sampler state: expected '" +
                          std::string(kStateMagic) + " " + kStateVersion +
                          " epoch=<int> position=<int> fingerprint=<16 hex digits>'; text=\"" +
                          text + "\"");
  };
  std::istringstream in(text);
  std::string magic, version, epoch_kv, position_kv, fingerprint_kv, extra;
  if (!(in >> magic >> version >> epoch_kv >> position_kv >> fingerprint_kv) || (in >> extra)) {
    return fail();
  }
  if (magic != kStateMagic || version != kStateVersion) {
    return fail();
  }
  auto integer = [&](const std::string& kv, const char* key, int64_t* out) {
    const std::string prefix = std::string(key) + "=";
    if (kv.compare(0, prefix.size(), prefix) != 0) {
      return false;
    }
    const std::string digits = kv.substr(prefix.size());
    if (digits.empty()) {
      return false;
    }
    size_t used = 0;
    try {
      *out = std::stoll(digits, &used, 10);
    } catch (const std::exception&) {
      return false;
    }
    return used == digits.size();
  };
  SamplerState s;
  if (!integer(epoch_kv, "epoch", &s.epoch) || !integer(position_kv, "position", &s.position)) {
    return fail();
  }
  const std::string fp_prefix = "fingerprint=";
  if (fingerprint_kv.compare(0, fp_prefix.size(), fp_prefix) != 0) {
    return fail();
  }
  const std::string hex = fingerprint_kv.substr(fp_prefix.size());
  if (hex.size() != 16 || !std::all_of(hex.begin(), hex.end(), [](char c) {
        return std::isxdigit(static_cast<unsigned char>(c)) != 0;
      })) {
    return fail();
  }
  s.fingerprint = std::stoull(hex, nullptr, 16);
  return s;
}

// ---- DistributedSampler ----

DistributedSampler::DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank,
                                       SamplerOptions options)
    : n_(n), num_replicas_(num_replicas), rank_(rank), options_(options), epoch_(options.epoch) {
  const Shape shape = validate_and_shape(n, num_replicas, rank, options);
  size_ = shape.size;
  total_size_ = shape.total;
  mode_ = effective_mode(options.mode, n);
  fingerprint_ = compute_fingerprint(n, num_replicas, rank, options, mode_);
  build_epoch();
}

int64_t DistributedSampler::shard_size(int64_t n, int64_t num_replicas, int64_t rank,
                                       const SamplerOptions& options) {
  return validate_and_shape(n, num_replicas, rank, options).size;
}

std::vector<int64_t> DistributedSampler::shard_sizes() const {
  std::vector<int64_t> sizes(static_cast<size_t>(num_replicas_));
  const int64_t floor_per_rank = n_ / num_replicas_;
  const int64_t rest = n_ % num_replicas_;
  for (int64_t r = 0; r < num_replicas_; ++r) {
    int64_t s = floor_per_rank;
    if (options_.evaluation) {
      s += r < rest ? 1 : 0;
    } else if (!options_.drop_last) {
      s += rest != 0 ? 1 : 0;
    }
    sizes[static_cast<size_t>(r)] = s;
  }
  return sizes;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  position_ = 0;
  if (epoch == epoch_ && data_ != nullptr) {
    return;
  }
  const int64_t previous = epoch_;
  epoch_ = epoch;
  try {
    build_epoch();
  } catch (...) {
    epoch_ = previous;
    throw;
  }
}

// Shard element i sits at global position rank + i*R of the padded sequence;
// the padding repeats the permutation from its start (PyTorch's wrap-around,
// which for n < R repeats it several times).
uint64_t DistributedSampler::position_of(int64_t i) const {
  uint64_t p = static_cast<uint64_t>(rank_) +
               static_cast<uint64_t>(i) * static_cast<uint64_t>(num_replicas_);
  const uint64_t n = static_cast<uint64_t>(n_);
  if (p >= n) {
    p %= n;
  }
  return p;
}

void DistributedSampler::build_epoch() {
  auto epoch = std::make_shared<Epoch>();
  if (!options_.shuffle || n_ <= 1) {
    epoch->kind = Epoch::Kind::kIdentity;
  } else if (mode_ == SamplerMode::kScalable) {
    epoch->kind = Epoch::Kind::kFeistel;
    const uint64_t key = mix64(mix64(static_cast<uint64_t>(options_.seed) ^ kScalableKeyTag) +
                               static_cast<uint64_t>(epoch_) * 0xd1b54a32d192ed03ull);
    epoch->feistel.emplace(static_cast<uint64_t>(n_), key);
  } else {
    // PyTorch: g.manual_seed(seed + epoch); only the low 32 bits reach mt19937,
    // so wrapping 64-bit addition gives the same generator as Python's ints.
    epoch->kind = Epoch::Kind::kTable;
    const uint64_t seed = static_cast<uint64_t>(options_.seed) + static_cast<uint64_t>(epoch_);
    const auto n = static_cast<size_t>(n_);
    BigBuffer<uint32_t> perm(n);
    sampler::torch_randperm(seed, static_cast<uint32_t>(n_), perm.data(),
                            options_.torch_release == TorchRelease::k2_6AndLater);
    if (size_ == n_ && num_replicas_ == 1) {
      epoch->table = std::move(perm);  // the shard is the whole permutation
    } else {
      BigBuffer<uint32_t> shard(static_cast<size_t>(size_));
      for (int64_t i = 0; i < size_; ++i) {
        shard[static_cast<size_t>(i)] = perm[position_of(i)];
      }
      epoch->table = std::move(shard);
    }
  }
  data_ = std::move(epoch);
}

int64_t DistributedSampler::at(int64_t i) const {
  if (i < 0 || i >= size_) {
    throw InvalidArgument("sampler: failed to read shard index: index out of range [0, " +
                          std::to_string(size_) + "); i=" + std::to_string(i) +
                          ", rank=" + std::to_string(rank_));
  }
  switch (data_->kind) {
    case Epoch::Kind::kIdentity:
      return static_cast<int64_t>(position_of(i));
    case Epoch::Kind::kTable:
      return data_->table[static_cast<size_t>(i)];
    case Epoch::Kind::kFeistel:
      return static_cast<int64_t>((*data_->feistel)(position_of(i)));
  }
  return -1;
}

void DistributedSampler::get(int64_t first, int64_t count, int64_t* out) const {
  if (first < 0 || count < 0 || first > size_ || count > size_ - first) {
    throw InvalidArgument("sampler: failed to read shard range: range outside [0, " +
                          std::to_string(size_) + "); first=" + std::to_string(first) +
                          ", count=" + std::to_string(count) + ", rank=" + std::to_string(rank_));
  }
  if (count == 0) {
    return;
  }
  switch (data_->kind) {
    case Epoch::Kind::kTable: {
      const uint32_t* src = data_->table.data() + first;
      for (int64_t k = 0; k < count; ++k) {
        out[k] = src[k];
      }
      return;
    }
    case Epoch::Kind::kIdentity:
    case Epoch::Kind::kFeistel: {
      // Positions advance by R from p0; the first `direct` of them are below
      // n, the rest (padding at the end of a padded shard: one position when
      // n >= R) wrap around to the start of the permutation.
      const uint64_t n = static_cast<uint64_t>(n_);
      const uint64_t step = static_cast<uint64_t>(num_replicas_);
      const uint64_t p0 = static_cast<uint64_t>(rank_) + static_cast<uint64_t>(first) * step;
      const uint64_t ucount = static_cast<uint64_t>(count);
      const uint64_t direct = p0 >= n ? 0 : std::min(ucount, (n - 1 - p0) / step + 1);
      auto* dst = reinterpret_cast<uint64_t*>(out);
      if (data_->kind == Epoch::Kind::kFeistel) {
        data_->feistel->map_progression(p0, step, static_cast<size_t>(direct), dst);
        for (uint64_t k = direct; k < ucount; ++k) {
          dst[k] = (*data_->feistel)((p0 + k * step) % n);
        }
      } else {
        for (uint64_t k = 0; k < direct; ++k) {
          dst[k] = p0 + k * step;
        }
        for (uint64_t k = direct; k < ucount; ++k) {
          dst[k] = (p0 + k * step) % n;
        }
      }
      return;
    }
  }
}

DistributedSampler::Iterator DistributedSampler::begin() const {
  return Iterator(this, 0);
}
DistributedSampler::Iterator DistributedSampler::end() const {
  return Iterator(this, size_);
}

bool DistributedSampler::next(int64_t* index) {
  if (position_ >= size_) {
    return false;
  }
  *index = at(position_);
  ++position_;
  return true;
}

int64_t DistributedSampler::next(int64_t* out, int64_t max) {
  if (max < 0) {
    throw InvalidArgument("sampler: failed to read next indices: max must be >= 0; max=" +
                          std::to_string(max));
  }
  const int64_t count = std::min(max, size_ - position_);
  get(position_, count, out);
  position_ += count;
  return count;
}

void DistributedSampler::seek(int64_t position) {
  if (position < 0 || position > size_) {
    throw InvalidArgument("sampler: failed to seek: position outside [0, " + std::to_string(size_) +
                          "]; position=" + std::to_string(position) +
                          ", rank=" + std::to_string(rank_));
  }
  position_ = position;
}

SamplerState DistributedSampler::state() const {
  SamplerState s;
  s.epoch = epoch_;
  s.position = position_;
  s.fingerprint = fingerprint_;
  return s;
}

void DistributedSampler::load_state(const SamplerState& state) {
  if (state.fingerprint != fingerprint_) {
    throw InvalidArgument(
        "sampler: failed to load sampler state: it was saved by a sampler with another "
        "configuration (n, num_replicas, rank, shuffle, seed, drop_last, evaluation, mode); "
        "fingerprint=" +
        hex16(state.fingerprint) + ", expected=" + hex16(fingerprint_) +
        ", n=" + std::to_string(n_) + ", num_replicas=" + std::to_string(num_replicas_) +
        ", rank=" + std::to_string(rank_));
  }
  if (state.position < 0 || state.position > size_) {
    throw InvalidArgument("sampler: failed to load sampler state: position outside [0, " +
                          std::to_string(size_) + "]; position=" + std::to_string(state.position) +
                          ", rank=" + std::to_string(rank_));
  }
  set_epoch(state.epoch);
  position_ = state.position;
}

// ---- BatchSampler ----

BatchSampler::BatchSampler(DistributedSampler sampler, int64_t batch_size, bool drop_last)
    : sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {
  if (batch_size <= 0) {
    throw InvalidArgument(
        "sampler: failed to create BatchSampler: batch size must be >= 1; batch_size=" +
        std::to_string(batch_size));
  }
}

int64_t BatchSampler::size() const {
  const int64_t s = sampler_.size();
  return s / batch_size_ + (!drop_last_ && s % batch_size_ != 0 ? 1 : 0);
}

void BatchSampler::batch(int64_t b, std::vector<int64_t>* out) const {
  const int64_t batches = size();
  if (b < 0 || b >= batches) {
    throw InvalidArgument("sampler: failed to read batch: batch out of range [0, " +
                          std::to_string(batches) + "); b=" + std::to_string(b) +
                          ", batch_size=" + std::to_string(batch_size_));
  }
  const int64_t first = b * batch_size_;
  const int64_t count = std::min(batch_size_, sampler_.size() - first);
  out->resize(static_cast<size_t>(count));
  sampler_.get(first, count, out->data());
}

std::vector<int64_t> BatchSampler::batch(int64_t b) const {
  std::vector<int64_t> out;
  batch(b, &out);
  return out;
}

bool BatchSampler::next(std::vector<int64_t>* out) {
  const int64_t remaining = sampler_.remaining();
  if (remaining == 0 || (drop_last_ && remaining < batch_size_)) {
    return false;
  }
  const int64_t count = std::min(batch_size_, remaining);
  out->resize(static_cast<size_t>(count));
  sampler_.next(out->data(), count);
  return true;
}

BatchSampler::Iterator BatchSampler::begin() const {
  return Iterator(this, 0);
}
BatchSampler::Iterator BatchSampler::end() const {
  return Iterator(this, size());
}

const std::vector<int64_t>& BatchSampler::Iterator::operator*() const {
  if (loaded_ != b_) {
    sampler_->batch(b_, &batch_);
    loaded_ = b_;
  }
  return batch_;
}

}  // namespace slurmddp
