// The two private engines of the PyTorch-parity mode: the Mersenne Twister and
// the blocked, prefetching randperm, each against a plain reference.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "reference.h"
#include "sampler/mt19937.h"
#include "sampler/torch_randperm.h"

namespace slurmddp::sampler {
namespace {

TEST(Mt19937, MatchesStandardEngineForManySeeds) {
  // std::mt19937 is specified by the C++ standard; PyTorch seeds with the low
  // 32 bits of a 64-bit seed.
  const uint64_t seeds[] = {
      0, 1, 42, 5489, 0xffffffffull, 0x100000000ull, 0x123456789abcdefull, ~uint64_t{0}};
  for (uint64_t seed : seeds) {
    Mt19937 ours(seed);
    std::mt19937 std_engine(static_cast<std::mt19937::result_type>(seed & 0xffffffffu));
    for (int i = 0; i < 3 * Mt19937::kStateWords + 7; ++i) {
      ASSERT_EQ(ours(), std_engine()) << "seed=" << seed << " draw=" << i;
    }
  }
}

TEST(Mt19937, StandardTenThousandthDraw) {
  // The C++ standard's required check value for mt19937 default-seeded (5489).
  Mt19937 engine(5489);
  uint32_t v = 0;
  for (int i = 0; i < 10000; ++i) {
    v = engine();
  }
  EXPECT_EQ(v, 4123659995u);
}

TEST(Mt19937, BulkFillEqualsSingleDraws) {
  Mt19937 single(7), bulk(7);
  std::vector<uint32_t> got(5000);
  // Uneven chunks crossing the 624-word regeneration boundary.
  size_t at = 0;
  for (size_t chunk : {1u, 623u, 1u, 1000u, 624u, 625u, 2126u}) {
    bulk.fill(got.data() + at, chunk);
    at += chunk;
  }
  ASSERT_EQ(at, got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], single()) << "draw " << i;
  }
}

TEST(TorchRandperm, EqualsNaiveFisherYates) {
  // Sizes around the 624-draw state refresh and the 4096-step blocks of the
  // optimized loop.
  const uint32_t sizes[] = {0,    1,    2,    3,    10,   623,  624,  625,   626,   1248,
                            1249, 4095, 4096, 4097, 4098, 8192, 8193, 12289, 65537, 300007};
  const uint64_t seeds[] = {0, 1, 31337, 0xfffffffffull};
  for (uint32_t n : sizes) {
    for (uint64_t seed : seeds) {
      std::vector<uint32_t> got(n);
      torch_randperm(seed, n, got.data());
      const std::vector<int64_t> want = sampler_test::naive_randperm(seed, n);
      for (uint32_t i = 0; i < n; ++i) {
        ASSERT_EQ(static_cast<int64_t>(got[i]), want[i])
            << "n=" << n << " seed=" << seed << " i=" << i;
      }
    }
  }
}

TEST(TorchRandperm, InsideOutEqualsNaiveInsideOut) {
  // PyTorch 2.6's algorithm above 2^32/20, checked at small sizes (the slow
  // suite compares the full size with the installed torch where it is 2.6+).
  const uint32_t sizes[] = {0, 1, 2, 3, 311, 312, 313, 624, 4095, 4096, 4097, 8193, 65537};
  const uint64_t seeds[] = {0, 1, 31337, 0xfffffffffull};
  for (uint32_t n : sizes) {
    for (uint64_t seed : seeds) {
      std::vector<uint32_t> got(n);
      torch_randperm_inside_out(seed, n, got.data());
      const std::vector<int64_t> want = sampler_test::naive_randperm_inside_out(seed, n);
      for (uint32_t i = 0; i < n; ++i) {
        ASSERT_EQ(static_cast<int64_t>(got[i]), want[i])
            << "n=" << n << " seed=" << seed << " i=" << i;
      }
    }
  }
  // Below the split both releases draw the classic shuffle.
  std::vector<uint32_t> classic(5000), since(5000);
  torch_randperm(9, 5000, classic.data(), false);
  torch_randperm(9, 5000, since.data(), true);
  EXPECT_EQ(classic, since);
}

TEST(TorchRandperm, SeedUsesLowThirtyTwoBitsOnly) {
  std::vector<uint32_t> a(1000), b(1000);
  torch_randperm(77, 1000, a.data());
  torch_randperm((uint64_t{5} << 32) | 77, 1000, b.data());
  EXPECT_EQ(a, b);
  torch_randperm(78, 1000, b.data());
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace slurmddp::sampler
