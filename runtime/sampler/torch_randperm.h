// torch.randperm(n, generator=g) on the CPU, for g seeded with `seed` (only
// the low 32 bits matter), reproduced value for value. See
// Note [PyTorch randperm] in torch_randperm.cpp for the algorithm and the
// range where it is proven.
#pragma once

#include <cstdint>

namespace slurmddp::sampler {

// n above this cannot be stored as 32-bit values; parity mode refuses it.
constexpr uint64_t kTorchRandpermMaxN = 0xffffffffu;

// Writes the permutation of [0, n) into out[0..n). Requires n <= kTorchRandpermMaxN.
// O(n) time, no memory beyond `out`.
void torch_randperm(uint64_t seed, uint32_t n, uint32_t* out);

}  // namespace slurmddp::sampler
