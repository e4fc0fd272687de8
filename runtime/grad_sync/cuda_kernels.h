// The batched copy/convert kernel behind bucket copy-in, copy-out and
// compression on CUDA (cuda_kernels.cu). Plain C++: callable from .cpp files.
//
// Note [Batched transfer kernel]
// One launch moves a whole bucket: a table in device memory lists its
// segments (source, destination, element count, first block). Block k works
// on the segment whose block range holds k (a binary search in the table), on
// elements [(k - first_block) * kElementsPerBlock, ... + kElementsPerBlock).
// The table is built and uploaded once, when the GradSync is constructed,
// because gradient and bucket addresses do not change; a step then costs one
// launch per bucket and direction instead of one copy per parameter.
#pragma once

#include <cstdint>

#include "slurmddp/communicator.h"

namespace slurmddp::grad_sync::cuda {

inline constexpr uint32_t kThreadsPerBlock = 256;
inline constexpr uint64_t kElementsPerBlock = 4096;

struct KernelSegment {
  const void* src;
  void* dst;
  uint64_t count;
  uint64_t first_block;
};

// Blocks a segment of `count` elements needs.
inline uint64_t blocks_for(uint64_t count) {
  return (count + kElementsPerBlock - 1) / kElementsPerBlock;
}

// True when the kernel converts src -> dst (the pairs of cast.h's convertible()).
bool kernel_supports(DataType src, DataType dst);

// Enqueues the kernel on `stream` (a cudaStream_t) over `segments` entries of
// `table` (device memory) covering `blocks` blocks. Returns the launch's own
// cudaError_t as an int (0: success); an error the calling thread had pending
// before stays pending (Note [Launch errors and pending errors] in
// common/cuda_launch.h).
int launch_transfer(const KernelSegment* table, uint32_t segments, uint64_t blocks, DataType src,
                    DataType dst, void* stream);

}  // namespace slurmddp::grad_sync::cuda
