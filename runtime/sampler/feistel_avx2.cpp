// The Feistel kernel compiled for AVX2, used only when the CPU has it. The
// target pragma applies to everything below, including the shared kernel
// template, so this translation unit is the only place AVX2 code lives.
// Every header the kernel needs is included before the target pragma: inline
// library functions defined under it would be AVX2 code that the linker could
// hand to the portable build.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sampler/feistel.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SLURMDDP_FEISTEL_AVX2 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif
#include <immintrin.h>
#endif

#include "sampler/feistel_kernel.h"

namespace slurmddp::sampler {

#if SLURMDDP_FEISTEL_AVX2
namespace {

// PortableOps with AVX2 instructions the portable forms do not reach.
struct Avx2Ops {
  // floor(h * m / 2^32) per lane with the 32x32->64 multiply (vpmuludq): the
  // compiler cannot see that both factors fit in 32 bits and would emit a full
  // 64-bit multiply.
  __attribute__((always_inline)) static void scale(U32x8& h, uint32_t m) {
    __m256i v;
    std::memcpy(&v, &h, sizeof v);
    const __m256i mm = _mm256_set1_epi64x(static_cast<long long>(m));
    const __m256i even = _mm256_srli_epi64(_mm256_mul_epu32(v, mm), 32);  // lanes 0, 2, 4, 6
    const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(v, 32), mm);   // high halves: 1, 3, 5, 7
    const __m256i both = _mm256_blend_epi32(even, odd, 0xaa);
    std::memcpy(&h, &both, sizeof h);
  }
  __attribute__((always_inline)) static void min(U32x8& x, const U32x8& y) {
    __m256i a, b;
    std::memcpy(&a, &x, sizeof a);
    std::memcpy(&b, &y, sizeof b);
    const __m256i m = _mm256_min_epu32(a, b);
    std::memcpy(&x, &m, sizeof x);
  }
  // Values are below 2^63, so the signed 64-bit compare is exact.
  __attribute__((always_inline)) static void combine(const U32x8& l, const U32x8& r, uint32_t b,
                                                     uint64_t n, uint64_t* out, U64x4& flags) {
    __m256i lv, rv, f;
    std::memcpy(&lv, &l, sizeof lv);
    std::memcpy(&rv, &r, sizeof rv);
    std::memcpy(&f, &flags, sizeof f);
    const __m256i bb = _mm256_set1_epi64x(static_cast<long long>(b));
    const __m256i last = _mm256_set1_epi64x(static_cast<long long>(n - 1));
    for (size_t k = 0; k < 2; ++k) {
      const __m128i lh = k == 0 ? _mm256_castsi256_si128(lv) : _mm256_extracti128_si256(lv, 1);
      const __m128i rh = k == 0 ? _mm256_castsi256_si128(rv) : _mm256_extracti128_si256(rv, 1);
      const __m256i y = _mm256_add_epi64(_mm256_mul_epu32(_mm256_cvtepu32_epi64(lh), bb),
                                         _mm256_cvtepu32_epi64(rh));
      f = _mm256_or_si256(f, _mm256_cmpgt_epi64(y, last));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 * k), y);
    }
    std::memcpy(&flags, &f, sizeof flags);
  }
};

bool kernel_avx2_small(const FeistelPlan& p, uint64_t* q, uint32_t* r, size_t count,
                       uint64_t* out) {
  return kernel_body<Avx2Ops, true>(p, q, r, count, out);
}
bool kernel_avx2_any(const FeistelPlan& p, uint64_t* q, uint32_t* r, size_t count, uint64_t* out) {
  return kernel_body<Avx2Ops, false>(p, q, r, count, out);
}

}  // namespace
#endif

#if SLURMDDP_FEISTEL_AVX2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

FeistelKernels feistel_kernels_avx2() {
#if SLURMDDP_FEISTEL_AVX2
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) {
    return {kernel_avx2_small, kernel_avx2_any};
  }
#endif
  return {nullptr, nullptr};
}

}  // namespace slurmddp::sampler
