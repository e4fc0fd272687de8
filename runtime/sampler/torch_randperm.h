// torch.randperm(n, generator=g) on the CPU, for g seeded with `seed` (only
// the low 32 bits matter), reproduced value for value. See
// Note [PyTorch randperm] in torch_randperm.cpp for the algorithm and the
// range where it is proven.
#pragma once

#include <cstdint>

namespace slurmddp::sampler {

// n above this cannot be stored as 32-bit values; parity mode refuses it.
constexpr uint64_t kTorchRandpermMaxN = 0xffffffffu;

// PyTorch 2.6 and later shuffle differently from this size on.
constexpr uint32_t kTorchRandpermSplit = 0xffffffffu / 20;

// Writes the permutation of [0, n) into out[0..n). Requires n <= kTorchRandpermMaxN.
// `since_2_6`: as PyTorch 2.6 and later draw it (the same below kTorchRandpermSplit).
// O(n) time, no memory beyond `out`.
void torch_randperm(uint64_t seed, uint32_t n, uint32_t* out, bool since_2_6 = true);

// PyTorch 2.6's algorithm for n >= kTorchRandpermSplit, at any n (torch_randperm
// calls it from that size on; the unit tests reach it at small sizes here).
void torch_randperm_inside_out(uint64_t seed, uint32_t n, uint32_t* out);

}  // namespace slurmddp::sampler
