// The 32-bit Mersenne Twister (Matsumoto & Nishimura, 1998) exactly as
// PyTorch's CPU generator uses it: seeded with the classic linear
// recurrence on the low 32 bits of the seed, producing the same stream as
// std::mt19937 seeded with `seed mod 2^32`.
//
// Written for throughput: the 624-word state is regenerated in one pass and
// tempered outputs are handed out in bulk, so a caller that needs millions of
// draws (the PyTorch-parity shuffle) pays a few cycles per draw.
#pragma once

#include <cstddef>
#include <cstdint>

namespace slurmddp::sampler {

class Mt19937 {
 public:
  static constexpr int kStateWords = 624;

  explicit Mt19937(uint64_t seed) { reseed(seed); }

  void reseed(uint64_t seed) {
    state_[0] = static_cast<uint32_t>(seed);
    for (int i = 1; i < kStateWords; ++i) {
      const uint32_t prev = state_[i - 1];
      state_[i] = 1812433253u * (prev ^ (prev >> 30)) + static_cast<uint32_t>(i);
    }
    next_ = kStateWords;  // the first draw regenerates the state
  }

  // One draw.
  uint32_t operator()() {
    if (next_ == kStateWords) {
      regenerate();
    }
    return temper(state_[next_++]);
  }

  // `count` consecutive draws into `out`; the same values `count` calls of
  // operator() would return.
  void fill(uint32_t* out, size_t count) {
    while (count > 0) {
      if (next_ == kStateWords) {
        regenerate();
      }
      size_t take = static_cast<size_t>(kStateWords - next_);
      if (take > count) {
        take = count;
      }
      const uint32_t* src = state_ + next_;
      for (size_t i = 0; i < take; ++i) {
        out[i] = temper(src[i]);
      }
      out += take;
      count -= take;
      next_ += static_cast<int>(take);
    }
  }

 private:
  static constexpr int kShift = 397;
  static constexpr uint32_t kMatrix = 0x9908b0dfu;

  static uint32_t temper(uint32_t y) {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
  }

  static uint32_t twist(uint32_t upper_from, uint32_t lower_from, uint32_t far) {
    const uint32_t y = (upper_from & 0x80000000u) | (lower_from & 0x7fffffffu);
    return far ^ (y >> 1) ^ ((0u - (y & 1u)) & kMatrix);
  }

  // The three index ranges keep every loop free of modulo arithmetic.
  void regenerate() {
    int i = 0;
    for (; i < kStateWords - kShift; ++i) {
      state_[i] = twist(state_[i], state_[i + 1], state_[i + kShift]);
    }
    for (; i < kStateWords - 1; ++i) {
      state_[i] = twist(state_[i], state_[i + 1], state_[i + kShift - kStateWords]);
    }
    state_[kStateWords - 1] = twist(state_[kStateWords - 1], state_[0], state_[kShift - 1]);
    next_ = 0;
  }

  uint32_t state_[kStateWords] = {};
  int next_ = kStateWords;
};

}  // namespace slurmddp::sampler
