// The communicator conformance suite: every collective of the Communicator
// contract (communicator.h) against the closed forms of collective_values.h,
// over data types x reduce ops x element counts, run the same way for every
// backend: Gloo and MPI on host memory (the multiproc suite's rank processes),
// NCCL on device memory (the gpu suite). Every rank of the communicator calls
// check_collectives with the same options, in the nccl-tests spirit of one
// checker for every collective.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collective_values.h"
#include "slurmddp/communicator.h"

namespace slurmddp::support {

// Where the checks keep their buffers: this process's memory, or a device's
// (device_buffer.h has the CUDA one).
class Memory {
 public:
  class Block {
   public:
    virtual ~Block() = default;
    virtual uint8_t* data() = 0;
  };
  virtual ~Memory() = default;
  virtual const char* name() const = 0;
  // Throws std::runtime_error saying why it cannot.
  virtual std::unique_ptr<Block> allocate(size_t bytes) = 0;
  virtual void upload(uint8_t* dst, const std::vector<uint8_t>& host) = 0;
  virtual std::vector<uint8_t> download(const uint8_t* src, size_t bytes) = 0;
};

Memory& host_memory();

struct ConformanceOptions {
  std::vector<size_t> counts = {0, 1, 7, 1001, 100003};
  // > 0: one more sum allreduce per type of this many elements (Gloo's ring,
  // the float32 path of 16-bit types).
  size_t large_count = 0;
  // Only the average (allreduce and reduce_scatter), e.g. for a sum-divide path.
  bool only_average = false;
  // Also allgather and reduce_scatter in place (NCCL's rule: this rank's send
  // block is recv + rank * count): NCCL documents it, the host backends do not
  // promise it (communicator.h).
  bool in_place = false;
  Signs signs = Signs::kMixed;
  // Floating averages within rounded_average_tolerance() (NCCL pre-multiplies
  // by 1/n in the element type); else every result compares exactly.
  bool rounded_average = false;
  std::chrono::milliseconds wait{std::chrono::seconds(60)};

  // The host backends' run (Gloo, MPI): mixed signs, exact, one large allreduce.
  static ConformanceOptions host();
  // NCCL's: positive values, rounded floating averages, in-place forms, and a
  // count past NCCL's small-message protocols.
  static ConformanceOptions nccl();
};

// Runs the checks and returns one line per failed case (empty: all passed),
// each naming rank, collective, type, count and the first wrong elements. A
// communicator error or a failed allocation ends it early with a line saying so.
std::vector<std::string> check_collectives(Communicator& comm, Memory& memory,
                                           const ConformanceOptions& options);

}  // namespace slurmddp::support
