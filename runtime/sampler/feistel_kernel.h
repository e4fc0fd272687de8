// The lane-parallel kernel of FeistelPermutation::map_progression, included
// by two translation units: feistel.cpp (portable build) and
// feistel_avx2.cpp (compiled for AVX2). Everything here has internal linkage,
// so the two builds never replace each other at link time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sampler/feistel.h"

namespace slurmddp::sampler {

// What the kernel needs to generate its inputs, start + j*step, directly as
// halves (q, r) = divmod(start + j*step, b).
struct FeistelPlan {
  static constexpr size_t kLanes = 8;
  const uint32_t* keys;
  uint32_t a, b;
  uint64_t n;
  // Lane k of a vector starts at (q, r) + (lane_q[k], lane_r[k]) where
  // k*step = lane_q[k]*b + lane_r[k] (lane_q modulo 2^32); each vector
  // advances by (adv_q, adv_r) = divmod(8*step, b).
  uint32_t lane_q[kLanes], lane_r[kLanes];
  uint64_t adv_q;
  uint32_t adv_r;
};

// Elements per kernel call; a multiple of the kernel's step (32).
constexpr size_t kFeistelBlock = 1024;

// Runs the network over elements (q, r) + j*step for j in
// [0, round_up(count, 32)) and writes y_j = L*b + R to out[j] (out holds
// kFeistelBlock values); (q, r) is advanced past them. Returns false when
// every y_j < n; true when some may not be (including lanes past `count`,
// which hold values to ignore), so that the caller walks those.
using FeistelKernelFn = bool (*)(const FeistelPlan&, uint64_t*, uint32_t*, size_t, uint64_t*);

// Which kernel serves sides a, b: the short one needs a, b <= 2^31 (n <= 2^62).
struct FeistelKernels {
  FeistelKernelFn small_sides;
  FeistelKernelFn any_sides;
};
// The AVX2 kernels, or nullptrs when the CPU (or the build) has none.
FeistelKernels feistel_kernels_avx2();

namespace {

// Eight 32-bit lanes (GCC/Clang vector extension): one AVX2 register, or two
// SSE2 registers on the portable path. Vectors are passed by reference
// throughout: by value their ABI would differ between the two builds.
typedef uint32_t U32x8 __attribute__((vector_size(32)));
typedef uint32_t U32x4 __attribute__((vector_size(16)));
typedef uint64_t U64x4 __attribute__((vector_size(32)));
constexpr size_t kLanes = 8;
constexpr size_t kUnroll = 4;  // independent vectors in flight
constexpr size_t kStep = kLanes * kUnroll;
static_assert(kFeistelBlock % kStep == 0, "blocks hold whole steps");
static_assert(kLanes == FeistelPlan::kLanes, "one plan lane per vector lane");

// The operations whose best form depends on the instruction set, portable
// versions. feistel_avx2.cpp has the AVX2 ones.
struct PortableOps {
  // h = floor(h * m / 2^32) per lane: even and odd lanes multiplied as 64-bit.
  __attribute__((always_inline)) static void scale(U32x8& h, uint32_t m) {
    U64x4 wide;
    std::memcpy(&wide, &h, sizeof wide);
    const U64x4 even = ((wide & 0xffffffffull) * m) >> 32;         // lanes 0, 2, 4, 6
    const U64x4 odd = ((wide >> 32) * m) & 0xffffffff00000000ull;  // lanes 1, 3, 5, 7
    const U64x4 both = even | odd;
    std::memcpy(&h, &both, sizeof h);
  }
  // x = min(x, y), unsigned, per lane.
  __attribute__((always_inline)) static void min(U32x8& x, const U32x8& y) {
    x = ((U32x8)(y < x) & y) | ((U32x8)(y >= x) & x);
  }
  // out[0..8) = l*b + r per lane; flags gets nonzero lanes where a value >= n.
  __attribute__((always_inline)) static void combine(const U32x8& l, const U32x8& r, uint32_t b,
                                                     uint64_t n, uint64_t* out, U64x4& flags) {
    U32x4 half;
    U64x4 y[2];
    for (size_t k = 0; k < 2; ++k) {
      std::memcpy(&half, reinterpret_cast<const char*>(&l) + 16 * k, sizeof half);
      y[k] = __builtin_convertvector(half, U64x4) * b;
      std::memcpy(&half, reinterpret_cast<const char*>(&r) + 16 * k, sizeof half);
      y[k] += __builtin_convertvector(half, U64x4);
      flags |= (U64x4)(y[k] >= n);
    }
    std::memcpy(out, y, sizeof y);
  }
};

// x = (x + f) mod m per lane, for x, f < m. With m <= 2^31 the sum cannot wrap
// 32 bits, and min(s, s - m) is the answer (s - m wraps to a huge value when
// s < m); larger m also need the wrap test. FeistelPermutation::add_mod.
template <typename Ops, bool kSmallSides>
__attribute__((always_inline)) inline void add_mod_lanes(U32x8& x, const U32x8& f, uint32_t m) {
  const U32x8 s = x + f;
  if (kSmallSides) {
    x = s - m;
    Ops::min(x, s);
  } else {
    const U32x8 wrap = (U32x8)((s < x) | (s >= m));  // all-ones where s - m is the answer
    x = s - (m & wrap);
  }
}

// One round on eight lanes: x <- (x + scale(hash(y xor key), m)) mod m, the
// lane form of FeistelPermutation::encrypt's round.
template <typename Ops, bool kSmallSides>
__attribute__((always_inline)) inline void round_lanes(U32x8& x, const U32x8& y, uint32_t key,
                                                       uint32_t m) {
  U32x8 h = y ^ key;  // FeistelPermutation::hash
  h *= 0x2c1b3c6du;
  h ^= h >> 15;
  h *= 0x297a2d39u;
  h ^= h >> 16;
  h *= 0x9e3779b1u;
  Ops::scale(h, m);  // FeistelPermutation::scale
  add_mod_lanes<Ops, kSmallSides>(x, h, m);
}

template <typename Ops, bool kSmallSides>
__attribute__((always_inline)) inline bool kernel_body(const FeistelPlan& p, uint64_t* q,
                                                       uint32_t* r, size_t count, uint64_t* out) {
  U32x8 lane_q, lane_r;
  std::memcpy(&lane_q, p.lane_q, sizeof lane_q);
  std::memcpy(&lane_r, p.lane_r, sizeof lane_r);
  uint64_t base_q = *q;
  uint32_t base_r = *r;
  U64x4 flags = {0, 0, 0, 0};
  for (size_t at = 0; at < count; at += kStep) {
    U32x8 l[kUnroll], rr[kUnroll];
#pragma GCC unroll 4
    for (size_t u = 0; u < kUnroll; ++u) {
      // Inputs (base_q + lane_q + carry, (base_r + lane_r) mod b): the same
      // modular addition as a round, its carry added to the quotient.
      const U32x8 base_r_lanes = U32x8{} + base_r;
      rr[u] = base_r_lanes;
      add_mod_lanes<Ops, kSmallSides>(rr[u], lane_r, p.b);
      const U32x8 carry = (U32x8)(rr[u] < base_r_lanes);      // all-ones where it wrapped
      l[u] = static_cast<uint32_t>(base_q) + lane_q - carry;  // -(-1) adds the carry
      // Advance the base by 8*step.
      const uint32_t before = base_r;
      base_r = FeistelPermutation::add_mod(base_r, p.adv_r, p.b);
      base_q += p.adv_q + (base_r < before ? 1 : 0);
    }
#pragma GCC unroll 6
    for (int round = 0; round < FeistelPermutation::kRounds; ++round) {
      const uint32_t key = p.keys[round];
      const uint32_t m = (round % 2 == 0) ? p.a : p.b;
#pragma GCC unroll 4
      for (size_t u = 0; u < kUnroll; ++u) {
        round_lanes<Ops, kSmallSides>(l[u], rr[u], key, m);  // l becomes the new right half
        const U32x8 old_right = rr[u];
        rr[u] = l[u];
        l[u] = old_right;
      }
    }
#pragma GCC unroll 4
    for (size_t u = 0; u < kUnroll; ++u) {
      Ops::combine(l[u], rr[u], p.b, p.n, out + at + u * kLanes, flags);
    }
  }
  *q = base_q;
  *r = base_r;
  uint64_t any[4];
  std::memcpy(any, &flags, sizeof any);
  return (any[0] | any[1] | any[2] | any[3]) != 0;
}

}  // namespace
}  // namespace slurmddp::sampler
