#include "sampler/feistel.h"

namespace slurmddp::sampler {

// Note [Keyed permutation]
// The scalable sampler needs pi(i), the i-th element of a random permutation
// of [0, n), without materializing it. A Feistel network is a bijection for
// any round function: split x into halves (L, R) and repeat
// (L, R) -> (R, L xor F_k(R)). We use a domain of 2^b >= n with b =
// max(ceil(log2 n), kMinBits), split into unbalanced halves of ceil(b/2) and
// floor(b/2) bits (the widths swap every round, so an even round count brings
// them back), and "cycle walking": if E(x) >= n, apply E again until the value
// lands in [0, n). Since E permutes the domain, walking from a point of
// [0, n) returns to [0, n) and the walk defines a bijection of [0, n); the
// expected number of passes is 2^b / n < 2 (except for n below 2^kMinBits,
// where the larger domain buys better mixing on tiny datasets).
//
// The round function is a 32-bit multiply/xorshift hash of (half xor key); the
// output width is at most 32 bits because b <= 63 for n <= 2^63. Six rounds,
// each with its own 32-bit key derived from (seed, epoch) through mix64. Its
// statistical quality (position uniformity, bijection) is checked by the unit
// tests; it is a shuffle for training, not a cipher.
FeistelPermutation::FeistelPermutation(uint64_t n, uint64_t key) : n_(n) {
  int bits = 0;
  while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;  // ceil(log2 n)
  if (bits < kMinBits) bits = kMinBits;
  right_bits_ = bits / 2;
  left_bits_ = bits - right_bits_;
  right_mask_ = static_cast<uint32_t>((uint64_t{1} << right_bits_) - 1);
  uint64_t state = key;
  for (int r = 0; r < kRounds; ++r) {
    state = mix64(state + 0x9e3779b97f4a7c15ull);
    keys_[r] = static_cast<uint32_t>(state >> 32);
    // Round r xors into the half that is currently "left": left_bits_ wide on
    // even rounds, right_bits_ wide on odd ones.
    const int width = (r % 2 == 0) ? left_bits_ : right_bits_;
    shift_[r] = 32 - width;
  }
}

void FeistelPermutation::map(const uint64_t* in, uint64_t* out, size_t count) const {
  // First a branch-free pass the compiler can pipeline across elements, then
  // the rarer walks for those that landed outside [0, n).
  for (size_t i = 0; i < count; ++i) out[i] = encrypt(in[i]);
  for (size_t i = 0; i < count; ++i) {
    uint64_t y = out[i];
    while (y >= n_) y = encrypt(y);
    out[i] = y;
  }
}

}  // namespace slurmddp::sampler
