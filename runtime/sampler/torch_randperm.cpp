#include "sampler/torch_randperm.h"

#include <algorithm>
#include <cstddef>

#include "sampler/mt19937.h"

namespace slurmddp::sampler {

// Note [PyTorch randperm]
// PyTorch 1.13's CPU randperm fills r = [0, 1, ..., n-1] and then, for
// i = 0 .. n-2, draws one 32-bit Mersenne-Twister word w (CPUGeneratorImpl::random)
// and swaps r[i] with r[i + w % (n - i)]: a forward Fisher-Yates whose modulo
// is slightly biased for large n but fully deterministic. The generator of
// torch.Generator().manual_seed(s) is mt19937 seeded with s mod 2^32 (negative
// Python seeds are taken as their two's-complement 64-bit value first).
// PyTorch 2.6 keeps that for n < 2^32/20 (kTorchRandpermSplit) and above it
// draws the "inside-out" Fisher-Yates with 64-bit words: for i = 0 .. n-1,
// w = (first draw << 32) | second draw (CPUGeneratorImpl::random64), z = w % (i+1),
// r[i] = r[z], r[z] = i. Releases before 2.6 have no such branch. The unit test
// `sampler` compares against the installed torch over hundreds of
// configurations, and the slow suite at n = 214,748,370 in full.
//
// Speed: the draws do not depend on the array, so a block of swap targets is
// computed first and each target is prefetched a fixed distance ahead of its
// swap. The swaps still happen strictly in order, so the result is unchanged;
// the memory latency of the random accesses is what this hides.
namespace {
constexpr size_t kBlock = 4096;
constexpr size_t kPrefetchDistance = 64;

inline void prefetch_for_write(const uint32_t* p) {
  __builtin_prefetch(p, 1, 3);
}

}  // namespace

// PyTorch 2.6's branch for n >= kTorchRandpermSplit (Note [PyTorch randperm]).
void torch_randperm_inside_out(uint64_t seed, uint32_t n, uint32_t* out) {
  Mt19937 engine(seed);
  uint32_t words[2 * kBlock];
  uint32_t targets[kBlock];
  for (uint32_t start = 0; start < n;) {
    const size_t count = std::min<size_t>(kBlock, n - start);
    engine.fill(words, 2 * count);
    for (size_t k = 0; k < count; ++k) {
      const uint64_t w = (static_cast<uint64_t>(words[2 * k]) << 32) | words[2 * k + 1];
      targets[k] = static_cast<uint32_t>(w % (uint64_t{start} + k + 1));
    }
    const size_t lead = std::min(count, kPrefetchDistance);
    for (size_t k = 0; k < lead; ++k) {
      prefetch_for_write(out + targets[k]);
    }
    for (size_t k = 0; k < count; ++k) {
      if (k + kPrefetchDistance < count) {
        prefetch_for_write(out + targets[k + kPrefetchDistance]);
      }
      const uint32_t i = start + static_cast<uint32_t>(k);
      const uint32_t z = targets[k];
      out[i] = i;  // as PyTorch writes it: z == i leaves i in place
      out[i] = out[z];
      out[z] = i;
    }
    start += static_cast<uint32_t>(count);
  }
}

void torch_randperm(uint64_t seed, uint32_t n, uint32_t* out, bool since_2_6) {
  if (since_2_6 && n >= kTorchRandpermSplit) {
    torch_randperm_inside_out(seed, n, out);
    return;
  }
  for (uint32_t i = 0; i < n; ++i) {
    out[i] = i;
  }
  if (n < 2) {
    return;
  }

  Mt19937 engine(seed);
  uint32_t targets[kBlock];
  const uint32_t last = n - 1;  // steps i = 0 .. n-2
  for (uint32_t start = 0; start < last;) {
    const size_t count = std::min<size_t>(kBlock, last - start);
    engine.fill(targets, count);
    for (size_t k = 0; k < count; ++k) {
      const uint32_t i = start + static_cast<uint32_t>(k);
      targets[k] = i + targets[k] % (n - i);
    }
    const size_t lead = std::min(count, kPrefetchDistance);
    for (size_t k = 0; k < lead; ++k) {
      prefetch_for_write(out + targets[k]);
    }
    for (size_t k = 0; k < count; ++k) {
      if (k + kPrefetchDistance < count) {
        prefetch_for_write(out + targets[k + kPrefetchDistance]);
      }
      const uint32_t i = start + static_cast<uint32_t>(k);
      const uint32_t j = targets[k];
      const uint32_t saved = out[i];
      out[i] = out[j];
      out[j] = saved;
    }
    start += static_cast<uint32_t>(count);
  }
}

}  // namespace slurmddp::sampler
