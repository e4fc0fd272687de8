// Kernels of the GPU gradient-sync benchmark (compiled by nvcc into a plain
// object; callable from C++).
#pragma once

#include <cstddef>

struct CUstream_st;

namespace slurmddp::bench {

// p[j] = scale * (j % 7 + 1) for j < n, on `stream`.
void fill_pattern(float* p, size_t n, float scale, CUstream_st* stream);

// Keeps the GPU busy for `cycles` clock cycles (one block of 32 threads spins
// on the SM clock), then does fill_pattern: a stand-in for the backward
// kernels that produce one gradient.
void spin_then_fill(long long cycles, float* p, size_t n, float scale, CUstream_st* stream);

}  // namespace slurmddp::bench
