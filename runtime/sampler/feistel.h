// A keyed bijection of [0, n) for any n up to 2^63, computed per element in
// O(1) time and memory. See Note [Keyed permutation] in feistel.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace slurmddp::sampler {

// Stafford's "Mix13" 64-bit finalizer (the output stage of SplitMix64): a
// bijective avalanche mix used to derive keys.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class FeistelPermutation {
 public:
  static constexpr int kRounds = 6;         // even: the halves end where they began
  static constexpr uint32_t kMinSide = 16;  // smallest domain 16 x 16, see the Note

  // A permutation of [0, n) chosen by `key`. 1 <= n <= 2^63.
  FeistelPermutation(uint64_t n, uint64_t key);

  uint64_t size() const { return n_; }
  // The network permutes [0, rows * cols) with rows * cols >= n.
  uint32_t rows() const { return a_; }
  uint32_t cols() const { return b_; }

  // The image of x; requires x < size(). O(1) expected.
  uint64_t operator()(uint64_t x) const {
    uint64_t y = encrypt(x);
    while (y >= n_) {
      y = encrypt(y);  // cycle walking: stays a bijection of [0, n)
    }
    return y;
  }

  // out[j] = (*this)(start + j*step) for j < count; requires
  // start + (count-1)*step < size() when count > 0. Lane-parallel (AVX2 where
  // the CPU has it): the fast path for a rank's strided shard. allow_simd =
  // false forces the portable kernel (tests compare the two).
  void map_progression(uint64_t start, uint64_t step, size_t count, uint64_t* out,
                       bool allow_simd = true) const;

  // One pass of the network over [0, rows*cols); x must be in that range.
  uint64_t encrypt(uint64_t x) const {
    uint32_t left = static_cast<uint32_t>(x / b_);
    uint32_t right = static_cast<uint32_t>(x % b_);
    for (int r = 0; r < kRounds; ++r) {
      const uint32_t m = (r % 2 == 0) ? a_ : b_;
      const uint32_t next_right = add_mod(left, scale(hash(right ^ keys_[r]), m), m);
      left = right;
      right = next_right;
    }
    return static_cast<uint64_t>(left) * b_ + right;
  }

  // The pieces of a round, shared with the lane-parallel kernel.
  static uint32_t hash(uint32_t v) {
    v *= 0x2c1b3c6du;
    v ^= v >> 15;
    v *= 0x297a2d39u;
    v ^= v >> 16;
    v *= 0x9e3779b1u;
    return v;
  }
  // floor(h * m / 2^32): a value in [0, m) from the top bits of h.
  static uint32_t scale(uint32_t h, uint32_t m) {
    return static_cast<uint32_t>((static_cast<uint64_t>(h) * m) >> 32);
  }
  // (x + f) mod m for x, f < m <= 2^32 - 1, also when x + f wraps 32 bits.
  static uint32_t add_mod(uint32_t x, uint32_t f, uint32_t m) {
    const uint32_t s = x + f;
    return (s < x || s >= m) ? s - m : s;
  }

  const uint32_t* keys() const { return keys_; }

 private:
  uint64_t n_;
  uint32_t a_;  // values of the left half: [0, a_)
  uint32_t b_;  // values of the right half: [0, b_)
  uint32_t keys_[kRounds] = {};
};

}  // namespace slurmddp::sampler
