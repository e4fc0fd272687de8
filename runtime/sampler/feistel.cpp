#include "sampler/feistel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "sampler/feistel_kernel.h"

namespace slurmddp::sampler {

// Note [Keyed permutation]
// The scalable sampler needs pi(i), the i-th element of a random permutation
// of [0, n), without materializing it. A Feistel network is a bijection for
// any round function. We use its mixed-radix form: x in [0, a*b) is split into
// (L, R) = (x / b, x % b) and each round maps
//     (L, R) -> (R, (L + F_k(R)) mod m),   m = a on even rounds, b on odd ones,
// which is invertible ((L = (R' - F_k(L')) mod m), so the network permutes
// [0, a*b); after an even number of rounds the halves are back in
// [0, a) x [0, b) and y = L*b + R. With b = ceil(sqrt(n)) and a = ceil(n/b),
// a*b - n < b, so "cycle walking" (apply the network again while y >= n, which
// keeps a bijection of [0, n) because walking from a point of [0, n) returns
// to [0, n)) is needed for a fraction below 1/sqrt(n) of the elements. Tiny n
// use at least a 16 x 16 domain: more room to mix, a few more walks.
//
// F_k(R) = floor(hash(R xor k) * m / 2^32) with a 32-bit multiply/xorshift
// hash; six rounds, each with its own 32-bit key derived from (seed, epoch)
// through mix64. For sides m near 2^32 (n beyond ~2^50) the scaling is
// visibly non-uniform per round; the network stays a bijection. Statistical
// quality (bijection, position uniformity) is checked by the unit tests; it is
// a shuffle for training, not a cipher.
//
// Speed: operator() is latency-bound (six dependent rounds and two 64-bit
// divisions). map_progression() instead generates eight strided inputs per
// vector, keeps both halves of eight elements in registers through all
// rounds (four vectors interleaved), and only the rare elements that land in
// [n, a*b) take the scalar walk. AVX2 is used where the CPU has it (chosen once
// at run time); elsewhere the same code runs on SSE2 registers.
FeistelPermutation::FeistelPermutation(uint64_t n, uint64_t key) : n_(n) {
  // b = ceil(sqrt(n)), exact: the double estimate is within one of it.
  uint64_t b = static_cast<uint64_t>(std::sqrt(static_cast<double>(n)));
  while (b * b < n) {
    ++b;
  }
  while (b > 1 && (b - 1) * (b - 1) >= n) {
    --b;
  }
  b = std::max<uint64_t>(b, kMinSide);
  const uint64_t a = std::max<uint64_t>((n + b - 1) / b, kMinSide);
  a_ = static_cast<uint32_t>(a);  // both <= 3037000500 < 2^32 for n <= 2^63
  b_ = static_cast<uint32_t>(b);
  uint64_t state = key;
  for (int r = 0; r < kRounds; ++r) {
    state = mix64(state + 0x9e3779b97f4a7c15ull);
    keys_[r] = static_cast<uint32_t>(state >> 32);
  }
}

namespace {

bool kernel_generic_small(const FeistelPlan& p, uint64_t* q, uint32_t* r, size_t count,
                          uint64_t* out) {
  return kernel_body<PortableOps, true>(p, q, r, count, out);
}
bool kernel_generic_any(const FeistelPlan& p, uint64_t* q, uint32_t* r, size_t count,
                        uint64_t* out) {
  return kernel_body<PortableOps, false>(p, q, r, count, out);
}

// Chosen on first use (a function-local static, so that a sampler used during
// another library's static initialization still finds it set).
const FeistelKernels& best_kernels() {
  static const FeistelKernels kernels = [] {
    const FeistelKernels avx2 = feistel_kernels_avx2();
    return avx2.small_sides != nullptr ? avx2
                                       : FeistelKernels{kernel_generic_small, kernel_generic_any};
  }();
  return kernels;
}
constexpr uint32_t kSmallSideMax = uint32_t{1} << 31;

}  // namespace

void FeistelPermutation::map_progression(uint64_t start, uint64_t step, size_t count, uint64_t* out,
                                         bool allow_simd) const {
  if (count == 0) {
    return;
  }
  FeistelPlan p{};
  p.keys = keys_;
  p.a = a_;
  p.b = b_;
  p.n = n_;
  for (size_t k = 0; k < FeistelPlan::kLanes; ++k) {
    // k*step < 8 * 2^63 would overflow for huge steps; step < n <= 2^63 and
    // k < 8, so split the product through divmod first.
    const uint64_t sq = step / b_, sr = step % b_;
    const uint64_t rk = sr * k;                             // < 8 * 2^32
    p.lane_q[k] = static_cast<uint32_t>(sq * k + rk / b_);  // only its low 32 bits matter
    p.lane_r[k] = static_cast<uint32_t>(rk % b_);
  }
  {
    const uint64_t sq = step / b_, sr = step % b_;
    const uint64_t rk = sr * FeistelPlan::kLanes;
    p.adv_q = sq * FeistelPlan::kLanes + rk / b_;
    p.adv_r = static_cast<uint32_t>(rk % b_);
  }
  uint64_t q = start / b_;
  uint32_t r = static_cast<uint32_t>(start % b_);

  const FeistelKernels kernels =
      allow_simd ? best_kernels() : FeistelKernels{kernel_generic_small, kernel_generic_any};
  const FeistelKernelFn kernel =
      (a_ <= kSmallSideMax && b_ <= kSmallSideMax) ? kernels.small_sides : kernels.any_sides;
  alignas(32) uint64_t block[kFeistelBlock];
  for (size_t done = 0; done < count; done += kFeistelBlock) {
    const size_t m = std::min(kFeistelBlock, count - done);
    const bool walk = kernel(p, &q, &r, m, block);
    if (walk) {  // rare: fewer than 1/sqrt(n) of the elements land in [n, a*b)
      for (size_t j = 0; j < m; ++j) {
        while (block[j] >= n_) {
          block[j] = encrypt(block[j]);
        }
      }
    }
    std::memcpy(out + done, block, m * sizeof(uint64_t));
  }
}

}  // namespace slurmddp::sampler
