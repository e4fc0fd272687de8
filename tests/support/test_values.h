// Deterministic gradient data with closed-form expectations, shared by the
// unit and multi-process grad_sync tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "slurmddp/communicator.h"
#include "slurmddp/grad_sync.h"

namespace slurmddp::support {

inline double get_value(DataType t, const void* p, size_t i) {
  return common::load_as_double(t, p, i);
}

inline void set_value(DataType t, void* p, size_t i, double v) {
  common::store_from_double(t, p, i, v);
}

// An integer in [-8, 8]: sums over up to 4 ranks and 3 steps stay exact in
// every dtype (bfloat16 holds integers up to 256 exactly).
inline double grad_value(int rank, size_t param, size_t k, int step = 0) {
  const uint64_t h = static_cast<uint64_t>(rank) * 7 + param * 3 + k * 5 +
                     static_cast<uint64_t>(step) * 11 + (k >> 7);
  return static_cast<double>(h % 17) - 8.0;
}

// The average the engine must produce from an exact sum: divided in the
// reduction type (float32 for float32 and 16-bit data, float64 for float64)
// and rounded once to the parameter's type.
inline double expected_average(DataType t, double sum, int ranks) {
  double avg = t == DataType::kFloat64
                   ? sum / ranks
                   : static_cast<double>(static_cast<float>(sum) / static_cast<float>(ranks));
  std::vector<uint8_t> one(8);
  set_value(t, one.data(), 0, avg);
  return get_value(t, one.data(), 0);
}

// A non-integer value in (-1000, 1000), a multiple of 2^-10 (exact in float32),
// from a cheap hash of its coordinates: data for the compression bounds.
inline double real_value(int rank, size_t param, size_t k) {
  uint64_t z = static_cast<uint64_t>(rank) * 0x9e3779b97f4a7c15ULL + param * 0xbf58476d1ce4e5b9ULL +
               k * 0x94d049bb133111ebULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return std::ldexp(static_cast<double>(z % 2000001) - 1000000.0, -10);
}

// Parameter values rank r starts with (rank 0's must win the broadcast).
inline double param_value(int rank, size_t param, size_t k) {
  return static_cast<double>(
      (rank * 1000 + static_cast<int>(param) * 10 + static_cast<int>(k % 10)) % 2000);
}

struct Shape {
  size_t count;
  DataType dtype;
};

// Random layouts with zero-size, odd-size, larger-than-cap parameters and
// mixed dtypes (cap given in bytes).
inline std::vector<Shape> random_layout(uint64_t seed, size_t n, size_t cap_bytes, bool mixed) {
  std::mt19937_64 rng(seed);
  const DataType types[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                            DataType::kBFloat16};
  std::vector<Shape> out;
  for (size_t i = 0; i < n; ++i) {
    const DataType t = mixed ? types[rng() % 4] : DataType::kFloat32;
    size_t count = 0;
    switch (rng() % 6) {
      case 0:
        count = 0;
        break;
      case 1:
        count = 1 + 2 * (rng() % 50);  // odd
        break;
      case 2:
        count = cap_bytes / element_size(t) + 1 + rng() % 1000;  // larger than the cap
        break;
      default:
        count = 1 + rng() % (cap_bytes / element_size(t) / 3 + 1);
    }
    out.push_back({count, t});
  }
  return out;
}

// One rank's buffers for a layout.
struct Model {
  std::vector<Shape> shapes;
  std::vector<std::vector<uint8_t>> data;
  std::vector<std::vector<uint8_t>> grads;

  Model(std::vector<Shape> s, bool with_grads) : shapes(std::move(s)) {
    for (const auto& sh : shapes) {
      data.emplace_back(sh.count * element_size(sh.dtype) + 1);
      grads.emplace_back(with_grads ? sh.count * element_size(sh.dtype) + 1 : 0);
    }
  }

  std::vector<GradParameter> parameters(bool with_grads) {
    std::vector<GradParameter> out;
    for (size_t i = 0; i < shapes.size(); ++i) {
      GradParameter p;
      p.name = "layer" + std::to_string(i / 2) + (i % 2 ? ".bias" : ".weight");
      p.data = data[i].data();
      p.grad = with_grads ? grads[i].data() : nullptr;
      p.count = shapes[i].count;
      p.dtype = shapes[i].dtype;
      out.push_back(p);
    }
    return out;
  }
};

}  // namespace slurmddp::support
