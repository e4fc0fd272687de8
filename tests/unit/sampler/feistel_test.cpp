// The keyed permutation behind the scalable mode: an exact bijection for every
// n, and statistically uniform. Keys are fixed, so the statistics are the same
// on every run: a threshold is either met or the permutation is broken.
#include "sampler/feistel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

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
  std::vector<uint64_t> fast(n), portable(n);
  perm.map_progression(0, 1, n, fast.data());
  perm.map_progression(0, 1, n, portable.data(), /*allow_simd=*/false);
  for (uint64_t x = 0; x < n; ++x) {
    const uint64_t y = perm(x);
    ASSERT_LT(y, n) << "n=" << n << " key=" << key << " x=" << x;
    ASSERT_EQ(seen[y], 0) << "n=" << n << " key=" << key << ": " << y << " hit twice";
    ASSERT_EQ(fast[x], y) << "kernel and operator() disagree; n=" << n << " x=" << x;
    ASSERT_EQ(portable[x], y) << "portable kernel and operator() disagree; n=" << n << " x=" << x;
    seen[y] = 1;
  }
}

TEST(Feistel, ExactBijectionForEverySmallSize) {
  for (uint64_t n = 1; n <= 1100; ++n) {
    for (uint64_t key : {uint64_t{0}, uint64_t{1}, uint64_t{0xdeadbeefcafef00d}}) {
      expect_bijection(n, key);
      if (HasFatalFailure()) {
        return;
      }
    }
  }
}

TEST(Feistel, ExactBijectionAroundSquaresAndPowersOfTwo) {
  for (int bits = 8; bits <= 20; ++bits) {
    const uint64_t p = uint64_t{1} << bits;
    for (uint64_t n : {p - 1, p, p + 1}) {
      expect_bijection(n, 0x51ed270b27e5ac1dull ^ n);
      if (HasFatalFailure()) {
        return;
      }
    }
  }
  for (uint64_t side : {uint64_t{100}, uint64_t{1000}, uint64_t{1021}}) {
    for (uint64_t n : {side * side - 1, side * side, side * side + 1, side * (side + 1) + 1}) {
      expect_bijection(n, n);
      if (HasFatalFailure()) {
        return;
      }
    }
  }
}

// The domain is rows x cols with cols = ceil(sqrt(n)) and rows = ceil(n/cols)
// (each at least 16), so at most cols - 1 spare values need cycle walking.
TEST(Feistel, DomainIsTheSmallestNearSquareCoveringN) {
  EXPECT_EQ(FeistelPermutation(1, 0).rows(), 16u);
  EXPECT_EQ(FeistelPermutation(1, 0).cols(), 16u);
  EXPECT_EQ(FeistelPermutation(257, 0).cols(), 17u);
  EXPECT_EQ(FeistelPermutation(257, 0).rows(), 16u);
  EXPECT_EQ(FeistelPermutation(1000000, 0).cols(), 1000u);
  EXPECT_EQ(FeistelPermutation(1000000, 0).rows(), 1000u);
  EXPECT_EQ(FeistelPermutation(1000001, 0).cols(), 1001u);
  EXPECT_EQ(FeistelPermutation(1000001, 0).rows(), 1000u);
  for (uint64_t n : {uint64_t{300}, uint64_t{99999989}, uint64_t{1} << 40, (uint64_t{1} << 40) + 1,
                     uint64_t{10000000000}, (uint64_t{1} << 62) + 1, (uint64_t{1} << 63) - 1,
                     uint64_t{1} << 63}) {
    FeistelPermutation perm(n, 0);
    const uint64_t rows = perm.rows(), cols = perm.cols();
    EXPECT_GE(cols * cols, n) << n;
    EXPECT_LT((cols - 1) * (cols - 1), n) << n;
    EXPECT_GE(rows * cols, n) << n;
    EXPECT_LT(rows * cols - n, cols) << n;
  }
}

// The kernel generates strided inputs itself: check it against operator() for
// starts and steps of every size, on both kernels and both side classes
// (sides <= 2^31 and larger, which need n > 2^62).
TEST(Feistel, StridedKernelMatchesScalarPath) {
  const uint64_t sizes[] = {1000,
                            1000003,
                            uint64_t{1} << 40,
                            uint64_t{10000000000},
                            (uint64_t{1} << 62) - 5,
                            (uint64_t{1} << 62) + 5,
                            (uint64_t{1} << 63) - 1};
  for (uint64_t n : sizes) {
    FeistelPermutation perm(n, n * 31 + 7);
    const uint64_t steps[] = {
        1, 3, 8, 1000, perm.cols() - 1, perm.cols(), perm.cols() + 1, n / 2000 + 1};
    for (uint64_t step : steps) {
      const size_t count = static_cast<size_t>(std::min<uint64_t>(1500, (n - 1) / step + 1));
      for (uint64_t start : {uint64_t{0}, uint64_t{5}, n - 1 - (count - 1) * step}) {
        std::vector<uint64_t> fast(count), portable(count);
        perm.map_progression(start, step, count, fast.data());
        perm.map_progression(start, step, count, portable.data(), false);
        for (size_t j = 0; j < count; ++j) {
          const uint64_t want = perm(start + j * step);
          ASSERT_EQ(fast[j], want)
              << "n=" << n << " step=" << step << " start=" << start << " j=" << j;
          ASSERT_EQ(portable[j], want) << "n=" << n << " step=" << step << " start=" << start;
        }
      }
    }
  }
}

TEST(Feistel, HugeDomainsStayInRangeAndInjective) {
  // No exhaustive check is possible at 2^63: the images of a few thousand
  // points must be in range and pairwise distinct.
  for (uint64_t n : {uint64_t{10000000000}, (uint64_t{1} << 62) + 12345, (uint64_t{1} << 63) - 1,
                     uint64_t{1} << 63}) {
    FeistelPermutation perm(n, 99);
    std::vector<uint64_t> images;
    for (uint64_t x = 0; x < 4000; ++x) {
      images.push_back(perm(x));
    }
    for (uint64_t x = n - 4000; x < n; ++x) {
      images.push_back(perm(x));
    }
    for (uint64_t y : images) {
      ASSERT_LT(y, n);
    }
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
      for (uint64_t x = 0; x < n; ++x) {
        count[x * n + perm(x)] += 1.0;
      }
    }
    const double expected = static_cast<double>(keys) / static_cast<double>(n);
    double chi2 = 0;
    for (double c : count) {
      chi2 += (c - expected) * (c - expected) / expected;
    }
    const double df = static_cast<double>((n - 1) * (n - 1));
    // df = 4 for n = 3 is below the approximation's range; use the exact 1e-6
    // quantile of chi2(4), 32.67.
    const double limit = n == 3 ? 32.67 : chi2_limit(df);
    std::printf("positions n=%d: chi2=%.1f df=%.0f limit=%.1f\n", static_cast<int>(n), chi2, df,
                limit);
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
    for (uint64_t x = 0; x < n; ++x) {
      count[(x / 100) * 10 + perm(x) / 100] += 1.0;
    }
  }
  const double expected = keys * n / 100.0;
  double chi2 = 0;
  for (double c : count) {
    chi2 += (c - expected) * (c - expected) / expected;
  }
  std::printf("deciles n=1000: chi2=%.1f df=81 limit=%.1f\n", chi2, chi2_limit(81));
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
      if (x > 0 && y > previous) {
        ++ascending;
      }
      previous = y;
    }
    double chi2 = 0;
    const double expected = samples / 100.0;
    for (double c : buckets) {
      chi2 += (c - expected) * (c - expected) / expected;
    }
    std::printf("consecutive key=%llu: chi2=%.1f df=99 limit=%.1f ascending=%.4f\n",
                static_cast<unsigned long long>(key), chi2, chi2_limit(99),
                ascending / static_cast<double>(samples - 1));
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
    for (uint64_t x = 0; x < n; ++x) {
      coincidences += a(x) == b(x) ? 1 : 0;
    }
  }
  std::printf("coincidences between consecutive keys: %d (expected 200)\n", coincidences);
  EXPECT_GT(coincidences, 100);
  EXPECT_LT(coincidences, 300);
}

}  // namespace
}  // namespace slurmddp::sampler
