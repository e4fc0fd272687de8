// Straightforward references the optimized sampler is checked against. They
// transcribe the documented algorithms one step at a time, with no blocking,
// prefetching or index arithmetic shortcuts.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace slurmddp::sampler_test {

// torch.randperm(n) on the CPU (PyTorch 1.13) for a generator seeded `seed`,
// driven by the standard library's mt19937 (same recurrence, same seeding of
// the low 32 bits): r = 0..n-1; for i in 0..n-2 swap r[i], r[i + draw % (n-i)].
inline std::vector<int64_t> naive_randperm(uint64_t seed, int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  std::mt19937 gen(static_cast<std::mt19937::result_type>(seed & 0xffffffffu));
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(gen()) % (n - i);
    std::swap(r[static_cast<size_t>(i)], r[static_cast<size_t>(z + i)]);
  }
  return r;
}

// PyTorch 2.6's randperm for n >= 2^32/20, line by line: the "inside-out"
// Fisher-Yates with 64-bit draws (first 32-bit word high, second low).
inline std::vector<int64_t> naive_randperm_inside_out(uint64_t seed, int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  std::mt19937 gen(static_cast<std::mt19937::result_type>(seed & 0xffffffffu));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t hi = gen();
    const uint64_t lo = gen();
    const auto z = static_cast<int64_t>(((hi << 32) | lo) % static_cast<uint64_t>(i + 1));
    r[static_cast<size_t>(i)] = i;
    r[static_cast<size_t>(i)] = r[static_cast<size_t>(z)];
    r[static_cast<size_t>(z)] = i;
  }
  return r;
}

// torch.utils.data.distributed.DistributedSampler.__iter__, line by line, over a
// given permutation (`indices`, the shuffled or unshuffled list).
inline std::vector<int64_t> naive_torch_shard(std::vector<int64_t> indices, int64_t replicas,
                                              int64_t rank, bool drop_last) {
  const int64_t n = static_cast<int64_t>(indices.size());
  int64_t num_samples;
  if (drop_last && n % replicas != 0) {
    // math.ceil((n - replicas) / replicas), with Python's true division
    const int64_t num = n - replicas;
    num_samples = num >= 0 ? (num + replicas - 1) / replicas : -((-num) / replicas);
  } else {
    num_samples = (n + replicas - 1) / replicas;
  }
  const int64_t total = num_samples * replicas;
  if (!drop_last) {
    const int64_t padding = total - n;
    if (padding <= n) {
      indices.insert(indices.end(), indices.begin(), indices.begin() + padding);
    } else {
      std::vector<int64_t> repeated;
      const int64_t times = (padding + n - 1) / n;
      for (int64_t t = 0; t < times; ++t)
        repeated.insert(repeated.end(), indices.begin(), indices.end());
      indices.insert(indices.end(), repeated.begin(), repeated.begin() + padding);
    }
  } else {
    indices.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> shard;
  for (int64_t p = rank; p < total; p += replicas) shard.push_back(indices[static_cast<size_t>(p)]);
  return shard;
}

inline std::vector<int64_t> iota_vector(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

}  // namespace slurmddp::sampler_test
