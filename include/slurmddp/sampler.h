// Sharded sampling for data-parallel training: which dataset indices each rank
// visits, in which order, in every epoch.
//
// DistributedSampler gives rank r of R a disjoint shard of a shuffled
// [0, n), reshuffled per epoch, with equal shard sizes so that collectives line
// up. Two permutation families sit behind one interface:
//
//  * SamplerMode::kTorch reproduces torch.utils.data.distributed.DistributedSampler
//    of the PyTorch release SamplerOptions::torch_release names (2.6 and later
//    by default, or any release before 2.6: they differ only for n >= 2^32/20,
//    see TorchRelease) index for index: for the same (n, num_replicas, rank,
//    shuffle, seed, epoch, drop_last) it yields exactly the same indices in the
//    same order, including wrap-around padding to ceil(n/R)*R, drop_last
//    truncation, the strided shard indices[rank:total:R] and the shuffle of
//    torch.randperm(n) with a generator seeded seed + epoch.
//    Parity is proven by the unit test `sampler`, which runs the installed
//    PyTorch on 423 configurations drawn at random (fixed seed) with
//    0 <= n <= 2^21 -- n below, at and above num_replicas (1..300), n at the
//    generator's 624-word refresh and the shuffle's block sizes, seeds and
//    epochs negative and beyond 2^32, shuffle and drop_last on and off -- plus
//    n in {2^24 - 1, 2^24, 2^24 + 1}, comparing every index; and by the `slow`
//    suite test, which compares torch.randperm at n = 214,748,370 (above the
//    2^32/20 size where PyTorch 2.6 switched algorithm) in full, against the
//    installed PyTorch's release. CI runs both against PyTorch 1.13 and 2.6.
//    Parity is therefore proven for n <= 2^21 and at those sizes; neither
//    algorithm has another size threshold below 2^32. seed + epoch wraps in
//    64 bits, which matches Python's exact sum wherever torch's manual_seed
//    accepts that sum ([-2^63, 2^64)).
//    Costs O(n) time and 4n bytes of memory while set_epoch() shuffles, then
//    4 bytes per index of this rank's shard.
//
//  * SamplerMode::kScalable computes each index through a keyed bijective
//    permutation (a Feistel network with cycle walking) of [0, n): O(1) memory
//    and O(1) expected time per index for n up to 2^63 - 1 (a few nanoseconds
//    per index through get()/next() in bulk), and set_epoch() is O(1). Same
//    shard structure (padding, drop_last, strides), different permutation: it
//    does not reproduce PyTorch's order.
//
//  * SamplerMode::kAuto (the default) is kTorch for n <= kSamplerAutoTorchMaxSize
//    and kScalable above.
//
// Evaluation mode (SamplerOptions::evaluation) drops the padding: every sample
// is visited exactly once across ranks, shards differ in size by at most one,
// and shard_sizes() gives the counts needed to weight per-rank metrics.
//
// Mid-epoch resume: the sampler keeps a cursor. next() consumes indices,
// state() captures (epoch, position), and load_state() on a sampler built with
// the same configuration continues with exactly the remaining sequence.
//
// Thread safety: const methods may run concurrently; anything that changes the
// epoch or the cursor needs exclusive access. Copies are cheap (a kTorch shard
// is shared, immutable, between copies) and independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

// Which permutation family a DistributedSampler draws from (see the file comment).
enum class SamplerMode { kAuto, kTorch, kScalable };

// "auto", "torch" or "scalable".
const char* to_string(SamplerMode mode);

// kAuto picks kTorch up to this dataset size (64 MiB of shuffle buffer).
constexpr int64_t kSamplerAutoTorchMaxSize = int64_t{1} << 24;
// kTorch stores indices as 32-bit values: n must not exceed this.
constexpr int64_t kSamplerTorchMaxSize = int64_t{0xffffffff};

// The PyTorch release whose torch.randperm SamplerMode::kTorch reproduces.
// Every release draws the same permutation for n < kTorchRandpermSplit; from
// there on, 2.6 and later use a 64-bit "inside-out" shuffle (uniform where the
// 32-bit modulo of earlier releases is biased), so the orders differ.
enum class TorchRelease { k2_6AndLater, kBefore2_6 };
constexpr int64_t kTorchRandpermSplit = int64_t{0xffffffff} / 20;  // 214,748,364

// "2.6+" or "<2.6".
const char* to_string(TorchRelease release);

// The release a PyTorch version string ("2.6.0+debian", "1.13.0a0", "2.10.1")
// belongs to. Throws InvalidArgument naming the text when it does not start
// with <major>.<minor>.
TorchRelease torch_release_of(const std::string& version);

struct SamplerOptions {
  // Shuffle per epoch; false visits indices in dataset order (both modes).
  bool shuffle = true;
  // Base seed. kTorch seeds its generator with seed + epoch (only the low 32
  // bits matter, as in PyTorch); kScalable derives a key from (seed, epoch).
  int64_t seed = 0;
  // Drop the tail so that every rank gets floor(n/R) indices, instead of
  // padding to ceil(n/R) by wrapping around to the start of the permutation.
  bool drop_last = false;
  // No padding and no dropping: every index exactly once across ranks; rank r
  // gets floor(n/R) + (r < n % R ? 1 : 0) of them. Cannot be combined with
  // drop_last.
  bool evaluation = false;
  SamplerMode mode = SamplerMode::kAuto;
  // kTorch: the PyTorch release to match (the Python package passes the
  // installed one). Part of the configuration only where it changes the order
  // (kTorch, shuffle, n >= kTorchRandpermSplit).
  TorchRelease torch_release = TorchRelease::k2_6AndLater;
  // The epoch the sampler starts at. Not part of the configuration (states of
  // any epoch load into the sampler); it spares kTorch a shuffle of epoch 0
  // when a job starts or resumes at a later epoch.
  int64_t epoch = 0;
};

// Where a sampler stands: enough to resume mid-epoch. `fingerprint` identifies
// the configuration (n, num_replicas, rank, shuffle, seed, drop_last,
// evaluation, effective mode) so that a state cannot be loaded into a sampler
// that would produce a different sequence.
struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;  // indices of this rank's shard already consumed
  uint64_t fingerprint = 0;

  // One line, e.g. "slurmddp-sampler v1 epoch=3 position=120 fingerprint=00ab...";
  // parse(to_string()) round-trips. parse() throws InvalidArgument naming the
  // offending text when it is not such a line.
  std::string to_string() const;
  static SamplerState parse(const std::string& text);

  bool operator==(const SamplerState& o) const {
    return epoch == o.epoch && position == o.position && fingerprint == o.fingerprint;
  }
  bool operator!=(const SamplerState& o) const { return !(*this == o); }
};

class DistributedSampler {
 public:
  class Iterator;

  // The shard of `rank` among `num_replicas` over a dataset of n samples, at
  // epoch options.epoch. Throws InvalidArgument naming the value when n < 0,
  // num_replicas <= 0, rank outside [0, num_replicas), drop_last together
  // with evaluation, mode kTorch with n > kSamplerTorchMaxSize (with shuffle),
  // or when the padded total ceil(n/R)*R would not fit in int64_t.
  // Complexity: as set_epoch().
  DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank,
                     SamplerOptions options = SamplerOptions());

  // Selects the permutation of `epoch` (any value, negative included) and
  // rewinds the cursor to 0. kTorch with shuffle: O(n) time, 4n bytes of
  // temporary memory (throws Error when it cannot be mapped); a no-op when
  // `epoch` is already the current one (the cursor is still rewound).
  // kScalable: O(1).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // Indices in this rank's shard per epoch. O(1).
  int64_t size() const { return size_; }
  // Sum of all ranks' shard sizes: ceil(n/R)*R, floor(n/R)*R with drop_last,
  // n in evaluation mode.
  int64_t total_size() const { return total_size_; }
  int64_t dataset_size() const { return n_; }
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }
  const SamplerOptions& options() const { return options_; }
  // The mode in effect (never kAuto).
  SamplerMode mode() const { return mode_; }

  // The i-th index of this rank's shard in the current epoch, 0 <= i < size();
  // throws InvalidArgument naming i otherwise. O(1) (expected, kScalable).
  int64_t at(int64_t i) const;
  int64_t operator[](int64_t i) const { return at(i); }
  // out[k] = at(first + k) for k < count, throwing InvalidArgument unless
  // 0 <= first, 0 <= count and first + count <= size(). The fast way to read
  // many indices.
  void get(int64_t first, int64_t count, int64_t* out) const;

  // The whole shard of the current epoch, independent of the cursor.
  Iterator begin() const;
  Iterator end() const;

  // Cursor: the next unconsumed index. Returns false (and leaves *index) at
  // the end of the epoch.
  bool next(int64_t* index);
  // Up to `max` next indices into out; returns how many (0 at the end of the
  // epoch). Throws InvalidArgument when max < 0.
  int64_t next(int64_t* out, int64_t max);
  int64_t position() const { return position_; }
  int64_t remaining() const { return size_ - position_; }
  // Moves the cursor to `position` in [0, size()]; InvalidArgument otherwise.
  void seek(int64_t position);

  SamplerState state() const;
  // Continues from `state`: sets its epoch and position (costing a shuffle in
  // kTorch unless the sampler is at that epoch already). Throws InvalidArgument
  // when the fingerprint belongs to another configuration or the position is
  // outside [0, size()]; the sampler is unchanged then.
  void load_state(const SamplerState& state);
  // The fingerprint this configuration writes into its states.
  uint64_t fingerprint() const { return fingerprint_; }

  // Indices per rank per epoch, for all ranks: shard_sizes()[r] is what rank r
  // visits. In evaluation mode they sum to n; weight a per-rank mean m_r by
  // shard_sizes()[r] / n (or sum per-rank sums and divide by n). O(R).
  std::vector<int64_t> shard_sizes() const;
  // Indices rank `rank` of `num_replicas` visits per epoch, without building a
  // sampler. Throws InvalidArgument like the constructor.
  static int64_t shard_size(int64_t n, int64_t num_replicas, int64_t rank,
                            const SamplerOptions& options = SamplerOptions());

  // Forward iteration over one epoch's shard; dereferencing computes at(i).
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = int64_t;
    using difference_type = std::ptrdiff_t;
    using pointer = const int64_t*;
    using reference = int64_t;

    Iterator() = default;
    int64_t operator*() const { return sampler_->at(i_); }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++i_;
      return old;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    friend class DistributedSampler;
    Iterator(const DistributedSampler* s, int64_t i) : sampler_(s), i_(i) {}
    const DistributedSampler* sampler_ = nullptr;
    int64_t i_ = 0;
  };

 private:
  // The permutation of one epoch; defined in the implementation.
  struct Epoch;

  // Global position (in the padded, permuted sequence) of shard element i.
  uint64_t position_of(int64_t i) const;
  void build_epoch();

  int64_t n_;
  int64_t num_replicas_;
  int64_t rank_;
  SamplerOptions options_;
  SamplerMode mode_;
  int64_t size_;
  int64_t total_size_;
  uint64_t fingerprint_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::shared_ptr<const Epoch> data_;
};

// Groups a DistributedSampler's shard into batches, like
// torch.utils.data.BatchSampler over it: consecutive runs of batch_size
// indices, the last one shorter unless drop_last. The batch sampler owns its
// DistributedSampler (set the epoch through sampler() or set_epoch()) and
// shares its cursor, so state()/load_state() resume batch iteration exactly.
class BatchSampler {
 public:
  class Iterator;

  // Throws InvalidArgument naming the value when batch_size <= 0.
  BatchSampler(DistributedSampler sampler, int64_t batch_size, bool drop_last = false);

  DistributedSampler& sampler() { return sampler_; }
  const DistributedSampler& sampler() const { return sampler_; }
  int64_t batch_size() const { return batch_size_; }
  bool drop_last() const { return drop_last_; }
  void set_epoch(int64_t epoch) { sampler_.set_epoch(epoch); }

  // Batches per epoch: floor(size/batch_size) with drop_last, else the ceiling.
  int64_t size() const;

  // Batch b (0 <= b < size(), else InvalidArgument naming b) into *out,
  // replacing its contents. O(batch_size).
  void batch(int64_t b, std::vector<int64_t>* out) const;
  std::vector<int64_t> batch(int64_t b) const;

  // The next batch from the sampler's cursor into *out (replacing its
  // contents). Returns false at the end of the epoch; with drop_last a short
  // remainder is not returned (and not consumed). After load_state() at a
  // position that is not a multiple of batch_size, batches start there.
  bool next(std::vector<int64_t>* out);

  SamplerState state() const { return sampler_.state(); }
  void load_state(const SamplerState& state) { sampler_.load_state(state); }

  // All batches of the current epoch, independent of the cursor.
  Iterator begin() const;
  Iterator end() const;

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = std::vector<int64_t>;
    using difference_type = std::ptrdiff_t;
    using pointer = const std::vector<int64_t>*;
    using reference = const std::vector<int64_t>&;

    Iterator() = default;
    const std::vector<int64_t>& operator*() const;
    Iterator& operator++() {
      ++b_;
      loaded_ = -1;
      return *this;
    }
    bool operator==(const Iterator& o) const { return b_ == o.b_; }
    bool operator!=(const Iterator& o) const { return b_ != o.b_; }

   private:
    friend class BatchSampler;
    Iterator(const BatchSampler* s, int64_t b) : sampler_(s), b_(b) {}
    const BatchSampler* sampler_ = nullptr;
    int64_t b_ = 0;
    mutable int64_t loaded_ = -1;
    mutable std::vector<int64_t> batch_;
  };

 private:
  DistributedSampler sampler_;
  int64_t batch_size_;
  bool drop_last_;
};

}  // namespace slurmddp

#pragma GCC visibility pop
