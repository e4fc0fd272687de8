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
  static constexpr int kRounds = 6;     // even: the halves end where they began
  static constexpr int kMinBits = 8;    // smallest domain 2^8, see the Note

  // A permutation of [0, n) chosen by `key`. n >= 1, n <= 2^63.
  FeistelPermutation(uint64_t n, uint64_t key);

  uint64_t size() const { return n_; }
  int domain_bits() const { return left_bits_ + right_bits_; }

  // The image of x; requires x < size().
  uint64_t operator()(uint64_t x) const {
    uint64_t y = encrypt(x);
    while (y >= n_) y = encrypt(y);  // cycle walking: stays a bijection of [0, n)
    return y;
  }

  // out[i] = (*this)(in[i]) for i < count; `in` and `out` may be the same array.
  void map(const uint64_t* in, uint64_t* out, size_t count) const;

  // One pass of the network over the whole 2^domain_bits() domain.
  uint64_t encrypt(uint64_t x) const {
    uint32_t left = static_cast<uint32_t>(x >> right_bits_);
    uint32_t right = static_cast<uint32_t>(x) & right_mask_;
    // Widths alternate between left_bits_ and right_bits_; shift_[r] turns the
    // 32-bit round output into the width of the half it is xored into.
    for (int r = 0; r < kRounds; ++r) {
      const uint32_t f = round_function(right, keys_[r]) >> shift_[r];
      const uint32_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    return (static_cast<uint64_t>(left) << right_bits_) | right;
  }

 private:
  static uint32_t round_function(uint32_t half, uint32_t key) {
    uint32_t h = (half ^ key) * 0x2c1b3c6du;
    h ^= h >> 15;
    h *= 0x297a2d39u;
    h ^= h >> 16;
    h *= 0x9e3779b1u;
    return h;  // callers keep the top bits, which depend on every input bit
  }

  uint64_t n_;
  int left_bits_;
  int right_bits_;
  uint32_t right_mask_;
  uint32_t keys_[kRounds];
  int shift_[kRounds];
};

}  // namespace slurmddp::sampler
