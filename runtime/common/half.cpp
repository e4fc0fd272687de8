#include "common/half.h"

#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace slurmddp::common {

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// float64 -> float32 rounding to odd: inexact results get their last bit set,
// so that a second rounding to a type at least two bits narrower is correct
// (Note [Half rounding]).
float to_float_odd(double d) {
  const float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) {
    return f;
  }
  uint32_t u = bits_of(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) {
    u -= 1;  // back toward zero
  }
  return float_of(u | 1u);
}

#if defined(__x86_64__)
// F16C converts 8 elements per instruction with the same rounding.
__attribute__((target("avx,f16c"))) void floats_to_half_f16c(const float* src, uint16_t* dst,
                                                             size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) {
    dst[i] = float_to_half(src[i]);
  }
}

__attribute__((target("avx,f16c"))) void half_to_floats_f16c(const uint16_t* src, float* dst,
                                                             size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) {
    dst[i] = half_to_float(src[i]);
  }
}

// CPUID: F16C and AVX, and the OS saving the AVX registers (XGETBV).
bool detect_f16c() {
  unsigned a = 0;
  unsigned b = 0;
  unsigned c = 0;
  unsigned d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) {
    return false;
  }
  const bool f16c = (c & bit_F16C) != 0;
  const bool avx = (c & bit_AVX) != 0;
  const bool osxsave = (c & bit_OSXSAVE) != 0;
  if (!f16c || !avx || !osxsave) {
    return false;
  }
  unsigned lo = 0;
  unsigned hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6u) == 6u;  // XMM and YMM state enabled
}

bool have_f16c() {
  static const bool yes = detect_f16c();
  return yes;
}
#endif

}  // namespace

uint16_t float_to_half(float f) {
  uint32_t u = bits_of(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) {  // |f| >= 65536, inf or NaN: beyond every finite half
    if (u > 0x7f800000u) {
      return static_cast<uint16_t>(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    }
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (u < 0x38800000u) {  // below 2^-14: a subnormal half or zero
    // Adding 0.5 puts the half's last subnormal bit (2^-24) at the float's
    // last mantissa bit, so the float addition does the rounding.
    const float shifted = float_of(u) + 0.5f;
    return static_cast<uint16_t>(sign | (bits_of(shifted) - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to
  // nearest even; a carry may ripple into the exponent (up to infinity).
  const uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000000u + 0x0fffu + odd;
  return static_cast<uint16_t>(sign | (u >> 13));
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return float_of(sign | bits_of(magnitude));
  }
  if (exponent == 31) {
    return float_of(sign | 0x7f800000u | (mantissa << 13));
  }
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t float_to_bfloat16(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  }
  const uint32_t odd = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + odd) >> 16);
}

float bfloat16_to_float(uint16_t b) {
  return float_of(static_cast<uint32_t>(b) << 16);
}

uint16_t double_to_half(double d) {
  return float_to_half(to_float_odd(d));
}

uint16_t double_to_bfloat16(double d) {
  return float_to_bfloat16(to_float_odd(d));
}

void floats_to_half(const float* src, uint16_t* dst, size_t n) {
#if defined(__x86_64__)
  if (have_f16c()) {
    floats_to_half_f16c(src, dst, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; ++i) {
    dst[i] = float_to_half(src[i]);
  }
}

void half_to_floats(const uint16_t* src, float* dst, size_t n) {
#if defined(__x86_64__)
  if (have_f16c()) {
    half_to_floats_f16c(src, dst, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; ++i) {
    dst[i] = half_to_float(src[i]);
  }
}

void floats_to_bfloat16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    dst[i] = float_to_bfloat16(src[i]);
  }
}

void bfloat16_to_floats(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    dst[i] = bfloat16_to_float(src[i]);
  }
}

}  // namespace slurmddp::common
