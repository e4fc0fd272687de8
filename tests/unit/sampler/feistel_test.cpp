// The keyed permutation behind the scalable mode: an exact bijection for every
// n, and statistically uniform. Keys are fixed, so the statistics are the same
// on every run: a threshold is either met or the permutation is broken.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "sampler/feistel.h"

namespace slurmddp::sampler {
namespace {

// Upper quantile of the chi-square distribution with `df` degrees of freedom
// at tail probability 1e-6 (Wilson-Hilferty approximation, accurate to a
// fraction of a percent for df >= 20). z = 4.7534 is the standard normal
// quantile for 1e-6.
double chi2_limit(double df) {
  const double z = 4.7534;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

void expect_bijection(uint64_t n, uint64_t key) {
  FeistelPermutation perm(n, key);
  std::vector<uint8_t> seen(n, 0);
  std::vector<uint64_t> in(n), out(n);
  for (uint64_t x = 0; x < n; ++x) in[x] = x;
  perm.map(in.data(), out.data(), n);
  for (uint64_t x = 0; x < n; ++x) {
    const uint64_t y = perm(x);
    ASSERT_LT(y, n) << "n=" << n << " key=" << key << " x=" << x;
    ASSERT_EQ(seen[y], 0) << "n=" << n << " key=" << key << ": " << y << " hit twice";
    ASSERT_EQ(out[x], y) << "map() and operator() disagree; n=" << n << " x=" << x;
    seen[y] = 1;
  }
}

TEST(Feistel, ExactBijectionForEverySmallSize) {
  for (uint64_t n = 1; n <= 1100; ++n) {
    for (uint64_t key : {uint64_t{0}, uint64_t{1}, uint64_t{0xdeadbeefcafef00d}}) {
      expect_bijection(n, key);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(Feistel, ExactBijectionAroundPowersOfTwo) {
  for (int bits = 8; bits <= 20; ++bits) {
    const uint64_t p = uint64_t{1} << bits;
    for (uint64_t n : {p - 1, p, p + 1}) {
      expect_bijection(n, 0x51ed270b27e5ac1dull ^ n);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(Feistel, DomainIsSmallestPowerOfTwoAtLeastEightBits) {
  EXPECT_EQ(FeistelPermutation(1, 0).domain_bits(), 8);
  EXPECT_EQ(FeistelPermutation(256, 0).domain_bits(), 8);
  EXPECT_EQ(FeistelPermutation(257, 0).domain_bits(), 9);
  EXPECT_EQ(FeistelPermutation(uint64_t{1} << 40, 0).domain_bits(), 40);
  EXPECT_EQ(FeistelPermutation((uint64_t{1} << 40) + 1, 0).domain_bits(), 41);
  EXPECT_EQ(FeistelPermutation(uint64_t{1} << 63, 0).domain_bits(), 63);
}

TEST(Feistel, HugeDomainsStayInRangeAndInjective) {
  // No exhaustive check is possible at 2^63: the images of a few thousand
  // points must be in range and pairwise distinct.
  for (uint64_t n : {uint64_t{10000000000}, (uint64_t{1} << 62) + 12345, (uint64_t{1} << 63) - 1,
                     uint64_t{1} << 63}) {
    FeistelPermutation perm(n, 99);
    std::vector<uint64_t> images;
    for (uint64_t x = 0; x < 4000; ++x) images.push_back(perm(x));
    for (uint64_t x = n - 4000; x < n; ++x) images.push_back(perm(x));
    for (uint64_t y : images) ASSERT_LT(y, n);
    std::sort(images.begin(), images.end());
    EXPECT_EQ(std::adjacent_find(images.begin(), images.end()), images.end()) << "n=" << n;
  }
}

// Chi-square over (value, position) cells for many keys: in a uniform random
// permutation every value lands in every position with probability 1/n.
TEST(Feistel, PositionsUniformSmallN) {
  for (uint64_t n : {uint64_t{3}, uint64_t{10}, uint64_t{37}}) {
    const int keys = 2000 * static_cast<int>(n);  // 2000 expected per cell
    std::vector<double> count(n * n, 0.0);
    for (int k = 0; k < keys; ++k) {
      FeistelPermutation perm(n, mix64(static_cast<uint64_t>(k) + 1000));
      for (uint64_t x = 0; x < n; ++x) count[x * n + perm(x)] += 1.0;
    }
    const double expected = static_cast<double>(keys) / static_cast<double>(n);
    double chi2 = 0;
    for (double c : count) chi2 += (c - expected) * (c - expected) / expected;
    const double df = static_cast<double>((n - 1) * (n - 1));
    // df = 4 for n = 3 is below the approximation's range; use the exact 1e-6
    // quantile of chi2(4), 32.67.
    const double limit = n == 3 ? 32.67 : chi2_limit(df);
    EXPECT_LT(chi2, limit) << "n=" << n << " df=" << df;
  }
}

// Larger n, where cycle walking matters (1000 in a domain of 1024): where do
// values land, bucketed 10 x 10 (value decile, position decile)?
TEST(Feistel, PositionsUniformByDecileWithCycleWalking) {
  const uint64_t n = 1000;
  const int keys = 400;
  std::vector<double> count(100, 0.0);
  for (int k = 0; k < keys; ++k) {
    FeistelPermutation perm(n, mix64(static_cast<uint64_t>(k) * 7 + 3));
    for (uint64_t x = 0; x < n; ++x) count[(x / 100) * 10 + perm(x) / 100] += 1.0;
  }
  const double expected = keys * n / 100.0;
  double chi2 = 0;
  for (double c : count) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, chi2_limit(81));
}

// Consecutive inputs must not give related outputs: the images of 0..99999
// spread evenly over 100 value buckets, and neighbours are ordered either way
// half of the time.
TEST(Feistel, ConsecutiveInputsLookIndependent) {
  const uint64_t n = 1000003;
  for (uint64_t key : {uint64_t{1}, uint64_t{2}, uint64_t{0x8000000000000000}}) {
    FeistelPermutation perm(n, key);
    std::vector<double> buckets(100, 0.0);
    int ascending = 0;
    uint64_t previous = perm(0);
    const int samples = 100000;
    for (int x = 0; x < samples; ++x) {
      const uint64_t y = perm(static_cast<uint64_t>(x));
      buckets[y * 100 / n] += 1.0;
      if (x > 0 && y > previous) ++ascending;
      previous = y;
    }
    double chi2 = 0;
    const double expected = samples / 100.0;
    for (double c : buckets) chi2 += (c - expected) * (c - expected) / expected;
    EXPECT_LT(chi2, chi2_limit(99)) << "key=" << key;
    // Fraction ascending: mean 1/2, sd 1/(2*sqrt(N)) = 0.0016; allow 6 sd.
    EXPECT_NEAR(ascending / static_cast<double>(samples - 1), 0.5, 0.0095) << "key=" << key;
  }
}

// Two keys (two epochs) give unrelated permutations: the number of fixed
// coincidences pi_a(x) == pi_b(x) over 200 key pairs at n = 1000 is
// Poisson(200); 300 is more than 6 sd away.
TEST(Feistel, DifferentKeysGiveUnrelatedPermutations) {
  const uint64_t n = 1000;
  int coincidences = 0;
  for (uint64_t k = 0; k < 200; ++k) {
    FeistelPermutation a(n, mix64(k)), b(n, mix64(k + 1));
    for (uint64_t x = 0; x < n; ++x) coincidences += a(x) == b(x) ? 1 : 0;
  }
  EXPECT_GT(coincidences, 100);
  EXPECT_LT(coincidences, 300);
}

}  // namespace
}  // namespace slurmddp::sampler
